"""Live fuzz: a running broker takes mutated real client frames on 50 connections while a
well-behaved confluent-kafka client produces and consumes with no error, and the broker's
memory stays within a bound.

The issue asks for 60 s; the suite runs 15 s (ACTORLOG_LIVE_FUZZ_SECONDS sets it, and
`actorlog bench fuzz --target live --seconds 60` runs the full length against a broker
of its own).

The recorded CreateTopics, DeleteTopics and CreatePartitions are mutated too (bench/
fuzz_live.py ADMIN_APIS; `--no-admin-seeds` leaves them out): a mutant asking for 131,073
partitions is a valid request, which once made the broker create them until it ran out of
file descriptors, a PartitionShard thread died of the ZMQError and the good client timed
out. The controllers now refuse it with POLICY_VIOLATION (Kafka's 10,000 a request, and
what the node's ulimit -n holds), and a ZMQError while sending is a dead letter (issue 17).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench.fuzz_live import run_live
from tests.fixtures.broker import BrokerProcess
from tests.fixtures.fuzz_recording import record

pytestmark = [pytest.mark.slow, pytest.mark.clients, pytest.mark.multiprocess]

SECONDS = float(os.environ.get("ACTORLOG_LIVE_FUZZ_SECONDS", "15"))
CONNECTIONS = 50
RSS_GROWTH_BOUND_MB = 100.0  # over the broker's VmRSS once the good client is running


@pytest.mark.timeout(SECONDS + 240)
def test_broker_serves_a_good_client_while_fuzzed(fresh_broker: BrokerProcess) -> None:
    assert fresh_broker.proc is not None
    report = run_live("127.0.0.1", fresh_broker.port, fresh_broker.proc.pid, seconds=SECONDS,
                      connections=CONNECTIONS, rate=1000.0, seed=7)
    print(report)
    assert fresh_broker.proc.poll() is None, fresh_broker.log()[-4000:]
    assert report["good_errors"] == [], report
    assert report["good_produced"] > 100
    assert report["good_produced"] == report["good_delivered"] == report["good_consumed"], report
    assert report["good_out_of_order"] == 0
    assert report["good_max_gap_s"] < 10.0, report
    assert report["frames_sent"] > 20 * SECONDS and report["closed_by_broker"] > 0, report
    assert report["connections_opened"] >= CONNECTIONS
    assert report["rss_growth_mb"] < RSS_GROWTH_BOUND_MB, report
    log = fresh_broker.log()
    assert "Traceback" not in log and "crashed" not in log, log[-6000:]


@pytest.mark.timeout(300)
def test_the_seed_corpus_can_be_recorded_again(tmp_path: Path) -> None:
    """`python -m tests.fixtures.fuzz_recording` (the seeds' source) still records both
    clients' requests and a node's envelope frames, small enough to keep in the tree."""
    kafka, envelope = record(tmp_path)
    assert kafka >= 20 and envelope >= 20
    names = {p.name for p in (tmp_path / "kafka").iterdir()}
    assert any(n.startswith("kafka-python-api00") for n in names), names  # Produce
    assert any(n.startswith("confluent-api18") for n in names), names  # ApiVersions
    assert sum(p.stat().st_size for p in tmp_path.rglob("*") if p.is_file()) < 200_000
