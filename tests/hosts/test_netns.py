"""Test hosts made of network namespaces, and the runners that start processes on them."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from actors.hosts import netns
from actors.hosts.netns import NetnsError, TestHost
from actors.hosts.runner import HostError, LocalRunner, NetnsRunner, Runner
from actors.hosts.spec import HostSpec
from tests.fixtures.netns import free_test_address, skip_unless_namespaces
from tests.fixtures.pids import HeldProcess, in_netns, running
from tests.hosts.helpers import answers, http_get, netns_host_spec, serve_http, wait_until

pytestmark = pytest.mark.multiprocess

MakeHosts = Callable[[int], list[TestHost]]


def test_hosts_have_their_own_stack_and_reach_each_other_over_the_bridge(
        make_test_hosts: MakeHosts, tmp_path: Path) -> None:
    a, b = make_test_hosts(2)
    assert {a.netns, b.netns} <= netns.namespaces()
    assert set(netns.bridge_ports()) >= {a.veth, b.veth}
    runner_a = NetnsRunner(netns_host_spec(a, tmp_path))
    inside = runner_a.run(["ip", "-o", "-4", "addr", "show"]).stdout
    assert f"inet {a.address}/24" in inside and b.address not in inside
    # nothing routes out of a test host: only the bridge's /24 is reachable
    route = runner_a.run(["ip", "route", "get", "192.0.2.2"], check=False)
    assert route.returncode != 0 and "unreachable" in route.stderr
    server = serve_http(runner_a, a, tmp_path)
    try:
        wait_until(lambda: answers(a.address, 8000), what="http server in host a")
        assert b"Directory listing" in http_get(a.address, 8000)  # from the root namespace
        runner_b = NetnsRunner(netns_host_spec(b, tmp_path))
        fetched = runner_b.run([sys.executable, "-c", textwrap.dedent(f"""
            import urllib.request
            print(urllib.request.urlopen("http://{a.address}:8000/", timeout=10).status)
        """)])
        assert fetched.stdout.strip() == "200"  # from another host
    finally:
        with server:
            server.kill()


def test_a_cut_link_drops_everything_until_it_is_restored(
        make_test_hosts: MakeHosts, tmp_path: Path) -> None:
    (a,) = make_test_hosts(1)
    runner = NetnsRunner(netns_host_spec(a, tmp_path))
    server = serve_http(runner, a, tmp_path)
    try:
        wait_until(lambda: answers(a.address, 8000), what="http server")
        netns.set_link(a, up=False)
        assert not netns.link_is_up(a.veth)
        assert not answers(a.address, 8000, timeout_s=1.0)
        netns.set_link(a, up=True)
        assert netns.link_is_up(a.veth)
        wait_until(lambda: answers(a.address, 8000), what="http server after the link is back")
    finally:
        with server:
            server.kill()


def test_create_and_remove_exactly_one_host() -> None:
    skip_unless_namespaces()
    bridge_made = netns.ensure_bridge()
    address = free_test_address()
    name, other = f"alog-t{os.getpid()}-create", f"alog-t{os.getpid()}-other"
    try:
        host = netns.create_host(name, address)
        assert netns.address_holder(address) == name
        with pytest.raises(NetnsError, match=f"network namespace {name} already exists"):
            netns.create_host(name, free_test_address())
        with pytest.raises(NetnsError, match=f"address {address} is already in use "
                                             f"\\(namespace {name}\\)"):
            netns.create_host(other, address)
        assert other not in netns.namespaces()  # nothing left of the refusal
        netns.remove_host(host)
        assert name not in netns.namespaces()
        assert not netns.link_exists(host.veth)
        assert netns.address_holder(address) is None
    finally:
        for ns in (name, other):
            if ns in netns.namespaces():
                netns.remove_host(TestHost(ns, address))
        if bridge_made:
            assert netns.remove_bridge_if_unused()


def test_the_fixture_removes_its_hosts_when_the_test_fails(tmp_path: Path) -> None:
    skip_unless_namespaces()
    root = Path(__file__).parents[2]
    record = tmp_path / "made.txt"
    inner = tmp_path / "test_inner.py"
    inner.write_text(textwrap.dedent(f"""
        import subprocess
        from tests.fixtures.netns import make_test_hosts  # noqa: F401  (the fixture)

        def test_fails(make_test_hosts):
            hosts = make_test_hosts(2)
            # a process left running inside a host must not keep the namespace alive
            subprocess.Popen(["ip", "netns", "exec", hosts[0].netns, "sleep", "300"],
                             start_new_session=True)
            open({str(record)!r}, "w").write(
                "\\n".join(h.netns + " " + h.veth for h in hosts))
            assert False, "the test fails on purpose"
    """))
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir",
         str(tmp_path), str(inner)],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(root)}, capture_output=True,
        text=True, timeout=120)
    assert "1 failed" in result.stdout, result.stdout + result.stderr
    made = [line.split() for line in record.read_text().splitlines()]
    assert len(made) == 2
    for ns, veth in made:
        assert ns not in netns.namespaces()
        assert not netns.link_exists(veth)


@pytest.mark.parametrize("where", ["local", "netns"])
def test_runner_starts_a_detached_process_and_controls_it_by_pid(
        where: str, make_test_hosts: MakeHosts, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # a narrow terminal (pytest-xdist's workers say COLUMNS=80) must not cut the marker off
    monkeypatch.setenv("COLUMNS", "20")
    if where == "netns":
        (a,) = make_test_hosts(1)
        runner: Runner = NetnsRunner(netns_host_spec(a, tmp_path))
    else:
        runner = LocalRunner(HostSpec("here", "local", "127.0.0.1", str(tmp_path), "", ""))
    work = tmp_path / "work dir"  # a space in the path is quoted through
    long_arg = "300" + "." + "0" * 100
    pid = runner.start_detached(["sleep", long_arg], cwd=str(work),
                                log_path=str(work / "out.log"), pid_path=str(work / "sleep.pid"))
    # held (tests/fixtures/pids.py): once it exited, its pid may be another test's process
    sleep = HeldProcess.take(pid, "the sleep", running(f"sleep {long_arg}"),
                             *([in_netns(a.netns)] if where == "netns" else []))
    try:
        assert runner.read_pid(str(work / "sleep.pid")) == pid
        info = runner.process(pid)
        assert info is not None and info.alive and info.args == f"sleep {long_arg}"
        # its own session: the runner's shell is gone, the process stays
        assert int(subprocess.run(["ps", "-o", "sid=", "-p", str(pid)], capture_output=True,
                                  text=True).stdout.strip()) == pid
        assert runner.signal(pid, "STOP")
        wait_until(lambda: (i := runner.process(pid)) is not None and i.paused, what="stopped")
        assert runner.signal(pid, "CONT")
        wait_until(lambda: (i := runner.process(pid)) is not None and not i.paused,
                   what="continued")
        assert runner.signal(pid, "TERM")
        wait_until(sleep.exited, what="exit")
        info = runner.process(pid)  # gone, or a zombie, or another process by now
        assert info is None or not info.alive or info.args != f"sleep {long_arg}", info
    finally:
        with sleep:
            sleep.kill()


def test_runner_files_and_errors(tmp_path: Path) -> None:
    runner = LocalRunner(HostSpec("here", "local", "127.0.0.1", str(tmp_path), "", ""))
    path = tmp_path / "a" / "b" / "file.txt"
    runner.write_file(str(path), "one\ntwo\nthree\n", mode=0o600)
    assert path.read_text() == "one\ntwo\nthree\n" and path.stat().st_mode & 0o777 == 0o600
    assert runner.read_tail(str(path), 2) == "two\nthree\n"
    assert runner.read_tail(str(tmp_path / "missing")).startswith("(no log at")
    assert runner.read_pid(str(path)) is None
    with pytest.raises(HostError, match=r"host here: `ls /nonexistent-dir` exited with 2: "):
        runner.run(["ls", "/nonexistent-dir"])
    with pytest.raises(HostError, match="'no-such-tool' is not installed here"):
        runner.run(["no-such-tool"])
    log = tmp_path / "fail.log"
    pid = runner.start_detached(["/no/such/binary"], cwd=str(tmp_path), log_path=str(log),
                                pid_path=str(tmp_path / "fail.pid"))
    wait_until(lambda: (i := runner.process(pid)) is None or not i.alive, what="exit")
    assert "/no/such/binary" in runner.read_tail(str(log))
