"""`actorlog users add|list|delete`: SCRAM users of SASL listeners.

Credentials (salt, iterations, stored key, server key; never the password)
go where the node reads them: ZooKeeper's ``/config/users/<name>`` when the
config names ``zookeeper.connect`` (a cluster), else the data dir of a single
node (``<log.dirs>/security``). A running node takes a change at once: a cluster's
nodes through ZooKeeper's ``/config/changes``, a single node by seeing its file change.
Kafka admin clients reach the same store through AlterUserScramCredentials.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click

from actors.cli import UserError
from actors.runtime.config import Config, ConfigError
from actors.security.scram import SCRAM_MECHANISMS, CredentialError


@contextmanager
def _store(config_file: str | None, data_dir: str | None) -> Iterator[tuple[Any, str]]:
    """The security store the config points at, and words for where it is."""
    from actors.broker import log_dirs_of
    from actors.metadata.store import MetadataError
    from actors.metadata.zk import ZkMetadataStore
    from actors.security.local_store import LocalSecurityStore

    try:
        cfg = Config.load(config_file, {"log.dirs": data_dir})
    except ConfigError as exc:
        raise UserError(str(exc)) from None
    connect = str(cfg["zookeeper.connect"]).strip()
    if not connect:
        directory = log_dirs_of(cfg)[0]
        yield LocalSecurityStore.in_data_dir(directory), f"data dir {directory}"
        return
    store = ZkMetadataStore(connect, lambda _notice: None,
                            session_timeout_ms=int(cfg["zookeeper.session.timeout.ms"]),
                            connection_timeout_ms=int(cfg["zookeeper.connection.timeout.ms"])
                            or 10000)
    try:
        store.start()
    except MetadataError as exc:
        raise click.ClickException(f"{exc}; start ZooKeeper or fix zookeeper.connect") from None
    try:
        yield store, f"ZooKeeper at {connect}"
    finally:
        store.close()


_CONFIG = click.option("--config", "config_file",
                       help="the node's TOML config (log.dirs, or zookeeper.connect)")
_DATA_DIR = click.option("--data-dir", help="the node's data directory [log.dirs]")


@click.group("users")
def group() -> None:
    """SCRAM users of the SASL listeners (PLAIN checks the same credentials)."""


@group.command("add")
@click.argument("name")
@click.option("--mechanism", type=click.Choice(SCRAM_MECHANISMS), default="SCRAM-SHA-256",
              show_default=True)
@click.option("--password-file", required=True, help="file whose first line is the password")
@click.option("--iterations", type=int, default=None, help="SCRAM iterations (default 4096)")
@_CONFIG
@_DATA_DIR
def add(name: str, mechanism: str, password_file: str, iterations: int | None,
        config_file: str | None, data_dir: str | None) -> None:
    """Add user NAME, or replace its credential for --mechanism."""
    from actors.security.credentials import read_password_file, upsert_user

    try:
        password = read_password_file(password_file)
        with _store(config_file, data_dir) as (store, where):
            extra = {} if iterations is None else {"iterations": iterations}
            credential = upsert_user(store, name, mechanism, password, **extra)
    except CredentialError as exc:
        raise UserError(str(exc)) from None
    click.echo(f"user {name}: {mechanism} credential ({credential.iterations} iterations) "
               f"stored in {where}")


@group.command("list")
@_CONFIG
@_DATA_DIR
def list_users(config_file: str | None, data_dir: str | None) -> None:
    """Users and their mechanisms (never a key)."""
    from actors.security.credentials import describe_users

    try:
        with _store(config_file, data_dir) as (store, _where):
            users = describe_users(store)
    except CredentialError as exc:
        raise UserError(str(exc)) from None
    for user, credentials in users.items():
        mechanisms = ", ".join(f"{m} ({n} iterations)" for m, n in credentials)
        click.echo(f"{user}\t{mechanisms}")


@group.command("delete")
@click.argument("name")
@click.option("--mechanism", type=click.Choice(SCRAM_MECHANISMS), multiple=True,
              help="only these mechanisms (default: all)")
@_CONFIG
@_DATA_DIR
def delete(name: str, mechanism: tuple[str, ...], config_file: str | None,
           data_dir: str | None) -> None:
    """Delete user NAME's credentials."""
    from actors.security.credentials import delete_user

    try:
        with _store(config_file, data_dir) as (store, where):
            removed = delete_user(store, name, mechanism or SCRAM_MECHANISMS)
    except CredentialError as exc:
        raise UserError(str(exc)) from None
    if not removed:
        raise UserError(f"user {name} has no credentials in {where}")
    click.echo(f"user {name}: {', '.join(removed)} removed from {where}")
