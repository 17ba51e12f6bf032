"""SCRAM users: the node's credential cache, and the admin operations behind ``actorlog users``.

Credentials live in the store (:class:`~actors.metadata.store.SecurityMetadata`:
ZooKeeper's ``/config/users/<name>`` for a cluster, the data dir's
``security/users.json`` for a single node) as Kafka keeps them: the user's
entity config maps a mechanism name to ``salt=...,stored_key=...,
server_key=...,iterations=...``. Never the password.

:class:`CredentialCache` is what SASL looks credentials up in (in memory,
so an authentication never waits on the store); the node's store owner
fills it at start and refreshes a user when a change notification names it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from actors.security.scram import (
    DEFAULT_ITERATIONS,
    SCRAM_MECHANISMS,
    CredentialError,
    ScramCredential,
    make_credential,
)

if TYPE_CHECKING:
    from actors.metadata.store import SecurityMetadata

WRITE_ATTEMPTS = 10


def scram_credentials(user: str, configs: dict[str, str]) -> dict[str, ScramCredential]:
    """The SCRAM credentials in a user's entity config (other keys, e.g. quotas, ignored)."""
    out = {}
    for mechanism in SCRAM_MECHANISMS:
        text = configs.get(mechanism)
        if text is not None:
            try:
                out[mechanism] = ScramCredential.from_kafka(text)
            except CredentialError as exc:
                raise CredentialError(f"user {user!r}, {mechanism}: {exc}") from None
    return out


class CredentialCache:
    """user -> mechanism -> credential, read by SASL through :meth:`lookup`.

    Shared by the Processors (readers) and whoever refreshes it (the handler that
    served AlterUserScramCredentials, the node's ClusterController on a ZooKeeper
    change notification): every change replaces one dict entry or the whole table,
    so a reader sees the old or the new credentials, never half of them.

    ``stamp`` (the data dir's store: its users file's identity) is checked on each
    lookup; when it changed (``actorlog users add`` while the node runs, another
    process of the node) the table is read again from ``store``.
    """

    def __init__(self, store: SecurityMetadata | None = None,
                 stamp: Callable[[], object] | None = None) -> None:
        self._users: dict[str, dict[str, ScramCredential]] = {}
        self._store = store
        self._stamp = stamp
        self._seen: object = None

    def load(self, store: SecurityMetadata | None = None) -> list[str]:
        """Read every user; returns one problem line per user whose config is unreadable."""
        store = store if store is not None else self._store
        assert store is not None
        if self._stamp is not None:
            self._seen = self._stamp()
        users: dict[str, dict[str, ScramCredential]] = {}
        problems = []
        for user in sorted(store.get_users()):
            try:
                credentials = scram_credentials(user, store.get_user_configs(user)[0])
            except CredentialError as exc:
                problems.append(str(exc))
                continue
            if credentials:
                users[user] = credentials
        self._users = users
        return problems

    def update(self, user: str, configs: dict[str, str]) -> None:
        credentials = scram_credentials(user, configs)
        if credentials:
            self._users[user] = credentials
        else:
            self._users.pop(user, None)

    def replace(self, users: dict[str, dict[str, ScramCredential]]) -> None:
        """Every user at once (process 0's whole table, relayed to another process)."""
        self._users = {u: dict(c) for u, c in users.items() if c}

    def refresh(self, user: str) -> None:
        """Read one user again from the store (after a change to it)."""
        if self._store is not None:
            self.update(user, self._store.get_user_configs(user)[0])

    def lookup(self, user: str, mechanism: str) -> ScramCredential | None:
        if self._stamp is not None and self._stamp() != self._seen:
            try:
                self.load()
            except (OSError, ValueError):  # unreadable now: go on with what was read last
                pass
        return self._users.get(user, {}).get(mechanism)

    def users(self) -> dict[str, dict[str, ScramCredential]]:
        return {u: dict(c) for u, c in self._users.items()}


def check_user_name(user: str) -> None:
    if not user or user != user.strip() or any(ord(c) < 32 for c in user):
        raise CredentialError(f"user name {user!r} is empty or has spaces at its ends or "
                              f"control characters")


def change_user(store: SecurityMetadata, user: str,
                edit: Callable[[dict[str, str]], dict[str, str]]) -> dict[str, str]:
    """Write ``edit(configs)`` over the user's entity config, read and written again while
    another writer gets there first; the config written. ``edit`` may raise to refuse."""
    for _attempt in range(WRITE_ATTEMPTS):
        configs, version = store.get_user_configs(user)
        changed = edit(dict(configs))
        if changed == configs or store.set_user_configs(user, changed, version):
            return changed
    raise CredentialError(f"user {user!r} kept changing under {WRITE_ATTEMPTS} attempts to "
                          f"write it; try again")


def _change_user(store: SecurityMetadata, user: str, mechanism: str,
                 credential: ScramCredential | None) -> bool:
    """Set (or, with None, remove) one mechanism's credential; False if there was none to remove."""
    had = False

    def edit(configs: dict[str, str]) -> dict[str, str]:
        nonlocal had
        had = mechanism in configs
        if credential is None:
            configs.pop(mechanism, None)
        else:
            configs[mechanism] = credential.to_kafka()
        return configs

    change_user(store, user, edit)
    return credential is not None or had


def upsert_user(store: SecurityMetadata, user: str, mechanism: str, password: str,
                iterations: int = DEFAULT_ITERATIONS) -> ScramCredential:
    """Add the user, or replace its credential for ``mechanism`` (``actorlog users add``)."""
    check_user_name(user)
    credential = make_credential(mechanism, password, iterations)
    _change_user(store, user, mechanism, credential)
    return credential


def delete_user(store: SecurityMetadata, user: str,
                mechanisms: Iterable[str] = SCRAM_MECHANISMS) -> list[str]:
    """Remove the user's credentials for ``mechanisms``; the mechanisms that were there."""
    return [m for m in mechanisms if _change_user(store, user, m, None)]


def describe_users(store: SecurityMetadata, users: Iterable[str] | None = None
                   ) -> dict[str, list[tuple[str, int]]]:
    """user -> [(mechanism, iterations)] (DescribeUserScramCredentials; ``users list``)."""
    names = sorted(store.get_users()) if users is None else list(users)
    out = {}
    for user in names:
        credentials = scram_credentials(user, store.get_user_configs(user)[0])
        if credentials:
            out[user] = [(m, c.iterations) for m, c in credentials.items()]
    return out


def read_password_file(path: Path | str) -> str:
    """The password in ``--password-file``: its first line, without the line end."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CredentialError(f"password file {p} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CredentialError(f"password file {p}: cannot read it ({exc})") from None
    password = text.split("\n", 1)[0].rstrip("\r")
    if not password:
        raise CredentialError(f"password file {p} is empty; put the password on its first line")
    return password
