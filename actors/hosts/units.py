"""systemd units for a spec's nodes: a template ``actorlog@.service``, one instance per node.

Instance ``node-<id>`` runs ``actorlog serve --config /etc/actorlog/node-<id>.toml``;
``/etc/actorlog/actorlog.env`` holds the settings every instance on the host
shares. `actorlog cluster units --spec FILE --out DIR` writes, per host that
runs nodes, ``DIR/<host>/`` with the unit (the host's actorlog executable and
its nodes' data dirs filled in), the environment file and each node's config
(the same config `cluster up` writes). ``deploy/actorlog@.service`` and
``deploy/actorlog.env`` are the same files for the defaults
(actorlog in /opt/actorlog, data under /var/lib/actorlog).
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from actors.hosts.node_config import NodePlan
from actors.hosts.spec import ClusterSpec

DEFAULT_ACTORLOG = "/opt/actorlog/.venv/bin/actorlog"
DEFAULT_DATA_DIR = "/var/lib/actorlog"
CONFIG_DIR = "/etc/actorlog"
UNIT_NAME = "actorlog@.service"
ENV_NAME = "actorlog.env"

UNIT_TEMPLATE = """\
# One actorlog node of a cluster per instance: actorlog@node-1 runs
# `actorlog serve --config {config_dir}/node-1.toml`. Written by
# `actorlog cluster units --spec FILE --out DIR`, which also writes each node's
# config and {env_name}.
#
# Install on a host: useradd --system --home {data_dir} actorlog; copy this file
# to /etc/systemd/system/, {env_name} and the host's node-N.toml files to
# {config_dir}/; then: systemctl daemon-reload && systemctl enable --now actorlog@node-N
#
# SIGTERM stops a node cleanly (and, in a cluster, after a controlled shutdown);
# a mistake in the settings exits with status 2, which is not restarted.

[Unit]
Description=actorlog node %i (a Kafka-compatible log broker)
After=network-online.target
Wants=network-online.target

[Service]
Type=exec
User=actorlog
Group=actorlog
EnvironmentFile={config_dir}/{env_name}
ExecStart={actorlog} serve --config {config_dir}/%i.toml --log-level ${{ACTORLOG_LOG_LEVEL}}
# The gateway's ipc socket of each instance lives in its own runtime directory.
Environment=ACTORLOG_IPC_DIR=/run/actorlog-%i
RuntimeDirectory=actorlog-%i
StateDirectory=actorlog
ReadWritePaths={read_write}
KillSignal=SIGTERM
TimeoutStopSec=180
Restart=on-failure
RestartSec=5
RestartPreventExitStatus=2
LimitNOFILE=1048576
NoNewPrivileges=yes
PrivateTmp=yes
ProtectSystem=strict
ProtectHome=yes

[Install]
WantedBy=multi-user.target
"""

ENV_TEMPLATE = """\
# Settings every actorlog@ instance on this host shares (read by actorlog@.service).
# The Kafka settings of each node are in {config_dir}/node-N.toml.
ACTORLOG_LOG_LEVEL=INFO
"""


def render_unit(actorlog: str = DEFAULT_ACTORLOG,
                data_dirs: tuple[str, ...] = (DEFAULT_DATA_DIR,)) -> str:
    # "-": a data dir that does not exist yet does not stop the unit from starting
    read_write = " ".join(f"-{d}" for d in data_dirs)
    return UNIT_TEMPLATE.format(actorlog=actorlog, config_dir=CONFIG_DIR, env_name=ENV_NAME,
                                data_dir=DEFAULT_DATA_DIR, read_write=read_write)


def render_env() -> str:
    return ENV_TEMPLATE.format(config_dir=CONFIG_DIR)


def write_units(spec: ClusterSpec, out: Path) -> list[str]:
    """Write the units, environment files and node configs; the lines to tell the user."""
    lines = []
    by_host: dict[str, list[NodePlan]] = {}
    for node_id in sorted(spec.nodes):
        plan = NodePlan.of(spec, node_id)
        by_host.setdefault(plan.host.name, []).append(plan)
    for host_name, plans in by_host.items():
        host = spec.hosts[host_name]
        directory = out / host_name
        directory.mkdir(parents=True, exist_ok=True)
        actorlog = host.actorlog if host.actorlog.startswith("/") else DEFAULT_ACTORLOG
        data_dirs = tuple(sorted({str(PurePosixPath(p.data_dir)) for p in plans}))
        (directory / UNIT_NAME).write_text(render_unit(actorlog, data_dirs))
        (directory / ENV_NAME).write_text(render_env())
        instances = []
        for plan in plans:
            (directory / f"node-{plan.node_id}.toml").write_text(plan.config_text())
            instances.append(f"actorlog@node-{plan.node_id}")
        lines.append(f"host {host_name}: {directory}/ ({UNIT_NAME}, {ENV_NAME}, "
                     + ", ".join(f"node-{p.node_id}.toml" for p in plans)
                     + f"); on the host: systemctl enable --now {' '.join(instances)}")
    zk = spec.zookeeper
    if zk.ensemble:
        servers = "".join(f"server.{i}={spec.hosts[h].address}:{zk.quorum_port}:"
                          f"{zk.election_port}\n" for i, h in enumerate(zk.hosts, start=1))
        for i, h in enumerate(zk.hosts, start=1):
            directory = out / h
            directory.mkdir(parents=True, exist_ok=True)
            (directory / "zoo.cfg.servers").write_text(
                f"# ZooKeeper server {i} of {len(zk.hosts)}: add these lines to "
                f"/etc/zookeeper/conf/zoo.cfg\n# and write {i} into "
                f"/etc/zookeeper/conf/myid (the Debian zookeeperd service).\n"
                f"clientPort={zk.port}\n{servers}")
            (directory / "myid").write_text(f"{i}\n")
        lines.append(f"ZooKeeper ensemble on {', '.join(zk.hosts)}: use the Debian zookeeperd "
                     "service on each, with the server lines of <host>/zoo.cfg.servers in its "
                     "zoo.cfg and <host>/myid as its myid")
    elif zk.hosts:
        lines.append(f"ZooKeeper on {', '.join(zk.hosts)}: use the Debian "
                     "zookeeperd service there (clientPort "
                     f"{zk.port}), or give [zookeeper] connect")
    return lines
