"""`actorlog keys new`: CURVE key pairs for the sockets between nodes.

Each node gets ``<out>/<name>.key_secret`` (its ``actor.curve.secret.key.file``,
mode 600) and ``<out>/public/<name>.key``; every node's
``actor.curve.public.keys.dir`` must hold the public keys of all the
cluster's nodes, its own included. For a cluster of a spec, ``actorlog
cluster keys --spec FILE`` makes them all and `cluster up` hands them out.
"""

from __future__ import annotations

from pathlib import Path

import click

from actors.cli import UserError
from actors.security.curve import (
    CurveError,
    check_key_name,
    make_node_keys,
    refuse_existing_keys,
)


@click.group("keys")
def group() -> None:
    """CURVE keys between nodes (actor.curve.secret.key.file, actor.curve.public.keys.dir)."""


@group.command("new")
@click.option("--out", "out", required=True, metavar="DIR",
              type=click.Path(file_okay=False, path_type=Path),
              help="where the key files go (made if missing)")
@click.option("--name", "names", multiple=True, metavar="NODE",
              help="node name (node.name; node-<node.id> in a cluster); repeat for several "
                   "[default: node-1]")
@click.option("--force", is_flag=True, help="replace keys that exist")
def new(out: Path, names: tuple[str, ...], force: bool) -> None:
    """Make a key pair per node; print the two config lines of each."""
    names = names or ("node-1",)
    # every name checked before any key is written: a refusal leaves nothing half made
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise UserError(f"--name {repeated[0]} is given more than once; each node gets one "
                        f"key pair")
    for name in names:
        try:
            check_key_name(name)
            if not force:
                refuse_existing_keys(out, name)
        except CurveError as exc:
            raise UserError(str(exc)) from None
    for name in names:
        try:
            public, secret = make_node_keys(out, name, overwrite=force)
        except CurveError as exc:
            raise UserError(str(exc)) from None
        click.echo(f"# {name}: public key {public}")
        click.echo(f'"actor.curve.secret.key.file" = "{secret.resolve()}"')
        click.echo(f'"actor.curve.public.keys.dir" = "{public.parent.resolve()}"')
