"""Bad input gets Kafka's answer, one log line, and hurts no other connection.

Kafka closes a connection whose request it cannot read (bad size, garbled
header or body, unknown API, unsupported version), answers an unsupported
ApiVersions version with a v0 error body listing its versions, and refuses a
batch with a bad CRC with CORRUPT_MESSAGE for that partition only. Each test
holds good connections opened before the bad input (one per Processor, as
connections are dealt round robin) and checks they still work afterwards.
"""

from __future__ import annotations

import random
import socket
import struct
import uuid
from collections.abc import Iterator

import pytest

from tests.broker.rawclient import (
    API_VERSIONS,
    METADATA,
    PRODUCE,
    RawClient,
    build,
    produce_values,
    read_records,
    record_batch,
    wait_for_log,
)
from tests.fixtures.broker import BrokerProcess

pytestmark = pytest.mark.num_processes(1, 2)

CORRUPT_MESSAGE = 2
UNSUPPORTED_VERSION = 35
PROCESSORS = 2  # num.network.threads default


class GoodClients:
    """Connections opened before the bad input; `check` uses every one of them."""

    def __init__(self, broker: BrokerProcess) -> None:
        self.broker = broker
        self.topic = f"good-{uuid.uuid4().hex[:8]}"
        self.clients = [RawClient(broker.port) for _ in range(PROCESSORS)]
        assert self.clients[0].create_topic(self.topic, 1) == 0
        self.sent = 0
        self.check()

    def check(self) -> None:
        for client in self.clients:
            part = client.produce(self.topic, 0, record_batch([(None, b"%d" % self.sent)]))
            assert (part.error_code, part.base_offset) == (0, self.sent)
            self.sent += 1
            fetched = client.fetch(self.topic, 0, self.sent - 1)
            assert read_records(fetched.records) == [(self.sent - 1, None, b"%d" % (self.sent - 1))]
        assert self.broker.proc is not None and self.broker.proc.poll() is None

    def close(self) -> None:
        for client in self.clients:
            client.close()


@pytest.fixture
def good(broker: BrokerProcess) -> Iterator[GoodClients]:
    clients = GoodClients(broker)
    yield clients
    clients.check()
    clients.close()
    log = broker.log()
    assert "Traceback" not in log and "crashed" not in log, log[-4000:]


def frame(api_key: int, version: int, correlation_id: int, body: bytes = b"",
          client_id: bytes = b"bad-input") -> bytes:
    """A size-prefixed request with a v1 (non-flexible) header and the given body."""
    payload = struct.pack(">hhih", api_key, version, correlation_id, len(client_id)) + client_id
    payload += body
    return struct.pack(">i", len(payload)) + payload


def unique_id() -> int:
    return random.randrange(100_000_000, 2_000_000_000)


def refused_once(broker: BrokerProcess, correlation_id: int) -> None:
    marker = f"correlation {correlation_id})"
    log = wait_for_log(broker, marker)
    assert log.count(marker) == 1, log[-3000:]


def assert_closed(client: RawClient) -> None:
    assert client.is_closed_by_peer(), "the broker kept the connection open"


# ---------------------------------------------------------------- framing


def test_size_prefix_of_2_gb_closes_the_connection(broker: BrokerProcess,
                                                   good: GoodClients) -> None:
    with RawClient(broker.port) as bad:
        bad.send_raw(struct.pack(">i", 2**31 - 1) + b"\x00" * 64)
        assert_closed(bad)
    good.check()
    log = wait_for_log(broker, "request size 2147483647 outside")
    assert log.count("request size 2147483647 outside") == 1


def test_negative_and_tiny_sizes_close_the_connection(broker: BrokerProcess,
                                                      good: GoodClients) -> None:
    for size in (-7, 3):
        with RawClient(broker.port) as bad:
            bad.send_raw(struct.pack(">i", size) + b"\x01" * 16)
            assert_closed(bad)
        log = wait_for_log(broker, f"request size {size} outside")
        assert log.count(f"request size {size} outside") == 1
    good.check()


def test_truncated_frame_then_disconnect(broker: BrokerProcess, good: GoodClients) -> None:
    """Half a request and a hang-up: the broker drops the bytes and the connection."""
    whole = frame(METADATA, 1, unique_id(), struct.pack(">i", -1))
    for cut in (2, 6, len(whole) - 1):
        with RawClient(broker.port) as bad:
            bad.send_raw(whole[:cut])
            bad.sock.shutdown(socket.SHUT_WR)
            assert_closed(bad)
    good.check()


def test_frame_shorter_than_its_request(broker: BrokerProcess, good: GoodClients) -> None:
    """The size prefix ends the frame inside the body: a malformed request, closed."""
    cid = unique_id()
    with RawClient(broker.port) as bad:
        request = build(PRODUCE, 9, produce_values("t", 0, record_batch([(None, b"x" * 50)])))
        bad.protocol._correlation_id = cid - 1  # the next request gets cid
        assert bad.protocol.send_request(request) == cid
        data = bytes(bad.protocol.send_bytes())[4:]
        cut = data[: len(data) - 30]
        bad.send_raw(struct.pack(">i", len(cut)) + cut)
        assert_closed(bad)
    refused_once(broker, cid)
    good.check()


def test_random_bytes(broker: BrokerProcess, good: GoodClients) -> None:
    rng = random.Random(5)
    before = len(wait_for_log(broker, "created topic(s) " + good.topic))
    for _ in range(6):
        with RawClient(broker.port) as bad:
            bad.send_raw(rng.randbytes(rng.randrange(1, 4096)))
            bad.sock.shutdown(socket.SHUT_WR)  # a plausible size would wait for more
            assert_closed(bad)
    # A random header behind a valid size: refused at the header.
    for _ in range(6):
        with RawClient(broker.port) as bad:
            body = rng.randbytes(rng.randrange(8, 300))
            bad.send_raw(struct.pack(">i", len(body)) + body)
            assert_closed(bad)
    good.check()
    # One warning per refused connection at most (a plausible size followed
    # by a hang-up is no refusal), one for each of the last six.
    refusals = broker.log()[before:].count("WARNING")
    assert 6 <= refusals <= 12, broker.log()[before:]


# ------------------------------------------------------------- headers, APIs


def test_valid_header_with_corrupt_body(broker: BrokerProcess, good: GoodClients) -> None:
    cid = unique_id()
    with RawClient(broker.port) as bad:
        # CreateTopics v4: topics array of 3 then a topic-name length of 30000.
        bad.send_raw(frame(19, 4, cid, struct.pack(">ih", 3, 30000) + b"\xfe" * 40))
        assert_closed(bad)
    refused_once(broker, cid)
    good.check()


def test_unknown_api_key(broker: BrokerProcess, good: GoodClients) -> None:
    cid = unique_id()
    with RawClient(broker.port) as bad:
        bad.send_raw(frame(1234, 0, cid))
        assert_closed(bad)
    refused_once(broker, cid)
    good.check()


@pytest.mark.parametrize(("api_key", "version"), [(METADATA, 99), (PRODUCE, 13), (PRODUCE, 2)])
def test_unsupported_version_closes(broker: BrokerProcess, good: GoodClients, api_key: int,
                                    version: int) -> None:
    cid = unique_id()
    with RawClient(broker.port) as bad:
        bad.send_raw(frame(api_key, version, cid, b"\x00" * 20))
        assert_closed(bad)
    refused_once(broker, cid)
    good.check()


def test_unsupported_api_versions_version_gets_a_v0_error(broker: BrokerProcess,
                                                          good: GoodClients) -> None:
    cid = unique_id()
    with RawClient(broker.port) as client:
        client.send_raw(frame(API_VERSIONS, 77, cid, b"\x00" * 10))
        (size,) = struct.unpack(">i", client.sock.recv(4))
        data = b""
        while len(data) < size:
            data += client.sock.recv(size - len(data))
        got_cid, error_code, count = struct.unpack_from(">ihi", data)
        assert (got_cid, error_code) == (cid, UNSUPPORTED_VERSION)
        versions = {}
        for i in range(count):
            key, lo, hi = struct.unpack_from(">hhh", data, 10 + 6 * i)
            versions[key] = (lo, hi)
        assert versions[API_VERSIONS][0] == 0 and versions[API_VERSIONS][1] >= 3
        assert PRODUCE in versions and METADATA in versions
        # Kafka keeps the connection: the client retries at a listed version.
        response = client.call(API_VERSIONS, 3, {"client_software_name": "t",
                                                 "client_software_version": "1"})
        assert response.error_code == 0
    good.check()


# ---------------------------------------------------------------- records


def corrupt_crc(batch: bytes) -> bytes:
    """Flip one bit of a record's value: the stored CRC no longer matches."""
    data = bytearray(batch)
    data[-3] ^= 0x01
    return bytes(data)


def test_bad_crc_is_corrupt_message_for_that_partition(broker: BrokerProcess,
                                                       good: GoodClients) -> None:
    topic = f"crc-{uuid.uuid4().hex[:8]}"
    with RawClient(broker.port) as client:
        assert client.create_topic(topic, 2) == 0
        values = produce_values(topic, 0, corrupt_crc(record_batch([(b"k", b"value")])))
        values["topic_data"][0]["partition_data"].append(
            {"index": 1, "records": record_batch([(b"k", b"fine")])})
        for _ in range(2):  # refused twice, logged once
            response = client.call(PRODUCE, 9, values)
            parts = {p.index: p for p in response.responses[0].partition_responses}
            assert parts[0].error_code == CORRUPT_MESSAGE
            assert parts[1].error_code == 0
        # The same connection goes on: nothing was stored on partition 0.
        assert client.list_offset(topic, 0, -1).offset == 0
        assert client.list_offset(topic, 1, -1).offset == 2
        assert client.fetch(topic, 0, 0).records in (b"", None)
        ok = client.produce(topic, 0, record_batch([(b"k", b"good")]))
        assert (ok.error_code, ok.base_offset) == (0, 0)
    marker = f"refused a batch for {topic}-0: CORRUPT_MESSAGE"
    log = wait_for_log(broker, marker)
    assert log.count(marker) == 1, log[-3000:]
    good.check()


def test_requests_behind_a_refused_one_are_not_executed(broker: BrokerProcess,
                                                        good: GoodClients) -> None:
    from tests.broker.rawclient import FETCH, fetch_values

    topic = f"behind-{uuid.uuid4().hex[:8]}"
    with RawClient(broker.port) as client:
        assert client.create_topic(topic, 1) == 0
    with RawClient(broker.port) as bad:
        # A waiting fetch keeps the connection's answers queued; then a request
        # the broker refuses, then a produce on the same connection.
        bad.send(FETCH, 11, fetch_values(topic, 0, 0, max_wait_ms=500, min_bytes=1 << 20))
        bad.send_raw(frame(1234, 0, unique_id()))
        bad.send(PRODUCE, 9, produce_values(topic, 0, record_batch([(None, b"late")]), 1))
        assert_closed(bad)
    with RawClient(broker.port) as client:
        # The produce was never answered, so it must not have been stored.
        assert client.list_offset(topic, 0, -1).offset == 0


def test_an_old_client_retrying_an_unsupported_version_is_logged_once_a_minute(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    """An old client reconnecting and retrying a version actorlog does not serve: every
    connection is refused and closed, but the warning is one line a minute per (API,
    version, client id), not one per connection, and one for the process, not one per
    request handler (num.io.threads=4: the connections are dealt to all four). The
    interval is an hour here (ACTORLOG_WARNING_INTERVAL_MS) so a slow run sees one line
    too; a client id is cut to its first 256 characters in the key and the line."""
    broker = BrokerProcess(tmp_path_factory.mktemp("old-client") / "data",
                           config={"num.io.threads": 4},
                           env={"ACTORLOG_WARNING_INTERVAL_MS": "3600000"}).start()
    try:
        long_id = b"x" * 300 + b"-tail"  # past the first 256: not kept
        for i in range(12):
            with RawClient(broker.port) as old:
                old.send_raw(frame(PRODUCE, 2, unique_id(), b"\x00" * 20,
                                   client_id=b"old-client-1"))
                assert_closed(old)
            with RawClient(broker.port) as old:  # ids differing past 256: one key
                old.send_raw(frame(PRODUCE, 2, unique_id(), b"\x00" * 20,
                                   client_id=long_id + str(i).encode()))
                assert_closed(old)
        marker = unique_id()  # another client id: its line comes after the ones above
        with RawClient(broker.port) as other:
            other.send_raw(frame(PRODUCE, 2, marker, b"\x00" * 20, client_id=b"other"))
            assert_closed(other)
        log = wait_for_log(broker, f"correlation {marker})")
        lines = [line for line in log.splitlines() if "'old-client-1'" in line]
        assert len(lines) == 1, lines
        assert "api 0 v2" in lines[0] and "0 more like it held back" in lines[0], lines
        long_lines = [line for line in log.splitlines() if "xxxxx" in line]
        assert len(long_lines) == 1, long_lines
        assert f"'{'x' * 256}'" in long_lines[0] and "-tail" not in long_lines[0]
        with RawClient(broker.port) as good:  # the broker serves on
            assert good.create_topic("after-old-clients", 1) == 0
    finally:
        assert broker.stop() == 0, broker.log()[-3000:]


def test_the_warning_limiter_counts_what_it_held_back() -> None:
    from actors.request_handler import WarningLimiter

    limiter = WarningLimiter(interval_ns=60_000)
    key = (0, 2, "old-client")
    assert limiter.admit(key, 1_000) == (0, False)  # the first: logged
    assert [limiter.admit(key, t) for t in (2_000, 30_000, 60_999)] == [None] * 3
    assert limiter.admit((0, 3, "old-client"), 2_000) == (0, False)  # its own line
    assert limiter.admit(key, 61_000) == (3, False)  # a minute on: with the 3 held back
    assert limiter.admit(key, 62_000) is None
    # client ids are the client's choice: the table is bounded, and once it is full a new
    # id is counted in one shared key, not given a line by evicting an old one
    new_ids = [limiter.admit((0, 2, f"c{i}"), 70_000) for i in range(WarningLimiter.MAX_KEYS)]
    assert new_ids.count((0, False)) == WarningLimiter.MAX_KEYS - 2
    assert new_ids[-2:] == [(0, True), None]
    assert len(limiter.keys) == WarningLimiter.MAX_KEYS + 1  # and the shared one
    assert limiter.admit(key, 70_000) is None  # still held: not evicted
    assert [limiter.admit((0, 2, f"d{i}"), 80_000) for i in range(5)] == [None] * 5
    assert limiter.admit((0, 2, "e"), 130_000) == (6, True)


def test_the_client_id_of_a_request_header_is_cut_and_absent_in_header_v0() -> None:
    from actors.request_handler import CLIENT_ID_KEPT, _client_id

    huge = b"\xc3\xa9" * 16_000  # 32,000 bytes of a client-chosen id
    header = struct.pack(">hhih", 0, 9, 7, len(huge)) + huge
    assert _client_id(header) == "\u00e9" * CLIENT_ID_KEPT
    assert _client_id(struct.pack(">hhih", 3, 1, 7, 2) + b"ab") == "ab"
    # ControlledShutdown v0 has header v0: what follows the correlation id is its body
    assert _client_id(struct.pack(">hhii", 7, 0, 7, 1)) is None
