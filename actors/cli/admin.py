"""What `actorlog topics` and `actorlog groups` share: the admin client, errors, output.

Both talk to ``--bootstrap`` through the Kafka APIs only (kafka-python's
KafkaAdminClient, a runtime dependency), so they work against any
Kafka-compatible broker. Each prints a table, or one JSON document with
``--json``; a per-item failure (an unknown topic) is reported and makes the
exit code 1; a broker that cannot be reached or lacks an API is one line.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])


COMMAND_CONFIG = "actorlog.command_config"  # ctx.meta: kafka-python's security arguments


def _command_config(ctx: click.Context, _param: click.Parameter, path: str | None) -> None:
    if path is None:
        return
    from actors.cli.client_config import command_config

    ctx.meta[COMMAND_CONFIG] = command_config(path)


def bootstrap_option(fn: F) -> F:
    fn = click.option("--command-config", metavar="FILE", expose_value=False,
                      callback=_command_config,
                      help="a Kafka client properties file (security.protocol, sasl.*, "
                           "ssl.*), as kafka-topics.sh takes")(fn)
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
    from kafka.errors import (
        IllegalSaslStateError,
        KafkaError,
        SaslAuthenticationFailedError,
        UnsupportedSaslMechanismError,
    )

    if isinstance(exc, KafkaError):
        message = (getattr(exc, "description", "") or str(exc)
                   ).removeprefix(f"{type(exc).__name__}: ")  # kafka-python's str() names it
        if isinstance(exc, (SaslAuthenticationFailedError, IllegalSaslStateError,
                            UnsupportedSaslMechanismError)):
            # the broker's error_message says which mechanism or login failed: kafka-python
            # puts it in the args ("SaslAuthenticationFailedError: <error_message>") and its
            # class description is only the generic "SASL Authentication failed."
            said = re.sub(r"^\w+Error: ", "", str(exc.args[0]) if exc.args else "").strip()
            if said and said != "None":
                message = said
        return f"{type(exc).__name__.removesuffix('Error')}: {message}".strip().rstrip(":")
    return f"{type(exc).__name__}: {exc}"


class _BootstrapFailures(logging.Handler):
    """What kafka-python logged while bootstrapping: it logs a failed login or a TLS
    handshake refused and goes on trying until its timeout, which then says only that.

    The records matched are kafka.net.manager's of kafka-python 3.0.12: "Bootstrap
    connection to %s failed: %s" with the exception as an argument, and "Bootstrap attempt
    to ... failed: ..." formatted as an f-string (no arguments: its text is read). While
    attached, this handler is the logger's only one, so logging.lastResort (which would
    print these warnings on stderr) stays quiet: the command's one line says it instead."""

    # kafka-python's names for a refused login or TLS handshake (its TLS failure is a
    # KafkaConnectionError "Handshake failed"; an ssl.SSLError does not reach the log)
    DECISIVE = ("SaslAuthenticationFailedError", "UnsupportedSaslMechanismError",
                "IllegalSaslStateError", "AuthorizationError", "Handshake failed")

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.decisive: str | None = None  # the first login or TLS failure, described
        self.last: str | None = None

    def emit(self, record: logging.LogRecord) -> None:
        from kafka import errors

        args = record.args if isinstance(record.args, tuple) else ()
        found = [exc for exc in args if isinstance(exc, BaseException)]
        if found:
            exc = found[0]
            if isinstance(exc, errors.KafkaTimeoutError):
                return
            text, described = f"{type(exc).__name__}: {exc}", describe_error(exc)
        elif " failed: " in (message := record.getMessage()):  # an f-string's record
            text = message.split(" failed: ", 1)[1].rsplit(" (backoff", 1)[0]
            described = _described_text(text)
        else:
            return
        self.last = described
        if self.decisive is None and any(name in text for name in self.DECISIVE):
            self.decisive = described


def _described_text(text: str) -> str:
    """describe_error's line for kafka-python's str() of an exception ("[Error 58]
    SaslAuthenticationFailedError: SaslAuthenticationFailedError: why")."""
    match = re.match(r"(?:\[Error -?\d+\] )?(\w+?)(?:Error)?: (?:\w+: )?(.*)$", text)
    return f"{match.group(1)}: {match.group(2)}" if match else text


@contextmanager
def admin_client(bootstrap: str, timeout_ms: int, needs: str = "") -> Iterator[Any]:
    """A connected KafkaAdminClient; connection and API failures become one line."""
    from kafka import KafkaAdminClient
    from kafka.errors import IncompatibleBrokerVersion, KafkaError, KafkaTimeoutError

    security = click.get_current_context().meta.get(COMMAND_CONFIG, {})
    failures = _BootstrapFailures()
    logger = logging.getLogger("kafka.net.manager")
    logger.addHandler(failures)
    try:
        client = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="actorlog-cli",
                                  request_timeout_ms=timeout_ms,
                                  bootstrap_timeout_ms=timeout_ms, **security)
    except KafkaTimeoutError:
        if failures.decisive is not None:
            raise click.ClickException(
                f"cannot connect to {bootstrap}: {failures.decisive} "
                f"(--command-config FILE)") from None
        last = f" (last: {failures.last})" if failures.last else ""
        raise click.ClickException(
            f"cannot reach a Kafka broker at {bootstrap} within {timeout_ms / 1000:g} s{last}; "
            f"is it running? (--bootstrap HOST:PORT"
            f"{'' if security else '; a TLS or SASL listener needs --command-config FILE'})"
        ) from None
    except (KafkaError, OSError, ValueError) as exc:
        raise click.ClickException(
            f"cannot connect to {bootstrap}: {describe_error(exc)} (--bootstrap HOST:PORT)"
        ) from None
    finally:
        logger.removeHandler(failures)
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
