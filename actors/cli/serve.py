"""`actorlog serve`: one broker node in the foreground (`zookeeper.connect`: a cluster's)."""

from __future__ import annotations

import gc
import os
import sys
from typing import Any

import click
from loguru import logger

from actors.cli import UserError
from actors.runtime.collector import begin_serving
from actors.runtime.config import Config, ConfigError

LOG_LEVEL_ENV = "ACTORLOG_LOG_LEVEL"
LOG_LEVELS = ("TRACE", "DEBUG", "INFO", "SUCCESS", "WARNING", "ERROR", "CRITICAL")


def configure_logging(level: str, node: str = "-") -> None:
    """Log lines to stderr tagged ``[node/actor]`` (``node`` for lines bound to neither)."""
    if level.upper() not in LOG_LEVELS:
        raise UserError(f"--log-level {level} is not a log level; use one of "
                        f"{', '.join(LOG_LEVELS)}")
    logger.remove()
    logger.add(sys.stderr, level=level.upper(), backtrace=False, diagnose=False,
               format="{time:YYYY-MM-DD HH:mm:ss.SSS} {level: <7} [{extra[node]}/{extra[actor]}] "
                      "{message}")
    logger.configure(extra={"node": node, "actor": "-"})


def _bind_metrics(config: Config, broker: Any) -> Any:
    """The metrics port bound before the broker starts (on the first listener's host), so
    a port in use stops the start before anything is made (no data dir left behind)."""
    from actors.metrics_http import bind_metrics, scrape
    from actors.security.listeners import parse_listeners

    port = int(config["metrics.port"])
    try:
        host = parse_listeners(str(config["listeners"]),
                               str(config["listener.security.protocol.map"]))[0].host
    except Exception:  # the broker's start names what is wrong with the listeners
        return None
    try:
        return bind_metrics(host, port, lambda: scrape(broker))
    except OSError as exc:
        raise click.ClickException(
            f"cannot serve metrics on port {port}: {exc.strerror}; "
            f"choose another --metrics-port (0: off)") from None


@click.command("serve")
@click.option("--listen", help="HOST:PORT of the Kafka listener, [::1]:PORT for IPv6 "
                               "[listeners: 127.0.0.1:9092]")
@click.option("--advertised-listeners", "advertised",
              help="HOST:PORT told to clients; needed when --listen binds 0.0.0.0 "
                   "[advertised.listeners]")
@click.option("--data-dir", help="data directory [log.dirs]")
@click.option("--config", "config_file", help="TOML config file (deploy/actorlog.example.toml "
                                              "lists every key)")
@click.option("--trace-sample", type=float, help="share of requests traced [trace.sample.ratio]")
@click.option("--metrics-port", type=int, help="Prometheus metrics port (0: off)")
@click.option("--log-level", default="INFO", show_default=True,
              help=f"one of {', '.join(LOG_LEVELS)}")
def command(listen: str | None, advertised: str | None, data_dir: str | None,
            config_file: str | None, trace_sample: float | None, metrics_port: int | None,
            log_level: str) -> None:
    """Run a single broker node in the foreground until SIGTERM or SIGINT."""
    from actors.broker import Broker, BrokerConfigError, BrokerError, StartInterrupted
    from actors.cli import EARLY_SIGNALS, HANDLERS_BEFORE

    configure_logging(log_level)
    os.environ[LOG_LEVEL_ENV] = log_level.upper()  # processes 1.. log at the same level
    try:
        config = Config.load(config_file, {
            "listeners": listen, "advertised.listeners": advertised, "log.dirs": data_dir,
            "trace.sample.ratio": trace_sample, "metrics.port": metrics_port,
        })
    except ConfigError as exc:
        raise UserError(str(exc)) from None
    broker = Broker(config, catch_signals=True, early_signals=EARLY_SIGNALS,
                    handlers_before=HANDLERS_BEFORE)
    metrics = _bind_metrics(config, broker) if int(config["metrics.port"]) else None
    try:
        broker.start()
    except BrokerConfigError as exc:
        raise UserError(str(exc)) from None
    except BrokerError as exc:
        raise click.ClickException(str(exc)) from None
    except StartInterrupted as exc:
        # asked to stop while starting: what started is stopped (the start's cleanup);
        # a stop, not a failure, so it exits as a stop after the start does
        broker.stop()
        logger.info("got {} while starting; stopped", exc)
        sys.exit(0)
    finally:
        if metrics is not None and broker.node is None:
            metrics.server_close()
    assert broker.node is not None
    if metrics is not None:
        from actors.metrics_http import start_metrics

        start_metrics(metrics)
        logger.info("metrics on http://{}:{}/metrics", broker.host, config["metrics.port"])
    print(f"actorlog listening on {broker.host}:{broker.port}", flush=True)
    begin_serving()
    broker.run_until_signal()
    broker.stop()
    gc.freeze()  # the exit's last collection would only walk (0.5 s after a load) what dies now
    if broker.gave_up is not None:  # a process could not restart: stopped, not asked to
        print(f"actorlog: broker stopped: {broker.gave_up}", file=sys.stderr, flush=True)
        sys.exit(1)
    sys.exit(0)
