"""`actorlog bench ...`: the benchmarks, whose load tools need optional extras.

The runtime install (`pip install -e .`) has none of the load tools'
libraries; `actorlog bench --help` still lists every benchmark, and a
benchmark whose libraries are missing says which `pip install` line adds
them instead of failing inside a worker process.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from typing import Any

import click

from actors.cli import UserError

# module the benchmarks import -> (its package, the extra of pyproject.toml that has it)
PACKAGE_OF: dict[str, tuple[str, str]] = {
    "confluent_kafka": ("confluent-kafka", "bench"),
    "hdrh": ("hdrhistogram", "bench"),
    "atheris": ("atheris", "bench"),
    "matplotlib": ("matplotlib", "bench"),
    "pyspark": ("pyspark", "spark"),
    "pyarrow": ("pyarrow", "spark"),
}

# name -> ("module:attribute" of the click.Command, modules it needs beyond the runtime).
BENCH_COMMANDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "actor-hop": ("bench.actor_hop:command", ()),
    "timer": ("bench.timer_bench:command", ()),
    "log": ("bench.log_bench:command", ()),
    "codec": ("bench.codec_bench:command", ()),
    "request-cost": ("bench.request_cost:command", ()),
    "cross-cost": ("bench.cross_cost:command", ("confluent_kafka", "hdrh")),
    "sim": ("bench.sim_bench:command", ()),
    "memory": ("bench.memory:command", ()),  # its consume figure needs the bench extra
    "failover": ("bench.failover:command", ()),
    "connect-rate": ("bench.connect_rate:command", ()),
    "fuzz": ("bench.fuzz:command", ("atheris",)),
    "produce": ("bench.load:produce_command", ("confluent_kafka", "hdrh")),
    "consume": ("bench.load:consume_command", ("confluent_kafka", "hdrh")),
    "e2e": ("bench.load:e2e_command", ("confluent_kafka", "hdrh")),
    "compare": ("bench.compare:command", ("confluent_kafka", "hdrh")),
    "scale": ("bench.scale:command", ("confluent_kafka", "hdrh")),
    "replication": ("bench.replication:command", ("confluent_kafka",)),
    "txn": ("bench.txn_bench:command", ("confluent_kafka",)),
    "sweep": ("bench.sweep:command", ("confluent_kafka", "hdrh", "matplotlib")),
    "chaos": ("bench.chaos:command", ("confluent_kafka",)),
    "trace-cost": ("bench.trace_bench:cost_command", ("confluent_kafka", "hdrh")),
    "trace-analyze": ("bench.trace_bench:analyze_command", ("hdrh", "pyspark", "pyarrow")),
}


def missing_modules(needs: tuple[str, ...]) -> list[str]:
    return [m for m in needs if importlib.util.find_spec(m) is None]


def install_line(modules: list[str]) -> str:
    """The pip command, for this interpreter, that installs the extras with ``modules``."""
    extras = sorted({PACKAGE_OF[m][1] for m in modules})
    return f"{sys.executable} -m pip install -e '.[{','.join(extras)}]'"


def extras_of(modules: list[str]) -> str:
    return "+".join(sorted({PACKAGE_OF[m][1] for m in modules}))


def packages(modules: list[str]) -> str:
    return ", ".join(PACKAGE_OF[m][0] for m in modules)


class _Unavailable(click.Command):
    """Stands in for a benchmark whose libraries are not installed."""

    def __init__(self, name: str, missing: list[str]) -> None:
        self.missing = missing
        super().__init__(
            name, context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
            add_help_option=False,
            short_help=f"(needs the {extras_of(missing)} extra: {packages(missing)})",
        )

    def invoke(self, ctx: click.Context) -> Any:
        one = len(self.missing) == 1
        raise UserError(
            f"`actorlog bench {self.name}` needs {packages(self.missing)}, which "
            f"{'is' if one else 'are'} not installed; in the actorlog checkout run: "
            f"{install_line(self.missing)}")


class BenchGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(BENCH_COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = BENCH_COMMANDS.get(cmd_name)
        if entry is None:
            return None
        target, needs = entry
        missing = missing_modules(needs)
        if missing:
            return _Unavailable(cmd_name, missing)
        module_name, attr = target.split(":")
        return getattr(importlib.import_module(module_name), attr)  # type: ignore[no-any-return]


@click.group("bench", cls=BenchGroup)
def group() -> None:
    """Benchmarks; each prints a summary and writes --json FILE.

    actor-hop, timer, log, codec, request-cost, memory and failover run on the plain
    install (memory's consume figure uses the bench extra); produce, consume, e2e,
    compare, scale, sweep, txn, chaos, trace-cost and fuzz need the bench extra (pip install
    -e '.[bench]' in the actorlog checkout), trace-analyze the spark extra too.
    """
