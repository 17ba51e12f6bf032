"""`actorlog serve`: one broker node in the foreground, no ZooKeeper."""

from __future__ import annotations

import sys

import click
from loguru import logger

from actors.runtime.config import Config, ConfigError


def configure_logging(level: str) -> None:
    logger.remove()
    logger.add(sys.stderr, level=level.upper(), backtrace=False, diagnose=False,
               format="{time:YYYY-MM-DD HH:mm:ss.SSS} {level: <7} [{extra[node]}/{extra[actor]}] "
                      "{message}")
    logger.configure(extra={"node": "-", "actor": "-"})


@click.command("serve")
@click.option("--listen", help="HOST:PORT of the Kafka listener [listeners: 127.0.0.1:9092]")
@click.option("--data-dir", help="data directory [log.dirs]")
@click.option("--config", "config_file", type=click.Path(dir_okay=False), help="TOML config file")
@click.option("--trace-sample", type=float, help="share of requests traced [trace.sample.ratio]")
@click.option("--metrics-port", type=int, help="Prometheus metrics port (0: off)")
@click.option("--log-level", default="INFO", show_default=True)
def command(listen: str | None, data_dir: str | None, config_file: str | None,
            trace_sample: float | None, metrics_port: int | None, log_level: str) -> None:
    """Run a single broker node in the foreground until SIGTERM or SIGINT."""
    from actors.broker import Broker, BrokerError

    configure_logging(log_level)
    try:
        config = Config.load(config_file, {
            "listeners": listen, "log.dirs": data_dir, "trace.sample.ratio": trace_sample,
            "metrics.port": metrics_port,
        })
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    broker = Broker(config)
    try:
        broker.start()
    except (BrokerError, ValueError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    assert broker.node is not None
    if int(config["metrics.port"]):
        from actors.metrics_http import serve_metrics

        serve_metrics(broker.host, int(config["metrics.port"]), broker.node.metrics.snapshot)
        logger.info("metrics on http://{}:{}/metrics", broker.host, config["metrics.port"])
    print(f"actorlog listening on {broker.host}:{broker.port}", flush=True)
    broker.node.run_until_signal()
    sys.exit(0)
