"""The ACL authorizer: Kafka's rules case by case, then against a simple model under hypothesis."""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from kafka.protocol.api_key import ApiKey
from loguru import logger

from actors.security.acl import (
    IMPLIED_BY,
    AclBinding,
    AclBindingFilter,
    AclEntry,
    AclError,
    Authorizer,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
    parse_super_users,
    validate_binding,
)
from actors.security.api_acls import API_CHECKS, HIDE, checks_for
from actors.security.authorizer_log import log_decision
from wire.api_versions import ADVERTISED
from wire.errors import ErrorCode

T, G, C, X = (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER,
              ResourceType.TRANSACTIONAL_ID)
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = Permission.ALLOW, Permission.DENY
Op = Operation


def entry(principal: str, op: Operation, permission: Permission = ALLOW,
          host: str = "*") -> AclEntry:
    return AclEntry(principal, host, op, permission)


def authorizer(*bindings: tuple[ResourcePattern, AclEntry], supers: str = "",
               allow_everyone: bool = False) -> Authorizer:
    table: dict[ResourcePattern, set[AclEntry]] = {}
    for pattern, acl in bindings:
        table.setdefault(pattern, set()).add(acl)
    auth = Authorizer(parse_super_users(supers), allow_everyone)
    auth.load(table)
    return auth


def allowed(auth: Authorizer, principal: str, op: Operation, rtype: ResourceType, name: str,
            host: str = "10.0.0.1") -> bool:
    return auth.authorize(principal, host, op, rtype, name).allowed


def test_no_acl_means_deny_unless_allow_everyone() -> None:
    assert not allowed(authorizer(), "User:alice", Op.READ, T, "orders")
    assert allowed(authorizer(allow_everyone=True), "User:alice", Op.READ, T, "orders")
    # Any ACL on the resource, even for someone else, turns the fallback off.
    auth = authorizer((ResourcePattern(T, "orders"), entry("User:bob", Op.READ)),
                      allow_everyone=True)
    assert not allowed(auth, "User:alice", Op.READ, T, "orders")
    assert allowed(auth, "User:alice", Op.READ, T, "other")


def test_super_users_skip_the_acls() -> None:
    auth = authorizer((ResourcePattern(T, "orders"), entry("User:admin", Op.ALL, DENY)),
                      supers="User:admin; User:ops")
    assert allowed(auth, "User:admin", Op.DELETE, T, "orders")
    decision = auth.authorize("User:ops", "h", Op.ALTER, C, "kafka-cluster")
    assert decision.allowed and decision.reason == "super user"


def test_literal_wildcard_and_prefixed_patterns() -> None:
    auth = authorizer(
        (ResourcePattern(T, "orders"), entry("User:alice", Op.WRITE)),
        (ResourcePattern(T, "*"), entry("User:bob", Op.READ)),
        (ResourcePattern(T, "logs-", PRE), entry("User:carol", Op.READ)),
    )
    assert allowed(auth, "User:alice", Op.WRITE, T, "orders")
    assert not allowed(auth, "User:alice", Op.WRITE, T, "orders2")
    assert allowed(auth, "User:bob", Op.READ, T, "anything")
    assert allowed(auth, "User:carol", Op.READ, T, "logs-app")
    assert not allowed(auth, "User:carol", Op.READ, T, "logs")
    assert not allowed(auth, "User:carol", Op.READ, G, "logs-app")  # other resource type


def test_deny_wins_and_is_not_widened() -> None:
    auth = authorizer(
        (ResourcePattern(T, "orders"), entry("User:*", Op.ALL)),
        (ResourcePattern(T, "ord", PRE), entry("User:mallory", Op.READ, DENY)),
    )
    assert allowed(auth, "User:alice", Op.READ, T, "orders")
    decision = auth.authorize("User:mallory", "h", Op.READ, T, "orders")
    assert not decision.allowed and decision.reason.startswith("denied by ACL: User:mallory has "
                                                               "Deny permission")
    # Deny Read does not deny Describe (Describe is only widened on the allow side).
    assert allowed(auth, "User:mallory", Op.DESCRIBE, T, "orders")


def test_implied_operations() -> None:
    for op in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER):
        auth = authorizer((ResourcePattern(T, "t"), entry("User:a", op)))
        assert allowed(auth, "User:a", Op.DESCRIBE, T, "t"), op
        assert not allowed(auth, "User:a", Op.CREATE, T, "t")
    auth = authorizer((ResourcePattern(T, "t"), entry("User:a", Op.ALTER_CONFIGS)))
    assert allowed(auth, "User:a", Op.DESCRIBE_CONFIGS, T, "t")
    assert not allowed(auth, "User:a", Op.ALTER, T, "t")
    auth = authorizer((ResourcePattern(T, "t"), entry("User:a", Op.DESCRIBE)))
    assert not allowed(auth, "User:a", Op.READ, T, "t")


def test_hosts() -> None:
    auth = authorizer((ResourcePattern(G, "g"), entry("User:a", Op.READ, host="10.0.0.1")))
    assert allowed(auth, "User:a", Op.READ, G, "g", host="10.0.0.1")
    assert not allowed(auth, "User:a", Op.READ, G, "g", host="10.0.0.2")


def test_set_acls_replaces_and_removes() -> None:
    auth = authorizer((ResourcePattern(T, "t"), entry("User:a", Op.READ)))
    auth.set_acls(ResourcePattern(T, "t"), [entry("User:b", Op.READ)])
    assert not allowed(auth, "User:a", Op.READ, T, "t")
    assert allowed(auth, "User:b", Op.READ, T, "t")
    auth.set_acls(ResourcePattern(T, "t"), [])
    assert auth.bindings() == []


def test_update_puts_changed_patterns_in_and_keeps_the_rest() -> None:
    """What a node does with a /kafka-acl-changes notice: only the patterns named change,
    in a fresh cache swapped in at once (a reader never sees half of it)."""
    kept, changed, gone = (ResourcePattern(T, "kept"), ResourcePattern(T, "changed", PRE),
                           ResourcePattern(G, "gone"))
    auth = authorizer((kept, entry("User:a", Op.READ)), (changed, entry("User:a", Op.WRITE)),
                      (gone, entry("User:a", Op.READ)))
    before, generation = auth._acls, auth.generation
    auth.update({changed: [entry("User:b", Op.WRITE)], gone: []})
    assert auth._acls is not before and auth.generation == generation + 1
    assert allowed(auth, "User:a", Op.READ, T, "kept")
    assert allowed(auth, "User:b", Op.WRITE, T, "changed-1")
    assert not allowed(auth, "User:a", Op.WRITE, T, "changed-1")
    assert not allowed(auth, "User:a", Op.READ, G, "gone")
    assert {b.pattern for b in auth.bindings()} == {kept, changed}


def test_filters_as_describe_and_delete_acls_use_them() -> None:
    orders = ResourcePattern(T, "orders")
    star = ResourcePattern(T, "*")
    prefix = ResourcePattern(T, "ord", PRE)
    group = ResourcePattern(G, "orders")
    auth = authorizer((orders, entry("User:a", Op.READ)), (star, entry("User:b", Op.WRITE)),
                      (prefix, entry("User:c", Op.READ, DENY)), (group, entry("User:a", Op.READ)))
    everything = auth.bindings()
    assert len(everything) == 4
    names = {b.pattern for b in auth.bindings(AclBindingFilter(T, "orders", PatternType.MATCH))}
    assert names == {orders, star, prefix}
    assert {b.pattern for b in auth.bindings(AclBindingFilter(T, "orders"))} == {orders}
    assert {b.pattern for b in auth.bindings(AclBindingFilter(name="orders"))} == {orders, group}
    assert [b.pattern for b in auth.bindings(AclBindingFilter(pattern_type=PRE))] == [prefix]
    assert [b.entry.principal for b in auth.bindings(
        AclBindingFilter(permission=DENY))] == ["User:c"]
    assert [b.entry.operation for b in auth.bindings(
        AclBindingFilter(principal="User:b"))] == [Op.WRITE]


@pytest.mark.parametrize(("binding", "message"), [
    (AclBinding(ResourcePattern(G, "g"), entry("User:a", Op.WRITE)),
     "operation Write does not apply to resource type Group"),
    (AclBinding(ResourcePattern(C, "c"), entry("User:a", Op.ALTER)),
     "the cluster resource is named 'kafka-cluster', not 'c'"),
    (AclBinding(ResourcePattern(T, "t", PatternType.MATCH), entry("User:a", Op.READ)),
     "pattern type MATCH is a filter, not a pattern; use LITERAL or PREFIXED"),
    (AclBinding(ResourcePattern(T, "*", PRE), entry("User:a", Op.READ)),
     "a PREFIXED pattern cannot be '*'; use a LITERAL '*' for every resource"),
    (AclBinding(ResourcePattern(T, "t"), entry("alice", Op.READ)),
     "principal 'alice' is not TYPE:NAME (e.g. User:alice)"),
    (AclBinding(ResourcePattern(T, "t"), entry("User:a", Op.READ, Permission.ANY)),
     "permission ANY is a filter; use ALLOW or DENY"),
    (AclBinding(ResourcePattern(ResourceType.USER, "u"), entry("User:a", Op.READ)),
     "resource type USER cannot have ACLs here"),
    (AclBinding(ResourcePattern(T, ""), entry("User:a", Op.READ)), "the resource name is empty"),
])
def test_bad_acls_are_refused(binding: AclBinding, message: str) -> None:
    with pytest.raises(AclError) as caught:
        validate_binding(binding)
    assert str(caught.value) == message


def test_names_parse_as_kafka_spells_them() -> None:
    assert [op.acl_name for op in (Op.CLUSTER_ACTION, Op.IDEMPOTENT_WRITE, Op.ALL)] == [
        "ClusterAction", "IdempotentWrite", "All"]
    assert Op.parse("DescribeConfigs") is Op.DESCRIBE_CONFIGS is Op.parse("describe_configs")
    assert ResourceType.parse("TransactionalId") is X is ResourceType.parse("TRANSACTIONAL_ID")
    assert X.zk_name == "TransactionalId" and T.zk_name == "Topic"
    assert str(ResourcePattern(T, "x", PRE)) == "Topic:PREFIXED:x"
    with pytest.raises(AclError, match="unknown operation 'Fly'"):
        Op.parse("Fly")
    with pytest.raises(AclError, match="principal 'nobody' is not TYPE:NAME"):
        parse_super_users("User:a;nobody")


def test_decisions_are_logged_through_the_authorizer_logger() -> None:
    lines: list[tuple[str, str, dict[str, object]]] = []
    sink = logger.add(lambda m: lines.append((m.record["level"].name, m.record["message"],
                                              m.record["extra"])), level="DEBUG")
    try:
        auth = authorizer((ResourcePattern(T, "t"), entry("User:a", Op.READ)))
        log_decision(auth.authorize("User:a", "10.0.0.1", Op.READ, T, "t"), api="Fetch")
        log_decision(auth.authorize("User:b", "10.0.0.2", Op.WRITE, T, "t"), api="Produce",
                     node="n1")
    finally:
        logger.remove(sink)
    assert [(level, extra["actor"]) for level, _m, extra in lines] == [
        ("DEBUG", "authorizer"), ("INFO", "authorizer")]
    assert lines[1][1] == ("Principal = User:b is Denied Operation = Write from host = 10.0.0.2 "
                           "on resource = Topic:LITERAL:t (no ACL allows it) for request = "
                           "Produce")
    assert lines[1][2]["node"] == "n1"


# ------------------------------------------------------------------ API table


def test_every_advertised_api_has_an_entry() -> None:
    for entry_ in ADVERTISED:
        assert entry_.api_key in API_CHECKS, ApiKey(entry_.api_key).name
    assert checks_for(ApiKey.ApiVersions) == ()
    with pytest.raises(KeyError):
        checks_for(9999)


def test_table_spot_checks() -> None:
    produce = checks_for(ApiKey.Produce)
    assert [(c.operation, c.resource_type, c.when) for c in produce] == [
        (Op.WRITE, X, "transactional"), (Op.IDEMPOTENT_WRITE, C, "idempotent"),
        (Op.WRITE, T, "always")]
    assert produce[2].error == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    metadata = checks_for(ApiKey.Metadata)
    assert any(c.denied == HIDE and c.when == "all_topics" for c in metadata)
    create = checks_for(ApiKey.CreateTopics)[0]
    assert (create.resource_type, create.either and create.either.resource_type) == (C, T)
    assert checks_for(ApiKey.JoinGroup)[0].error == ErrorCode.GROUP_AUTHORIZATION_FAILED
    for key in (ApiKey.CreateAcls, ApiKey.DeleteAcls, ApiKey.AlterUserScramCredentials):
        assert [(c.operation, c.resource_type) for c in checks_for(key)] == [(Op.ALTER, C)]


# ------------------------------------------------------------- against a model

PRINCIPALS = ["User:a", "User:b", "User:*"]
HOSTS = ["h1", "h2", "*"]
NAMES = ["", "o", "ord", "orders", "*"]
TYPES = [T, G]
OPS = [Op.READ, Op.WRITE, Op.DESCRIBE, Op.ALL, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS]


def model_allows(bindings: set[AclBinding], supers: frozenset[str], allow_everyone: bool,
                 principal: str, host: str, op: Operation, rtype: ResourceType,
                 name: str) -> bool:
    """Kafka's rule, restated as plainly as possible over a flat set of bindings."""
    if principal in supers:
        return True

    def applies_to_resource(b: AclBinding) -> bool:
        p = b.pattern
        if p.resource_type is not rtype:
            return False
        if p.pattern_type is LIT:
            return p.name == name or p.name == "*"
        return name.startswith(p.name)

    relevant = [b.entry for b in bindings if applies_to_resource(b)]
    if not relevant:
        return allow_everyone

    def matches(e: AclEntry, ops: set[Operation]) -> bool:
        return (e.principal in (principal, "User:*") and e.host in (host, "*")
                and (e.operation in ops or e.operation is Op.ALL))

    if any(e.permission is DENY and matches(e, {op}) for e in relevant):
        return False
    granting = {op} | set(IMPLIED_BY.get(op, ()))
    return any(e.permission is ALLOW and matches(e, granting) for e in relevant)


patterns = st.builds(ResourcePattern, st.sampled_from(TYPES), st.sampled_from(NAMES[1:]),
                     st.sampled_from([LIT, PRE]))
entries = st.builds(AclEntry, st.sampled_from(PRINCIPALS), st.sampled_from(HOSTS),
                    st.sampled_from(OPS), st.sampled_from([ALLOW, DENY]))


class AuthorizerAgainstModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.bindings: set[AclBinding] = set()
        self.supers = frozenset({"User:root"})
        self.auth = Authorizer(self.supers, False)
        self.allow_everyone = False

    def _store(self, pattern: ResourcePattern) -> None:
        self.auth.set_acls(pattern, [b.entry for b in self.bindings if b.pattern == pattern])

    @rule(pattern=patterns, acl=entries)
    def add(self, pattern: ResourcePattern, acl: AclEntry) -> None:
        self.bindings.add(AclBinding(pattern, acl))
        self._store(pattern)

    @rule(pattern=patterns)
    def remove_pattern(self, pattern: ResourcePattern) -> None:
        self.bindings = {b for b in self.bindings if b.pattern != pattern}
        self._store(pattern)

    @rule(flag=st.booleans())
    def reload_with_fallback(self, flag: bool) -> None:
        """As a node does when its store session renews: everything read again."""
        self.allow_everyone = flag
        self.auth = Authorizer(self.supers, flag)
        table: dict[ResourcePattern, list[AclEntry]] = {}
        for b in self.bindings:
            table.setdefault(b.pattern, []).append(b.entry)
        self.auth.load(table)

    @rule(principal=st.sampled_from([*PRINCIPALS[:2], "User:root", "User:c"]),
          host=st.sampled_from(HOSTS[:2]), op=st.sampled_from(OPS),
          rtype=st.sampled_from(TYPES), name=st.sampled_from(NAMES[1:]))
    def decide(self, principal: str, host: str, op: Operation, rtype: ResourceType,
               name: str) -> None:
        expected = model_allows(self.bindings, self.supers, self.allow_everyone, principal, host,
                                op, rtype, name)
        decision = self.auth.authorize(principal, host, op, rtype, name)
        assert decision.allowed == expected, (decision, sorted(self.bindings))

    @invariant()
    def bindings_are_what_was_stored(self) -> None:
        assert set(self.auth.bindings()) == self.bindings


AuthorizerAgainstModel.TestCase.settings = settings(max_examples=200, stateful_step_count=50,
                                                    deadline=None)
test_authorizer_against_model = AuthorizerAgainstModel.TestCase

