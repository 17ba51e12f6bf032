"""systemd units for a spec: the template in deploy/, the per-host files, systemd's verdict."""

from __future__ import annotations

import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from actors.cluster_cli import group
from actors.hosts.node_config import NodePlan
from actors.hosts.spec import load_spec
from actors.hosts.units import render_env, render_unit
from tests.hosts.helpers import ACTORLOG

# it renders files and makes no host: not in the netns group (tests/conftest.py)
pytestmark = pytest.mark.local_hosts

DEPLOY = Path(__file__).parents[2] / "deploy"


def test_deploy_holds_the_default_unit_and_environment_file() -> None:
    assert (DEPLOY / "actorlog@.service").read_text() == render_unit()
    assert (DEPLOY / "actorlog.env").read_text() == render_env()


def write_spec(tmp_path: Path) -> Path:
    spec = tmp_path / "prod.toml"
    spec.write_text(f"""
[hosts.a]
via = "ssh"
address = "10.0.0.1"
actorlog = "{ACTORLOG}"
data_dir = "/srv/kafka"
[hosts.b]
via = "ssh"
address = "10.0.0.2"
[zookeeper]
hosts = ["a"]
[nodes.1]
host = "a"
[nodes.2]
host = "b"
[nodes.3]
host = "a"
config = {{"listeners" = "10.0.0.1:9192", "log.dirs" = "/data2/kafka"}}
[config]
"num.partitions" = 6
""")
    return spec


def test_units_per_host_with_its_nodes_configs(tmp_path: Path) -> None:
    spec_path = write_spec(tmp_path)
    out = tmp_path / "units"
    result = CliRunner().invoke(group, ["units", "--spec", str(spec_path), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (out / "a").iterdir()) == [
        "actorlog.env", "actorlog@.service", "node-1.toml", "node-3.toml"]
    assert sorted(p.name for p in (out / "b").iterdir()) == [
        "actorlog.env", "actorlog@.service", "node-2.toml"]
    unit_a = (out / "a" / "actorlog@.service").read_text()
    assert f"ExecStart={ACTORLOG} serve --config /etc/actorlog/%i.toml" in unit_a
    assert "ReadWritePaths=-/data2/kafka -/srv/kafka/node-1\n" in unit_a
    # a host without an absolute actorlog path gets the documented default place
    assert "ExecStart=/opt/actorlog/.venv/bin/actorlog serve" in \
        (out / "b" / "actorlog@.service").read_text()
    spec = load_spec(spec_path)
    for host, node_id in (("a", 1), ("a", 3), ("b", 2)):
        written = tomllib.loads((out / host / f"node-{node_id}.toml").read_text())
        assert written == NodePlan.of(spec, node_id).config
    assert "systemctl enable --now actorlog@node-1 actorlog@node-3" in result.output


def test_an_ensemble_gets_its_server_lines_and_myid_per_host(tmp_path: Path) -> None:
    spec_path = write_spec(tmp_path)
    spec_path.write_text(spec_path.read_text().replace('hosts = ["a"]', 'hosts = ["a", "b"]'))
    out = tmp_path / "units"
    result = CliRunner().invoke(group, ["units", "--spec", str(spec_path), "--out", str(out)])
    assert result.exit_code == 0, result.output
    servers = "server.1=10.0.0.1:2888:3888\nserver.2=10.0.0.2:2888:3888\n"
    for host, myid in (("a", 1), ("b", 2)):
        assert (out / host / "myid").read_text() == f"{myid}\n"
        text = (out / host / "zoo.cfg.servers").read_text()
        assert text.endswith(f"clientPort=2181\n{servers}")
        assert f"write {myid} into /etc/zookeeper/conf/myid" in text
    assert "ZooKeeper ensemble on a, b: use the Debian zookeeperd service on each" in \
        result.output


def test_systemd_analyze_verify_accepts_the_units(tmp_path: Path) -> None:
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed (Debian package systemd)")
    out = tmp_path / "units"
    result = CliRunner().invoke(group, ["units", "--spec", str(write_spec(tmp_path)),
                                        "--out", str(out)])
    assert result.exit_code == 0, result.output
    unit_dir = out / "a"
    # an instance is verified through its template, as systemd would load it
    verified = subprocess.run(
        ["systemd-analyze", "verify", str(unit_dir / "actorlog@node-1.service")],
        capture_output=True, text=True, timeout=120)
    complaints = [line for line in (verified.stdout + verified.stderr).splitlines()
                  if "actorlog@" in line]
    assert verified.returncode == 0 and not complaints, verified.stdout + verified.stderr
    # and it does complain about a broken one, so the check above means something
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "actorlog@.service").write_text(
        render_unit(actorlog="/nonexistent/actorlog").replace("Type=exec", "Type=exce"))
    refused = subprocess.run(
        ["systemd-analyze", "verify", str(broken / "actorlog@node-1.service")],
        capture_output=True, text=True, timeout=120)
    text = refused.stdout + refused.stderr
    assert refused.returncode != 0 and "/nonexistent/actorlog" in text
    assert "Failed to parse service type" in text
