"""Another process's copy of process 0's SCRAM users and ACLs (num.processes > 1, cluster).

A cluster node keeps one ZooKeeper session, in process 0 (its ClusterController).
Processes 1.. authenticate and authorize on copies: process 0 relays every
change it learns (a ZooKeeper notification, its own admin write, the periodic
re-read) as a :class:`~wire.security_messages.SecurityRelay`, and the answers to
the admin requests those processes forward carry the rows they changed, so the
process that asked sees its change before its client does.

Relays reach a process by one path and answers by another, so they may arrive
out of order. Each row says a pattern's (or user's) whole state at a version;
:class:`SecurityMirror` keeps the version each pattern and user was last set
at and takes a row only over an older one. A *whole* relay (at start, and the
periodic re-read) replaces everything not set later than it. A pattern or user
the mirror has no version for is as old as the last whole relay, so a row older
than that (a deletion the whole already reflects) is ignored too.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from enum import IntEnum
from typing import TypeVar

from actors.security.acl import (
    AclBinding,
    AclBindingFilter,
    AclEntry,
    Authorizer,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
)
from actors.security.credentials import CredentialCache, scram_credentials
from actors.security.scram import SCRAM_MECHANISMS, CredentialError, ScramCredential
from wire.security_messages import (
    AclBindingRow,
    AclEntryRow,
    AclFilterRow,
    AclPatternRow,
    SecurityRelay,
    UserRow,
)

# ------------------------------------------------------------ rows <-> the cores' types


def acl_rows(acls: Mapping[ResourcePattern, Iterable[AclEntry]]) -> list[AclPatternRow]:
    return [AclPatternRow(int(p.resource_type), p.name, int(p.pattern_type),
                          [AclEntryRow(e.principal, e.host, int(e.operation), int(e.permission))
                           for e in sorted(entries)])
            for p, entries in sorted(acls.items())]


def acls_of(rows: Iterable[AclPatternRow]) -> dict[ResourcePattern, frozenset[AclEntry]]:
    return {ResourcePattern(ResourceType(r.resource_type), r.name, PatternType(r.pattern_type)):
            frozenset(AclEntry(e.principal, e.host, Operation(e.operation),
                               Permission(e.permission)) for e in r.entries)
            for r in rows}


def binding_row(binding: AclBinding) -> AclBindingRow:
    p, e = binding.pattern, binding.entry
    return AclBindingRow(int(p.resource_type), p.name, int(p.pattern_type), e.principal, e.host,
                         int(e.operation), int(e.permission))


def binding_of(row: AclBindingRow) -> AclBinding:
    return AclBinding(
        ResourcePattern(_code(ResourceType, row.resource_type), row.name,
                        _code(PatternType, row.pattern_type)),
        AclEntry(row.principal, row.host, _code(Operation, row.operation),
                 _code(Permission, row.permission)))


def filter_row(f: AclBindingFilter) -> AclFilterRow:
    return AclFilterRow(int(f.resource_type), f.name, int(f.pattern_type), f.principal, f.host,
                        int(f.operation), int(f.permission))


def filter_of(row: AclFilterRow) -> AclBindingFilter:
    return AclBindingFilter(_code(ResourceType, row.resource_type), row.name,
                            _code(PatternType, row.pattern_type), row.principal, row.host,
                            _code(Operation, row.operation), _code(Permission, row.permission))


E = TypeVar("E", bound=IntEnum)


def _code(cls: type[E], value: int) -> E:
    """The enum member; UNKNOWN (0) for a code this side does not know (validated later)."""
    try:
        return cls(value)
    except ValueError:
        return cls(0)


def scram_texts(configs: Mapping[str, str]) -> dict[str, str]:
    """The SCRAM credentials of a user's entity config (other keys, e.g. quotas, left out)."""
    return {m: configs[m] for m in SCRAM_MECHANISMS if m in configs}


def user_rows(users: Mapping[str, Mapping[str, ScramCredential]]) -> list[UserRow]:
    return [UserRow(user, {m: c.to_kafka() for m, c in sorted(creds.items())})
            for user, creds in sorted(users.items())]


# ------------------------------------------------------------ the mirror


class SecurityMirror:
    """Applies relayed rows to one process's Authorizer and CredentialCache.

    Called by the process's SecurityView actor (relays) and by its handlers (the
    answers to their forwarded admin requests), from any thread: one at a time.
    """

    def __init__(self, authorizer: Authorizer | None,
                 credentials: CredentialCache | None) -> None:
        self.authorizer = authorizer
        self.credentials = credentials
        self.lock = threading.Lock()
        self.acl_versions: dict[ResourcePattern, int] = {}
        self.user_versions: dict[str, int] = {}
        self.acls_base = 0   # the version of the last whole ACL relay
        self.users_base = 0  # the same for the users
        self.version = 0     # the newest version taken
        self.applied = 0
        # set once both kinds this process keeps came whole (it may take connections)
        self.ready = threading.Event()

    def apply(self, relay: SecurityRelay) -> list[str]:
        """Take what is newer in ``relay``; one problem line per user whose credentials
        cannot be read (that user is left out)."""
        problems: list[str] = []
        with self.lock:
            if relay.acls is not None and self.authorizer is not None:
                self._apply_acls(relay.version, relay.acls_whole, acls_of(relay.acls))
            if relay.users is not None and self.credentials is not None:
                problems = self._apply_users(relay.version, relay.users_whole, relay.users)
            self.version = max(self.version, relay.version)
            self.applied += 1
            if ((self.authorizer is None or self.acls_base)
                    and (self.credentials is None or self.users_base)):
                self.ready.set()
        return problems

    def apply_answer(self, version: int, acls: list[AclPatternRow] | None = None,
                     users: list[UserRow] | None = None) -> list[str]:
        """The rows an admin answer carries: as a relay of only those."""
        return self.apply(SecurityRelay(version, False, acls, False, users))

    def _apply_acls(self, version: int, whole: bool,
                    rows: dict[ResourcePattern, frozenset[AclEntry]]) -> None:
        authorizer = self.authorizer
        assert authorizer is not None
        versions, base = self.acl_versions, self.acls_base
        if whole:
            if version <= base:
                return  # an older whole than the one taken
            later = {p for p, v in versions.items() if v > version}
            table = {p: e for p, e in authorizer.table().items() if p in later}
            table.update({p: e for p, e in rows.items() if p not in later and e})
            self.acl_versions = {p: versions[p] for p in later}
            self.acls_base = version
            with authorizer.lock:
                authorizer.replace(table)
            return
        changes = {}
        for pattern, entries in rows.items():
            if versions.get(pattern, base) < version:
                versions[pattern] = version
                changes[pattern] = entries
        if changes:
            with authorizer.lock:
                authorizer.update(changes)

    def _apply_users(self, version: int, whole: bool, rows: list[UserRow]) -> list[str]:
        credentials = self.credentials
        assert credentials is not None
        problems: list[str] = []
        versions, base = self.user_versions, self.users_base
        if whole:
            if version <= base:
                return problems
            later = {u for u, v in versions.items() if v > version}
            table = {u: c for u, c in credentials.users().items() if u in later}
            for row in rows:
                if row.user in later:
                    continue
                try:
                    table[row.user] = scram_credentials(row.user, row.credentials)
                except CredentialError as exc:
                    problems.append(str(exc))
            self.user_versions = {u: versions[u] for u in later}
            self.users_base = version
            credentials.replace(table)
            return problems
        for row in rows:
            if versions.get(row.user, base) >= version:
                continue
            versions[row.user] = version
            try:
                credentials.update(row.user, dict(row.credentials))
            except CredentialError as exc:
                problems.append(str(exc))
                credentials.update(row.user, {})  # not the credentials it had before
        return problems
