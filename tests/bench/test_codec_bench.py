"""`actorlog bench codec` runs at a tiny size and writes the benchmark JSON contract."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from bench.codec_bench import RATIO_KEYS, command


def test_bench_codec_writes_well_formed_json(tmp_path: Path) -> None:
    out = tmp_path / "codec.json"
    result = CliRunner().invoke(command, ["--count", "500", "--repeat", "2", "--json", str(out)])
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert set(report) == {"bench", "config", "results", "ratios"}
    assert report["bench"] == "codec"
    assert set(report["ratios"]) == set(RATIO_KEYS)
    assert all(isinstance(v, float) and v > 0 for v in report["ratios"].values())
    spread = report["results"]["produce_v9_hot_us"]
    assert spread["min"] <= spread["median"] <= spread["max"]
    assert "produce_v9_hot_vs_kafka_protocol" in result.output
