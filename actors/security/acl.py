"""ACLs with Kafka's AclAuthorizer semantics, as a pure core.

An ACL binds a resource pattern (resource type, name, LITERAL or PREFIXED)
to an entry (principal, host, operation, ALLOW or DENY). To decide whether
``principal`` from ``host`` may do ``operation`` on a resource, the
:class:`Authorizer` does what Kafka's ``AclAuthorizer.authorize`` does:

1. A principal of ``super.users`` may do anything.
2. The ACLs that apply to the resource are the literal ones on its name,
   the literal ones on ``*`` (every resource of the type), and the prefixed
   ones whose prefix starts its name. If there are none,
   ``allow.everyone.if.no.acl.found`` decides (false by default).
3. A DENY entry matching the principal (or ``User:*``), the host (or ``*``)
   and the operation (or All) wins.
4. Otherwise an ALLOW entry must match the same way, where the operation may
   also be one that implies the one asked: Describe is implied by Read,
   Write, Delete and Alter; DescribeConfigs by AlterConfigs. (A DENY is never
   widened that way: denying Read does not deny Describe.)

Every decision comes back as a :class:`Decision` with its reason; the shell
logs it through the ``authorizer`` logger (``actors.security.authorizer_log``).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from enum import IntEnum

WILDCARD_RESOURCE = "*"
WILDCARD_PRINCIPAL = "User:*"
WILDCARD_HOST = "*"
CLUSTER_NAME = "kafka-cluster"


class AclError(ValueError):
    """An ACL or filter that cannot be stored or used; one-line message (INVALID_REQUEST)."""


class ResourceType(IntEnum):
    """Kafka's resource type codes (the wire values of CreateAcls/DescribeAcls)."""

    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7

    @property
    def zk_name(self) -> str:
        """The name in ZooKeeper paths: ``Topic``, ``Group``, ``Cluster``, ``TransactionalId``."""
        return _ZK_NAMES[self]

    @classmethod
    def parse(cls, text: str) -> ResourceType:
        """``Topic``, ``TOPIC``, ``topic`` or ``transactional_id``/``TransactionalId``."""
        key = text.replace("_", "").replace("-", "").lower()
        for member in cls:
            if member.name.replace("_", "").lower() == key:
                return member
        raise AclError(f"unknown resource type {text!r}")


_ZK_NAMES = {ResourceType.TOPIC: "Topic", ResourceType.GROUP: "Group",
             ResourceType.CLUSTER: "Cluster", ResourceType.TRANSACTIONAL_ID: "TransactionalId",
             ResourceType.DELEGATION_TOKEN: "DelegationToken", ResourceType.USER: "User",
             ResourceType.ANY: "Any", ResourceType.UNKNOWN: "Unknown"}
STORED_RESOURCE_TYPES = (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER,
                         ResourceType.TRANSACTIONAL_ID)


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4

    @classmethod
    def parse(cls, text: str) -> PatternType:
        try:
            return cls[text.strip().upper()]
        except KeyError:
            raise AclError(f"unknown pattern type {text!r}") from None


class Operation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14

    @property
    def acl_name(self) -> str:
        """Kafka's name in ACL JSON and tools: ``Read``, ``ClusterAction``, ``IdempotentWrite``."""
        return "".join(part.capitalize() for part in self.name.split("_"))

    @classmethod
    def parse(cls, text: str) -> Operation:
        key = text.replace("_", "").replace("-", "").lower()
        for member in cls:
            if member.name.replace("_", "").lower() == key:
                return member
        raise AclError(f"unknown operation {text!r}")


class Permission(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3

    @property
    def acl_name(self) -> str:
        return self.name.capitalize()

    @classmethod
    def parse(cls, text: str) -> Permission:
        try:
            return cls[text.strip().upper()]
        except KeyError:
            raise AclError(f"unknown permission type {text!r}") from None


IMPLIED_BY: dict[Operation, frozenset[Operation]] = {
    Operation.DESCRIBE: frozenset({Operation.DESCRIBE, Operation.READ, Operation.WRITE,
                                   Operation.DELETE, Operation.ALTER}),
    Operation.DESCRIBE_CONFIGS: frozenset({Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS}),
}
"""Operation asked -> the operations whose ALLOW grants it (Kafka's implied operations)."""

SUPPORTED_OPERATIONS: dict[ResourceType, frozenset[Operation]] = {
    ResourceType.TOPIC: frozenset({Operation.READ, Operation.WRITE, Operation.CREATE,
                                   Operation.DESCRIBE, Operation.DELETE, Operation.ALTER,
                                   Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS,
                                   Operation.ALL}),
    ResourceType.GROUP: frozenset({Operation.READ, Operation.DESCRIBE, Operation.DELETE,
                                   Operation.ALL}),
    ResourceType.CLUSTER: frozenset({Operation.CREATE, Operation.CLUSTER_ACTION,
                                     Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS,
                                     Operation.IDEMPOTENT_WRITE, Operation.ALTER,
                                     Operation.DESCRIBE, Operation.ALL}),
    ResourceType.TRANSACTIONAL_ID: frozenset({Operation.DESCRIBE, Operation.WRITE,
                                              Operation.ALL}),
}
"""Operations an ACL on each resource type may name (Kafka's ``AclEntry.supportedOperations``)."""


def parse_principal(text: str) -> tuple[str, str]:
    """``User:alice`` -> ("User", "alice"); a principal must have a type."""
    kind, sep, name = text.partition(":")
    if not sep or not kind or not name:
        raise AclError(f"principal {text!r} is not TYPE:NAME (e.g. User:alice)")
    return kind, name


@dataclass(frozen=True, slots=True, order=True)
class ResourcePattern:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType = PatternType.LITERAL

    def __str__(self) -> str:  # Kafka's form in log lines: Topic:LITERAL:orders
        return f"{self.resource_type.zk_name}:{self.pattern_type.name}:{self.name}"


@dataclass(frozen=True, slots=True, order=True)
class AclEntry:
    """Kafka's AccessControlEntry: who, from where, may (or may not) do what."""

    principal: str
    host: str
    operation: Operation
    permission: Permission

    def __str__(self) -> str:
        return (f"{self.principal} has {self.permission.acl_name} permission for operations: "
                f"{self.operation.acl_name} from hosts: {self.host}")


@dataclass(frozen=True, slots=True, order=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AclEntry


def validate_binding(binding: AclBinding) -> None:
    """What CreateAcls checks before storing an ACL; :class:`AclError` names the problem."""
    pattern, entry = binding.pattern, binding.entry
    if pattern.resource_type not in STORED_RESOURCE_TYPES:
        raise AclError(f"resource type {pattern.resource_type.name} cannot have ACLs here")
    if pattern.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise AclError(f"pattern type {pattern.pattern_type.name} is a filter, not a pattern; "
                       f"use LITERAL or PREFIXED")
    if not pattern.name:
        raise AclError("the resource name is empty")
    if pattern.resource_type is ResourceType.CLUSTER and pattern.name != CLUSTER_NAME:
        raise AclError(f"the cluster resource is named {CLUSTER_NAME!r}, not {pattern.name!r}")
    if pattern.pattern_type is PatternType.PREFIXED and pattern.name == WILDCARD_RESOURCE:
        raise AclError("a PREFIXED pattern cannot be '*'; use a LITERAL '*' for every resource")
    parse_principal(entry.principal)
    if not entry.host:
        raise AclError("the host is empty; use '*' for every host")
    if entry.permission not in (Permission.ALLOW, Permission.DENY):
        raise AclError(f"permission {entry.permission.name} is a filter; use ALLOW or DENY")
    if entry.operation not in SUPPORTED_OPERATIONS[pattern.resource_type]:
        raise AclError(f"operation {entry.operation.acl_name} does not apply to resource type "
                       f"{pattern.resource_type.zk_name}")


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """A DescribeAcls/DeleteAcls filter: None and ANY match everything; MATCH as Kafka."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: Operation = Operation.ANY
    permission: Permission = Permission.ANY

    def matches(self, binding: AclBinding) -> bool:
        pattern, entry = binding.pattern, binding.entry
        if self.resource_type is not ResourceType.ANY and \
                pattern.resource_type is not self.resource_type:
            return False
        if not self._pattern_matches(pattern):
            return False
        return ((self.principal is None or entry.principal == self.principal)
                and (self.host is None or entry.host == self.host)
                and (self.operation is Operation.ANY or entry.operation is self.operation)
                and (self.permission is Permission.ANY or entry.permission is self.permission))

    def _pattern_matches(self, pattern: ResourcePattern) -> bool:
        if self.pattern_type is PatternType.MATCH:
            if self.name is None:
                return True
            if pattern.pattern_type is PatternType.LITERAL:
                return pattern.name in (self.name, WILDCARD_RESOURCE)
            return pattern.pattern_type is PatternType.PREFIXED and \
                self.name.startswith(pattern.name)
        if self.pattern_type is not PatternType.ANY and pattern.pattern_type is not \
                self.pattern_type:
            return False
        return self.name is None or pattern.name == self.name


@dataclass(frozen=True, slots=True)
class Decision:
    """One authorization decision, with why (for the ``authorizer`` log line)."""

    principal: str
    host: str
    operation: Operation
    resource: ResourcePattern
    allowed: bool
    reason: str

    def __str__(self) -> str:
        verdict = "Allowed" if self.allowed else "Denied"
        return (f"Principal = {self.principal} is {verdict} Operation = "
                f"{self.operation.acl_name} from host = {self.host} on resource = "
                f"{self.resource} ({self.reason})")


def parse_super_users(text: str) -> frozenset[str]:
    """``super.users``: principals separated by ';' (Kafka's separator; ',' is taken too)."""
    out = set()
    for item in text.replace(",", ";").split(";"):
        item = item.strip()
        if item:
            parse_principal(item)
            out.add(item)
    return frozenset(out)


class Authorizer:
    """The ACL cache and the decision rule. Fed by the store's contents; never does I/O."""

    def __init__(self, super_users: Iterable[str] = (),
                 allow_everyone_if_no_acl_found: bool = False) -> None:
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self._acls: dict[ResourcePattern, frozenset[AclEntry]] = {}
        self._by_name: dict[tuple[ResourceType, PatternType], dict[str, frozenset[AclEntry]]] = {}
        # kept by the shell that feeds the cache: when it last read the store, and a count of
        # replacements (a read that started before one must not overwrite it)
        self.read_ms = 0
        self.generation = 0
        # the store file's stamp when last read (a single node's store has one: any write,
        # from any process, changes it)
        self.read_stamp: object = None
        self.read_failed = False  # the last read of the store failed (tried again later)
        # held by a shell while it reads the store and puts what it read in: reads that
        # take turns land in the order they were made (the last read is the freshest)
        self.lock = threading.Lock()

    # ----------------------------------------------------------- the cache
    def load(self, acls: Mapping[ResourcePattern, Iterable[AclEntry]]) -> None:
        """Replace everything (at start, after the store's session was renewed)."""
        self._acls.clear()
        self._by_name.clear()
        for pattern, entries in acls.items():
            self.set_acls(pattern, entries)

    def replace(self, acls: Mapping[ResourcePattern, Iterable[AclEntry]]) -> None:
        """Like :meth:`load`, but readers on other threads never see a half-built cache."""
        fresh = Authorizer()
        fresh.load(acls)
        self._acls, self._by_name = fresh._acls, fresh._by_name
        self.generation += 1

    def update(self, changes: Mapping[ResourcePattern, Iterable[AclEntry]]) -> None:
        """Some patterns' ACLs as the store now has them (empty: none left), put in at once
        as :meth:`replace` does: the rest stays as it was."""
        acls: dict[ResourcePattern, Iterable[AclEntry]] = dict(self._acls)
        acls.update(changes)
        self.replace(acls)

    def set_acls(self, pattern: ResourcePattern, entries: Iterable[AclEntry]) -> None:
        """The ACLs of one pattern as the store now has them (empty: none left)."""
        frozen = frozenset(entries)
        names = self._by_name.setdefault((pattern.resource_type, pattern.pattern_type), {})
        if frozen:
            self._acls[pattern] = frozen
            names[pattern.name] = frozen
        else:
            self._acls.pop(pattern, None)
            names.pop(pattern.name, None)

    def acls(self, pattern: ResourcePattern) -> frozenset[AclEntry]:
        return self._acls.get(pattern, frozenset())

    def table(self) -> dict[ResourcePattern, frozenset[AclEntry]]:
        """Every pattern's ACLs (a copy: what another process is sent as the whole)."""
        return dict(self._acls)

    def bindings(self, filter_: AclBindingFilter = AclBindingFilter()) -> list[AclBinding]:
        """Every stored binding the filter matches (DescribeAcls), in a stable order."""
        out = [AclBinding(pattern, entry) for pattern, entries in self._acls.items()
               for entry in entries]
        return sorted(b for b in out if filter_.matches(b))

    # --------------------------------------------------------- the decision
    def matching_entries(self, resource_type: ResourceType, name: str) -> Iterator[AclEntry]:
        """Every ACL entry that applies to the resource (literal, wildcard, prefixed)."""
        literal = self._by_name.get((resource_type, PatternType.LITERAL), {})
        yield from literal.get(name, ())
        if name != WILDCARD_RESOURCE:
            yield from literal.get(WILDCARD_RESOURCE, ())
        prefixed = self._by_name.get((resource_type, PatternType.PREFIXED))
        if prefixed:
            for end in range(1, len(name) + 1):
                yield from prefixed.get(name[:end], ())

    def authorize(self, principal: str, host: str, operation: Operation,
                  resource_type: ResourceType, name: str) -> Decision:
        resource = ResourcePattern(resource_type, name, PatternType.LITERAL)

        def decide(allowed: bool, reason: str) -> Decision:
            return Decision(principal, host, operation, resource, allowed, reason)

        if principal in self.super_users:
            return decide(True, "super user")
        entries = list(self.matching_entries(resource_type, name))
        if not entries:
            return decide(self.allow_everyone_if_no_acl_found,
                          f"no ACL for the resource; allow.everyone.if.no.acl.found="
                          f"{str(self.allow_everyone_if_no_acl_found).lower()}")

        def applies(entry: AclEntry, permission: Permission,
                    operations: frozenset[Operation]) -> bool:
            return (entry.permission is permission
                    and entry.principal in (principal, WILDCARD_PRINCIPAL)
                    and entry.host in (host, WILDCARD_HOST)
                    and (entry.operation in operations or entry.operation is Operation.ALL))

        for entry in entries:
            if applies(entry, Permission.DENY, frozenset({operation})):
                return decide(False, f"denied by ACL: {entry}")
        granting = IMPLIED_BY.get(operation, frozenset({operation}))
        for entry in entries:
            if applies(entry, Permission.ALLOW, granting):
                return decide(True, f"allowed by ACL: {entry}")
        return decide(False, "no ACL allows it")
