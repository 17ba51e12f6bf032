"""The bounded fuzz run CI makes: each target for a fixed number of cases (libFuzzer
under atheris, in a child process), failing on a crash, an input over 1 s, or an
uncaught exception; and the bench JSON contract of `actorlog bench fuzz`.

25,000 cases a target: here kafka runs at about 6,000-12,000 cases/s and envelope at
about 30,000/s once started (the start, instrumenting the modules, takes 5-30 s on a
busy 2-core machine), so each run stays well under a minute.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from bench.fuzz import RATIO_KEY, command, parse_output
from bench.fuzz_targets import TARGETS

pytest.importorskip("atheris")

pytestmark = pytest.mark.multiprocess

CASES = 25_000


@pytest.mark.parametrize("name", TARGETS)
def test_bounded_fuzz_run_finds_nothing(name: str, tmp_path: Path) -> None:
    out = tmp_path / f"{name}.json"
    result = CliRunner().invoke(command, [
        "--target", name, "--runs", str(CASES), "--timeout", "1", "--seed", "1",
        "--out", str(tmp_path / "out"), "--json", str(out)])
    report = json.loads(out.read_text())
    results = report["results"]
    log = Path(results["log"]).read_text()
    assert results["crashes"] == [], log[-6000:]
    assert result.exit_code == 0, result.output + log[-3000:]
    assert results["returncode"] == 0
    assert results["cases"] == CASES
    assert results["coverage_after_seeds"] > 0 and results["new_coverage"] >= 0
    assert results["seed_inputs"] >= 30
    assert set(report) == {"bench", "config", "results", "ratios"}
    assert report["bench"] == "fuzz" and report["config"]["target"] == name
    assert isinstance(report["ratios"][RATIO_KEY], float) and report["ratios"][RATIO_KEY] > 0
    assert f"{name}: {CASES} cases" in result.output


SAMPLE_CRASH = """\
INFO: seed corpus: files: 30 min: 22b max: 462b total: 3269b rss: 92Mb
#31\tINITED cov: 525 ft: 612 corp: 23/2652b exec/s: 0 rss: 92Mb
#200\tNEW    cov: 530 ft: 640 corp: 25/2700b lim: 462 exec/s: 0 rss: 93Mb L: 40/462 MS: 1 X-
FUZZ-CRASH-INPUT /tmp/out/crash-4f4c
==12898== ERROR: libFuzzer: fuzz target exited
artifact_prefix='/tmp/out/'; Test unit written to /tmp/out/crash-4f4c

 === Uncaught Python exception: ===
Finding: kafka: TypeError: 'NoneType' object is not iterable
"""


def test_a_crash_in_the_fuzzer_output_is_reported_once_with_its_input() -> None:
    found = parse_output(SAMPLE_CRASH)
    assert found["cases"] == 200
    assert (found["coverage_after_seeds"], found["coverage"], found["new_coverage"]) == (
        525, 530, 5)
    assert found["corpus_units_added"] == 2 and found["peak_rss_mb"] == 93
    assert found["crashes"] == [{"kind": "crash", "input": "/tmp/out/crash-4f4c",
                                 "exception": "Finding: kafka: TypeError: 'NoneType' object "
                                              "is not iterable"}]


@pytest.mark.slow
@pytest.mark.clients
def test_live_target_writes_the_contract(tmp_path: Path) -> None:
    """`--target live` briefly: a broker of its own, the good client, the JSON contract."""
    out = tmp_path / "live.json"
    result = CliRunner().invoke(command, ["--target", "live", "--seconds", "3",
                                          "--connections", "10", "--json", str(out)])
    report = json.loads(out.read_text())
    assert report["results"]["failures"] == [], report
    assert result.exit_code == 0, result.output
    assert report["bench"] == "fuzz" and report["config"]["target"] == "live"
    assert report["results"]["frames_sent"] > 0 and report["results"]["broker_alive"]
    assert report["ratios"]["good_consumed_vs_produced"] == 1.0
