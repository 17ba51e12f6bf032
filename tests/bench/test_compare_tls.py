"""`actorlog bench compare --tls`: actorlog with an SSL listener against actorlog with a
PLAINTEXT one, in one run; the JSON carries the TLS/plaintext ratios (issue 17)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

pytest.importorskip("confluent_kafka", reason="the load tool drives brokers with confluent-kafka")
pytest.importorskip("hdrh", reason="the load tool needs hdrhistogram (the bench extra)")

from bench import compare

pytestmark = [pytest.mark.multiprocess, pytest.mark.clients]


def test_compare_tls_writes_the_tls_over_plaintext_ratios(tmp_path: Path) -> None:
    out = tmp_path / "tls.json"
    result = CliRunner().invoke(compare.command, [
        "--tls", "--scenarios", "throughput_acks1,small_requests", "--duration", "0.6",
        "--rounds", "1", "--processes", "1", "--small-connections", "2", "--no-progress",
        "--json", str(out)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "tls" in result.output and "plaintext" in result.output
    doc = json.loads(out.read_text())
    assert doc["config"]["tls"] is True
    assert (doc["config"]["a_name"], doc["config"]["b_name"]) == ("tls", "plaintext")
    assert "SSL://" in doc["config"]["a"] and "SSL://" not in doc["config"]["b"]
    assert set(doc["ratios"]) == {"throughput_acks1", "small_requests"}
    for name, ratio in doc["ratios"].items():
        block = doc["results"][name]
        assert ratio > 0 and block["ratio"]["min"] <= ratio <= block["ratio"]["max"]
        run = block["rounds"][0]
        # records acknowledged on the SSL port: A's clients spoke TLS (plaintext gets nothing)
        assert run["a"]["acked"] > 0 and run["b"]["acked"] > 0
        assert block["errors_a"] == 0 and block["errors_b"] == 0


def test_compare_tls_starts_both_sides_itself() -> None:
    result = CliRunner().invoke(compare.command, ["--tls", "--a", "127.0.0.1:9092"])
    assert result.exit_code == 2
    assert "--tls starts both sides itself" in result.output
