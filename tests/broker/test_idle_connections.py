"""connections.max.idle.ms: the Processor closes a connection quiet for that long.

A connection that keeps talking, or waits for an answer, is not idle; one
that says nothing is closed and the close is logged with the setting's name.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.broker.rawclient import API_VERSIONS, FETCH, RawClient, fetch_values, wait_for_log
from tests.fixtures.broker import BrokerProcess

IDLE_MS = 400


@pytest.fixture(scope="module")
def idle_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    base: Path = tmp_path_factory.mktemp("idle")
    b = BrokerProcess(base / "data", config={"connections.max.idle.ms": IDLE_MS}).start()
    yield b
    assert b.stop() == 0, b.log()[-3000:]


def test_a_quiet_connection_is_closed(idle_broker: BrokerProcess) -> None:
    with RawClient(idle_broker.port) as quiet:
        assert quiet.call(API_VERSIONS, 0, {}).error_code == 0
        assert quiet.is_closed_by_peer(timeout=30)
    log = wait_for_log(idle_broker, "connections.max.idle.ms")
    assert f"idle for {IDLE_MS} ms (connections.max.idle.ms)" in log


def test_a_talking_connection_and_one_waiting_for_an_answer_stay_open(
        idle_broker: BrokerProcess) -> None:
    with RawClient(idle_broker.port) as talking, RawClient(idle_broker.port) as waiting:
        assert waiting.create_topic("idle-t", 1) == 0
        # A fetch that waits 3 idle periods in the purgatory for data that never comes.
        cid = waiting.send(FETCH, 11, fetch_values("idle-t", 0, 0, max_wait_ms=3 * IDLE_MS,
                                                   min_bytes=1))
        deadline = time.monotonic() + 3 * IDLE_MS / 1000
        while time.monotonic() < deadline:
            assert talking.call(API_VERSIONS, 0, {}).error_code == 0
            time.sleep(IDLE_MS / 4000)
        got, _response = waiting.recv()
        assert got == cid
        assert talking.call(API_VERSIONS, 0, {}).error_code == 0


def test_with_the_default_a_quiet_connection_stays_open(broker: BrokerProcess) -> None:
    with RawClient(broker.port) as quiet:
        assert quiet.call(API_VERSIONS, 0, {}).error_code == 0
        assert not quiet.is_closed_by_peer(timeout=3 * IDLE_MS / 1000)
        assert quiet.call(API_VERSIONS, 0, {}).error_code == 0
