"""`actorlog trace ...`: the trace tools (their commands live with the trace modules)."""

from __future__ import annotations

try:  # the trace modules' package (issue 11 moves them to actors/trace/)
    from actors.trace.cli import group
except ModuleNotFoundError as exc:
    if exc.name not in ("actors.trace", "actors.trace.cli"):
        raise
    from actors.trace_cli import group

__all__ = ["group"]
