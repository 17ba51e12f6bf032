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

from collections.abc import Iterable
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
    """user -> mechanism -> credential, read by SASL through :meth:`lookup`."""

    def __init__(self) -> None:
        self._users: dict[str, dict[str, ScramCredential]] = {}

    def load(self, store: SecurityMetadata) -> list[str]:
        """Read every user; returns one problem line per user whose config is unreadable."""
        self._users.clear()
        problems = []
        for user in sorted(store.get_users()):
            try:
                self.update(user, store.get_user_configs(user)[0])
            except CredentialError as exc:
                problems.append(str(exc))
        return problems

    def update(self, user: str, configs: dict[str, str]) -> None:
        credentials = scram_credentials(user, configs)
        if credentials:
            self._users[user] = credentials
        else:
            self._users.pop(user, None)

    def lookup(self, user: str, mechanism: str) -> ScramCredential | None:
        return self._users.get(user, {}).get(mechanism)

    def users(self) -> dict[str, dict[str, ScramCredential]]:
        return {u: dict(c) for u, c in self._users.items()}


def check_user_name(user: str) -> None:
    if not user or user != user.strip() or any(ord(c) < 32 for c in user):
        raise CredentialError(f"user name {user!r} is empty or has spaces at its ends or "
                              f"control characters")


def _change_user(store: SecurityMetadata, user: str, mechanism: str,
                 credential: ScramCredential | None) -> bool:
    """Set (or, with None, remove) one mechanism's credential; False if there was none to remove."""
    for _attempt in range(WRITE_ATTEMPTS):
        configs, version = store.get_user_configs(user)
        if credential is None and mechanism not in configs:
            return False
        changed = dict(configs)
        if credential is None:
            del changed[mechanism]
        else:
            changed[mechanism] = credential.to_kafka()
        if store.set_user_configs(user, changed, version):
            return True
    raise CredentialError(f"user {user!r} kept changing under {WRITE_ATTEMPTS} attempts to "
                          f"write it; try again")


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
