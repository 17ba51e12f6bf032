"""A ZooKeeper-mode node takes the cluster id from /cluster/id, a string any Kafka tool or
broker may have written: the data dir's meta.properties keeps it as Java's Properties.store
writes it, and a restart reads back the same id (no 'belongs to cluster' refusal)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from actors.runtime.properties import read_properties

pytestmark = [pytest.mark.multiprocess]


def _zookeeper_holds(zk_connect: str, cluster_id: str) -> None:
    """The cluster id a new cluster on this ZooKeeper takes (as an earlier run left it)."""
    zk = KazooClient(hosts=zk_connect)
    zk.start(timeout=15)
    try:
        zk.create("/cluster/id", json.dumps({"version": "1", "id": cluster_id}).encode(),
                  makepath=True)
    finally:
        zk.stop()
        zk.close()


def test_a_cluster_id_with_a_backslash_and_non_ascii_chars_survives_a_restart(
        cluster_factory: Any, zk_connect: str) -> None:
    cluster_id = "clüster\\id:é-Ω"
    _zookeeper_holds(zk_connect, cluster_id)
    cluster = cluster_factory(size=1)
    node = cluster.nodes[1]
    assert node.metadata().cluster_id == cluster_id
    meta = (node.data_dir / "meta.properties").read_bytes()
    assert meta.isascii() and read_properties(meta.decode())["cluster.id"] == cluster_id
    assert node.stop() == 0, node.log()[-3000:]
    node.start()  # the old writer's UTF-8 bytes read back as another id: refused here
    assert node.metadata().cluster_id == cluster_id
    assert "belongs to cluster" not in node.log()


def _restarted_over_an_older_file(cluster_factory: Any, zk_connect: str,
                                  cluster_id: str) -> tuple[Any, Path]:
    """A one-node cluster whose ZooKeeper holds ``cluster_id``, restarted over the
    meta.properties an older actorlog wrote (the id raw in UTF-8)."""
    _zookeeper_holds(zk_connect, cluster_id)
    cluster = cluster_factory(size=1)
    node = cluster.nodes[1]
    assert node.stop() == 0, node.log()[-3000:]
    path = node.data_dir / "meta.properties"
    path.write_bytes(f"version=0\nbroker.id=1\ncluster.id={cluster_id}\n".encode())
    node.start()
    return node, path


def test_a_meta_properties_an_older_actorlog_wrote_keeps_its_cluster_id(
        cluster_factory: Any, zk_connect: str) -> None:
    """An older actorlog wrote the id raw in UTF-8 (a backslash unescaped), which Java's
    ISO-8859-1 reading turns into another id: the node keeps the older id (ZooKeeper's),
    rewrites the file in Java's form and says so once."""
    cluster_id = "clüster\\id-é"
    node, path = _restarted_over_an_older_file(cluster_factory, zk_connect, cluster_id)
    assert node.metadata().cluster_id == cluster_id
    meta = path.read_bytes()
    assert meta.isascii() and read_properties(meta.decode())["cluster.id"] == cluster_id
    assert node.log().count("the file rewritten in Java's form") == 1, node.log()[-3000:]


def test_zookeeper_s_id_decides_among_the_readings_of_an_older_file(
        cluster_factory: Any, zk_connect: str) -> None:
    """An older actorlog wrote the id ``a\\\\b`` (two backslashes) raw: the file's own form
    reads as Java's escape (one backslash), but ZooKeeper holds the raw reading; the node
    takes that one, and only then rewrites the file (not refused 'belongs to cluster')."""
    cluster_id = "a\\\\b"
    node, path = _restarted_over_an_older_file(cluster_factory, zk_connect, cluster_id)
    assert node.metadata().cluster_id == cluster_id
    assert "belongs to cluster" not in node.log()
    assert read_properties(path.read_bytes().decode())["cluster.id"] == cluster_id
    assert node.log().count("the file rewritten in Java's form") == 1, node.log()[-3000:]


@pytest.mark.parametrize(("text", "expected"), [
    ("version=0\nbroker.id=2\ncluster.id=cl\u00fcster\n", "cl\u00fcster"),  # older, UTF-8
    ("version=0\nbroker.id=2\ncluster.id=a\\b\n", "a\\b"),          # older, a raw backslash
    ("version=0\nbroker.id=2\ncluster.id=a\\\\b\n", "a\\b"),         # Java's escape
    ("version=0\nbroker.id=2\ncluster.id=cl\\u00FCster\n", "cl\u00fcster"),  # Java's form
    # Java's form, not as Properties.store writes it: lowercase hex, an escaped blank
    ("version=0\nbroker.id=2\ncluster.id=cl\\u00fcster\n", "cl\u00fcster"),
    ("version=0\nbroker.id=2\ncluster.id=a\\ b\n", "a b"),
    # Kafka's escapes, with a UTF-8 comment: judged on the value, not the whole file
    ("#\u00fc\nversion=0\nbroker.id=2\ncluster.id=a\\:b\n", "a:b"),
    # Kafka 3.7's Properties.store(Writer): UTF-8 raw, only its own escapes
    ("version=0\nbroker.id=2\ncluster.id=cl\u00fc\\:x\n", "cl\u00fc:x"),
    # an older raw id that Java refuses (a \u without hex digits): the older reading
    ("version=0\nbroker.id=2\ncluster.id=C:\\users\n", "C:\\users"),
])
def test_which_meta_properties_is_read_in_the_older_form(tmp_path: Any, text: str,
                                                         expected: str) -> None:
    from actors.broker import read_meta

    (tmp_path / "meta.properties").write_bytes(text.encode())
    assert read_meta(tmp_path, 2) == expected
    assert read_meta(tmp_path, 2) == expected  # rewritten, when it was older: the same
    meta = (tmp_path / "meta.properties").read_bytes()
    assert meta == text.encode() or meta.isascii()  # Java's as it was, or rewritten so
    assert read_properties(meta.decode("latin-1"))["cluster.id"] == expected


def test_an_iso_8859_1_byte_is_read_as_java_reads_it(tmp_path: Any) -> None:
    from actors.broker import read_meta

    (tmp_path / "meta.properties").write_bytes(b"broker.id=2\ncluster.id=cl\xfcster\n")
    assert read_meta(tmp_path, 2) == "cl\u00fcster"  # not UTF-8: left as Java reads it


def test_a_rewrite_s_leftover_temp_file_is_removed_on_read(tmp_path: Any) -> None:
    """A crash between writing the temp file and its rename leaves it (empty after a power
    loss, when unsynced): the read removes it, as Kafka's does, and the id is the file's."""
    from actors.broker import read_meta, read_or_create_meta

    (tmp_path / "meta.properties").write_bytes(b"version=0\nbroker.id=2\ncluster.id=abc\n")
    (tmp_path / "meta.properties.tmp").write_bytes(b"")
    (tmp_path / "meta.tmp").write_bytes(b"version=0\nbroker.id=2\ncluster.id=x")
    assert read_meta(tmp_path, 2) == "abc"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["meta.properties"]
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    cluster_id = read_or_create_meta(fresh, 3)
    assert sorted(p.name for p in fresh.iterdir()) == ["meta.properties"]
    assert read_meta(fresh, 3) == cluster_id
