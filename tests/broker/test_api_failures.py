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

from tests.broker.rawclient import METADATA, RawClient
from tests.fixtures.broker import ROOT, BrokerProcess
from wire.errors import ErrorCode

DESCRIBE_LOG_DIRS = 35
INJECTED = "injected-failure-of-describe-log-dirs"


@pytest.fixture
def failing_broker(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[BrokerProcess]:
    """The broker run from a copy of the tree whose DescribeLogDirs raises; the test's
    param, if any, is the warning interval (ACTORLOG_WARNING_INTERVAL_MS), else an hour:
    a slow run cannot see a second line a minute later."""
    tree = tmp_path / "tree"
    for package in ("actors", "wire"):
        shutil.copytree(ROOT / package, tree / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    admin = tree / "actors" / "apis" / "admin.py"
    text = admin.read_text()
    marker = ('    """The log dir with the size of every partition it holds (or of those '
              'asked for)."""\n')
    assert marker in text
    admin.write_text(text.replace(marker, marker + f"    raise RuntimeError({INJECTED!r})\n"))
    interval = getattr(request, "param", "3600000")
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


@pytest.mark.parametrize("failing_broker", ["0"], indirect=True)
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
