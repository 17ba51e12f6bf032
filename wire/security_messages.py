"""Messages of the security layer (type ids 600-699).

The metadata store's notice that a change-notification znode was added under
one of Kafka's change roots (``/config/changes`` for user credentials,
``/kafka-acl-changes`` and ``/kafka-acl-extended-changes`` for ACLs): the owner
reads the new notifications and refreshes what they name.

With num.processes > 1 on a cluster node, process 0's ClusterController alone
holds the ZooKeeper session: it relays the users and ACLs it learns to the
SecurityView of every other process (``SecurityRelay``), and the handlers of
those processes send it the SCRAM and ACL admin requests (``*Ask``), whose
answers carry what changed so the asking process sees its own change at once.
"""

from __future__ import annotations

from typing import NamedTuple

from wire.registry import message


@message(600)
class ChangesNotified(NamedTuple):
    """A child was added under the change root ``root`` (a watch fired once; read to re-arm)."""

    session_id: int
    root: str


# ------------------------------------------------------------ relayed users and ACLs


class AclEntryRow(NamedTuple):
    """One ACL entry (Kafka's wire codes for operation and permission)."""

    principal: str
    host: str
    operation: int
    permission: int


class AclPatternRow(NamedTuple):
    """A resource pattern's ACL entries as the store has them now (empty: none left)."""

    resource_type: int
    name: str
    pattern_type: int
    entries: list[AclEntryRow]


class UserRow(NamedTuple):
    """A user's SCRAM credentials as the store has them now: mechanism -> Kafka's
    ``salt=...,stored_key=...,server_key=...,iterations=...`` (empty: the user has none)."""

    user: str
    credentials: dict[str, str]


@message(601)
class SecurityRelay(NamedTuple):
    """Process 0's ClusterController -> the SecurityView of each other process.

    ``version`` grows with every relay; a row is taken only over an older one of
    the same pattern or user, so relays and admin answers may arrive in any order.
    ``acls_whole``: ``acls`` is every ACL (patterns not in it have none); else only
    the patterns named changed. The same for ``users``. None: nothing of that kind.
    """

    version: int
    acls_whole: bool
    acls: list[AclPatternRow] | None
    users_whole: bool
    users: list[UserRow] | None


@message(602)
class SecuritySnapshotAsk(NamedTuple):
    """Process ``process`` (1..) -> process 0's ClusterController, as it starts: send its
    SecurityView every user and ACL (a ``SecurityRelay`` with both whole)."""

    process: int


# ------------------------------------------------------------ SCRAM admin from processes 1..


class ScramDeletionRow(NamedTuple):
    user: str
    mechanism: int  # Kafka's mechanism type: 1 SCRAM-SHA-256, 2 SCRAM-SHA-512


class ScramUpsertionRow(NamedTuple):
    user: str
    mechanism: int
    iterations: int
    salt: bytes
    salted_password: bytes


class ScramUserResultRow(NamedTuple):
    """One user of a Describe (``credentials``: [mechanism type, iterations] pairs) or of an
    Alter (``credentials`` empty) answer."""

    user: str
    error_code: int
    error_message: str | None
    credentials: list[list[int]]


@message(603)
class ScramCredentialsDescribe(NamedTuple):
    """Handler of process 1.. -> process 0's ClusterController: DescribeUserScramCredentials
    (``users`` None: every user)."""

    req_id: int
    users: list[str] | None


@message(604)
class ScramCredentialsAlter(NamedTuple):
    """Handler of process 1.. -> process 0's ClusterController: AlterUserScramCredentials,
    asked by ``principal``."""

    req_id: int
    principal: str
    deletions: list[ScramDeletionRow]
    upsertions: list[ScramUpsertionRow]


@message(605)
class ScramCredentialsDone(NamedTuple):
    """The answer to either: ``error_code`` != 0 fails the whole request (the store could
    not be used); an Alter's ``users`` are the changed users' credentials at ``version``."""

    req_id: int
    error_code: int
    error_message: str | None
    results: list[ScramUserResultRow]
    version: int
    users: list[UserRow]


# ------------------------------------------------------------ ACL admin from processes 1..


class AclBindingRow(NamedTuple):
    resource_type: int
    name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission: int


class AclFilterRow(NamedTuple):
    """A DeleteAcls filter (None: any name, principal or host)."""

    resource_type: int
    name: str | None
    pattern_type: int
    principal: str | None
    host: str | None
    operation: int
    permission: int


@message(606)
class AclsCreate(NamedTuple):
    """Handler of process 1.. -> process 0's ClusterController: CreateAcls."""

    req_id: int
    bindings: list[AclBindingRow]


@message(607)
class AclsDelete(NamedTuple):
    """Handler of process 1.. -> process 0's ClusterController: DeleteAcls."""

    req_id: int
    filters: list[AclFilterRow]


@message(608)
class AclsDone(NamedTuple):
    """The answer to either: ``error_code`` != 0 fails the whole request. CreateAcls:
    ``problems`` has one entry per binding (None: stored). DeleteAcls: ``deleted`` has
    the bindings each filter removed. ``acls``: the changed patterns at ``version``."""

    req_id: int
    error_code: int
    error_message: str | None
    problems: list[str | None]
    deleted: list[list[AclBindingRow]]
    version: int
    acls: list[AclPatternRow]
