"""An API function that raises is answered as Kafka answers it, not with a closed connection.

Kafka's KafkaApis.handle catches what a handler throws and answers the request's error
response (requestHelper.handleError -> sendErrorOrCloseConnection: the exception's code,
UNKNOWN_SERVER_ERROR for an unexpected one, on every item the request named); it closes
the connection only where that response has no error field. DescribeLogDirs v1-2 have
none, but Kafka's error response is still written there (its top-level error is v3+ and
ignorable): empty results, the connection kept.

No request found today makes an API function raise on a single node (a few dozen odd
but well-formed requests, every API, were tried; the decoder refuses what is malformed),
so the broker here runs from a copy of the tree whose DescribeLogDirs function raises, as
a bug would: a real broker process, real sockets, kafka-python's protocol objects. The
failure is logged with its traceback once, then one line a minute with the count held
back, however many requests hit it.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.broker.rawclient import METADATA, PRODUCE, RawClient, produce_values
from tests.fixtures.broker import ROOT, BrokerProcess
from wire.errors import ErrorCode

DESCRIBE_LOG_DIRS = 35
INJECTED = "injected-failure-of-describe-log-dirs"
INJECTED_PRODUCE = "injected-failure-of-produce"
# the planted faults (the test's param "fault"): a bug's exception; a KafkaError with a
# code of its own; an exception whose repr raises (its log line cannot be written)
UNEXPECTED = f"    raise RuntimeError({INJECTED!r})\n"
OWN_CODE = ("    from wire.errors import ErrorCode as _Code, KafkaError as _Error\n"
            f"    raise _Error({INJECTED!r}, _Code.KAFKA_STORAGE_ERROR)\n")
BROKEN_REPR = ("    class _Broken(RuntimeError):\n"
               "        def __repr__(self) -> str:\n"
               "            raise ValueError('no repr')\n"
               f"    raise _Broken({INJECTED!r})\n")


@pytest.fixture
def failing_broker(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[BrokerProcess]:
    """The broker run from a copy of the tree whose DescribeLogDirs raises (the test's
    param "fault", UNEXPECTED by default) and whose Produce raises; the param "interval"
    is the warning interval (ACTORLOG_WARNING_INTERVAL_MS), an hour by default: a slow
    run cannot see a second line a minute later."""
    param = getattr(request, "param", {})
    tree = tmp_path / "tree"
    for package in ("actors", "wire"):
        shutil.copytree(ROOT / package, tree / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    admin = tree / "actors" / "apis" / "admin.py"
    text = admin.read_text()
    marker = ("def handle_describe_log_dirs(ctx: HandlerContext, header: Any, req: Any) "
              "-> ApiGen:\n")
    assert marker in text
    admin.write_text(text.replace(marker, marker + param.get("fault", UNEXPECTED)))
    produce = tree / "actors" / "apis" / "produce.py"
    text = produce.read_text()
    marker = "def handle_produce(ctx: HandlerContext, header: Any, req: Any) -> ApiGen:\n"
    assert marker in text
    produce.write_text(text.replace(
        marker, marker + f"    raise RuntimeError({INJECTED_PRODUCE!r})\n"))
    interval = param.get("interval", "3600000")
    env: dict[str, str | None] = {"ACTORLOG_WARNING_INTERVAL_MS": interval}
    broker = BrokerProcess(tmp_path / "data", root=tree, env=env).start()
    try:
        yield broker
    finally:
        broker.stop()
        shutil.rmtree(tree, ignore_errors=True)
        if os.environ.get("PYTHONPYCACHEPREFIX"):  # the copy's bytecode, kept apart
            shutil.rmtree(Path(os.environ["PYTHONPYCACHEPREFIX"]) / tree.relative_to("/"),
                          ignore_errors=True)


def test_an_api_that_raises_is_answered_with_its_error_response(
        failing_broker: BrokerProcess) -> None:
    unknown = int(ErrorCode.UNKNOWN_SERVER_ERROR)
    with RawClient(failing_broker.port) as client:
        for version in (1, 2):  # no error field: empty results, the connection kept
            response = client.call(DESCRIBE_LOG_DIRS, version, {"topics": None})
            assert response.results == [], (version, response)
        for version in (3, 4):
            response = client.call(DESCRIBE_LOG_DIRS, version, {"topics": None})
            assert (response.error_code, response.results) == (unknown, []), version
        for _ in range(6):  # a flood of the same failure
            response = client.call(DESCRIBE_LOG_DIRS, 3, {"topics": [
                {"topic": "t", "partitions": [0]}]})
            assert response.error_code == unknown
        # the connection still serves other APIs
        answer = client.call(METADATA, 4, {"topics": [], "allow_auto_topic_creation": False})
        assert answer.brokers
    log = failing_broker.log()
    # one line for the ten failures (the traceback with it), the rest counted
    lines = [line for line in log.splitlines() if INJECTED in line and "ERROR" in line]
    assert len(lines) == 1, lines
    assert "answered its error response (UNKNOWN_SERVER_ERROR)" in lines[0], lines
    assert log.count("Traceback") == 1, log[-4000:]
    assert "closing" not in lines[0]


@pytest.mark.parametrize("failing_broker", [{"interval": "0"}], indirect=True)
def test_a_failure_logs_its_traceback_once_per_place_however_often_it_is_logged(
        failing_broker: BrokerProcess) -> None:
    """With no interval between lines (ACTORLOG_WARNING_INTERVAL_MS=0) every failure has
    its line, but only the first carries the traceback: one per place in the code."""
    with RawClient(failing_broker.port) as client:
        for _ in range(4):
            response = client.call(DESCRIBE_LOG_DIRS, 3, {"topics": None})
            assert response.error_code == int(ErrorCode.UNKNOWN_SERVER_ERROR)
    log = failing_broker.log()
    lines = [line for line in log.splitlines() if INJECTED in line and "ERROR" in line]
    assert len(lines) == 4, lines
    assert log.count("Traceback") == 1, log[-4000:]


@pytest.mark.parametrize("failing_broker", [{"fault": OWN_CODE}], indirect=True)
def test_a_kafka_error_is_answered_with_its_own_code(failing_broker: BrokerProcess) -> None:
    """A KafkaError carries its code into the error response (Kafka's
    ApiError.fromThrowable), not UNKNOWN_SERVER_ERROR."""
    storage = int(ErrorCode.KAFKA_STORAGE_ERROR)
    with RawClient(failing_broker.port) as client:
        for _ in range(2):
            response = client.call(DESCRIBE_LOG_DIRS, 3, {"topics": None})
            assert (response.error_code, response.results) == (storage, []), response
    lines = [line for line in failing_broker.log().splitlines()
             if INJECTED in line and " ERROR " in line]  # not the traceback's "_Error"
    assert len(lines) == 1 and "(KAFKA_STORAGE_ERROR)" in lines[0], lines


@pytest.mark.parametrize("failing_broker", [{"fault": BROKEN_REPR}], indirect=True)
def test_a_failure_whose_log_line_cannot_be_written_is_still_answered(
        failing_broker: BrokerProcess) -> None:
    """The answer goes before the log line: an exception whose repr raises (the line
    cannot be formatted) still gets its error response, and a plain line is logged."""
    with RawClient(failing_broker.port) as client:
        for _ in range(2):
            response = client.call(DESCRIBE_LOG_DIRS, 3, {"topics": None})
            assert response.error_code == int(ErrorCode.UNKNOWN_SERVER_ERROR)
    log = failing_broker.log()
    assert "_Broken (its log line cannot be written)" in log, log[-4000:]


def test_a_failing_produce_is_answered_per_partition_and_with_acks_0_closed(
        failing_broker: BrokerProcess) -> None:
    """Produce (decoded field by field, not by kafka.protocol) that fails: with acks 1 or
    -1 each partition asked is answered UNKNOWN_SERVER_ERROR; with acks=0 the producer
    reads no answer, so the connection is closed (Kafka's ProduceRequest.getErrorResponse
    is null for acks=0: sendErrorOrCloseConnection closes it)."""
    batch = b"\0" * 70  # never read: the API raises first
    unknown = int(ErrorCode.UNKNOWN_SERVER_ERROR)
    with RawClient(failing_broker.port) as client:
        for acks in (1, -1):
            response = client.call(PRODUCE, 9, produce_values("t", 3, batch, acks))
            rows = [(t.name, p.index, p.error_code) for t in response.responses
                    for p in t.partition_responses]
            assert rows == [("t", 3, unknown)], rows
    with RawClient(failing_broker.port) as client:
        client.send(PRODUCE, 9, produce_values("t", 3, batch, 0))
        assert client.is_closed_by_peer()
    lines = [line for line in failing_broker.log().splitlines()
             if INJECTED_PRODUCE in line and "ERROR" in line]
    assert len(lines) == 1 and "answered its error response" in lines[0], lines


def test_a_failure_site_is_per_api_and_names_actorlogs_own_innermost_line() -> None:
    """Two APIs failing in the same library line (an encoding failure ends in the same
    kafka-python or codec lines whatever the bug) are two places, each with its
    traceback; the innermost line of actors/ or wire/ is part of the place."""
    from actors.request_handler import _failure_site
    from wire import kafka_codec as kc

    try:
        kc.encode_response(kc.parse_request_header(_describe_configs_frame()),
                           {"error_code": "not a number", "results": []})
    except Exception as exc:  # a real codec failure
        failure = exc
    else:
        raise AssertionError("the codec wrote a string as an int16")
    sites = {_failure_site(api_key, failure) for api_key in (32, 35)}
    assert len(sites) == 2, sites
    own = {(site[4], site[5]) for site in sites}
    assert len(own) == 1 and f"{os.sep}wire{os.sep}" in next(iter(own))[0], own


def test_the_process_limiters_are_per_node() -> None:
    """The nodes of one Python process (the simulation, in-process tests) do not share
    a limiter; the request handlers of one node do; a node made again under the same
    name (a restart, the simulation's next seed with its clock from 0) starts with
    fresh limiters, not its predecessor's next-log times."""
    import zmq

    from actors.request_handler import process_limiter
    from actors.runtime.node import Node

    context = zmq.Context()
    try:
        first = Node("node-a", context=context)
        other = Node("node-b", context=context)
        limiter = process_limiter("api_failure", first)
        assert limiter is process_limiter("api_failure", first)
        assert first.limiters["api_failure"] is limiter  # kept on the node object
        assert limiter is not process_limiter("api_failure", other)
        assert limiter is not process_limiter("unsupported_version", first)
        assert limiter.admit(("api", "site"), 0) is not None
        assert limiter.admit(("api", "site"), 1) is None  # held back within the interval
        again = Node("node-a", context=context)
        fresh = process_limiter("api_failure", again)
        assert fresh is not limiter
        assert fresh.admit(("api", "site"), 1) is not None
    finally:
        context.term()


def _describe_configs_frame() -> bytes:
    from kafka.protocol.parser import KafkaProtocol

    from tests.broker.rawclient import build

    protocol = KafkaProtocol(client_id="t")
    protocol.send_request(build(32, 4, {"resources": [], "include_synonyms": False,
                                        "include_documentation": False}))
    return bytes(protocol.send_bytes())[4:]
