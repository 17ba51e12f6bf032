"""`actorlog bench txn` runs at a tiny size and writes the benchmark JSON contract."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from bench.txn_bench import command, ratio_keys
from tests.fixtures.broker import BrokerProcess

pytestmark = [pytest.mark.clients]


def test_bench_txn_writes_well_formed_json(broker: BrokerProcess, tmp_path: Path) -> None:
    out = tmp_path / "txn.json"
    result = CliRunner().invoke(command, [
        "--bootstrap", broker.bootstrap, "--records", "300", "--txn-sizes", "10,100",
        "--rounds", "2", "--dir", str(tmp_path), "--json", str(out)])
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert set(report) == {"bench", "config", "results", "ratios"}
    assert report["bench"] == "txn"
    assert set(report["ratios"]) == set(ratio_keys((10, 100), peer=False))
    assert all(isinstance(v, float) and v > 0 for v in report["ratios"].values())
    for figures in report["results"]["actorlog"].values():
        assert figures["min"] <= figures["median"] <= figures["max"]
    assert "txn_100_vs_idempotent" in result.output
    assert [p.name for p in tmp_path.iterdir()] == ["txn.json"]  # nothing left behind
