"""Kafka's request-time split, scraped from the Prometheus endpoint of a real broker."""

from __future__ import annotations

import re
import urllib.request
from pathlib import Path

from tests.broker.rawclient import RawClient, record_batch
from tests.fixtures.broker import BrokerProcess, free_port


def scrape(port: int) -> dict[str, int]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out = {}
    for line in text.splitlines():
        name, _, value = line.rpartition(" ")
        out[name] = int(value)
    return out


def test_request_stages_are_exported_and_add_up(tmp_path: Path) -> None:
    metrics_port = free_port()
    broker = BrokerProcess(tmp_path / "data", config={"metrics.port": metrics_port}).start()
    try:
        with RawClient(broker.port) as client:
            assert client.create_topic("m", 1) == 0
            for _ in range(20):
                assert client.produce("m", 0, record_batch([(None, b"x")]), acks=1).error_code == 0
            # A request is counted once its response is written (as Kafka counts it, at the
            # completed send), so the client may hold the 20th answer a moment before it is
            # counted. The Processor reads the next request of the connection only after
            # that: one more round trip on it orders every Produce count before the scrape.
            assert client.list_offset("m", 0, -1).error_code == 0
        m = scrape(metrics_port)
    finally:
        assert broker.stop() == 0
    assert m['actorlog_requests_total{api="Produce"}'] == 20
    stages = {
        re.search(r'stage="(\w+)"', k).group(1): v  # type: ignore[union-attr]
        for k, v in m.items()
        if k.startswith('actorlog_request_stage_time_ns_total{api="Produce"')
    }
    assert set(stages) == {"request_queue", "local", "remote", "response_queue", "send"}
    assert all(v >= 0 for v in stages.values())
    assert stages["local"] > 0 and stages["remote"] > 0  # the shard round trip is remote
    total = m['actorlog_request_time_ns_total{api="Produce"}']
    assert abs(sum(stages.values()) - total) <= 20 * 1000  # equal, up to clamping
