"""DescribeUserScramCredentials / AlterUserScramCredentials (KIP-554) against the store.

The rules are Kafka's (its ZooKeeper-era admin manager), written down here as
plain functions over :class:`~actors.metadata.store.SecurityMetadata`:

* Describe with no names (null or empty) lists every user that has a SCRAM
  credential, sorted; named users are answered once each, in the order asked:
  a name given twice gets DUPLICATE_RESOURCE, an empty name or a user without
  a SCRAM credential RESOURCE_NOT_FOUND. Only mechanisms and iteration counts
  ever leave the store.
* Alter takes deletions and upsertions and answers one result per user. A user
  with any bad item fails as a whole, nothing of it written: an empty name or
  an iteration count outside 4096..16384 (or an empty salt or salted password)
  is UNACCEPTABLE_CREDENTIAL, an unknown mechanism UNSUPPORTED_SASL_MECHANISM,
  the same (user, mechanism) twice DUPLICATE_RESOURCE, deleting a credential
  that is not there RESOURCE_NOT_FOUND. Each user's items are one conditional
  write of its entity config (retried when another writer got there first).
  Upsertions carry the client's salt and SaltedPassword; the store gets the
  stored and server keys derived from them (:func:`credential_from_salted_password`).
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

from actors.security.credentials import change_user, check_user_name, scram_credentials
from actors.security.scram import (
    MAX_ITERATIONS,
    MECHANISM_TYPES,
    MECHANISMS_BY_TYPE,
    MIN_ITERATIONS,
    CredentialError,
    credential_from_salted_password,
)
from wire.errors import ErrorCode

if TYPE_CHECKING:
    from actors.metadata.store import SecurityMetadata


class UserDescription(NamedTuple):
    """One user of a DescribeUserScramCredentials answer."""

    user: str
    error: ErrorCode
    message: str | None
    credentials: list[tuple[int, int]]  # (mechanism type, iterations)


class Deletion(NamedTuple):
    user: str
    mechanism: int  # Kafka's mechanism type: 1 SCRAM-SHA-256, 2 SCRAM-SHA-512


class Upsertion(NamedTuple):
    user: str
    mechanism: int
    iterations: int
    salt: bytes
    salted_password: bytes

    def __repr__(self) -> str:  # the salted password stays out of logs
        return (f"Upsertion(user={self.user!r}, mechanism={self.mechanism}, "
                f"iterations={self.iterations})")


class AlterResult(NamedTuple):
    """One user of an AlterUserScramCredentials answer."""

    user: str
    error: ErrorCode
    message: str | None


class _Refused(Exception):
    def __init__(self, error: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error = error
        self.message = message


def _described(user: str, configs: dict[str, str]) -> UserDescription | None:
    try:
        found = scram_credentials(user, configs)
    except CredentialError as exc:
        return UserDescription(user, ErrorCode.UNKNOWN_SERVER_ERROR, str(exc), [])
    if not found:
        return None
    return UserDescription(user, ErrorCode.NONE, None,
                           [(MECHANISM_TYPES[m], c.iterations) for m, c in found.items()])


def describe_scram_credentials(store: SecurityMetadata, users: Sequence[str] | None
                               ) -> list[UserDescription]:
    """The answer rows; a store that cannot be read raises (the whole request fails)."""
    if not users:
        rows = (_described(u, store.get_user_configs(u)[0]) for u in sorted(store.get_users()))
        return [r for r in rows if r is not None]
    counts = Counter(users)
    out = []
    for user in dict.fromkeys(users):  # each name once, in the order asked
        if not user:
            out.append(UserDescription(user, ErrorCode.RESOURCE_NOT_FOUND,
                                       "the user name is empty", []))
        elif counts[user] > 1:
            out.append(UserDescription(
                user, ErrorCode.DUPLICATE_RESOURCE,
                f"user {user!r} is named {counts[user]} times in one request", []))
        else:
            row = _described(user, store.get_user_configs(user)[0])
            out.append(row if row is not None else UserDescription(
                user, ErrorCode.RESOURCE_NOT_FOUND,
                f"user {user!r} has no SCRAM credential", []))
    return out


def _mechanism(code: int) -> str:
    name = MECHANISMS_BY_TYPE.get(code)
    if name is None:
        raise _Refused(ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                       f"unknown SCRAM mechanism type {code}; use 1 (SCRAM-SHA-256) or 2 "
                       f"(SCRAM-SHA-512)")
    return name


def _check_item(item: Deletion | Upsertion) -> None:
    try:
        check_user_name(item.user)
    except CredentialError as exc:
        raise _Refused(ErrorCode.UNACCEPTABLE_CREDENTIAL, str(exc)) from None
    _mechanism(item.mechanism)
    if isinstance(item, Upsertion):
        if not MIN_ITERATIONS <= item.iterations <= MAX_ITERATIONS:
            few = "few" if item.iterations < MIN_ITERATIONS else "many"
            raise _Refused(ErrorCode.UNACCEPTABLE_CREDENTIAL,
                           f"too {few} iterations ({item.iterations}); use {MIN_ITERATIONS} "
                           f"to {MAX_ITERATIONS}")
        if not item.salt or not item.salted_password:
            raise _Refused(ErrorCode.UNACCEPTABLE_CREDENTIAL,
                           "the salt and the salted password must not be empty")


def alter_scram_credentials(store: SecurityMetadata, deletions: Sequence[Deletion],
                            upsertions: Sequence[Upsertion]) -> list[AlterResult]:
    """Apply what can be applied; one result per user, in the order users first appear."""
    items: list[Deletion | Upsertion] = [*deletions, *upsertions]
    failed: dict[str, AlterResult] = {}
    for item in items:
        if item.user in failed:
            continue
        try:
            _check_item(item)
        except _Refused as exc:
            failed[item.user] = AlterResult(item.user, exc.error, exc.message)
    pairs = Counter((i.user, i.mechanism) for i in items if i.user not in failed)
    for (user, mechanism), n in pairs.items():
        if n > 1 and user not in failed:
            failed[user] = AlterResult(
                user, ErrorCode.DUPLICATE_RESOURCE,
                f"user {user!r}: the {MECHANISMS_BY_TYPE[mechanism]} credential is altered "
                f"{n} times in one request")
    results = []
    for user in dict.fromkeys(i.user for i in items):
        if user in failed:
            results.append(failed[user])
            continue
        mine = [i for i in items if i.user == user]
        try:
            change_user(store, user, functools.partial(_apply, items=mine))
        except _Refused as exc:
            results.append(AlterResult(user, exc.error, exc.message))
            continue
        except CredentialError as exc:
            results.append(AlterResult(user, ErrorCode.UNACCEPTABLE_CREDENTIAL, str(exc)))
            continue
        results.append(AlterResult(user, ErrorCode.NONE, None))
    return results


def _apply(configs: dict[str, str], items: list[Deletion | Upsertion]) -> dict[str, str]:
    """One user's new entity config; raises :class:`_Refused` for a deletion of nothing."""
    for item in items:
        mechanism = _mechanism(item.mechanism)
        if isinstance(item, Deletion):
            if mechanism not in configs:
                raise _Refused(ErrorCode.RESOURCE_NOT_FOUND,
                               f"user {item.user!r} has no {mechanism} credential to delete")
            del configs[mechanism]
        else:
            configs[mechanism] = credential_from_salted_password(
                mechanism, item.salt, item.salted_password, item.iterations).to_kafka()
    return configs
