"""`actorlog trace ...`: the trace tools (their commands live with the trace modules)."""

from __future__ import annotations

from actors.trace.cli import group

__all__ = ["group"]
