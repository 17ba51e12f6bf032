"""`actorlog cluster ...`: a spec's ZooKeeper and nodes on their hosts, health, faults, units.

Every command reads the spec first and refuses a wrong one before anything
starts (one line per mistake, exit status 2); a failure on a host is a few
lines naming the host and the command (exit status 1), never a traceback.
The work is in ``actors.hosts``; this module only parses arguments and prints.
"""

from __future__ import annotations

import json
import logging
import shlex
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from actors.hosts.cluster import Cluster, ClusterError
from actors.hosts.faults import FaultError, Netem, parse_delay_ms, parse_loss_pct
from actors.hosts.launch import StartError
from actors.hosts.netns import NetnsError
from actors.hosts.runner import HostError, identity_problem
from actors.hosts.spec import ClusterSpec, SpecError, load_spec

RUN_TIME_ERRORS = (ClusterError, HostError, NetnsError, FaultError, StartError)


class SpecRefused(click.ClickException):
    """The spec (or an argument) is wrong: exit status 2, nothing was started."""

    exit_code = 2


def say(line: str) -> None:
    click.echo(line)
    sys.stdout.flush()


def read_spec(path: str) -> ClusterSpec:
    try:
        spec = load_spec(path)
    except SpecError as exc:
        raise SpecRefused(str(exc)) from None
    unknown = spec.client_unknown_keys
    if unknown:  # as topics --command-config says it
        click.echo(f"Warning: [cluster] client_config {spec.client_config}: ignoring unknown "
                   f"{'key' if len(unknown) == 1 else 'keys'} {', '.join(unknown)}", err=True)
    return spec


@contextmanager
def cluster_of(spec_path: str, **kwargs: Any) -> Iterator[Cluster]:
    spec = read_spec(spec_path)
    cluster = Cluster(spec, say=say, **kwargs)
    try:
        yield cluster
    except SpecError as exc:
        raise SpecRefused(str(exc)) from None
    except RUN_TIME_ERRORS as exc:
        raise click.ClickException(str(exc)) from None
    finally:
        cluster.close()


spec_option = click.option("--spec", "spec_path", required=True, metavar="FILE",
                           help="the cluster spec (TOML)")
stop_timeout_option = click.option(
    "--stop-timeout", "stop_timeout_s", type=float, default=30.0, show_default=True,
    help="seconds a process has after SIGTERM before it gets SIGKILL")
node_argument = click.argument("node", type=int, metavar="NODE")


@click.group("cluster")
def group() -> None:
    """ZooKeeper and nodes on a spec's hosts: up, down, status, faults, systemd units."""
    # kazoo logs every failed connection attempt; status reports the outcome in one line.
    logging.getLogger("kazoo").setLevel(logging.CRITICAL)


@group.command()
@spec_option
def check(spec_path: str) -> None:
    """Read the spec and say what it describes; contacts no host."""
    spec = read_spec(spec_path)
    # files the spec names on this machine are checked here too (ssh would blame the host)
    missing = [p for p in map(identity_problem, spec.hosts.values()) if p]
    if missing:
        raise SpecRefused("\n".join(missing))
    cluster = Cluster(spec, say=say)
    for host in spec.hosts.values():
        say(f"host {host.name}: via {host.via}, {host.address}"
            + (f", namespace {host.netns}" if host.netns else ""))
    zk = spec.zookeeper
    if zk.ensemble:
        say(f"ZooKeeper: ensemble of {len(zk.hosts)} on {', '.join(zk.hosts)} (ids 1-"
            f"{len(zk.hosts)} in that order), ports {zk.port}/{zk.quorum_port}/"
            f"{zk.election_port} (client/quorum/election)")
    else:
        say("ZooKeeper: " + (f"on {', '.join(zk.hosts)}, port {zk.port}" if zk.hosts
                             else f"connect {zk.connect}"))
    say(f"zookeeper.connect of the nodes: {spec.connect_string()}")
    for node_id, plan in cluster.plans.items():
        say(f"node {node_id}: host {plan.host.name}, listener {plan.client_address}, "
            f"data dir {plan.data_dir}")
    if spec.client_config is not None:  # its path and protocol: the file holds the login
        protocol = spec.client_settings.get("security.protocol", "PLAINTEXT").strip().upper()
        say(f"client config of up and status: {spec.client_config} ({protocol})")
    say(f"state dir: {spec.state_dir}")


@group.command()
@spec_option
@click.option("--force", is_flag=True, help="replace keys made before")
def keys(spec_path: str, force: bool) -> None:
    """Make a CURVE key pair per node of the spec (in its state dir); `up` hands them out."""
    with cluster_of(spec_path) as cluster:
        cluster.make_keys(force=force)


@group.command()
@spec_option
@click.option("--keep", is_flag=True, help="on failure, leave what was started for inspection")
@click.option("--timeout", "timeout_s", type=float, default=90.0, show_default=True,
              help="seconds each process may take to become ready")
def up(spec_path: str, keep: bool, timeout_s: float) -> None:
    """Start ZooKeeper, then every node; print the bootstrap servers."""
    with cluster_of(spec_path) as cluster:
        cluster.up(keep=keep, timeout_s=timeout_s)


@group.command()
@spec_option
@stop_timeout_option
def down(spec_path: str, stop_timeout_s: float) -> None:
    """Stop every node, then ZooKeeper; remove the hosts `up` made."""
    with cluster_of(spec_path, stop_timeout_s=stop_timeout_s) as cluster:
        cluster.down()


@group.command()
@spec_option
@click.option("--json", "as_json", is_flag=True, help="print the status as JSON")
@click.option("--topics", is_flag=True, help="also every partition's leader, ISR and replicas")
@click.option("--no-groups", is_flag=True, help="skip the consumer groups and their lag")
def status(spec_path: str, as_json: bool, topics: bool, no_groups: bool) -> None:
    """Nodes, ZooKeeper, the controller and its epoch, partitions, groups with lag, faults.

    Exit status 0 whether healthy or not; the JSON's "healthy" says which.
    """
    with cluster_of(spec_path) as cluster:
        found = cluster.status(topics=topics, groups=not no_groups)
    if as_json:
        click.echo(json.dumps(found, indent=2, sort_keys=True))
        return
    for line in format_status(found):
        click.echo(line)


def format_status(found: dict[str, Any]) -> list[str]:
    zk = found["zookeeper"]
    lines = [f"cluster {found['cluster']}: bootstrap servers {found['bootstrap_servers']}"]
    for server in zk["servers"]:
        lines.append(f"ZooKeeper on {server['host']} ({server['address']}): "
                     + (f"serving ({server['mode']})" if server["serving"] else "NOT serving"))
    if zk["error"]:
        lines.append(f"ZooKeeper at {zk['connect']}: not readable ({zk['error']})")
    else:
        lines.append(f"ZooKeeper at {zk['connect']}: registered nodes {zk['registered']}, "
                     f"controller {found['controller']} (epoch {found['controller_epoch']})")
    wires = found.get("wires") or []
    if len(wires) > 1:
        lines.append(f"inter-node wire: MIXED ({', '.join(w or 'none' for w in wires)}): these "
                     f"builds cannot read each other's messages; stop every node to upgrade")
    lines.append(f"{'node':<6}{'host':<10}{'listener':<24}{'pid':<9}{'process':<10}"
                 f"{'uptime':<9}{'version':<10}{'wire':<14}{'zk':<6}{'leads':<7}kafka")
    unreachable: list[str] = []
    for node in found["nodes"]:
        process = "paused" if node["paused"] else "running" if node["alive"] else \
            "unknown" if node.get("host_error") else "down"
        if node.get("host_error"):
            unreachable.append(f"node {node['id']}: process unknown, its host did not answer: "
                               f"{node['host_error']}")
        uptime = f"{node['uptime_s']}s" if node["uptime_s"] is not None else "-"
        kafka = "answers" if node["answers"] else f"no answer ({node['error']})"
        lines.append(f"{node['id']:<6}{node['host']:<10}{node['listener']:<24}"
                     f"{node['pid'] or '-'!s:<9}{process:<10}{uptime:<9}"
                     f"{node['version'] or '-':<10}{node.get('wire') or '-':<14}"
                     f"{'yes' if node['registered'] else 'no':<6}"
                     f"{node['leaderships']:<7}{kafka}")
    lines += unreachable
    lines.append(f"partitions: {found['partitions']} (from {found['partitions_source']}), "
                 f"under-replicated {found['under_replicated_partitions']}, "
                 f"offline {found['offline_partitions']}")
    for p in found.get("topics", []):
        lines.append(f"  {p['topic']}-{p['partition']}: leader {p['leader']}, isr {p['isr']}, "
                     f"replicas {p['replicas']}"
                     + ("  UNDER-REPLICATED" if len(set(p["isr"]) & set(p["replicas"]))
                        < len(p["replicas"]) else "")
                     + ("  OFFLINE" if p["leader"] < 0 else ""))
    if found.get("groups_error"):
        lines.append(f"groups: not readable ({found['groups_error']})")
    elif found.get("groups_unlisted_nodes"):
        lines.append(f"groups coordinated by node(s) {found['groups_unlisted_nodes']} are "
                     "not listed (no answer)")
    for g in found.get("groups", []):
        lines.append(f"group {g['group']}: {g['state']}, {g['members']} member(s), "
                     f"lag {g['lag'] if g['lag'] is not None else '-'} over "
                     f"{g['partitions']} partition(s)")
    lines.append("healthy" if found["healthy"] else "NOT healthy")
    faults = found["faults"]
    if faults["isolated"] or faults["netem"]:
        lines.append(f"faults: isolated {faults['isolated']}, netem {faults['netem']}")
    return lines


@group.command()
@spec_option
@click.option("--rolling", is_flag=True,
              help="one node at a time: each registered again, and every ISR full, before "
                   "the next stops")
@stop_timeout_option
@click.option("--timeout", "timeout_s", type=float, default=90.0, show_default=True,
              help="seconds each node may take to answer again")
@click.argument("nodes", type=int, nargs=-1, metavar="[NODE]...")
def restart(spec_path: str, rolling: bool, stop_timeout_s: float, timeout_s: float,
            nodes: tuple[int, ...]) -> None:
    """Restart the given nodes (default: all)."""
    with cluster_of(spec_path, stop_timeout_s=stop_timeout_s) as cluster:
        cluster.restart(list(nodes), rolling, timeout_s)


def _fault(name: str, doc: str, action: Callable[[Cluster, int], None]) -> None:
    @group.command(name, help=doc)
    @spec_option
    @node_argument
    def command(spec_path: str, node: int) -> None:
        with cluster_of(spec_path) as cluster:
            action(cluster, node)


_fault("kill", "SIGKILL the node's processes.", Cluster.kill)
_fault("pause", "SIGSTOP the node's processes.", Cluster.pause)
_fault("resume", "SIGCONT the node's processes.", Cluster.resume)
_fault("isolate", "Cut the link of the node's (netns) host.", Cluster.isolate)
_fault("heal", "Restore the link of the node's (netns) host and remove netem.", Cluster.heal)


@group.command()
@spec_option
@node_argument
@click.option("--delay", default="0ms", show_default=True, help="added delay, e.g. 50ms")
@click.option("--loss", default="0%", show_default=True, help="share of packets lost, e.g. 5%")
@click.option("--clear", is_flag=True, help="remove any netem from the host")
def netem(spec_path: str, node: int, delay: str, loss: str, clear: bool) -> None:
    """Delay or drop what the node's (netns) host sends (tc netem, or nftables for loss)."""
    try:
        shape = Netem() if clear else Netem(parse_delay_ms(delay), parse_loss_pct(loss))
    except FaultError as exc:
        raise SpecRefused(str(exc)) from None
    with cluster_of(spec_path) as cluster:
        cluster.netem(node, shape)


@group.command()
@spec_option
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="directory for the units and node configs (one subdirectory per host)")
def units(spec_path: str, out_dir: str) -> None:
    """systemd units for the spec's nodes: actorlog@.service, an environment file, configs."""
    from actors.hosts.units import write_units

    spec = read_spec(spec_path)
    for line in write_units(spec, Path(out_dir)):
        say(line)


@group.command()
@spec_option
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="directory for the copies, one node-<id> subdirectory per node")
@click.option("--node", "node_ids", type=int, multiple=True, metavar="N",
              help="only this node (repeatable; default: every node of the spec)")
@click.option("--analyze", "then_analyze", is_flag=True,
              help="then run `actorlog trace analyze` on the copies (report in OUT/report)")
def traces(spec_path: str, out_dir: str, node_ids: tuple[int, ...], then_analyze: bool) -> None:
    """Copy every node's trace files from its host into OUT/node-<id>, for `actorlog trace`.

    Exit status 1 if a node's traces could not be copied (the others are copied, and
    analyzed with --analyze).
    """
    from actors.hosts.traces import TraceCopyError, copy_traces, trace_dir

    spec = read_spec(spec_path)
    unknown = sorted(set(node_ids) - set(spec.nodes))
    if unknown:
        raise SpecRefused(f"not a node of the spec: {', '.join(map(str, unknown))} "
                          f"(its nodes: {', '.join(map(str, sorted(spec.nodes)))})")
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise click.ClickException(f"cannot make --out {out}: {exc.strerror}") from None
    copied: list[Path] = []
    failed = 0
    cluster = Cluster(spec, say=say)
    try:
        for node_id in sorted(set(node_ids) or spec.nodes):
            plan = cluster.plans[node_id]
            dest = out / f"node-{node_id}"
            missing = cluster.missing_host(plan.host)
            try:
                if missing:
                    raise TraceCopyError(missing)
                got = copy_traces(cluster.runners[plan.host.name], trace_dir(plan.data_dir),
                                  dest)
            except TraceCopyError as exc:
                failed += 1
                say(f"node {node_id}: NOT copied: {exc}")
                continue
            copied.append(dest)
            say(f"node {node_id}: {got.files} file(s), {got.bytes:,} bytes from {got.source} "
                f"to {dest}")
    finally:
        cluster.close()
    if copied and then_analyze:
        from actors.trace.cli import analyze

        click.get_current_context().invoke(analyze, dirs=tuple(map(str, copied)), more_dirs=(),
                                           out=str(out / "report"), master="local[*]",
                                           profile=None)
    elif copied:
        say("analyze them with: actorlog trace analyze "
            + " ".join(f"--dir {shlex.quote(str(d))}" for d in copied)
            + f" --out {shlex.quote(str(out / 'report'))}")
    if failed:
        raise click.ClickException(f"{failed} node(s) not copied")


if __name__ == "__main__":
    group(prog_name="actorlog cluster")
