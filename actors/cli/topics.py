"""`actorlog topics list|describe|create|delete|alter` through the Kafka admin APIs.

``alter`` needs CreatePartitions (``--partitions``) and IncrementalAlterConfigs
(``--config``, ``--delete-config``); against a broker without them it says so
in one line.
"""

from __future__ import annotations

import re
from typing import Any

import click

from actors.cli import UserError
from actors.cli.admin import (
    admin_client,
    bootstrap_option,
    emit,
    error_name,
    fail_if,
    json_option,
    table,
)

SOURCES_SHOWN = ("DYNAMIC_TOPIC_CONFIG", "STATIC_BROKER_CONFIG", "DYNAMIC_BROKER_CONFIG",
                 "DYNAMIC_DEFAULT_BROKER_CONFIG")


def parse_configs(pairs: tuple[str, ...], what: str = "--config") -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UserError(f"{what} takes KEY=VALUE (e.g. retention.ms=86400000), got {pair!r}")
        out[key.strip()] = value.strip()
    return out


def _error(code: int, message: str | None) -> str | None:
    if not code:
        return None
    return f"{error_name(code)}: {message}" if message else error_name(code)


@click.group("topics")
def group() -> None:
    """Topics of any Kafka-compatible broker (--bootstrap), through the Kafka APIs."""


@group.command("list")
@bootstrap_option
@json_option
@click.option("--exclude-internal", is_flag=True, help="leave out __consumer_offsets and the like")
def list_topics(bootstrap: str, timeout_ms: int, as_json: bool, exclude_internal: bool) -> None:
    """List the topics and their partition counts."""
    with admin_client(bootstrap, timeout_ms) as admin:
        described = admin.describe_topics()
    topics = sorted(
        ({"name": t["name"], "partitions": len(t["partitions"]), "internal": t["is_internal"]}
         for t in described if not (exclude_internal and t["is_internal"])),
        key=lambda t: t["name"])
    emit(as_json, {"topics": topics}, lambda: table(
        ["TOPIC", "PARTITIONS"],
        [(t["name"] + (" (internal)" if t["internal"] else ""), t["partitions"])
         for t in topics]))


def _configs_of(admin: Any, names: list[str]) -> dict[str, dict[str, dict[str, Any]]]:
    from kafka.admin import ConfigResource, ConfigResourceType

    if not names:
        return {}
    found = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, n) for n in names],
                                   config_filter="all")
    return {name: {key: {"value": entry["value"], "source": entry["config_source"]}
                   for key, entry in sorted(configs.items())}
            for name, configs in found.get("topic", {}).items()}


@group.command("describe")
@click.argument("topics", nargs=-1)
@bootstrap_option
@json_option
def describe(topics: tuple[str, ...], bootstrap: str, timeout_ms: int, as_json: bool) -> None:
    """Partitions (leader, replicas, in-sync replicas) and configs of TOPICS (default: all)."""
    with admin_client(bootstrap, timeout_ms) as admin:
        described = admin.describe_topics(list(topics) if topics else None)
        ok = [t["name"] for t in described if not t["error_code"]]
        configs = _configs_of(admin, ok)
    out = []
    for t in sorted(described, key=lambda t: t["name"]):
        out.append({
            "name": t["name"],
            "internal": t["is_internal"],
            "error": _error(t["error_code"], None),
            "partitions": [{"partition": p["partition_index"], "leader": p["leader_id"],
                            "replicas": p["replica_nodes"], "isr": p["isr_nodes"],
                            "offline": p["offline_replicas"],
                            "error": _error(p["error_code"], None)}
                           for p in sorted(t["partitions"], key=lambda p: p["partition_index"])],
            "configs": configs.get(t["name"], {}),
        })

    def human() -> None:
        for t in out:
            if t["error"]:
                click.echo(f"{t['name']}: {t['error']}")
                continue
            set_here = {k: c["value"] for k, c in t["configs"].items()
                        if c["source"] in SOURCES_SHOWN}
            click.echo(f"Topic: {t['name']}  partitions: {len(t['partitions'])}"
                       + ("  (internal)" if t["internal"] else "")
                       + "  configs: " + (", ".join(f"{k}={v}" for k, v in set_here.items())
                                          or "(defaults)"))
            table(["PARTITION", "LEADER", "REPLICAS", "ISR"],
                  [(p["partition"], p["leader"], ",".join(map(str, p["replicas"])),
                    ",".join(map(str, p["isr"]))) for p in t["partitions"]], indent="  ")

    emit(as_json, {"topics": out}, human)
    fail_if(any(t["error"] for t in out))


@group.command("create")
@click.argument("topics", nargs=-1, required=True)
@click.option("--partitions", type=int, default=-1, help="[default: the broker's num.partitions]")
@click.option("--replication-factor", type=int, default=-1,
              help="[default: the broker's default.replication.factor]")
@click.option("--config", "configs", multiple=True, metavar="KEY=VALUE",
              help="a topic config, e.g. retention.ms=86400000; repeat for more")
@click.option("--if-not-exists", is_flag=True, help="a topic that exists is not an error")
@bootstrap_option
@json_option
def create(topics: tuple[str, ...], partitions: int, replication_factor: int,
           configs: tuple[str, ...], if_not_exists: bool, bootstrap: str, timeout_ms: int,
           as_json: bool) -> None:
    """Create TOPICS."""
    settings = parse_configs(configs)
    with admin_client(bootstrap, timeout_ms) as admin:
        response = admin.create_topics(
            {name: {"num_partitions": partitions, "replication_factor": replication_factor,
                    "configs": settings} for name in topics},
            timeout_ms=timeout_ms, raise_errors=False)
    from kafka.errors import TopicAlreadyExistsError

    out = []
    for t in response["topics"]:
        code = t["error_code"]
        exists = code == TopicAlreadyExistsError.errno
        out.append({"name": t["name"], "created": not code,
                    "partitions": t.get("num_partitions") if not code else None,
                    "error": None if exists and if_not_exists else
                    _error(code, t.get("error_message"))})
    def human() -> None:
        for t in out:
            click.echo(f"{t['name']}: " + (f"created ({t['partitions']} partitions)"
                                            if t["created"] else t["error"] or "exists already"))

    emit(as_json, {"topics": out}, human)
    fail_if(any(t["error"] for t in out))


@group.command("delete")
@click.argument("topics", nargs=-1, required=True)
@click.option("--if-exists", is_flag=True, help="a topic that does not exist is not an error")
@bootstrap_option
@json_option
def delete(topics: tuple[str, ...], if_exists: bool, bootstrap: str, timeout_ms: int,
           as_json: bool) -> None:
    """Delete TOPICS and their data (not Kafka's internal topics)."""
    from actors.core.topic_config import INTERNAL_TOPICS  # here: the CLI starts without it

    internal = [t for t in topics if t in INTERNAL_TOPICS]
    if internal:  # as kafka-topics.sh: the broker would take it, and lose every group's state
        raise UserError(f"{internal[0]} is an internal topic (the consumer groups' offsets or "
                        "the transactions' state) and is not deleted; nothing was deleted")
    with admin_client(bootstrap, timeout_ms) as admin:
        response = admin.delete_topics(list(topics), timeout_ms=timeout_ms, raise_errors=False)
    from kafka.errors import UnknownTopicOrPartitionError

    out = []
    for t in response["topics"]:
        code = t["error_code"]
        missing = code == UnknownTopicOrPartitionError.errno
        out.append({"name": t["name"], "deleted": not code,
                    "error": None if missing and if_exists else
                    _error(code, t.get("error_message"))})
    def human() -> None:
        for t in out:
            click.echo(f"{t['name']}: " + ("deleted" if t["deleted"]
                                            else t["error"] or "does not exist"))

    emit(as_json, {"topics": out}, human)
    fail_if(any(t["error"] for t in out))


@group.command("alter")
@click.argument("topic")
@click.option("--partitions", type=click.IntRange(min=1),
              help="the new partition count (only grows; needs CreatePartitions)")
@click.option("--config", "configs", multiple=True, metavar="KEY=VALUE",
              help="set a topic config; repeat for more (needs IncrementalAlterConfigs)")
@click.option("--delete-config", "deletes", multiple=True, metavar="KEY",
              help="return a topic config to the broker default; repeat for more")
@bootstrap_option
@json_option
def alter(topic: str, partitions: int | None, configs: tuple[str, ...], deletes: tuple[str, ...],
          bootstrap: str, timeout_ms: int, as_json: bool) -> None:
    """Add partitions to TOPIC or change its configs."""
    from kafka.admin import ConfigResource, ConfigResourceType

    settings = parse_configs(configs)
    if partitions is None and not settings and not deletes:
        raise UserError("nothing to alter: give --partitions N, --config KEY=VALUE or "
                        "--delete-config KEY")
    changes: dict[str, Any] = {k: ("SET", v) for k, v in settings.items()}
    changes.update({k: ("DELETE", None) for k in deletes})
    result: dict[str, Any] = {"name": topic, "partitions": None, "configs": None, "error": None}
    with admin_client(bootstrap, timeout_ms, needs="`actorlog topics alter`") as admin:
        if partitions is not None:
            response = admin.create_partitions({topic: partitions}, timeout_ms=timeout_ms,
                                               raise_errors=False)
            [res] = response.results
            result["error"] = _error(res.error_code, res.error_message)
            if not result["error"]:
                result["partitions"] = partitions
        if changes and not result["error"]:
            try:
                answer = admin.alter_configs(
                    [ConfigResource(ConfigResourceType.TOPIC, topic, configs=changes)],
                    incremental=True, raise_on_unknown=False)  # the broker names what it
                # refuses (kafka-python's own check took a missing topic's every key as
                # unknown)
            except ValueError as exc:
                raise UserError(f"{topic}: {exc}") from None
            # kafka-python answers each resource 'OK' or its error as text,
            # "[Error 40] InvalidConfigurationError: <the broker's message>"
            outcome = answer.get("topic", {}).get(topic)
            if outcome == "OK":
                result["configs"] = {k: v for k, (_op, v) in changes.items()}
            else:
                result["error"] = re.sub(r"^\[Error -?\d+\] (\w+?)Error\b", r"\1",
                                         str(outcome or "no answer for the topic")
                                         ).removesuffix(": None")  # no message sent
    emit(as_json, {"topic": result}, lambda: click.echo(
        (f"{topic}: partitions {partitions}; {result['error']}" if result["partitions"] else
         f"{topic}: {result['error']}") if result["error"] else
        f"{topic}: altered" + (f"; partitions {partitions}" if partitions else "")
        + "".join(f"; {k}={'(default)' if v is None else v}"
                  for k, v in (result["configs"] or {}).items())))
    fail_if(bool(result["error"]))
