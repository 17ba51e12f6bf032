"""The `actorlog` command line: one module per command group.

``serve`` (one broker), ``topics`` and ``groups`` (admin through the Kafka
APIs), ``bench`` (benchmarks, optional extras), ``trace`` (trace tools),
``keys`` (CURVE keys between nodes) and ``sim`` (the deterministic simulation).
Each group's module is imported only when it is invoked, so `actorlog serve`
starts fast and `actorlog --help` works without the optional extras.

A user's mistake ends in one line on stderr (``Error: ...``) and exit code 2
for a bad argument or setting, 1 for a condition at run time; never a
traceback.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import click

# name -> "module:attribute" of a click.Command; resolved on first use.
TOP_COMMANDS: dict[str, str] = {
    "serve": "actors.cli.serve:command",
    "config": "actors.cli.config:group",
    "topics": "actors.cli.topics:group",
    "groups": "actors.cli.groups:group",
    "bench": "actors.cli.bench:group",
    "trace": "actors.cli.trace:group",
    "cluster": "actors.cluster_cli:group",
    "users": "actors.cli.users:group",
    "acls": "actors.cli.acls:group",
    "keys": "actors.cli.keys:group",
    "sim": "actors.cli.sim:command",
}


# `actorlog serve`: SIGTERM/SIGINT from its first moment, through its imports and settings
# (seconds on a busy machine) until Broker.start catches them itself, are noted here; the
# start then stops at once, as after one that came while it started. The default action
# would kill it without a word (SIGTERM) or with a traceback (SIGINT).
EARLY_SIGNALS: list[int] = []
# the handlers in force before those (the default actions): a start that fails puts them
# back, so a later signal stops `serve` as it would have (never only noted)
HANDLERS_BEFORE: dict[int, Any] = {}


def _note_early_signals() -> None:
    import signal

    def note(signum: int, _frame: Any) -> None:
        EARLY_SIGNALS.append(signum)

    for sig in (signal.SIGTERM, signal.SIGINT):
        HANDLERS_BEFORE[sig] = signal.getsignal(sig)
        signal.signal(sig, note)


def _put_back_handlers() -> None:
    """After `serve` failed (a setting, a start): the handlers before its early ones."""
    import signal

    for sig, handler in HANDLERS_BEFORE.items():
        if handler is not None:
            signal.signal(sig, handler)


class UserError(click.ClickException):
    """A mistake in the command line or the settings: one line, exit code 2."""

    exit_code = 2


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
            return getattr(importlib.import_module(module_name), attr)  # type: ignore[no-any-return]
        return super().get_command(ctx, cmd_name)


@click.group(cls=LazyGroup, lazy=TOP_COMMANDS)
@click.version_option(package_name="actorlog")
def cli() -> None:
    """actorlog: a Kafka-compatible log broker built as an actor system."""


def main(argv: list[str] | None = None) -> None:
    """The console script: click's usage errors shortened to one line."""
    if (sys.argv[1:] if argv is None else argv)[:1] == ["serve"]:
        _note_early_signals()
    try:
        code = cli.main(args=argv, prog_name="actorlog", standalone_mode=False)
    except click.UsageError as exc:
        _put_back_handlers()
        where = f" (see `{exc.ctx.command_path} --help`)" if exc.ctx is not None else ""
        click.echo(f"Error: {exc.format_message()}{where}", err=True)
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        _put_back_handlers()
        exc.show()
        sys.exit(exc.exit_code)
    except click.Abort:
        _put_back_handlers()
        click.echo("Aborted.", err=True)
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
