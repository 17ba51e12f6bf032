"""CURVE between nodes: key files, settings, the ZAP policy, and real ZeroMQ sockets."""

from __future__ import annotations

import os
import queue
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import zmq
from loguru import logger
from zmq.utils.monitor import recv_monitor_message

from actors.security.curve import (
    CurveError,
    CurveSettings,
    cluster_mismatch,
    make_node_keys,
    raw_key,
    read_key_file,
    read_public_keys,
    write_keys,
    z85_key,
)
from actors.security.zap import ZAP_VERSION, ZapDecision, ZapPolicy
from actors.security.zap_handler import ZapHandler


@pytest.fixture
def keys(tmp_path: Path) -> Path:
    """node-1 and node-2 in a cluster key directory; their secret files beside it."""
    for name in ("node-1", "node-2"):
        write_keys(tmp_path / "secrets", name)
    cluster = tmp_path / "public"
    cluster.mkdir()
    for name in ("node-1", "node-2"):
        (cluster / f"{name}.key").write_bytes((tmp_path / "secrets" / f"{name}.key").read_bytes())
    write_keys(tmp_path / "stranger", "mallory")
    return tmp_path


def test_key_files_and_settings(keys: Path) -> None:
    secret = keys / "secrets" / "node-1.key_secret"
    assert secret.stat().st_mode & 0o777 == 0o600
    pair = read_key_file(secret)
    assert len(pair.public) == 40 and len(pair.secret) == 40
    assert "secret" not in repr(pair).lower().replace("curvekeys", "")
    known = read_public_keys(keys / "public")
    assert set(known) == {"node-1", "node-2"} and known["node-1"] == pair.public
    settings = CurveSettings.from_config({"actor.curve.secret.key.file": str(secret),
                                          "actor.curve.public.keys.dir": str(keys / "public")})
    assert settings.enabled
    own, cluster = settings.load("node-1")
    assert own == pair and cluster == known
    assert not CurveSettings.from_config({}).enabled


def test_bad_key_settings_get_one_line(keys: Path) -> None:
    public_dir = str(keys / "public")
    with pytest.raises(CurveError, match=r"actor\.curve\.secret\.key\.file is not set"):
        CurveSettings("", public_dir).load("node-1")
    with pytest.raises(CurveError, match="make keys with `actorlog keys new --out DIR`"):
        CurveSettings(str(keys / "none.key_secret"), public_dir).load("node-1")
    with pytest.raises(CurveError, match="no secret key in it"):
        CurveSettings(str(keys / "public" / "node-1.key"), public_dir).load("node-1")
    stranger = str(keys / "stranger" / "mallory.key_secret")
    with pytest.raises(CurveError) as caught:
        CurveSettings(stranger, public_dir).load("mallory")
    assert str(caught.value) == (
        f"actor.curve.public.keys.dir {public_dir} has no mallory.key matching this node's key "
        f"{stranger}; the cluster's key directory must hold every node's public key")
    empty = keys / "empty"
    empty.mkdir()
    with pytest.raises(CurveError, match=r"has no \*\.key files"):
        read_public_keys(empty)
    (empty / "bad.key").write_text('public-key = "short"\n')
    with pytest.raises(CurveError, match=r"bad\.key: the public key is not 40 Z85 characters"):
        read_public_keys(empty)
    with pytest.raises(CurveError, match="must be a plain file name"):
        write_keys(keys, "../x")


def _request(mechanism: bytes, *credentials: bytes, version: bytes = ZAP_VERSION) -> list[bytes]:
    return [version, b"7", b"", b"10.0.0.5", b"", mechanism, *credentials]


def test_zap_policy() -> None:
    key = bytes(range(32))
    policy = ZapPolicy({key: "node-2"})
    reply, decision = policy.handle(_request(b"CURVE", key))
    assert reply == [b"1.0", b"7", b"200", b"OK", b"node-2", b""]
    assert decision == ZapDecision(True, "10.0.0.5", "CURVE", key, "node-2", "key of node node-2")
    reply, decision = policy.handle(_request(b"CURVE", bytes(32)))
    assert reply[2:4] == [b"400", b"unknown public key"] and not decision.allowed
    reply, decision = policy.handle(_request(b"PLAIN", b"user", b"pw"))
    assert reply[2] == b"400" and decision.reason == "mechanism PLAIN is not CURVE with a key"
    reply, decision = policy.handle(_request(b"NULL"))
    assert reply[2] == b"400"
    reply, decision = policy.handle(_request(b"CURVE", key, version=b"2.0"))
    assert reply[2] == b"500" and not decision.allowed
    reply, decision = policy.handle([b"1.0", b"9"])
    assert reply == [b"1.0", b"9", b"500", b"malformed request", b"", b""]


@pytest.fixture
def context() -> Iterator[zmq.Context]:
    ctx = zmq.Context()
    yield ctx
    ctx.destroy(linger=0)


def test_a_curve_socket_admits_known_keys_and_refuses_a_stranger(keys: Path,
                                                                  context: zmq.Context) -> None:
    server_keys = read_key_file(keys / "secrets" / "node-1.key_secret")
    known = read_public_keys(keys / "public")
    decisions: queue.Queue[ZapDecision] = queue.Queue()
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(m.record["message"]), level="WARNING",
                      filter=lambda r: r["extra"].get("actor") == "zap")
    policy = ZapPolicy({raw_key(k): name for name, k in known.items()})
    with ZapHandler(context, policy, node="node-1", on_decision=decisions.put):
        server = context.socket(zmq.PULL)
        server.linger = 0
        server.curve_server = True
        server.curve_secretkey = server_keys.secret
        server.curve_publickey = server_keys.public
        port = server.bind_to_random_port("tcp://127.0.0.1")

        def client(key_file: Path) -> zmq.Socket:
            own = read_key_file(key_file)
            sock = context.socket(zmq.PUSH)
            sock.linger = 0
            sock.curve_serverkey = known["node-1"]
            sock.curve_publickey = own.public
            sock.curve_secretkey = own.secret
            return sock

        friend = client(keys / "secrets" / "node-2.key_secret")
        friend.connect(f"tcp://127.0.0.1:{port}")
        friend.send(b"hello from node-2")
        assert server.poll(10_000), "the known node's frame never arrived"
        frame = server.recv(copy=False)
        assert frame.bytes == b"hello from node-2"
        assert frame.get("User-Id") == "node-2"
        admitted = decisions.get(timeout=10)
        assert admitted.allowed and admitted.node == "node-2"

        stranger = client(keys / "stranger" / "mallory.key_secret")
        monitor = stranger.get_monitor_socket(zmq.EVENT_HANDSHAKE_FAILED_AUTH)
        stranger.connect(f"tcp://127.0.0.1:{port}")
        stranger.send(b"let me in", zmq.NOBLOCK)
        assert monitor.poll(10_000), "the stranger's handshake was not refused"
        event = recv_monitor_message(monitor)
        assert event["event"] == zmq.EVENT_HANDSHAKE_FAILED_AUTH
        refused = decisions.get(timeout=10)
        assert not refused.allowed and refused.address == "127.0.0.1"
        mallory = read_key_file(keys / "stranger" / "mallory.key", secret=False).public.decode()
        assert refused.public_key is not None and z85_key(refused.public_key) == mallory
        assert not server.poll(0)  # nothing of the stranger's got through
        stranger.disable_monitor()
        monitor.close()
        for sock in (server, friend, stranger):
            sock.close()
    logger.remove(sink)
    deadline = time.monotonic() + 5
    while not lines and time.monotonic() < deadline:
        time.sleep(0.01)
    assert lines[0] == (f"CURVE peer 127.0.0.1 refused: unknown public key (mechanism CURVE, "
                        f"key {mallory})")


def test_a_secret_key_file_others_may_read_or_none_may_read_is_one_line(keys: Path) -> None:
    secret = keys / "secrets" / "node-1.key_secret"
    secret.chmod(0o644)
    with pytest.raises(CurveError) as caught:
        read_key_file(secret)
    assert str(caught.value) == (f"{secret}: the secret key file may be read by others (mode "
                                 f"0644); make it private with chmod 600 {secret}")
    secret.chmod(0o000)
    try:
        if os.geteuid() != 0:  # root reads it anyway
            with pytest.raises(CurveError, match="cannot read the key file: permission denied"):
                read_key_file(secret)
    finally:
        secret.chmod(0o600)
    assert read_key_file(secret).public == read_public_keys(keys / "public")["node-1"]


def test_a_node_joins_only_nodes_with_curve_on_the_same_side(keys: Path) -> None:
    public = keys / "public"
    me = CurveSettings(str(keys / "secrets" / "node-1.key_secret"), str(public)).identity("node-1")
    node2 = read_public_keys(public)["node-2"].decode()
    assert cluster_mismatch(me, {"node-2": node2}) == (None, [])
    assert cluster_mismatch(None, {"node-2": ""}) == (None, [])
    refusal, _ = cluster_mismatch(None, {"node-2": node2})
    assert refusal == ("node-2 is registered with CURVE between nodes and this node has none; "
                       "set actor.curve.secret.key.file and actor.curve.public.keys.dir (keys "
                       "from `actorlog cluster keys --spec FILE` or `actorlog keys new`)")
    refusal, _ = cluster_mismatch(me, {"node-2": ""})
    assert refusal is not None and refusal.startswith(
        "node-2 is registered without CURVE between nodes and this node has it")
    stranger = read_key_file(keys / "stranger" / "mallory.key", secret=False).public.decode()
    assert cluster_mismatch(me, {"node-2": stranger, "node-7": node2}) == (None, [
        f"node-2 is registered with CURVE key {stranger}, not the {node2} of node-2.key "
        f"here: its frames are refused",
        f"node-7 is registered with CURVE key {node2}, and actor.curve.public.keys.dir has no "
        f"node-7.key: this node neither sends to it nor admits it"])


def test_keys_new_lays_keys_out_for_the_config(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from actors.cli import cli
    out = tmp_path / "k"
    result = CliRunner().invoke(cli, ["keys", "new", "--out", str(out), "--name", "node-1",
                                      "--name", "node-2"])
    assert result.exit_code == 0, result.output
    assert f'"actor.curve.secret.key.file" = "{out / "node-2.key_secret"}"' in result.output
    assert f'"actor.curve.public.keys.dir" = "{out / "public"}"' in result.output
    assert sorted(p.name for p in (out / "public").iterdir()) == ["node-1.key", "node-2.key"]
    assert (out / "node-1.key_secret").stat().st_mode & 0o777 == 0o600
    settings = CurveSettings(str(out / "node-2.key_secret"), str(out / "public"))
    assert set(settings.identity("node-2").peers) == {"node-1", "node-2"}
    again = CliRunner().invoke(cli, ["keys", "new", "--out", str(out)])
    assert again.exit_code == 2 and "node-1.key_secret exists already" in again.output
    with pytest.raises(CurveError, match="exists already"):
        make_node_keys(out, "node-2")


def test_keys_new_refuses_before_it_writes_any_key(tmp_path: Path) -> None:
    """A repeated --name, or a name whose keys exist, is refused before any key is made:
    no pair is written only to be replaced or left half done (a later name refused)."""
    from click.testing import CliRunner

    from actors.cli import cli
    out = tmp_path / "k"
    twice = CliRunner().invoke(cli, ["keys", "new", "--out", str(out), "--name", "node-1",
                                     "--name", "node-1"])
    assert twice.exit_code == 2 and "--name node-1 is given more than once" in twice.output
    assert not out.exists()
    assert CliRunner().invoke(cli, ["keys", "new", "--out", str(out), "--name",
                                    "node-2"]).exit_code == 0
    later = CliRunner().invoke(cli, ["keys", "new", "--out", str(out), "--name", "node-1",
                                     "--name", "node-2"])
    assert later.exit_code == 2 and "node-2.key_secret exists already" in later.output
    assert "node-1" not in later.output
    assert sorted(p.name for p in out.iterdir()) == ["node-2.key_secret", "public"]
    assert [p.name for p in (out / "public").iterdir()] == ["node-2.key"]
    bad = CliRunner().invoke(cli, ["keys", "new", "--out", str(out), "--name", "node-3",
                                   "--name", ".bad"])
    assert bad.exit_code == 2 and "key name '.bad' must be a plain file name" in bad.output
    assert "node-3" not in bad.output
    assert sorted(p.name for p in out.iterdir()) == ["node-2.key_secret", "public"]
    assert [p.name for p in (out / "public").iterdir()] == ["node-2.key"]
