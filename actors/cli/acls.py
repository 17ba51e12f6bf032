"""`actorlog acls add|list|remove`: ACLs of authorizer.class.name = "acl", as kafka-acls.sh.

The ACLs go where the node reads them (the same store as `actorlog users`):
ZooKeeper's ``/kafka-acl/<Type>/<name>`` (``/kafka-acl-extended/prefixed/...``
for prefixed patterns) when the config names ``zookeeper.connect``, else the
single node's data dir (``<log.dirs>/security``). A cluster's running nodes
take a change at once through their /kafka-acl-changes watches; a single node
reads its store again on the first decision after the store's file changed; a Kafka
admin client's CreateAcls or DeleteAcls is applied at once by the node that serves it.
"""

from __future__ import annotations

import click

from actors.cli import UserError
from actors.cli.users import _CONFIG, _DATA_DIR, _store
from actors.security.acl import (
    CLUSTER_NAME,
    AclBinding,
    AclBindingFilter,
    AclEntry,
    AclError,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
    parse_principal,
)


def _resources(topic: tuple[str, ...], group_: tuple[str, ...], txn: tuple[str, ...],
               cluster: bool) -> list[tuple[ResourceType, str]]:
    found = ([(ResourceType.TOPIC, t) for t in topic] + [(ResourceType.GROUP, g) for g in group_]
             + [(ResourceType.TRANSACTIONAL_ID, t) for t in txn])
    if cluster:
        found.append((ResourceType.CLUSTER, CLUSTER_NAME))
    return found


_RESOURCE_OPTIONS = [
    click.option("--topic", multiple=True, help="a topic (or prefix); '*' for every topic"),
    click.option("--group", "group_", multiple=True, help="a consumer group (or prefix)"),
    click.option("--transactional-id", "txn", multiple=True, help="a transactional id"),
    click.option("--cluster", is_flag=True, help="the cluster resource (kafka-cluster)"),
]


def _resource_options(f):  # type: ignore[no-untyped-def]
    for option in reversed(_RESOURCE_OPTIONS):
        f = option(f)
    return f


def _show(binding: AclBinding) -> str:
    p, e = binding.pattern, binding.entry
    return (f"{p.resource_type.zk_name}:{p.pattern_type.name}:{p.name}\t{e.principal}\t"
            f"{e.host}\t{e.operation.acl_name}\t{e.permission.acl_name}")


@click.group("acls")
def group() -> None:
    """ACLs of authorizer.class.name = "acl" (Kafka's kafka-acls.sh, in short)."""


@group.command("add")
@click.option("--allow-principal", multiple=True, help="User:NAME allowed (repeatable)")
@click.option("--deny-principal", multiple=True, help="User:NAME denied (repeatable)")
@click.option("--operation", multiple=True, required=True,
              help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, "
                   "DescribeConfigs, AlterConfigs, IdempotentWrite or All (repeatable)")
@click.option("--host", default="*", show_default=True, help="client address the ACL covers")
@click.option("--resource-pattern-type", default="literal", show_default=True,
              help="literal or prefixed")
@_resource_options
@_CONFIG
@_DATA_DIR
def add(allow_principal: tuple[str, ...], deny_principal: tuple[str, ...],
        operation: tuple[str, ...], host: str, resource_pattern_type: str,
        topic: tuple[str, ...], group_: tuple[str, ...], txn: tuple[str, ...], cluster: bool,
        config_file: str | None, data_dir: str | None) -> None:
    """Add ACLs: each principal x operation x resource."""
    from actors.security.acl_admin import create_acls

    try:
        pattern_type = PatternType.parse(resource_pattern_type)
        operations = [Operation.parse(o) for o in operation]
        principals = ([(p, Permission.ALLOW) for p in allow_principal]
                      + [(p, Permission.DENY) for p in deny_principal])
        for principal, _permission in principals:
            parse_principal(principal)
        resources = _resources(topic, group_, txn, cluster)
        if not principals:
            raise AclError("name --allow-principal or --deny-principal (User:NAME)")
        if not resources:
            raise AclError("name a resource: --topic, --group, --transactional-id or --cluster")
        bindings = [AclBinding(ResourcePattern(rtype, name, pattern_type),
                               AclEntry(principal, host, op, permission))
                    for rtype, name in resources for principal, permission in principals
                    for op in operations]
        with _store(config_file, data_dir) as (store, where):
            problems = create_acls(store, bindings)
    except AclError as exc:
        raise UserError(str(exc)) from None
    refused = [p for p in problems if p is not None]
    if refused:
        raise UserError(refused[0])
    for binding in bindings:
        click.echo(f"added {_show(binding)}")
    click.echo(f"{len(bindings)} ACLs stored in {where}")


def _filter(principal: str | None, resource_pattern_type: str, topic: tuple[str, ...],
            group_: tuple[str, ...], txn: tuple[str, ...], cluster: bool
            ) -> list[AclBindingFilter]:
    pattern_type = PatternType.parse(resource_pattern_type)
    resources = _resources(topic, group_, txn, cluster)
    if not resources:
        return [AclBindingFilter(ResourceType.ANY, None, pattern_type, principal)]
    return [AclBindingFilter(rtype, name, pattern_type, principal) for rtype, name in resources]


@group.command("list")
@click.option("--principal", default=None, help="only this principal's ACLs")
@click.option("--resource-pattern-type", default="any", show_default=True,
              help="any, match, literal or prefixed")
@_resource_options
@_CONFIG
@_DATA_DIR
def list_acls(principal: str | None, resource_pattern_type: str, topic: tuple[str, ...],
              group_: tuple[str, ...], txn: tuple[str, ...], cluster: bool,
              config_file: str | None, data_dir: str | None) -> None:
    """ACLs (resource, principal, host, operation, permission), one a line."""
    try:
        filters = _filter(principal, resource_pattern_type, topic, group_, txn, cluster)
        with _store(config_file, data_dir) as (store, _where):
            stored = store.get_all_acls()
    except AclError as exc:
        raise UserError(str(exc)) from None
    for pattern in sorted(stored):
        for entry in sorted(stored[pattern]):
            binding = AclBinding(pattern, entry)
            if any(f.matches(binding) for f in filters):
                click.echo(_show(binding))


@group.command("remove")
@click.option("--principal", default=None, help="only this principal's ACLs")
@click.option("--resource-pattern-type", default="literal", show_default=True,
              help="literal, prefixed, any or match")
@_resource_options
@_CONFIG
@_DATA_DIR
def remove(principal: str | None, resource_pattern_type: str, topic: tuple[str, ...],
           group_: tuple[str, ...], txn: tuple[str, ...], cluster: bool,
           config_file: str | None, data_dir: str | None) -> None:
    """Remove the ACLs of the named resources (and principal)."""
    from actors.security.acl_admin import delete_acls

    try:
        if not (topic or group_ or txn or cluster):
            raise AclError("name a resource: --topic, --group, --transactional-id or --cluster")
        filters = _filter(principal, resource_pattern_type, topic, group_, txn, cluster)
        with _store(config_file, data_dir) as (store, where):
            deleted = delete_acls(store, filters)
    except AclError as exc:
        raise UserError(str(exc)) from None
    gone = sorted({b for found in deleted for b in found})
    if not gone:
        raise UserError(f"no ACL matched in {where}")
    for binding in gone:
        click.echo(f"removed {_show(binding)}")
