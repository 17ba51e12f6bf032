"""The transaction state machine core against a model, and its record format.

The model is what a client may expect from the coordinator, written
independently of the core: per transactional id, the epoch it was last
granted, whether a transaction is open and with which partitions, and
whether a write is in flight. Log writes and marker writes are delivered
(or failed) at random points. Checked at every step: each request gets
exactly one answer and the model's; each state change is a legal one of
Kafka's table; epochs only grow; markers name exactly the partitions of the
transaction they end; and the core rebuilt from the persisted records alone
equals the live one.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from actors.core.record_batch import check_batches, read_records
from actors.core.transaction_log import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    TransactionLogError,
    TxnLogValue,
    TxnStatus,
    control_batch,
    control_type,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    partition_for,
)
from actors.core.transaction_state import (
    VALID_PREVIOUS,
    CoordinatorConfig,
    IllegalTransitionError,
    Reply,
    TransactionCoordinatorCore,
    TxnMetadata,
    WriteLog,
    WriteMarkers,
)
from wire.errors import ErrorCode

E = ErrorCode
S = TxnStatus
IDS = ["a", "b"]
PARTS = [("t", 0), ("t", 1), ("u", 0)]
TIMEOUT_MS = 1000


def _core() -> TransactionCoordinatorCore:
    counter = itertools.count(1000)
    core = TransactionCoordinatorCore(CoordinatorConfig(num_partitions=3, max_timeout_ms=5000),
                                      lambda: next(counter))
    for p in range(3):
        core.coordinator_epochs[p] = 7
    return core


class _ModelTxn:
    def __init__(self) -> None:
        self.pid: int | None = None
        self.epoch = -1
        self.state = "empty"  # empty | ongoing | preparing | completing | done-commit | done-abort
        self.commit = False
        self.parts: set[tuple[str, int]] = set()
        self.busy = False


class TransactionMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.core = _core()
        self.now = 10_000
        self.rids = itertools.count(1)
        self.answers: dict[int, list[Reply]] = {}
        self.expected: dict[int, ErrorCode | None] = {}  # None: any of the retriable answers
        self.writes: list[WriteLog] = []
        self.markers: list[WriteMarkers] = []
        self.persisted: dict[bytes, bytes | None] = {}
        self.model = {t: _ModelTxn() for t in IDS}
        self.last_states = self._states()
        self.max_epoch: dict[str, int] = {}
        self.pending_rid: dict[str, int | None] = {}

    # --- plumbing ----------------------------------------------------
    def _states(self) -> dict[str, TxnStatus]:
        return {t: m.state for t, m in self.core.txns.items()}

    def _perform(self, effects: list[Any]) -> None:
        for fx in effects:
            if isinstance(fx, Reply):
                self.answers.setdefault(fx.request_id, []).append(fx)
                assert len(self.answers[fx.request_id]) == 1, f"answered twice: {fx}"
                want = self.expected.get(fx.request_id, "unknown")
                assert want != "unknown", f"an answer to no request: {fx}"
                if want is not None:
                    assert fx.error == want, (fx, want)
                if fx.error == E.NONE and fx.producer_epoch >= 0:
                    txn = self.init_ids[fx.request_id]
                    assert fx.producer_epoch > self.max_epoch.get(txn, -1)
                    self.max_epoch[txn] = fx.producer_epoch
                    m = self.model[txn]
                    m.pid, m.epoch = fx.producer_id, fx.producer_epoch
            elif isinstance(fx, WriteLog):
                self.writes.append(fx)
            elif isinstance(fx, WriteMarkers):
                m = self.model[fx.transactional_id]
                assert set(fx.partitions) == m.parts, (fx, m.parts)
                assert fx.commit == m.commit
                assert fx.coordinator_epoch == 7
                self.markers.append(fx)
            else:
                raise AssertionError(fx)

    def _ask(self, want: ErrorCode | None) -> int:
        rid = next(self.rids)
        self.expected[rid] = want
        return rid

    init_ids: dict[int, str] = {}

    # --- client requests ---------------------------------------------
    @rule(txn=st.sampled_from(IDS))
    def init(self, txn: str) -> None:
        m = self.model[txn]
        if m.busy or m.state in ("preparing", "completing"):
            want: ErrorCode | None = E.CONCURRENT_TRANSACTIONS
        elif m.state == "ongoing":
            want = E.CONCURRENT_TRANSACTIONS  # fences and aborts the open transaction
        else:
            want = E.NONE
        rid = self._ask(want)
        self.init_ids[rid] = txn
        was_ongoing = m.state == "ongoing" and not m.busy
        self._perform(self.core.init_producer_id(rid, txn, TIMEOUT_MS, -1, -1, self.now))
        if want == E.NONE or was_ongoing:
            self.pending_rid[txn] = rid if want == E.NONE else None
            m.busy = True
            self.pending_kind = getattr(self, "pending_kind", {})
            self.pending_kind[txn] = "init" if want == E.NONE else "fence"
            if was_ongoing:
                m.commit = False  # fenced once PrepareEpochFence is written

    @rule(txn=st.sampled_from(IDS), parts=st.sets(st.sampled_from(PARTS), min_size=1),
          stale=st.booleans())
    def add(self, txn: str, parts: set[tuple[str, int]], stale: bool) -> None:
        m = self.model[txn]
        if m.pid is None:
            return
        epoch = m.epoch - 1 if stale else m.epoch
        if stale:
            want: ErrorCode | None = E.PRODUCER_FENCED
        elif m.busy or m.state in ("preparing", "completing"):
            want = E.CONCURRENT_TRANSACTIONS
        else:
            want = E.NONE
        rid = self._ask(want)
        writes = len(self.writes)
        self._perform(self.core.add_partitions(rid, txn, m.pid, epoch, parts, self.now))
        if len(self.writes) > writes:
            m.busy = True
            self.pending_rid[txn] = rid
            self.pending_kind = getattr(self, "pending_kind", {})
            self.pending_kind[txn] = ("add", frozenset(parts))

    @rule(txn=st.sampled_from(IDS), commit=st.booleans())
    def end(self, txn: str, commit: bool) -> None:
        m = self.model[txn]
        if m.pid is None:
            return
        if m.busy or m.state in ("preparing", "completing"):
            want: ErrorCode | None = None  # CONCURRENT_TRANSACTIONS or INVALID_TXN_STATE
        elif m.state == "ongoing" or m.state == ("done-commit" if commit else "done-abort"):
            want = E.NONE
        else:
            want = E.INVALID_TXN_STATE
        rid = self._ask(want)
        writes = len(self.writes)
        self._perform(self.core.end_txn(rid, txn, m.pid, m.epoch, commit, self.now))
        if len(self.writes) > writes:
            m.busy = True
            self.pending_rid[txn] = rid
            m.commit = commit
            self.pending_kind = getattr(self, "pending_kind", {})
            self.pending_kind[txn] = "prepare"
        elif want is None:
            assert self.answers[rid][0].error in (E.CONCURRENT_TRANSACTIONS,
                                                  E.INVALID_TXN_STATE)

    @rule(ms=st.integers(0, 3 * TIMEOUT_MS))
    def tick(self, ms: int) -> None:
        self.now += ms
        before = len(self.writes)
        timed_out = [t for t, m in self.model.items() if m.state == "ongoing" and not m.busy
                     and self.core.txns[t].start_ms + TIMEOUT_MS < self.now]
        self._perform(self.core.abort_timed_out(self.now))
        assert len(self.writes) - before == len(timed_out)
        for txn in timed_out:
            m = self.model[txn]
            m.busy = True
            m.commit = False
            self.pending_kind = getattr(self, "pending_kind", {})
            self.pending_kind[txn] = "fence"

    # --- the shell's side ----------------------------------------------
    @precondition(lambda self: self.writes)
    @rule(data=st.data(), ok=st.booleans())
    def deliver_write(self, data: st.DataObject, ok: bool) -> None:
        write = self.writes.pop(data.draw(st.integers(0, len(self.writes) - 1)))
        txn = decode_key(write.key)
        m = self.model[txn]
        value = decode_value(write.value) if write.value is not None else None
        kind = self.pending_kind.get(txn)
        assert value is not None
        if not ok and kind == "complete" and value.status in (S.COMPLETE_COMMIT,
                                                              S.COMPLETE_ABORT):
            # a completion refused (short ISR): nothing changes, and retry_completions (the
            # shell's, RETRY_MS later) writes the same completion again
            assert self.core.on_log_written(write.write_id, E.NOT_ENOUGH_REPLICAS,
                                            self.now) == []
            before = len(self.writes)
            self._perform(self.core.retry_completions(self.now))
            assert len(self.writes) == before + 1 and self.writes[-1].key == write.key
            assert decode_value(self.writes[-1].value).status == value.status  # type: ignore[arg-type]
            return
        if value.status in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT, S.PREPARE_ABORT) and (
                kind == "fence"):
            ok = True  # background writes: failures are retried by the shell, tested apart
        if ok:
            self.persisted[write.key] = write.value
        else:
            rid = self.pending_rid.pop(txn, None)
            if rid is not None:
                self.expected[rid] = E.COORDINATOR_NOT_AVAILABLE
        self._perform(self.core.on_log_written(write.write_id,
                                               E.NONE if ok else E.NOT_ENOUGH_REPLICAS,
                                               self.now))
        if not ok:
            m.busy = False
            if kind == "init" and m.pid is None:
                pass
            return
        status = value.status
        if status == S.EMPTY:
            m.state, m.parts, m.busy = "empty", set(), False
        elif status == S.ONGOING:
            m.state, m.parts, m.busy = "ongoing", set(value.partitions), False
        elif status == S.PREPARE_EPOCH_FENCE:
            m.epoch += 1  # the old producer's epoch is stale from now; still busy
        elif status in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            m.state, m.busy = "preparing", False
            self.pending_kind[txn] = "markers"
        elif status in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            m.state = "done-commit" if status == S.COMPLETE_COMMIT else "done-abort"
            m.parts, m.busy = set(), False

    @precondition(lambda self: self.markers)
    @rule(data=st.data())
    def deliver_markers(self, data: st.DataObject) -> None:
        fx = self.markers.pop(data.draw(st.integers(0, len(self.markers) - 1)))
        m = self.model[fx.transactional_id]
        writes = len(self.writes)
        self._perform(self.core.on_markers_written(fx.transactional_id, fx.producer_epoch,
                                                   self.now))
        if len(self.writes) > writes:
            m.state, m.busy = "completing", True
            self.pending_kind[fx.transactional_id] = "complete"

    # --- invariants --------------------------------------------------
    @invariant()
    def transitions_are_legal(self) -> None:
        now = self._states()
        for txn, state in now.items():
            before = self.last_states.get(txn)
            if before is not None and before != state:
                assert before in VALID_PREVIOUS[state], (txn, before, state)
        self.last_states = now

    @invariant()
    def persisted_state_rebuilds_the_core(self) -> None:
        fresh = _core()
        for p in range(3):
            fresh.load_partition(p, 7, list(self.persisted.items()), self.now)
        for txn, meta in self.core.txns.items():
            if meta.producer_epoch < 0:
                continue  # created, never persisted
            loaded = fresh.txns[txn]
            assert (loaded.state, loaded.producer_id, loaded.producer_epoch,
                    loaded.partitions) == (meta.state, meta.producer_id, meta.producer_epoch,
                                           meta.partitions)

    @invariant()
    def every_answer_is_the_models(self) -> None:
        for rid, replies in self.answers.items():
            assert len(replies) == 1, rid

    def teardown(self) -> None:
        # drain: every request still waiting gets its one answer
        for _ in range(20):
            if not self.writes and not self.markers:
                break
            while self.writes:
                write = self.writes.pop(0)
                self.persisted[write.key] = write.value
                self._perform(self.core.on_log_written(write.write_id, E.NONE, self.now))
            while self.markers:
                fx = self.markers.pop(0)
                self._perform(self.core.on_markers_written(fx.transactional_id,
                                                           fx.producer_epoch, self.now))
        assert set(self.answers) == set(self.expected), "a request was never answered"


TransactionMachine.TestCase.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
TestTransactionMachine = TransactionMachine.TestCase


# --- examples ---------------------------------------------------------------


def _drain(core: TransactionCoordinatorCore, effects: list[Any], now: int) -> list[Any]:
    """Perform writes and markers successfully until quiet; returns the replies."""
    replies = []
    queue = list(effects)
    while queue:
        fx = queue.pop(0)
        if isinstance(fx, Reply):
            replies.append(fx)
        elif isinstance(fx, WriteLog):
            queue.extend(core.on_log_written(fx.write_id, E.NONE, now))
        elif isinstance(fx, WriteMarkers):
            queue.extend(core.on_markers_written(fx.transactional_id, fx.producer_epoch, now))
    return replies


def test_a_commit_goes_through_prepare_and_complete() -> None:
    core = _core()
    [init] = _drain(core, core.init_producer_id(1, "a", 1000, -1, -1, 0), 0)
    assert (init.error, init.producer_epoch) == (E.NONE, 0)
    _drain(core, core.add_partitions(2, "a", init.producer_id, 0, [("t", 0)], 1), 1)
    effects = core.end_txn(3, "a", init.producer_id, 0, True, 2)
    [write] = effects
    assert isinstance(write, WriteLog)
    assert core.txns["a"].state == S.ONGOING and core.txns["a"].pending == S.PREPARE_COMMIT
    after = core.on_log_written(write.write_id, E.NONE, 2)
    assert after[0] == Reply(3, E.NONE)
    assert after[1] == WriteMarkers("a", init.producer_id, 0, True, 7, (("t", 0),))
    assert core.end_txn(4, "a", init.producer_id, 0, True, 3) == [
        Reply(4, E.CONCURRENT_TRANSACTIONS)]
    _drain(core, core.on_markers_written("a", 0, 3), 3)
    assert core.txns["a"].state == S.COMPLETE_COMMIT and not core.txns["a"].partitions


def test_a_new_instance_fences_the_open_transaction_and_gets_a_higher_epoch() -> None:
    core = _core()
    [init] = _drain(core, core.init_producer_id(1, "a", 1000, -1, -1, 0), 0)
    _drain(core, core.add_partitions(2, "a", init.producer_id, 0, [("t", 0)], 1), 1)
    effects = core.init_producer_id(3, "a", 1000, -1, -1, 2)
    assert effects[0] == Reply(3, E.CONCURRENT_TRANSACTIONS)
    _drain(core, effects[1:], 2)
    assert core.txns["a"].state == S.COMPLETE_ABORT
    assert core.add_partitions(4, "a", init.producer_id, 0, [("t", 0)], 3) == [
        Reply(4, E.PRODUCER_FENCED)]
    [again] = _drain(core, core.init_producer_id(5, "a", 1000, -1, -1, 3), 3)
    assert (again.error, again.producer_id, again.producer_epoch) == (
        E.NONE, init.producer_id, 2)


def test_kip360_retry_and_stale_expected_epoch() -> None:
    core = _core()
    [init] = _drain(core, core.init_producer_id(1, "a", 1000, -1, -1, 0), 0)
    [bumped] = _drain(core, core.init_producer_id(2, "a", 1000, init.producer_id, 0, 1), 1)
    assert bumped.producer_epoch == 1
    [retry] = _drain(core, core.init_producer_id(3, "a", 1000, init.producer_id, 0, 2), 2)
    assert (retry.error, retry.producer_epoch) == (E.NONE, 1)
    assert core.init_producer_id(4, "a", 1000, init.producer_id, 5, 3) == [
        Reply(4, E.PRODUCER_FENCED)]


def test_timeout_limits_and_not_coordinator() -> None:
    core = _core()
    assert core.init_producer_id(1, "a", 6000, -1, -1, 0) == [
        Reply(1, E.INVALID_TRANSACTION_TIMEOUT)]
    core.unload_partitions({partition_for("a", 3)})
    assert core.init_producer_id(2, "a", 1000, -1, -1, 0) == [Reply(2, E.NOT_COORDINATOR)]


def test_an_illegal_transition_raises_and_changes_nothing() -> None:
    core = _core()
    _drain(core, core.init_producer_id(1, "a", 1000, -1, -1, 0), 0)
    meta = core.txns["a"]
    before = (meta.state, meta.pending, dict(core._writes))
    with pytest.raises(IllegalTransitionError):
        core._write(meta, meta.value(S.COMPLETE_COMMIT, (), 0, 0, 0), None, "complete")
    assert (meta.state, meta.pending, dict(core._writes)) == before


def test_load_resends_the_markers_of_prepared_transactions() -> None:
    core = _core()
    value = TxnLogValue(9, 3, 1000, S.PREPARE_ABORT, (("t", 1),), 5, 4)
    txn = next(t for t in (f"id{i}" for i in range(100)) if partition_for(t, 3) == 1)
    effects = core.load_partition(1, 12, [(encode_key(txn), encode_value(value))], 6)
    assert effects == [WriteMarkers(txn, 9, 3, False, 12, (("t", 1),))]


def _prepared(core: TransactionCoordinatorCore) -> tuple[int, WriteMarkers]:
    """"a" in PrepareCommit over ("t", 0), its EndTxn answered: (producer id, markers)."""
    [init] = _drain(core, core.init_producer_id(1, "a", 1000, -1, -1, 0), 0)
    _drain(core, core.add_partitions(2, "a", init.producer_id, 0, [("t", 0)], 1), 1)
    [write] = core.end_txn(3, "a", init.producer_id, 0, True, 2)
    assert isinstance(write, WriteLog)
    reply, markers = core.on_log_written(write.write_id, E.NONE, 2)
    assert reply == Reply(3, E.NONE) and isinstance(markers, WriteMarkers)
    return init.producer_id, markers


@pytest.mark.parametrize(("log_error", "answer"), [
    (E.NOT_ENOUGH_REPLICAS, E.COORDINATOR_NOT_AVAILABLE),
    (E.NOT_ENOUGH_REPLICAS_AFTER_APPEND, E.COORDINATOR_NOT_AVAILABLE),
    (E.REQUEST_TIMED_OUT, E.COORDINATOR_NOT_AVAILABLE),
    (E.UNKNOWN_TOPIC_OR_PARTITION, E.COORDINATOR_NOT_AVAILABLE),
    (E.NOT_LEADER_OR_FOLLOWER, E.NOT_COORDINATOR),
    (E.KAFKA_STORAGE_ERROR, E.NOT_COORDINATOR),
    (E.MESSAGE_TOO_LARGE, E.UNKNOWN_SERVER_ERROR),
])
def test_a_failed_log_write_answers_kafkas_coordinator_error_and_changes_nothing(
        log_error: ErrorCode, answer: ErrorCode) -> None:
    """__transaction_state's ISR below transaction.state.log.min.isr refuses the
    PrepareCommit: EndTxn is answered COORDINATOR_NOT_AVAILABLE (retriable), the
    transaction stays Ongoing and the client's retry goes through."""
    core = _core()
    [init] = _drain(core, core.init_producer_id(1, "a", 1000, -1, -1, 0), 0)
    _drain(core, core.add_partitions(2, "a", init.producer_id, 0, [("t", 0)], 1), 1)
    [write] = core.end_txn(3, "a", init.producer_id, 0, True, 2)
    assert isinstance(write, WriteLog)
    assert core.on_log_written(write.write_id, log_error, 2) == [Reply(3, answer)]
    meta = core.txns["a"]
    assert (meta.state, meta.pending) == (S.ONGOING, None)
    [again] = core.end_txn(4, "a", init.producer_id, 0, True, 3)
    assert isinstance(again, WriteLog)
    assert core.on_log_written(again.write_id, E.NONE, 3)[0] == Reply(4, E.NONE)
    assert core.txns["a"].state == S.PREPARE_COMMIT


def test_a_completion_refused_for_a_short_isr_is_written_again() -> None:
    """Markers written, CompleteCommit refused NOT_ENOUGH_REPLICAS: the id stays in
    PrepareCommit and retry_completions writes the completion (not the markers) again
    until it lands; retry_stuck leaves it alone meanwhile."""
    core = _core()
    _pid, markers = _prepared(core)
    [complete] = core.on_markers_written("a", markers.producer_epoch, 3)
    assert isinstance(complete, WriteLog)
    assert core.on_log_written(complete.write_id, E.NOT_ENOUGH_REPLICAS, 3) == []
    assert core.completing == {"a"} and core.txns["a"].state == S.PREPARE_COMMIT
    assert core.retry_stuck(4) == []
    [again] = core.retry_completions(4)
    assert isinstance(again, WriteLog) and decode_value(again.value).status == S.COMPLETE_COMMIT
    assert core.retry_completions(4) == []  # in flight: not twice
    assert core.on_log_written(again.write_id, E.NOT_ENOUGH_REPLICAS_AFTER_APPEND, 4) == []
    [third] = core.retry_completions(5)
    assert isinstance(third, WriteLog)
    assert core.on_log_written(third.write_id, E.NONE, 5) == []
    assert core.completing == set() and core.txns["a"].state == S.COMPLETE_COMMIT


def test_a_completion_refused_as_not_leader_is_left_to_the_next_coordinator() -> None:
    core = _core()
    _pid, markers = _prepared(core)
    [complete] = core.on_markers_written("a", markers.producer_epoch, 3)
    assert isinstance(complete, WriteLog)
    assert core.on_log_written(complete.write_id, E.NOT_LEADER_OR_FOLLOWER, 3) == []
    assert core.completing == set() and core.retry_completions(4) == []
    core.unload_partitions({partition_for("a", 3)})
    assert "a" not in core.txns


# --- record format ----------------------------------------------------------


@given(st.text(max_size=20), st.integers(0, 2**63 - 1), st.integers(0, 32767),
       st.integers(1, 2**31 - 1), st.sampled_from(list(TxnStatus)),
       st.sets(st.tuples(st.text(min_size=1, max_size=8), st.integers(0, 1000)), max_size=6),
       st.integers(0, 2**62), st.integers(-1, 2**62))
def test_records_round_trip(txn: str, pid: int, epoch: int, timeout: int, status: TxnStatus,
                            parts: set[tuple[str, int]], updated: int, started: int) -> None:
    value = TxnLogValue(pid, epoch, timeout, status, tuple(sorted(parts)), updated, started)
    assert decode_key(encode_key(txn)) == txn
    assert decode_value(encode_value(value)) == value


def test_value_layout_is_kafkas_version_0() -> None:
    raw = encode_value(TxnLogValue(5, 1, 60000, S.ONGOING, (("t", 0), ("t", 2)), 7, 6))
    assert raw == (b"\x00\x00" + (5).to_bytes(8, "big") + b"\x00\x01" + (60000).to_bytes(4, "big")
                   + b"\x01" + b"\x00\x00\x00\x01" + b"\x00\x01t" + b"\x00\x00\x00\x02"
                   + b"\x00\x00\x00\x00" + b"\x00\x00\x00\x02" + (7).to_bytes(8, "big")
                   + (6).to_bytes(8, "big"))
    assert encode_key("ab") == b"\x00\x00\x00\x02ab"


@given(st.binary(max_size=40))
def test_garbage_values_raise_the_narrow_error(raw: bytes) -> None:
    try:
        decode_value(raw)
    except TransactionLogError:
        pass


def test_control_batches_carry_the_marker() -> None:
    batch = control_batch(42, 3, True, 9, 1234)
    [header] = check_batches(batch)
    assert header.is_control and header.is_transactional
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (42, 3, -1)
    [record] = list(read_records(batch, header, 0))
    assert control_type(record.key) == CONTROL_COMMIT
    assert record.value == b"\x00\x00\x00\x00\x00\x09"
    abort_batch = control_batch(1, 0, False, 0, 0)
    [abort] = list(read_records(abort_batch, check_batches(abort_batch)[0], 0))
    assert control_type(abort.key) == CONTROL_ABORT


def test_partition_for_is_kafkas() -> None:
    h = 0
    for ch in "my-txn":
        h = (31 * h + ord(ch)) % 2**32
    h = h - 2**32 if h >= 2**31 else h
    assert partition_for("my-txn", 50) == abs(h) % 50
    assert isinstance(TxnMetadata, type)


@pytest.mark.parametrize("log_error", [E.REQUEST_TIMED_OUT, E.NOT_ENOUGH_REPLICAS])
def test_a_prepare_abort_failed_after_the_epoch_fence_is_written_again(
        log_error: ErrorCode) -> None:
    """The fence (PrepareEpochFence) is written, the PrepareAbort behind it fails (its
    answer lost and timed out, or refused): retry_stuck writes it again, as it does for a
    coordinator that loads the id in PrepareEpochFence; nothing else would move it on."""
    core = _core()
    [init] = _drain(core, core.init_producer_id(1, "a", 1000, -1, -1, 0), 0)
    _drain(core, core.add_partitions(2, "a", init.producer_id, 0, [("t", 0)], 1), 1)
    [fence] = core.abort_timed_out(5000)
    assert isinstance(fence, WriteLog)
    [abort] = core.on_log_written(fence.write_id, E.NONE, 5000)
    assert isinstance(abort, WriteLog)
    assert core.on_log_written(abort.write_id, log_error, 5000) == []
    meta = core.txns["a"]
    assert (meta.state, meta.pending, meta.producer_epoch) == (S.PREPARE_EPOCH_FENCE, None, 1)
    assert core.abort_timed_out(6000) == []
    assert core.init_producer_id(3, "a", 1000, -1, -1, 6000) == [
        Reply(3, E.CONCURRENT_TRANSACTIONS)]
    [again] = core.retry_stuck(6000)
    assert isinstance(again, WriteLog)
    value = decode_value(again.value)  # type: ignore[arg-type]
    assert (value.status, value.producer_epoch) == (S.PREPARE_ABORT, 1)
    assert core.retry_stuck(6000) == []  # in flight: not twice
    _drain(core, [again], 6000)
    assert core.txns["a"].state == S.COMPLETE_ABORT

    # A coordinator that loads the id in PrepareEpochFence finishes the abort as well.
    loaded = _core()
    loaded.load_partition(partition_for("a", loaded.config.num_partitions), 7,
                          [(encode_key("a"), fence.value)], 7000)
    assert loaded.txns["a"].state == S.PREPARE_EPOCH_FENCE
    [write] = loaded.retry_stuck(7000)
    assert isinstance(write, WriteLog)
    assert decode_value(write.value).status == S.PREPARE_ABORT  # type: ignore[arg-type]
    _drain(loaded, [write], 7000)
    assert loaded.txns["a"].state == S.COMPLETE_ABORT


def test_a_completion_answered_as_timed_out_but_written_after_all_is_taken() -> None:
    """The CompleteCommit write's answer is late: it was given up on (REQUEST_TIMED_OUT)
    and written again, then the late success comes. The id waits for that completion
    still, so it is taken: without it a shard lagging for good would have every
    rewritten completion given up on and every success ignored, the id stuck in
    PrepareCommit. A late success for an id that moved on, or an earlier epoch's, is not."""
    core = _core()
    [init] = _drain(core, core.init_producer_id(1, "a", 1000, -1, -1, 0), 0)
    _drain(core, core.add_partitions(2, "a", init.producer_id, 0, [("t", 0)], 1), 1)
    [prepare] = core.end_txn(3, "a", init.producer_id, 0, True, 2)
    _reply, _markers = core.on_log_written(prepare.write_id, E.NONE, 2)
    [first] = core.on_markers_written("a", 0, 3)
    assert isinstance(first, WriteLog)
    assert core.on_log_written(first.write_id, E.REQUEST_TIMED_OUT, 4) == []
    assert core.completing == {"a"} and core.awaits_late(first.write_id)
    [second] = core.retry_completions(5)
    assert isinstance(second, WriteLog) and core.txns["a"].pending == S.COMPLETE_COMMIT
    assert core.on_log_written(first.write_id, E.NONE, 6) == []  # the late success
    meta = core.txns["a"]
    assert (meta.state, meta.partitions, core.completing) == (S.COMPLETE_COMMIT, set(), set())
    assert meta.pending == S.COMPLETE_COMMIT  # the retry in flight keeps others out
    assert core.end_txn(4, "a", init.producer_id, 0, True, 6) == [
        Reply(4, E.CONCURRENT_TRANSACTIONS)]
    assert core.on_log_written(second.write_id, E.REQUEST_TIMED_OUT, 7) == []
    assert core.retry_completions(8) == []  # completed: nothing to write again
    assert not core.awaits_late(second.write_id)
    assert core.txns["a"].state == S.COMPLETE_COMMIT

    # The next transaction: a late success of its own completion's failed write is taken,
    # one of a write the id no longer waits for (it completed by a retry) changes nothing.
    _drain(core, core.add_partitions(5, "a", init.producer_id, 0, [("t", 1)], 9), 9)
    [prepare] = core.end_txn(6, "a", init.producer_id, 0, False, 10)
    _reply, _markers = core.on_log_written(prepare.write_id, E.NONE, 10)
    [abort] = core.on_markers_written("a", 0, 11)
    assert core.on_log_written(abort.write_id, E.REQUEST_TIMED_OUT, 12) == []
    [retry] = core.retry_completions(13)
    assert core.on_log_written(retry.write_id, E.NONE, 14) == []
    assert core.txns["a"].state == S.COMPLETE_ABORT and not core.awaits_late(abort.write_id)
    _drain(core, core.add_partitions(7, "a", init.producer_id, 0, [("t", 0)], 15), 15)
    assert core.on_log_written(abort.write_id, E.NONE, 16) == []
    assert core.txns["a"].state == S.ONGOING


def test_a_late_completion_never_completes_the_next_transaction() -> None:
    """A transactional producer keeps its epoch over transactions. The CompleteCommit of
    its first transaction is given up on twice (the retry too); before the retry is due
    the producer starts a second transaction, which reaches PrepareCommit with its markers
    in flight. The first transaction's late success then comes: it must not complete the
    second (its markers unwritten, its CompleteCommit never written)."""
    core = _core()
    [init] = _drain(core, core.init_producer_id(1, "a", 1000, -1, -1, 0), 0)
    _drain(core, core.add_partitions(2, "a", init.producer_id, 0, [("t", 0)], 1), 1)
    [prepare] = core.end_txn(3, "a", init.producer_id, 0, True, 2)
    _reply, _markers = core.on_log_written(prepare.write_id, E.NONE, 2)
    [first] = core.on_markers_written("a", 0, 3)
    assert core.on_log_written(first.write_id, E.REQUEST_TIMED_OUT, 4) == []
    [second] = core.retry_completions(5)
    assert core.on_log_written(first.write_id, E.NONE, 6) == []  # taken: T1 complete
    assert core.on_log_written(second.write_id, E.REQUEST_TIMED_OUT, 7) == []
    # before retry_completions runs, the second transaction reaches PrepareCommit
    _drain(core, core.add_partitions(4, "a", init.producer_id, 0, [("t", 1)], 8), 8)
    [prepare2] = core.end_txn(5, "a", init.producer_id, 0, True, 9)
    _reply, _markers = core.on_log_written(prepare2.write_id, E.NONE, 9)
    assert core.txns["a"].state == S.PREPARE_COMMIT
    assert core.on_log_written(second.write_id, E.NONE, 10) == []  # T1's late success
    meta = core.txns["a"]
    assert (meta.state, meta.partitions) == (S.PREPARE_COMMIT, {("t", 1)})
