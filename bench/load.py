"""`actorlog bench produce|consume|e2e`: load any Kafka-compatible broker on loopback.

The commands are thin: they build a config, call :func:`run_produce`,
:func:`run_consume` or :func:`run_e2e` (which `compare` and `sweep` call too),
print a summary and write the JSON contract. Workers live in
`load_produce.py` and `load_consume.py`, the process machinery in
`load_core.py`.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterable
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from bench.contract import write_json
from bench.load_consume import (
    ConsumeConfig,
    consumer_group,
    plan_partitions,
    summarize_consume,
)
from bench.load_core import LoadRunError, ProgressView, run_groups, spawn_context
from bench.load_produce import ProduceConfig, producer_group, summarize_produce
from bench.peers import (
    BootstrapRefusedError,
    BrokerStartError,
    LoginRefusedError,
    TlsFailedError,
    check_bootstrap,
    check_login,
    ensure_topic,
    split_host_port,
)

DEFAULT_NUM_RECORDS = 100_000
E2E_DEFAULT_RATE = 1000.0
E2E_DEFAULT_NUM_RECORDS = 10_000  # ten seconds at the default rate


def _hard_cap_s(time_limit_s: float, message_timeout_ms: int) -> float:
    # Sending stops at time_limit_s; draining may take up to the message timeout.
    return time_limit_s + message_timeout_ms / 1000.0 + 5.0


def run_produce(
    config: ProduceConfig,
    *,
    allow_hosts: Iterable[str] = (),
    show_progress: bool = False,
    create_topic: bool = True,
) -> dict[str, Any]:
    """Run one produce load and return the `results` block."""
    check_bootstrap(config.bootstrap, allow_hosts)
    check_login(config.bootstrap, config.client_config)
    if create_topic:
        config.partitions = ensure_topic(config.bootstrap, config.topic, config.partitions,
                                         client_config=config.client_config)
    producers = producer_group(spawn_context(), config)
    total = config.num_records if config.duration_s is None else None
    view = ProgressView(show_progress, f"produce {config.topic}", total, "rec")
    run_groups(
        [producers],
        hard_cap_s=_hard_cap_s(config.time_limit_s, config.message_timeout_ms),
        progress=view,
    )
    return summarize_produce(config, producers.ordered_results())


def run_consume(
    config: ConsumeConfig, *, allow_hosts: Iterable[str] = (), show_progress: bool = False
) -> dict[str, Any]:
    """Read from a topic and return the `results` block (throughput, consume() call latency)."""
    check_bootstrap(config.bootstrap, allow_hosts)
    check_login(config.bootstrap, config.client_config)
    plan = plan_partitions(config)
    consumers = consumer_group(spawn_context(), config, plan)
    total = config.num_records
    if total is None and config.duration_s is None:
        total = sum(max(0, end - start) for _p, start, end in plan)
    view = ProgressView(show_progress, f"consume {config.topic}", total, "rec")
    run_groups([consumers], hard_cap_s=config.time_limit_s + 5.0, progress=view)
    results = summarize_consume(consumers.ordered_results(), "consume_call_latency")
    results["partitions"] = len(plan)
    return results


# librdkafka's producer-only properties (CONFIGURATION.md, "P"): a consumer given one
# warns that it ignores it
PRODUCER_ONLY = frozenset((
    "transactional.id", "transaction.timeout.ms", "enable.idempotence",
    "enable.gapless.guarantee", "queue.buffering.max.messages", "queue.buffering.max.kbytes",
    "queue.buffering.max.ms", "linger.ms", "message.send.max.retries", "retries",
    "queue.buffering.backpressure.threshold", "compression.codec", "compression.type",
    "compression.level", "batch.num.messages", "batch.size", "delivery.report.only.error",
    "dr_cb", "dr_msg_cb", "sticky.partitioning.linger.ms", "request.required.acks", "acks",
    "request.timeout.ms", "message.timeout.ms", "delivery.timeout.ms", "queuing.strategy",
    "produce.offset.report", "partitioner", "partitioner_cb", "msg_order_cmp"))


def consumer_settings(producer_settings: dict[str, str]) -> dict[str, str]:
    """An e2e run's consumers get the producers' settings but the producer-only ones: how
    to reach the broker (security, TLS verification, timeouts, ...), not the producer's
    tuning."""
    return {k: v for k, v in producer_settings.items() if k not in PRODUCER_ONLY}


def run_e2e(
    produce: ProduceConfig,
    consumer_processes: int = 1,
    *,
    allow_hosts: Iterable[str] = (),
    show_progress: bool = False,
    idle_timeout_s: float = 10.0,
) -> dict[str, Any]:
    """Produce records stamped with their due time and measure when consumers see them."""
    check_bootstrap(produce.bootstrap, allow_hosts)
    check_login(produce.bootstrap, produce.client_config)
    produce.e2e_run_id = produce.e2e_run_id or os.urandom(8)
    produce.partitions = ensure_topic(produce.bootstrap, produce.topic, produce.partitions,
                                      client_config=produce.client_config)
    consume = ConsumeConfig(
        bootstrap=produce.bootstrap,
        client_config=consumer_settings(produce.client_config),
        topic=produce.topic,
        processes=consumer_processes,
        start="end",
        time_limit_s=_hard_cap_s(produce.time_limit_s, produce.message_timeout_ms) + idle_timeout_s,
        idle_timeout_s=idle_timeout_s,
        e2e_run_id=produce.e2e_run_id,
    )
    ctx = spawn_context()
    consumers = consumer_group(ctx, consume, plan_partitions(consume))
    producers = producer_group(ctx, produce)
    total = produce.num_records if produce.duration_s is None else None

    def publish_expected() -> None:
        # Once every producer is done, consumers know how many records to wait for.
        if consumers.expected.value < 0 and producers.finished():
            if producers.failures():
                consumers.expected.value = 0
            else:
                consumers.expected.value = sum(r["acked"] for r in producers.results.values())

    view = ProgressView(show_progress, f"e2e {produce.topic}", total, "rec")
    run_groups(
        [consumers, producers],
        hard_cap_s=consume.time_limit_s,
        progress=view,
        progress_group=0,
        on_tick=publish_expected,
    )
    produced = summarize_produce(produce, producers.ordered_results())
    received = summarize_consume(consumers.ordered_results(), "e2e_latency")
    return {
        "produced": produced["acked"],
        "consumed": received["consumed"],
        "e2e_latency": received["e2e_latency"],
        "produce": produced,
        "consume": received,
    }


# --------------------------------------------------------------------------- printing


def make_console() -> Console:
    """A console; when output goes to a file or pipe, wide enough that tables keep their headers."""
    console = Console()
    if not console.is_terminal:
        console = Console(width=160)
    return console


def _fmt(value: float) -> str:
    return f"{value:,.3f}" if value < 100 else f"{value:,.0f}"


def latency_row(block: dict[str, Any]) -> list[str]:
    return [_fmt(block[k]) for k in ("p50_ms", "p90_ms", "p99_ms", "p999_ms", "max_ms")]


def print_produce_summary(console: Console, config: ProduceConfig, results: dict[str, Any]) -> None:
    table = Table(title=f"produce → {config.bootstrap} {config.topic} (acks={config.acks})")
    for col in ("acked", "records/s", "MB/s", "p50 ms", "p90 ms", "p99 ms", "p99.9 ms", "max ms"):
        table.add_column(col, justify="right")
    table.add_row(
        f"{results['acked']:,}",
        _fmt(results["records_per_s"]),
        _fmt(results["mb_per_s"]),
        *latency_row(results["latency"]),
    )
    console.print(table)
    console.print(f"latency measured from: {results['latency_measured_from']}")
    console.print(
        f"produce requests: {results['produce_requests']:,} "
        f"({_fmt(results['requests_per_s'])}/s, "
        f"{results['records_per_request']:,.1f} records per request)"
    )
    print_errors(console, results["errors"])


def print_errors(console: Console, errors: dict[str, dict[str, int]]) -> None:
    if not errors:
        console.print("errors: none")
        return
    table = Table(title="errors")
    for col in ("name", "code", "count"):
        table.add_column(col)
    for name, entry in sorted(errors.items(), key=lambda kv: -kv[1]["count"]):
        table.add_row(name, str(entry["code"]), f"{entry['count']:,}")
    console.print(table)


# --------------------------------------------------------------------------- click options


def _client_config(pairs: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise click.BadParameter(f"expected KEY=VALUE, got {pair!r}", param_hint="-X")
        out[key.strip()] = value.strip()
    return out


def _command_config(_ctx: click.Context, _param: click.Parameter,
                    path: str | None) -> dict[str, str]:
    """librdkafka settings from a Kafka client properties file, read as `actorlog topics
    --command-config` reads it; a bad file is one line and exit code 2."""
    if path is None:
        return {}
    from actors.cli.client_config import command_config

    return command_config(path, librdkafka=True)


def _settings(kw: dict[str, Any]) -> dict[str, str]:
    # -X settings override the file's
    return {**kw["command_config"], **_client_config(kw["client_config"])}


def common_options(func: Callable[..., Any]) -> Callable[..., Any]:
    options = [
        click.option("--bootstrap", required=True, help="HOST:PORT of the broker (loopback only)."),
        click.option(
            "--allow-host",
            "allow_hosts",
            multiple=True,
            help="A non-loopback host this run may target (repeatable).",
        ),
        click.option("--topic", default="actorlog-bench", show_default=True),
        click.option(
            "--num-records",
            type=click.IntRange(min=1),
            default=None,
            help="Records in total (default 100,000 unless --duration).",
        ),
        click.option(
            "--duration",
            type=click.FloatRange(min=0.1),
            default=None,
            help="Seconds to run instead of a count.",
        ),
        click.option(
            "--time-limit",
            type=click.FloatRange(min=1),
            default=300.0,
            show_default=True,
            help="Hard cap in seconds on the load, even if records remain.",
        ),
        click.option(
            "-X",
            "--client-config",
            "client_config",
            multiple=True,
            help="Extra librdkafka setting KEY=VALUE (repeatable).",
        ),
        click.option(
            "--command-config",
            metavar="FILE",
            callback=_command_config,
            help="A Kafka client properties file (security.protocol, sasl.*, ssl.*), as "
            "kafka-topics.sh and `actorlog topics` take it; -X settings override it.",
        ),
        click.option(
            "--json",
            "json_path",
            type=click.Path(dir_okay=False),
            default=None,
            help="Write the results as JSON.",
        ),
        click.option("--no-progress", is_flag=True, help="No live progress bar."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def producer_options(func: Callable[..., Any]) -> Callable[..., Any]:
    options = [
        click.option("--record-size", type=click.IntRange(min=1), default=100, show_default=True),
        click.option(
            "--keys",
            type=click.IntRange(min=0),
            default=0,
            show_default=True,
            help="0: no key; N: N distinct keys round robin.",
        ),
        click.option(
            "--partitions",
            type=click.IntRange(min=1),
            default=3,
            show_default=True,
            help="Partitions of the topic if it has to be created.",
        ),
        click.option(
            "--acks", type=click.Choice(["0", "1", "all", "-1"]), default="1", show_default=True
        ),
        click.option(
            "--compression",
            type=click.Choice(["none", "gzip", "snappy", "lz4", "zstd"]),
            default="none",
            show_default=True,
        ),
        click.option("--linger-ms", type=click.FloatRange(min=0), default=5.0, show_default=True),
        click.option("--batch-size", type=click.IntRange(min=1), default=65536, show_default=True),
        click.option(
            "--target-rate",
            type=click.FloatRange(min=0),
            default=None,
            help="Records/s over all processes, open loop (latency from the due time).",
        ),
        click.option(
            "--processes", type=click.IntRange(min=1, max=64), default=1, show_default=True
        ),
        click.option(
            "--connections",
            type=click.IntRange(min=1, max=64),
            default=1,
            show_default=True,
            help="Producer instances (connections) per process.",
        ),
        click.option(
            "--records-per-request",
            type=click.IntRange(min=1),
            default=None,
            help="Cap records per batch (librdkafka batch.num.messages); 1 = one per request.",
        ),
        click.option(
            "--max-in-flight",
            type=click.IntRange(min=1),
            default=None,
            help="max.in.flight.requests.per.connection.",
        ),
        click.option(
            "--max-outstanding",
            type=click.IntRange(min=1),
            default=None,
            help="Closed loop: unacknowledged records per connection "
            "(default: 5 requests x partitions x records per batch).",
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _produce_config(
    kw: dict[str, Any],
    default_rate: float | None = None,
    default_records: int = DEFAULT_NUM_RECORDS,
) -> ProduceConfig:
    num_records = kw["num_records"]
    if num_records is None and kw["duration"] is None:
        num_records = default_records
    rate = kw["target_rate"] if kw["target_rate"] is not None else default_rate
    return ProduceConfig(
        bootstrap=kw["bootstrap"],
        topic=kw["topic"],
        num_records=num_records,
        duration_s=kw["duration"],
        record_size=kw["record_size"],
        keys=kw["keys"],
        partitions=kw["partitions"],
        acks="all" if kw["acks"] == "-1" else kw["acks"],
        compression=kw["compression"],
        linger_ms=kw["linger_ms"],
        batch_size=kw["batch_size"],
        target_rate=rate or None,
        processes=kw["processes"],
        connections=kw["connections"],
        records_per_request=kw["records_per_request"],
        max_in_flight=kw["max_in_flight"],
        max_outstanding=kw["max_outstanding"],
        time_limit_s=kw["time_limit"],
        client_config=_settings(kw),
    )


def _reachable(bootstrap: str, timeout_s: float = 5.0) -> bool:
    """Whether any bootstrap address takes a TCP connection (librdkafka would retry one that
    does not, logging each try, until its metadata request times out)."""
    for address in bootstrap.split(","):
        try:
            with socket.create_connection(split_host_port(address.strip()), timeout=timeout_s):
                return True
        except (OSError, ValueError):
            continue
    return False


def _guard(func: Callable[[], None], bootstrap: str, allow_hosts: Iterable[str]) -> None:
    """The load, with the broker's absence or a client error as one line (exit code 1)."""
    from confluent_kafka import KafkaException

    try:
        for address in bootstrap.split(","):
            split_host_port(address.strip())
    except ValueError as exc:  # a mistyped --bootstrap
        raise click.UsageError(f"--bootstrap: {exc}") from None
    try:
        check_bootstrap(bootstrap, allow_hosts)  # before any connection to it
        if not _reachable(bootstrap):
            raise click.ClickException(
                f"cannot reach a Kafka broker at {bootstrap}; is it running? "
                f"(--bootstrap HOST:PORT)")
        func()
    except BootstrapRefusedError as exc:
        raise click.UsageError(str(exc)) from exc
    except KafkaException as exc:
        raise click.ClickException(f"{bootstrap}: {exc.args[0].str()}") from None
    except BrokerStartError as exc:
        raise click.ClickException(f"{bootstrap}: {exc}") from None
    except LoginRefusedError as exc:
        raise click.ClickException(f"{bootstrap}: login refused: {exc} "
                                   f"(--command-config FILE)") from None
    except TlsFailedError as exc:
        raise click.ClickException(f"{bootstrap}: TLS handshake failed: {exc} "
                                   f"(--command-config FILE)") from None
    except LoadRunError as exc:  # a worker's error, by its first line (not its traceback)
        raise click.ClickException(f"{bootstrap}: the load failed: {exc.summary}") from None


@click.command("produce")
@common_options
@producer_options
def produce_command(**kw: Any) -> None:
    """Produce records and report throughput, latency percentiles and errors by code."""
    config = _produce_config(kw)
    console = make_console()

    def go() -> None:
        results = run_produce(
            config, allow_hosts=kw["allow_hosts"], show_progress=not kw["no_progress"]
        )
        print_produce_summary(console, config, results)
        if kw["json_path"]:
            write_json(kw["json_path"], "produce", config.to_json(), results)

    _guard(go, kw["bootstrap"], kw["allow_hosts"])


@click.command("consume")
@common_options
@click.option("--processes", type=click.IntRange(min=1, max=64), default=1, show_default=True)
@click.option(
    "--from",
    "start",
    type=click.Choice(["beginning", "end"]),
    default="beginning",
    show_default=True,
)
def consume_command(**kw: Any) -> None:
    """Read records (a count, a duration, or everything there at start) and report throughput."""
    config = ConsumeConfig(
        bootstrap=kw["bootstrap"],
        topic=kw["topic"],
        num_records=kw["num_records"],
        duration_s=kw["duration"],
        processes=kw["processes"],
        start=kw["start"],
        time_limit_s=kw["time_limit"],
        client_config=_settings(kw),
    )
    console = make_console()

    def go() -> None:
        results = run_consume(
            config, allow_hosts=kw["allow_hosts"], show_progress=not kw["no_progress"]
        )
        table = Table(title=f"consume ← {config.bootstrap} {config.topic}")
        for col in ("consumed", "records/s", "MB/s", "call p50 ms", "p90", "p99", "p99.9", "max"):
            table.add_column(col, justify="right")
        table.add_row(
            f"{results['consumed']:,}",
            _fmt(results["records_per_s"]),
            _fmt(results["mb_per_s"]),
            *latency_row(results["consume_call_latency"]),
        )
        console.print(table)
        print_errors(console, results["errors"])
        if kw["json_path"]:
            write_json(kw["json_path"], "consume", config.to_json(), results)

    _guard(go, kw["bootstrap"], kw["allow_hosts"])


@click.command("e2e")
@common_options
@producer_options
@click.option(
    "--consumer-processes", type=click.IntRange(min=1, max=64), default=1, show_default=True
)
def e2e_command(**kw: Any) -> None:
    """Produce-to-consume latency, from timestamps carried in the records.

    Open loop at 1,000 records/s unless --target-rate (0: as fast as possible);
    10,000 records unless --num-records or --duration.
    """
    config = _produce_config(
        kw, default_rate=E2E_DEFAULT_RATE, default_records=E2E_DEFAULT_NUM_RECORDS
    )
    console = make_console()

    def go() -> None:
        results = run_e2e(
            config,
            kw["consumer_processes"],
            allow_hosts=kw["allow_hosts"],
            show_progress=not kw["no_progress"],
        )
        table = Table(title=f"e2e {config.bootstrap} {config.topic} (acks={config.acks})")
        for col in ("produced", "consumed", "p50 ms", "p90 ms", "p99 ms", "p99.9 ms", "max ms"):
            table.add_column(col, justify="right")
        table.add_row(
            f"{results['produced']:,}",
            f"{results['consumed']:,}",
            *latency_row(results["e2e_latency"]),
        )
        console.print(table)
        print_errors(console, {**results["produce"]["errors"], **results["consume"]["errors"]})
        if kw["json_path"]:
            conf = config.to_json()
            conf["consumer_processes"] = kw["consumer_processes"]
            write_json(kw["json_path"], "e2e", conf, results)

    _guard(go, kw["bootstrap"], kw["allow_hosts"])
