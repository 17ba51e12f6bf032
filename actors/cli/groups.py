"""`actorlog groups list|describe|reset-offsets|delete` through the Kafka admin APIs.

``describe`` shows a group's members and their assignments, and per
partition the committed offset, the log end offset and the lag between
them. ``reset-offsets`` works like Kafka's kafka-consumer-groups tool: it
prints the plan, and commits it only with ``--execute`` and only while the
group has no members. ``delete`` needs DeleteGroups, which actorlog serves
from issue 12's admin-API step on.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import click

from actors.cli import UserError
from actors.cli.admin import admin_client, bootstrap_option, emit, fail_if, json_option, table

INACTIVE = ("Empty", "Dead")


@click.group("groups")
def group() -> None:
    """Consumer groups of any Kafka-compatible broker (--bootstrap), through the Kafka APIs."""


@group.command("list")
@bootstrap_option
@json_option
def list_groups(bootstrap: str, timeout_ms: int, as_json: bool) -> None:
    """List the groups with their state and protocol type."""
    with admin_client(bootstrap, timeout_ms) as admin:
        listed = admin.list_groups()
    groups = sorted(({"group": g["group_id"], "state": g.get("group_state") or None,
                      "protocol_type": g.get("protocol_type") or None} for g in listed),
                    key=lambda g: g["group"])
    emit(as_json, {"groups": groups}, lambda: table(
        ["GROUP", "STATE", "PROTOCOL TYPE"],
        [(g["group"], g["state"], g["protocol_type"]) for g in groups]))


def _assignment(member: dict[str, Any]) -> list[tuple[str, int]]:
    assignment = member.get("member_assignment")
    if not isinstance(assignment, dict):
        return []  # not the consumer protocol: the assignment is opaque bytes
    return sorted((a["topic"], p) for a in assignment.get("assigned_partitions", [])
                  for p in a["partitions"])


def _log_ends(admin: Any, partitions: set[tuple[str, int]]) -> dict[tuple[str, int], int | None]:
    from kafka import TopicPartition
    from kafka.admin import OffsetSpec
    from kafka.errors import KafkaError

    tps = {key: TopicPartition(*key) for key in partitions}
    try:
        found = admin.list_partition_offsets({tp: OffsetSpec.LATEST for tp in tps.values()})
        return {key: found[tp].offset for key, tp in tps.items()}
    except KafkaError:  # e.g. a topic deleted since: ask one at a time, it fails alone
        pass
    ends: dict[tuple[str, int], int | None] = {}
    for key, tp in tps.items():
        try:
            ends[key] = admin.list_partition_offsets({tp: OffsetSpec.LATEST})[tp].offset
        except KafkaError:
            ends[key] = None
    return ends


def describe_group(admin: Any, group_id: str) -> dict[str, Any]:
    """One group as the describe command shows it (members, offsets, lag)."""
    info = admin.describe_groups([group_id])[group_id]
    state = info.get("group_state")
    if state == "Dead":
        return {"group": group_id, "state": state, "error": f"group {group_id!r} does not exist",
                "members": [], "offsets": []}
    committed = {(tp.topic, tp.partition): om.offset
                 for tp, om in admin.list_group_offsets({group_id: None})[group_id].items()}
    members, owner = [], {}
    for m in info.get("members", []):
        assigned = _assignment(m)
        members.append({"member_id": m["member_id"], "client_id": m["client_id"],
                        "host": m.get("client_host") or None,
                        "instance_id": m.get("group_instance_id"),
                        "assignment": [{"topic": t, "partition": p} for t, p in assigned]})
        owner.update({tp: m["member_id"] for tp in assigned})
    partitions = set(committed) | set(owner)
    ends = _log_ends(admin, partitions)
    offsets = []
    for topic, partition in sorted(partitions):
        done = committed.get((topic, partition))
        done = done if done is not None and done >= 0 else None
        end = ends.get((topic, partition))
        offsets.append({"topic": topic, "partition": partition, "committed": done,
                        "log_end": end,
                        "lag": end - done if end is not None and done is not None else None,
                        "member": owner.get((topic, partition))})
    return {"group": group_id, "state": state, "protocol_type": info.get("protocol_type"),
            "protocol": info.get("protocol_data") or None, "error": None,
            "members": members, "offsets": offsets}


@group.command("describe")
@click.argument("groups", nargs=-1, required=True)
@bootstrap_option
@json_option
def describe(groups: tuple[str, ...], bootstrap: str, timeout_ms: int, as_json: bool) -> None:
    """Members, assignments, and per partition: committed offset, log end, lag."""
    with admin_client(bootstrap, timeout_ms) as admin:
        out = [describe_group(admin, g) for g in groups]

    def human() -> None:
        for g in out:
            if g["error"]:
                click.echo(f"{g['group']}: {g['error']}")
                continue
            click.echo(f"Group: {g['group']}  state: {g['state']}  protocol: "
                       f"{g['protocol_type'] or '-'}/{g['protocol'] or '-'}  "
                       f"members: {len(g['members'])}")
            if g["members"]:
                table(["MEMBER", "CLIENT", "HOST", "PARTITIONS"],
                      [(m["member_id"], m["client_id"], m["host"],
                        ",".join(f"{a['topic']}-{a['partition']}" for a in m["assignment"]))
                       for m in g["members"]], indent="  ")
            if g["offsets"]:
                table(["TOPIC", "PARTITION", "COMMITTED", "LOG END", "LAG", "MEMBER"],
                      [(o["topic"], o["partition"], o["committed"], o["log_end"], o["lag"],
                        o["member"]) for o in g["offsets"]], indent="  ")

    emit(as_json, {"groups": out}, human)
    fail_if(any(g["error"] for g in out))


def _parse_topic(spec: str) -> tuple[str, list[int] | None]:
    topic, sep, parts = spec.partition(":")
    if not topic:
        raise UserError(f"--topic takes TOPIC or TOPIC:P,P,..., got {spec!r}")
    if not sep:
        return topic, None
    try:
        return topic, [int(p) for p in parts.split(",") if p.strip()]
    except ValueError:
        raise UserError(f"--topic takes TOPIC or TOPIC:P,P,..., got {spec!r}") from None


def _timestamp_ms(text: str) -> int:
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise UserError(f"--to-datetime takes an ISO 8601 time such as 2024-05-01T12:00:00, "
                        f"got {text!r}") from None
    return int(when.timestamp() * 1000)


@group.command("reset-offsets")
@click.argument("group_id", metavar="GROUP")
@click.option("--topic", "topics", multiple=True, metavar="TOPIC[:P,P]",
              help="the topic (or some of its partitions) to reset; repeat for more")
@click.option("--all-topics", is_flag=True, help="every partition the group has committed")
@click.option("--to-earliest", is_flag=True, help="the log start")
@click.option("--to-latest", is_flag=True, help="the log end")
@click.option("--to-offset", type=int, help="this offset (kept within the log)")
@click.option("--shift-by", type=int, help="the committed offset plus N (N may be negative)")
@click.option("--to-datetime", help="the first offset at or after this ISO 8601 time")
@click.option("--execute", is_flag=True, help="commit the new offsets (default: show the plan)")
@bootstrap_option
@json_option
def reset_offsets(group_id: str, topics: tuple[str, ...], all_topics: bool, to_earliest: bool,
                  to_latest: bool, to_offset: int | None, shift_by: int | None,
                  to_datetime: str | None, execute: bool, bootstrap: str, timeout_ms: int,
                  as_json: bool) -> None:
    """Move GROUP's committed offsets; the group must have no members to --execute."""
    from kafka import TopicPartition
    from kafka.admin import OffsetSpec, OffsetTimestamp
    from kafka.structs import OffsetAndMetadata

    # two flags of one option would keep one silently: each is its own
    to = "earliest" if to_earliest else "latest" if to_latest else None
    chosen = [c for c in (to_earliest or None, to_latest or None, to_offset, shift_by,
                          to_datetime) if c is not None]
    if len(chosen) != 1:
        raise UserError("give exactly one of --to-earliest, --to-latest, --to-offset N, "
                        "--shift-by N, --to-datetime TIME")
    if bool(topics) == all_topics:
        raise UserError("give --topic TOPIC (repeatable) or --all-topics")
    with admin_client(bootstrap, timeout_ms, needs="`actorlog groups reset-offsets`") as admin:
        described = describe_group(admin, group_id)
        state = described["state"]
        if execute and state not in INACTIVE:
            raise click.ClickException(
                f"group {group_id!r} is {state} with {len(described['members'])} member(s); "
                f"offsets can be reset only while it has none: stop its consumers first")
        current = {(o["topic"], o["partition"]): o["committed"] for o in described["offsets"]}
        targets: list[tuple[str, int]] = []
        if all_topics:
            targets = sorted(tp for tp, c in current.items() if c is not None)
        for spec in topics:
            topic, parts = _parse_topic(spec)
            [meta] = admin.describe_topics([topic])
            if meta["error_code"]:
                raise click.ClickException(f"topic {topic!r} does not exist")
            known = sorted(p["partition_index"] for p in meta["partitions"])
            # a partition named that the topic lacks: said here, not as the broker's
            # UnknownTopicOrPartition of the offsets lookup, which names neither
            missing = [p for p in parts or () if p not in known]
            if missing:
                raise click.ClickException(
                    f"topic {topic!r} has no partition {missing[0]}: it has {len(known)} "
                    f"(--topic {topic}:PARTITION[,PARTITION...])")
            targets += [(topic, p) for p in (known if parts is None else parts)]
        tps = {tp: TopicPartition(*tp) for tp in targets}

        def lookup(spec: Any) -> dict[tuple[str, int], int]:
            found = admin.list_partition_offsets({tp: spec for tp in tps.values()})
            return {key: found[tp].offset for key, tp in tps.items()}

        earliest, latest = lookup(OffsetSpec.EARLIEST), lookup(OffsetSpec.LATEST)
        if to == "earliest":
            wanted = dict(earliest)
        elif to == "latest":
            wanted = dict(latest)
        elif to_offset is not None:
            wanted = dict.fromkeys(tps, to_offset)
        elif shift_by is not None:
            wanted = {}
            for tp in tps:
                base = current.get(tp)
                wanted[tp] = (latest[tp] if base is None else base) + shift_by
        else:
            assert to_datetime is not None
            at = lookup(OffsetTimestamp(_timestamp_ms(to_datetime)))
            wanted = {tp: latest[tp] if off < 0 else off for tp, off in at.items()}
        new = {tp: min(max(off, earliest[tp]), latest[tp]) for tp, off in wanted.items()}
        errors: dict[tuple[str, int], str] = {}
        if execute and new:
            answer = admin.alter_group_offsets(
                group_id, {tps[tp]: OffsetAndMetadata(off, "", -1) for tp, off in new.items()})
            for key, tp in tps.items():
                err = answer.get(tp)
                if err is not None and getattr(err, "__name__", "NoError") != "NoError":
                    errors[key] = err.__name__
    rows = [{"topic": t, "partition": p, "current": current.get((t, p)), "new": off,
             "error": errors.get((t, p))} for (t, p), off in sorted(new.items())]
    def human() -> None:
        table(["TOPIC", "PARTITION", "CURRENT", "NEW"] + (["ERROR"] if errors else []),
              [(r["topic"], r["partition"], r["current"], r["new"])
               + ((r["error"],) if errors else ()) for r in rows])
        if not execute:
            click.echo("(a plan: add --execute to commit it)")
        elif not errors:
            click.echo("committed.")

    emit(as_json, {"group": group_id, "executed": execute, "offsets": rows}, human)
    fail_if(bool(errors))


@group.command("delete")
@click.argument("groups", nargs=-1, required=True)
@bootstrap_option
@json_option
def delete(groups: tuple[str, ...], bootstrap: str, timeout_ms: int, as_json: bool) -> None:
    """Delete GROUPS and their committed offsets (only groups without members)."""
    with admin_client(bootstrap, timeout_ms, needs="`actorlog groups delete`") as admin:
        answer = admin.delete_groups(list(groups))  # {group: "OK" or the error's name}
    out = [{"group": g, "deleted": answer.get(g) == "OK",
            "error": None if answer.get(g) == "OK"
            else str(answer.get(g, "no answer")).removesuffix("Error")}
           for g in dict.fromkeys(groups)]
    def human() -> None:
        for g in out:
            click.echo(f"{g['group']}: " + ("deleted" if g["deleted"] else g["error"]))

    emit(as_json, {"groups": out}, human)
    fail_if(any(g["error"] for g in out))
