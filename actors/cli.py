"""The `actorlog` command line.

Subcommands that pull in heavy modules (benchmarks, Spark) are imported only
when they are invoked, so `actorlog serve` starts fast.
"""

from __future__ import annotations

import importlib
from typing import Any

import click

# name -> "module:attribute" of a click.Command; resolved on first use.
BENCH_COMMANDS: dict[str, str] = {
    "actor-hop": "bench.actor_hop:command",
    "timer": "bench.timer_bench:command",
    "log": "bench.log_bench:command",
    "produce": "bench.load:produce_command",
    "consume": "bench.load:consume_command",
    "e2e": "bench.load:e2e_command",
    "compare": "bench.compare:command",
    "sweep": "bench.sweep:command",
    "trace-cost": "bench.trace_bench:cost_command",
    "trace-analyze": "bench.trace_bench:analyze_command",
}
TOP_COMMANDS: dict[str, str] = {
    "serve": "actors.serve:command",
    "trace": "actors.trace.cli:group",
}


class LazyGroup(click.Group):
    """A click group whose subcommands live in modules imported on demand."""

    def __init__(self, *args: Any, lazy: dict[str, str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lazy = dict(lazy or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(self._lazy))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self._lazy:
            module_name, attr = self._lazy[cmd_name].split(":")
            try:
                module = importlib.import_module(module_name)
            except ModuleNotFoundError as exc:
                if exc.name == module_name:
                    return None  # not built yet in this checkout
                raise click.ClickException(
                    f"`{cmd_name}` needs {exc.name!r}, which is not installed; "
                    f"install the extra that provides it (see README.md)"
                ) from exc
            return getattr(module, attr)  # type: ignore[no-any-return]
        return super().get_command(ctx, cmd_name)


@click.group(cls=LazyGroup, lazy=TOP_COMMANDS)
@click.version_option(package_name="actorlog")
def cli() -> None:
    """actorlog: a Kafka-compatible log broker built as an actor system."""


@cli.group(cls=LazyGroup, lazy=BENCH_COMMANDS)
def bench() -> None:
    """Benchmarks; each prints a summary and writes --json FILE."""


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
