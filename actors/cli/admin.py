"""What `actorlog topics` and `actorlog groups` share: the admin client, errors, output.

Both talk to ``--bootstrap`` through the Kafka APIs only (kafka-python's
KafkaAdminClient, a runtime dependency), so they work against any
Kafka-compatible broker. Each prints a table, or one JSON document with
``--json``; a per-item failure (an unknown topic) is reported and makes the
exit code 1; a broker that cannot be reached or lacks an API is one line.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])


def bootstrap_option(fn: F) -> F:
    fn = click.option("--timeout-ms", type=click.IntRange(min=1), default=10_000,
                      show_default=True,
                      help="how long to wait for the broker (connect and each request)")(fn)
    fn = click.option("--bootstrap", default="127.0.0.1:9092", show_default=True,
                      envvar="ACTORLOG_BOOTSTRAP",
                      help="HOST:PORT of any broker of the cluster ($ACTORLOG_BOOTSTRAP)")(fn)
    return fn


def json_option(fn: F) -> F:
    return click.option("--json", "as_json", is_flag=True,
                        help="print one JSON document instead of a table")(fn)


def error_name(code: int) -> str:
    """Kafka's name of an error code (kafka-python's table)."""
    from kafka.errors import for_code

    return str(for_code(code).__name__).removesuffix("Error")


def describe_error(exc: BaseException) -> str:
    """One line for a kafka-python exception."""
    from kafka.errors import KafkaError

    if isinstance(exc, KafkaError):
        message = getattr(exc, "description", "") or str(exc)
        return f"{type(exc).__name__.removesuffix('Error')}: {message}".strip().rstrip(":")
    return f"{type(exc).__name__}: {exc}"


@contextmanager
def admin_client(bootstrap: str, timeout_ms: int, needs: str = "") -> Iterator[Any]:
    """A connected KafkaAdminClient; connection and API failures become one line."""
    from kafka import KafkaAdminClient
    from kafka.errors import IncompatibleBrokerVersion, KafkaError, KafkaTimeoutError

    try:
        client = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="actorlog-cli",
                                  request_timeout_ms=timeout_ms,
                                  bootstrap_timeout_ms=timeout_ms)
    except KafkaTimeoutError:
        raise click.ClickException(
            f"cannot reach a Kafka broker at {bootstrap} within {timeout_ms / 1000:g} s; "
            f"is it running? (--bootstrap HOST:PORT)") from None
    except (KafkaError, OSError, ValueError) as exc:
        raise click.ClickException(
            f"cannot connect to {bootstrap}: {describe_error(exc)} (--bootstrap HOST:PORT)"
        ) from None
    try:
        yield client
    except IncompatibleBrokerVersion as exc:
        api = str(exc).split("'")[1] if "'" in str(exc) else "an API this command needs"
        raise click.ClickException(
            f"the broker at {bootstrap} does not serve the {api.removesuffix('Request')} API"
            f"{f', which {needs} needs' if needs else ''}") from None
    except KafkaTimeoutError:
        raise click.ClickException(
            f"no answer from {bootstrap} within {timeout_ms / 1000:g} s (--timeout-ms)") from None
    except KafkaError as exc:
        raise click.ClickException(describe_error(exc)) from None
    finally:
        client.close()


def emit(as_json: bool, document: dict[str, Any], human: Callable[[], None]) -> None:
    if as_json:
        click.echo(json.dumps(document, indent=2, sort_keys=False))
    else:
        human()


def table(headers: Sequence[str], rows: Sequence[Sequence[object]], indent: str = "") -> None:
    """Columns left-aligned to their widest cell; None shows as '-'."""
    cells = [[("-" if v is None else str(v)) for v in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    for row in [list(headers), *cells]:
        click.echo(indent + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True))
                   .rstrip())


def fail_if(failed: bool) -> None:
    """Exit 1 after the output when some item failed."""
    if failed:
        click.get_current_context().exit(1)
