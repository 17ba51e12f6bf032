"""`actorlog bench fuzz`: coverage-guided fuzzing (atheris) of the Kafka request path and
of the actor envelope decoder.

The fuzzer runs in a child process (bench/fuzz_worker.py): libFuzzer ends
its process when the run is over, or at the first crash or hang, and the
CLI must outlive that to report. The seeds are the recorded real traffic in
tests/fuzz_corpus/<target>/ plus the inputs of earlier crashes in
tests/fuzz_corpus/regressions/<target>/; new inputs go to OUT/corpus (the
seed directory is never written). A crash (an exception other than the
decode path's own refusals, bench/fuzz_targets.py) or an input that takes
longer than ``--timeout`` seconds is saved in OUT as ``crash-<sha1>`` or
``timeout-<sha1>``.

Results: cases run, cases/s, coverage (libFuzzer's ``cov``, instrumented
edges of the decode path's modules) after the seeds and at the end, the
corpus units the run added, and the crashes. The ratio is the fuzzer's
cases/s over a plain (uninstrumented) replay of the seeds in this process,
measured in the same run: what the instrumentation and libFuzzer cost.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import click

from bench.contract import write_json
from bench.fuzz_targets import CORPUS_DIR, TARGETS, corpus_files, target

BENCH_NAME = "fuzz"
RATIO_KEY = "cases_per_s_vs_plain_replay"
ROOT = Path(__file__).resolve().parents[1]

_STATUS = re.compile(r"^#(\d+)\s+(\w+)\s+cov: (\d+) ft: (\d+)(?: corp: (\d+)/\S+)?")
_RSS = re.compile(r" rss: (\d+)Mb")
_DONE = re.compile(r"^Done (\d+) runs in (\d+) second")
_ARTIFACT = re.compile(r"(?:Test unit written to|FUZZ-CRASH-INPUT) (\S+)")
_EXCEPTION = re.compile(r"^\s*=== Uncaught Python exception: ===\n(.+)$", re.MULTILINE)


def parse_output(text: str) -> dict[str, Any]:
    """What libFuzzer's stderr says about a run (figures absent: 0)."""
    inited: tuple[int, int, int] | None = None
    last: tuple[int, int, int, int] | None = None
    rss = 0
    for line in text.splitlines():
        match = _STATUS.match(line)
        if match is None:
            continue
        runs, kind, cov, ft = (int(match[1]), match[2], int(match[3]), int(match[4]))
        corp = int(match[5] or 0)
        rss_match = _RSS.search(line)
        rss = max(rss, int(rss_match[1]) if rss_match else 0)
        if kind == "INITED":
            inited = (cov, ft, corp)
        last = (runs, cov, ft, corp)
    done = None
    for line in text.splitlines():
        match = _DONE.match(line)
        if match is not None:
            done = int(match[1])
    start_cov, start_ft, start_corp = inited or (0, 0, 0)
    runs, cov, ft, corp = last or (0, start_cov, start_ft, start_corp)
    artifacts = list(dict.fromkeys(_ARTIFACT.findall(text)))
    exceptions = _EXCEPTION.findall(text)
    return {
        "cases": done if done is not None else runs,
        "coverage_after_seeds": start_cov,
        "coverage": cov,
        "new_coverage": cov - start_cov,
        "features_after_seeds": start_ft,
        "features": ft,
        "new_features": ft - start_ft,
        "corpus_units_added": max(0, corp - start_corp),
        "peak_rss_mb": rss,
        "crashes": [{"kind": Path(a).name.split("-")[0], "input": a,
                     "exception": exceptions[0] if exceptions else ""} for a in artifacts],
    }


def run_fuzz(name: str, *, seconds: float | None = None, runs: int | None = None,
             timeout_s: int = 1, out_dir: Path | None = None, seed: int | None = None,
             corpus: Path = CORPUS_DIR, max_len: int = 8192) -> dict[str, Any]:
    """Fuzz target ``name`` for ``seconds`` or ``runs`` cases (whichever ends first);
    returns the report (the bench JSON contract's dict)."""
    if name not in TARGETS:
        raise click.BadParameter(f"unknown target {name!r}; one of {', '.join(TARGETS)}")
    if seconds is None and runs is None:
        raise click.BadParameter("give --seconds, --runs or both")
    out = Path(out_dir) if out_dir else Path(tempfile.mkdtemp(prefix=f"actorlog-fuzz-{name}-"))
    new_corpus = out / "corpus"
    new_corpus.mkdir(parents=True, exist_ok=True)
    seeds = [d for d in (corpus / name, corpus / "regressions" / name) if d.is_dir()]
    args = [sys.executable, "-m", "bench.fuzz_worker", name, f"-timeout={timeout_s}",
            f"-artifact_prefix={out}/", f"-max_len={max_len}", "-rss_limit_mb=2048",
            "-print_final_stats=1"]
    if seconds is not None:
        args.append(f"-max_total_time={max(1, int(seconds))}")
    if runs is not None:
        args.append(f"-runs={runs}")
    if seed is not None:
        args.append(f"-seed={seed}")
    args += [str(new_corpus), *map(str, seeds)]
    # libFuzzer stops itself; the wall limit only guards against a wedged child
    # (startup, instrumenting the modules, is part of it)
    limit = (seconds or 0) + (runs or 0) * 0.05 + 180
    started = time.monotonic()
    proc = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, errors="replace",
                          timeout=limit, check=False)
    ended = time.monotonic()
    elapsed = ended - started
    (out / "fuzzer.log").write_text(proc.stderr + proc.stdout)
    found = parse_output(proc.stderr + proc.stdout)
    fuzz_s = _fuzzing_seconds(proc.stderr, ended, elapsed)
    plain = plain_replay_rate(name, corpus)
    cases_per_s = found["cases"] / fuzz_s if fuzz_s > 0 else 0.0
    results = {
        **found,
        "cases_per_s": round(cases_per_s, 1),
        "fuzz_seconds": round(fuzz_s, 2),
        "wall_seconds": round(elapsed, 2),
        "plain_replay_cases_per_s": round(plain, 1),
        "returncode": proc.returncode,
        "out_dir": str(out),
        "log": str(out / "fuzzer.log"),
        "seed_inputs": len(corpus_files(name, corpus)),
    }
    if proc.returncode != 0 and not found["crashes"]:
        results["crashes"] = [{"kind": "exit", "input": "", "exception":
                               f"fuzzer exited with {proc.returncode}: "
                               + _tail(proc.stderr)}]
    return {"bench": BENCH_NAME,
            "config": {"target": name, "seconds": seconds, "runs": runs,
                       "timeout_s": timeout_s, "max_len": max_len, "seed": seed,
                       "corpus": str(corpus)},
            "results": results,
            "ratios": {RATIO_KEY: round(cases_per_s / plain, 4) if plain > 0 else 0.0}}


def _fuzzing_seconds(stderr: str, ended: float, elapsed: float) -> float:
    """Seconds spent fuzzing: from the worker's first input (its FUZZ-START line, on the
    monotonic clock) to its end; the whole wall time if it never got that far."""
    match = re.search(r"^FUZZ-START (\d+\.\d+)$", stderr, re.MULTILINE)
    return ended - float(match[1]) if match else elapsed


def _tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def plain_replay_rate(name: str, corpus: Path = CORPUS_DIR, seconds: float = 0.5) -> float:
    """Cases/s of the target on its seeds without instrumentation or libFuzzer."""
    inputs = [p.read_bytes() for p in corpus_files(name, corpus)]
    if not inputs:
        return 0.0
    one = target(name)
    for data in inputs:  # warm (compiled decoders, first imports)
        one(data)
    done = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        for data in inputs:
            one(data)
        done += len(inputs)
    return done / (time.perf_counter() - start)


LIVE_RATIO_KEY = "good_consumed_vs_produced"
LIVE_RSS_BOUND_MB = 100.0


def run_live_bench(seconds: float, connections: int, rate: float, seed: int,
                   rss_bound_mb: float = LIVE_RSS_BOUND_MB,
                   admin: bool = True) -> dict[str, Any]:
    """`--target live`: a broker of its own (bench/fuzz_live.py), fuzzed while a good
    client works; ``failures`` lists what broke the issue's promise (none: passed)."""
    from bench.fuzz_live import run_live
    from bench.peers import ACTORLOG_TEMPLATE, start_broker

    broker = start_broker(ACTORLOG_TEMPLATE, timeout_s=60)
    try:
        assert broker.pid is not None
        results = run_live("127.0.0.1", broker.port, broker.pid, seconds=seconds,
                           connections=connections, rate=rate, seed=seed, admin=admin)
        alive = broker.proc is not None and broker.proc.poll() is None
        log = broker.log_path.read_text(errors="replace")
    finally:
        broker.stop(timeout_s=30)
    failures = [f"good client: {e}" for e in results["good_errors"]]
    if not alive:
        failures.append("the broker died")
    if results["good_consumed"] != results["good_produced"]:
        failures.append(f"good client: {results['good_produced']} produced, "
                        f"{results['good_consumed']} consumed")
    if results["rss_growth_mb"] > rss_bound_mb:
        failures.append(f"broker VmRSS grew {results['rss_growth_mb']} MB (bound {rss_bound_mb})")
    # Topics refused for the partition bound (one line per request).
    results["partition_refusals"] = len(re.findall(r"refused \d+ topic\(s\)", log))
    results["topic_creations"] = log.count("created topic(s)")
    tracebacks = log.count("Traceback")
    if tracebacks:
        failures.append(f"{tracebacks} tracebacks in the broker log")
    results.update(broker_alive=alive, broker_tracebacks=tracebacks, failures=failures,
                   rss_bound_mb=rss_bound_mb)
    produced = results["good_produced"]
    return {"bench": BENCH_NAME,
            "config": {"target": "live", "seconds": seconds, "connections": connections,
                       "rate": rate, "seed": seed, "admin_seeds": admin},
            "results": results,
            "ratios": {LIVE_RATIO_KEY: round(results["good_consumed"] / produced, 4)
                       if produced else 0.0}}


@click.command(name=BENCH_NAME)
@click.option("--target", "name", type=click.Choice([*TARGETS, "live"]), required=True,
              help="kafka: request frame -> header -> body -> API; envelope: actor frames; "
                   "live: a broker of its own fuzzed over TCP while a good client works")
@click.option("--connections", default=50, show_default=True, help="live: fuzzing sockets")
@click.option("--rate", default=1000.0, show_default=True,
              help="live: mutated frames per second over all connections")
@click.option("--admin-seeds/--no-admin-seeds", default=True, show_default=True,
              help="live: mutate the recorded CreateTopics, DeleteTopics and CreatePartitions "
                   "too (valid mutants ask for topics of any size: the broker refuses what it "
                   "cannot hold)")
@click.option("--seconds", type=float, default=None, help="fuzz this long (libFuzzer time)")
@click.option("--runs", type=int, default=None, help="stop after this many cases")
@click.option("--timeout", "timeout_s", default=1, show_default=True,
              help="an input taking longer than this (s) is a hang")
@click.option("--seed", type=int, default=None, help="libFuzzer's random seed")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path),
              default=None, help="crashes, new corpus units and the fuzzer log (default: a "
                                 "new temporary directory)")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None,
              help="write the report as JSON here")
def command(name: str, connections: int, rate: float, admin_seeds: bool,
            seconds: float | None, runs: int | None,
            timeout_s: int, seed: int | None, out_dir: Path | None,
            json_path: str | None) -> None:
    """Coverage-guided fuzzing of the Kafka request path or the envelope decoder (atheris),
    or live fuzzing of a running broker.

    Exits 1 when a crash or a hang was found (the inputs are in --out), or for live when
    the broker died, logged a traceback, grew over 100 MB, or failed the good client.
    """
    if seconds is None and runs is None:
        seconds = 60.0
    if name == "live":
        live = run_live_bench(seconds or 60.0, connections, rate, seed or 1,
                              admin=admin_seeds)
        r = live["results"]
        click.echo(f"live: {r['frames_sent']} mutated frames in {r['seconds']} s "
                   f"({r['frames_per_s']:.0f}/s) on {r['connections']} connections "
                   f"({r['connections_opened']} opened, {r['closed_by_broker']} closed by the "
                   f"broker); good client {r['good_produced']} produced, {r['good_consumed']} "
                   f"consumed, longest wait {r['good_max_gap_s']} s; broker VmRSS "
                   f"{r['rss_baseline_mb']} -> peak {r['rss_peak_mb']} MB; "
                   f"{r['topic_creations']} topic creations, {r['partition_refusals']} "
                   f"refused for the partition bound")
        for failure in r["failures"]:
            click.echo(f"FAILED: {failure}")
        if json_path:
            write_json(json_path, live["bench"], live["config"], live["results"], live["ratios"])
        if r["failures"]:
            raise SystemExit(1)
        return
    report = run_fuzz(name, seconds=seconds, runs=runs, timeout_s=timeout_s, seed=seed,
                      out_dir=out_dir)
    r = report["results"]
    click.echo(f"{name}: {r['cases']} cases in {r['fuzz_seconds']} s ({r['cases_per_s']:.0f}/s; "
               f"plain replay {r['plain_replay_cases_per_s']:.0f}/s), coverage "
               f"{r['coverage_after_seeds']} -> {r['coverage']} (+{r['new_coverage']}), "
               f"{r['corpus_units_added']} corpus units added, peak RSS {r['peak_rss_mb']} MB")
    for crash in r["crashes"]:
        click.echo(f"CRASH ({crash['kind']}): {crash['input']}\n  {crash['exception']}")
    click.echo(f"fuzzer log, new corpus and any crash inputs: {r['out_dir']}")
    if json_path:
        write_json(json_path, report["bench"], report["config"], report["results"],
                   report["ratios"])
    if r["crashes"]:
        raise SystemExit(1)


if __name__ == "__main__":  # pragma: no cover
    print(json.dumps(run_fuzz(sys.argv[1], runs=int(sys.argv[2])), indent=2))
