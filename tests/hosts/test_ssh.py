"""The ssh path for real: a sshd in a test host, reached with the ssh client in batch mode."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import tempfile
from pathlib import Path

import pytest

from actors.hosts.runner import HostError, SshRunner, check_version, local_version
from actors.hosts.spec import HostSpec
from tests.fixtures.pids import HeldProcess, running
from tests.fixtures.sshd import SshServer, keygen
from tests.hosts.helpers import ACTORLOG, wait_until

pytestmark = pytest.mark.multiprocess


def ssh_spec(server: SshServer, tmp_path: Path, **changes: object) -> HostSpec:
    spec = HostSpec(name="h2", via="ssh", address=server.host.address,
                    data_dir=str(tmp_path / "remote"), actorlog=ACTORLOG, python="",
                    user="root", identity_file=str(server.identity_file))
    return dataclasses.replace(spec, **changes)  # type: ignore[arg-type]


def test_commands_run_inside_the_ssh_host(ssh_host: SshServer, tmp_path: Path) -> None:
    runner = SshRunner(ssh_spec(ssh_host, tmp_path), tmp_path / "state" / "known_hosts")
    out = runner.run(["ip", "-o", "-4", "addr", "show", "dev", "eth0"]).stdout
    assert f"inet {ssh_host.host.address}/24" in out  # the host's own network stack
    # words with spaces and quotes arrive as they were given
    assert runner.run(["printf", "%s|", "a b", "it's", "$HOME"]).stdout == "a b|it's|$HOME|"
    # the first connection recorded the host key in the managed known_hosts
    recorded = (tmp_path / "state" / "known_hosts").read_text()
    assert ssh_host.host_key.with_suffix(".pub").read_text().split()[1] in recorded
    # files and the remote command's failures
    runner.write_file(str(tmp_path / "remote" / "x.txt"), "hello\n")
    assert runner.read_tail(str(tmp_path / "remote" / "x.txt")) == "hello\n"
    with pytest.raises(HostError, match=r"host h2: `ssh root@198\.18\.0\.\d+ -p 22 false` "
                                        r"exited with 1"):
        runner.run(["false"])


def test_a_changed_host_key_is_refused(ssh_host: SshServer, tmp_path: Path) -> None:
    runner = SshRunner(ssh_spec(ssh_host, tmp_path), tmp_path / "known_hosts")
    runner.run(["true"])
    ssh_host.stop()
    ssh_host.new_host_key()
    ssh_host.start()
    with pytest.raises(HostError) as info:
        runner.run(["true"])
    assert str(info.value) == (
        f"host h2 (root@{ssh_host.host.address}, port 22): its ssh host key does not match the "
        f"one recorded in {tmp_path / 'known_hosts'}; if the host was reinstalled, remove its "
        f"line there")


def test_a_users_known_hosts_file_is_checked_strictly(ssh_host: SshServer,
                                                      tmp_path: Path) -> None:
    own = tmp_path / "my_known_hosts"
    own.write_text("")
    runner = SshRunner(ssh_spec(ssh_host, tmp_path, known_hosts=str(own)), tmp_path / "unused")
    with pytest.raises(HostError, match="its ssh host key does not match"):
        runner.run(["true"])  # an unknown host is not accepted silently
    key = ssh_host.host_key.with_suffix(".pub").read_text().split()
    own.write_text(f"{ssh_host.host.address} {key[0]} {key[1]}\n")
    assert runner.run(["echo", "ok"]).stdout == "ok\n"
    assert not (tmp_path / "unused").exists()


def test_a_key_the_host_does_not_know_is_one_line(ssh_host: SshServer, tmp_path: Path) -> None:
    other = tmp_path / "other_key"
    keygen(other)
    runner = SshRunner(ssh_spec(ssh_host, tmp_path, identity_file=str(other)),
                       tmp_path / "known_hosts")
    with pytest.raises(HostError) as info:
        runner.run(["true"])
    assert str(info.value) == (f"host h2 (root@{ssh_host.host.address}, port 22): ssh failed: "
                               f"root@{ssh_host.host.address}: Permission denied (publickey).")


def test_a_missing_identity_file_is_named_not_blamed_on_the_host(ssh_host: SshServer,
                                                                 tmp_path: Path) -> None:
    """ssh only warns about a key file it cannot read and then fails as "Permission denied":
    the file is named instead, by the runner and by `cluster check`."""
    from click.testing import CliRunner

    from actors.cluster_cli import group

    missing = tmp_path / "no_such_key"
    runner = SshRunner(ssh_spec(ssh_host, tmp_path, identity_file=str(missing)),
                       tmp_path / "known_hosts")
    line = f"host h2: identity_file {missing} (in [hosts.h2]) does not exist here"
    with pytest.raises(HostError) as info:
        runner.run(["true"])
    assert str(info.value) == line
    with pytest.raises(HostError) as info:
        runner.run_bytes(["true"])
    assert str(info.value) == line
    spec = tmp_path / "demo.toml"
    spec.write_text(f'[hosts.h2]\nvia = "ssh"\naddress = "{ssh_host.host.address}"\n'
                    f'identity_file = "{missing}"\n[zookeeper]\nconnect = "127.0.0.1:2181"\n'
                    f'[nodes.1]\nhost = "h2"\n')
    result = CliRunner().invoke(group, ["check", "--spec", str(spec)])
    assert result.exit_code == 2 and result.output == f"Error: {line}\n", result.output
    # the key that exists is used as before
    found = SshRunner(ssh_spec(ssh_host, tmp_path), tmp_path / "known_hosts")
    assert found.run(["echo", "ok"]).stdout == "ok\n"


def test_an_identity_file_of_which_only_the_public_half_is_here_uses_the_agent(
        ssh_host: SshServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The private key is in an agent, KEY.pub is the file: ssh signs with the agent's key
    that matches it. The missing KEY was refused as a missing identity file."""
    key = tmp_path / "in_agent"
    key.with_suffix(".pub").write_text(
        Path(f"{ssh_host.identity_file}.pub").read_text())
    socket = tmp_path / "agent.sock"
    agent = subprocess.Popen(["ssh-agent", "-D", "-a", str(socket)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(socket.exists, timeout_s=10, what="ssh-agent's socket")
        monkeypatch.setenv("SSH_AUTH_SOCK", str(socket))
        subprocess.run(["ssh-add", "-q", str(ssh_host.identity_file)], check=True,
                       capture_output=True, timeout=30)
        runner = SshRunner(ssh_spec(ssh_host, tmp_path, identity_file=str(key)),
                           tmp_path / "known_hosts")
        assert runner.run(["echo", "ok"]).stdout == "ok\n"
    finally:
        agent.kill()
        agent.wait()
    # without the agent, the same file is the host's refusal, as ssh says it
    monkeypatch.delenv("SSH_AUTH_SOCK")
    runner = SshRunner(ssh_spec(ssh_host, tmp_path, identity_file=str(key)),
                       tmp_path / "known_hosts")
    with pytest.raises(HostError, match=r"Permission denied \(publickey\)"):
        runner.run(["true"])


def test_nothing_listening_is_one_line(ssh_host: SshServer, tmp_path: Path) -> None:
    runner = SshRunner(ssh_spec(ssh_host, tmp_path, port=2222), tmp_path / "known_hosts")
    with pytest.raises(HostError, match=r"port 2222\): ssh failed: .*Connection refused"):
        runner.run(["true"])


def test_the_host_must_run_the_same_actorlog(ssh_host: SshServer, tmp_path: Path) -> None:
    runner = SshRunner(ssh_spec(ssh_host, tmp_path), tmp_path / "known_hosts")
    assert check_version(runner) == local_version()
    missing = SshRunner(ssh_spec(ssh_host, tmp_path, actorlog="/opt/none/bin/actorlog"),
                        tmp_path / "known_hosts")
    with pytest.raises(HostError) as info:
        check_version(missing)
    assert str(info.value) == (
        "host h2: '/opt/none/bin/actorlog' is not found there; install actorlog on it "
        "(deploy/install.sh) and set actorlog = \"/path/to/.venv/bin/actorlog\" in [hosts.h2]")
    # another release on the host: a stand-in executable that answers as one would
    older = tmp_path / "older-actorlog"
    older.write_text("#!/bin/sh\necho 'actorlog, version 0.0.1'\n")
    older.chmod(0o755)
    with pytest.raises(HostError, match=f"host h2 runs actorlog 0.0.1, this is actorlog "
                                        f"{local_version()}: install the same version"):
        check_version(SshRunner(ssh_spec(ssh_host, tmp_path, actorlog=str(older)),
                                tmp_path / "known_hosts"))


def test_detached_processes_outlive_the_ssh_session(ssh_host: SshServer,
                                                    tmp_path: Path) -> None:
    runner = SshRunner(ssh_spec(ssh_host, tmp_path), tmp_path / "known_hosts")
    work = tmp_path / "remote"
    pid = runner.start_detached(["sleep", "300"], cwd=str(work), log_path=str(work / "log"),
                                pid_path=str(work / "pid"))
    # held (tests/fixtures/pids.py): once it exited, its pid may be another test's process
    sleep = HeldProcess.take(pid, "the sleep", running("sleep 300"))
    try:
        info = runner.process(pid)
        assert info is not None and info.alive and info.args == "sleep 300"
        # it runs in the ssh host's namespace
        ns = subprocess.run(["ip", "netns", "identify", str(pid)], capture_output=True,
                            text=True).stdout.strip()
        assert ns == ssh_host.host.netns
        assert not sleep.exited()  # (so the pid is still its)
        assert runner.signal(pid, "KILL")  # kill over ssh
        wait_until(sleep.exited, what="exit")
        info = runner.process(pid)  # gone, or a zombie, or another process by now
        assert info is None or not info.alive or info.args != "sleep 300", info
    finally:
        with sleep:
            sleep.kill()


def test_control_master_shares_one_connection_and_close_ends_it(ssh_host: SshServer,
                                                                tmp_path: Path) -> None:
    control = Path(tempfile.mkdtemp(prefix="alssh-"))  # a socket path must stay short
    runner = SshRunner(ssh_spec(ssh_host, tmp_path, control_master=True),
                       tmp_path / "known_hosts", control_dir=control)
    assert runner.run(["echo", "one"]).stdout == "one\n"
    sockets = list(control.iterdir())
    assert len(sockets) == 1  # the master's socket
    check = ["ssh", "-O", "check", "-o", f"ControlPath={runner.control_path}",
             ssh_host.host.address]
    master = subprocess.run(check, capture_output=True, text=True)
    assert master.returncode == 0 and "Master running" in master.stderr
    master_pid = int(master.stderr.split("pid=")[1].split(")")[0])
    assert runner.run(["echo", "two"]).stdout == "two\n"
    # held: once it exited its pid may be another process, which would look like it
    with HeldProcess.take(master_pid, "the ssh master", running("ssh")) as master_process:
        runner.close()
        wait_until(master_process.exited, what="the ssh master to exit")
    assert not list(control.iterdir())
    control.rmdir()


def test_one_failed_look_at_a_nodes_processes_over_ssh_is_looked_at_again(
        tmp_path: Path) -> None:
    """processes_looked_at_twice, which Cluster.wait_process_restarted looks at the node's
    processes through, looks again once when ssh fails under its ``ps`` (exit 255:
    SshFailed), as after a failed ``ps`` on this host; it
    raised HostError at once, ending the chaos run. A second failure is raised; any other
    HostError (a program missing) at once. The ssh failure is real ssh's (to a loopback
    port where nothing listens); the look that follows it is this host's ``ps``."""
    from actors.hosts.cluster import processes_looked_at_twice
    from actors.hosts.runner import LocalRunner, ProcessInfo, SshFailed
    from tests.fixtures.broker import free_port

    spec = HostSpec(name="h2", via="ssh", address="127.0.0.1", port=free_port(),
                    data_dir=str(tmp_path / "remote"), actorlog=ACTORLOG, python="")
    over_ssh = SshRunner(spec, tmp_path / "known_hosts", connect_timeout_s=5)
    here = LocalRunner(dataclasses.replace(spec, via="local", port=22))
    pid = os.getpid()
    looks: list[str] = []

    def look(failing: int) -> dict[int, ProcessInfo]:
        """The first ``failing`` looks over ssh (which fails), the next ones here."""
        if len(looks) < failing:
            looks.append("ssh")
            over_ssh.process(pid)
            raise AssertionError("ssh to a port where nothing listens ran a command")
        looks.append("here")
        info = here.process(pid)
        return {0: info} if info is not None else {}

    found = processes_looked_at_twice(lambda: look(1), pause_s=0.05)
    assert looks == ["ssh", "here"] and found[0].pid == pid, (looks, found)
    looks.clear()
    with pytest.raises(SshFailed, match=r"port \d+\): ssh failed: .*Connection refused"):
        processes_looked_at_twice(lambda: look(2), pause_s=0.05)
    assert looks == ["ssh", "ssh"]
    looks.clear()
    assert processes_looked_at_twice(lambda: look(0), pause_s=0.05)[0].pid == pid
    assert looks == ["here"]  # found at the first look: not looked at again

    def missing() -> dict[int, ProcessInfo]:
        looks.append("missing")
        here.run(["actorlog-no-such-program"])
        return {}

    looks.clear()
    with pytest.raises(HostError, match="is not installed here") as raised:
        processes_looked_at_twice(missing, pause_s=0.05)
    assert not isinstance(raised.value, SshFailed) and looks == ["missing"]
