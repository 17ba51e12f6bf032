"""`actorlog config ...`: the example config file, and a check of a config file."""

from __future__ import annotations

from pathlib import Path

import click

from actors.cli import UserError
from actors.runtime.config import Config, ConfigError, example_toml


@click.group("config")
def group() -> None:
    """Config files: every key with its default and meaning, and a check of a file."""


@group.command("example")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path),
              help="write here instead of standard output")
def example(out: Path | None) -> None:
    """Print a config file with every key at its default (deploy/actorlog.example.toml)."""
    text = example_toml()
    if out is None:
        click.echo(text, nl=False)
    else:
        out.write_text(text)


@group.command("check")
@click.argument("file")
def check(file: str) -> None:
    """Read FILE as `actorlog serve --config FILE` would; print the keys it changes."""
    try:
        cfg = Config.load(file)
    except ConfigError as exc:
        raise UserError(str(exc)) from None
    changed = {k: v for k, v in cfg.values.items() if v != Config().values[k]}
    click.echo(f"{file}: valid; {len(changed)} key(s) differ from the defaults")
    for key, value in sorted(changed.items()):
        click.echo(f"  {key} = {value!r}")
