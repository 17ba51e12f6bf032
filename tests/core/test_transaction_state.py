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
from dataclasses import replace
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


def test_a_partition_loaded_in_slices_keeps_the_retries_of_its_earlier_slices() -> None:
    """The shell restores a partition's ids a slice at a time: a later slice (fresh
    False) adds its ids and leaves alone a completion retry an earlier slice's id got
    meanwhile; a fresh load forgets it, as a new load of the partition must."""
    core = _core()
    _pid, markers = _prepared(core)  # "a", on partition_for("a", 3)
    p = partition_for("a", 3)
    [complete] = core.on_markers_written("a", markers.producer_epoch, 3)
    assert isinstance(complete, WriteLog)
    core.on_log_written(complete.write_id, E.NOT_ENOUGH_REPLICAS, 3)
    assert core.completing == {"a"}
    other = next(t for t in (f"id{i}" for i in range(100)) if partition_for(t, 3) == p)
    value = TxnLogValue(9, 3, 1000, S.EMPTY, (), 5, 4)
    assert core.load_partition(p, 7, [(encode_key(other), encode_value(value))], 6,
                               fresh=False) == []
    assert core.completing == {"a"} and core.txns[other].state == S.EMPTY
    core.load_partition(p, 7, [], 6)
    assert core.completing == set()


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


def test_the_ticks_scans_leave_the_ids_of_partitions_in_skip_alone() -> None:
    """A partition being restored a slice at a time: its ids wait for the rest of it
    (Kafka's scan sees only loaded partitions), the other partitions' ids do not."""
    core = _core()
    [init] = _drain(core, core.init_producer_id(1, "a", 1000, -1, -1, 0), 0)
    _drain(core, core.add_partitions(2, "a", init.producer_id, 0, [("t", 0)], 1), 1)
    p = core.partition_for("a")
    assert core.abort_timed_out(5000, {p}) == []
    [fence] = core.abort_timed_out(5000, {p + 1})
    assert isinstance(fence, WriteLog)
    # one loaded in PrepareEpochFence: retry_stuck would write its PrepareAbort
    loaded = _core()
    loaded.load_partition(p, 7, [(encode_key("a"), fence.value)], 7000)
    assert loaded.retry_stuck(7000, {p}) == []
    [again] = loaded.retry_stuck(7000, {p + 1})
    assert isinstance(again, WriteLog)


def _load_many(core: TransactionCoordinatorCore, ids: dict[str, TxnLogValue],
               now: int) -> list[Any]:
    """Load ``ids`` (id -> its last value) into their partitions of ``core``."""
    effects: list[Any] = []
    for p in range(core.config.num_partitions):
        effects.extend(core.load_partition(p, 7, [
            (encode_key(t), encode_value(v)) for t, v in ids.items()
            if partition_for(t, core.config.num_partitions) == p], now))
    return effects


def test_the_tick_looks_only_at_the_ids_that_can_be_due_among_many() -> None:
    """20,000 ids, most of them idle (CompleteCommit) or Ongoing within their timeout:
    the timed-out ones are still fenced and aborted, a transaction that starts and times
    out later too, and one fenced whose write failed is fenced again at the next tick;
    but a tick looks at the due ones and the prepared ones, not at every id (the old
    scan visited all 20,000 at each call)."""
    core = _core()
    ids: dict[str, TxnLogValue] = {}
    for i in range(20_000):
        if i % 2:
            ids[f"idle{i}"] = TxnLogValue(i, 0, 1000, S.COMPLETE_COMMIT, (), 5, 5)
        else:
            ids[f"open{i}"] = TxnLogValue(i, 0, 60_000, S.ONGOING, (("t", 0),), 5, 5)
    late = [f"late{i}" for i in range(3)]
    for i, t in enumerate(late):
        ids[t] = TxnLogValue(100_000 + i, 0, 1000, S.ONGOING, (("t", 1),), 10, 10)
    prepared = TxnLogValue(200_000, 2, 1000, S.PREPARE_COMMIT, (("t", 2),), 10, 10)
    ids["prep"] = prepared
    [markers] = _load_many(core, ids, 20)
    assert markers.transactional_id == "prep"

    assert core.abort_timed_out(900) == []  # none due yet
    visits = core.expiry_visits
    fences = core.abort_timed_out(2000)
    assert sorted(decode_key(f.key) for f in fences) == late  # type: ignore[union-attr]
    assert core.expiry_visits - visits == len(late)
    # the first fence's write fails: still Ongoing, fenced again at the next tick
    first, *rest = fences
    assert isinstance(first, WriteLog)
    assert core.on_log_written(first.write_id, E.REQUEST_TIMED_OUT, 2000) == []
    for fx in rest:
        _drain(core, [fx], 2000)
    [again] = core.abort_timed_out(3000)
    assert isinstance(again, WriteLog) and decode_key(again.key) == decode_key(first.key)
    _drain(core, [again], 3000)
    assert {core.txns[t].state for t in late} == {S.COMPLETE_ABORT}
    # the prepared id's markers are sent again by retry_stuck, looking at it alone
    visits = core.expiry_visits
    [resent] = core.retry_stuck(3000)
    assert isinstance(resent, WriteMarkers) and resent.transactional_id == "prep"
    # it, and the aborted ones once (they went through PrepareAbort, now dropped)
    assert core.expiry_visits - visits == 1 + len(late)
    _drain(core, core.on_markers_written("prep", 2, 3000), 3000)
    assert core.txns["prep"].state == S.COMPLETE_COMMIT
    assert core.retry_stuck(3000) == []

    # an idle id begins a transaction: it times out in turn, alone among the 20,000
    meta = core.txns["idle1"]
    _drain(core, core.add_partitions(9, "idle1", meta.producer_id, 0, [("t", 3)], 4000),
           4000)
    visits = core.expiry_visits
    assert core.abort_timed_out(4500) == []
    [fence] = core.abort_timed_out(5001)
    assert decode_key(fence.key) == "idle1"  # type: ignore[union-attr]
    _drain(core, [fence], 5001)
    assert core.txns["idle1"].state == S.COMPLETE_ABORT
    # it, and the entry of the one fenced twice, met once more and dropped
    assert core.expiry_visits - visits == 2
    # the 10,000 open ones, past their 60 s, are all fenced
    fences = core.abort_timed_out(60_006)
    assert len(fences) == 10_000
    assert {core.txns[f"open{i}"].pending for i in range(0, 20_000, 2)} == {
        S.PREPARE_EPOCH_FENCE}


def test_the_ticks_sweep_goes_on_over_calls_when_more_are_due_than_its_limit() -> None:
    """5,000 timed-out transactions, a limit of 2,000 a call: three calls fence them all
    (``expiry_more`` says when the sweep goes on); ids left alone (a partition in skip)
    are held until the sweep ends, so it ends, and the next sweep looks at them again."""
    core = _core()
    ids = {f"t{i}": TxnLogValue(i, 0, 1000, S.ONGOING, (("t", 0),), 5, 5)
           for i in range(5000)}
    _load_many(core, ids, 10)
    skipped = {t for t in ids if partition_for(t, 3) == 0}
    fenced: list[str] = []
    calls = 0
    while True:
        calls += 1
        effects = core.abort_timed_out(2000, {0}, limit=2000)
        fenced.extend(decode_key(f.key) for f in effects)  # type: ignore[union-attr]
        if not core.expiry_more:
            break
        assert calls < 10
    assert calls == 3
    assert sorted(fenced) == sorted(set(ids) - skipped)
    # the skipped partition is loaded now: the next sweep fences its ids
    effects = core.abort_timed_out(3000, None, limit=len(ids))
    assert not core.expiry_more
    assert sorted(decode_key(f.key) for f in effects) == sorted(skipped)  # type: ignore[union-attr]


def test_the_entries_of_ended_transactions_count_against_the_sweeps_limit() -> None:
    """One id runs 5,000 short transactions: each leaves an entry in the heap (stale once
    the next begins; the heap is pruned when mostly stale). Past all their deadlines a
    sweep with a limit of 100 looks at no more than 100 entries a call, stale ones
    included, aborts nothing (each ended), and ends."""
    core = _core()
    [init] = _drain(core, core.init_producer_id(1, "a", 1000, -1, -1, 0), 0)
    for i in range(5000):
        _drain(core, core.add_partitions(2, "a", init.producer_id, 0, [("t", 0)], i), i)
        _drain(core, core.end_txn(3, "a", init.producer_id, 0, True, i), i)
        # the rebuild keeps the heap lean: without it 5,000 entries, 4,999 stale
        assert len(core._deadlines) <= 2 * len(core._deadline_seq) + 1024
    assert core.txns["a"].state == S.COMPLETE_COMMIT
    left = len(core._deadlines)
    calls = 0
    while True:
        calls += 1
        visits = core.expiry_visits
        assert core.abort_timed_out(100_000, limit=100) == []
        assert core.expiry_visits - visits <= 100
        if not core.expiry_more:
            break
    # every entry left is looked at once, 100 a call: 11 calls at most (51 unpruned)
    assert 2 < calls <= left // 100 + 1 <= (2 + 1024) // 100 + 1
    assert core.abort_timed_out(200_000, limit=100) == [] and not core.expiry_more


def test_a_sweep_under_way_tracks_ids_through_an_unload_and_a_reload() -> None:
    """A sweep stopped at its limit (ids held aside) while a partition is unloaded and
    loaded again (a new epoch), and then while the partition count changes (all of them
    unloaded and loaded under the new count): when the sweep ends no timed-out id is left
    Ongoing unfenced (one would hang: nothing else aborts it), and an id reloaded in
    PrepareCommit still gets its markers from retry_stuck."""
    core = _core()
    ids = {f"t{i}": TxnLogValue(i, 0, 1000, S.ONGOING, (("t", 0),), 5, 5)
           for i in range(600)}
    ids["prep"] = TxnLogValue(9999, 0, 1000, S.PREPARE_COMMIT, (("t", 0),), 5, 5)
    records = {p: [(encode_key(t), encode_value(v)) for t, v in ids.items()
                   if partition_for(t, 3) == p] for p in range(3)}
    for p in range(3):
        core.load_partition(p, 7, records[p], 10)

    def unfenced() -> set[str]:
        return {t for t, m in core.txns.items()
                if m.state == S.ONGOING and m.pending is None}

    def sweep(now: int) -> None:
        while True:
            core.abort_timed_out(now, limit=100)
            if not core.expiry_more:
                return

    # a partition's epoch changes mid-sweep: its fenced ids' writes are dropped, and
    # reloaded from the log (still Ongoing there) they are due again
    core.abort_timed_out(2000, limit=100)
    assert core.expiry_more and core._held
    p = partition_for(core._held[0][2], 3)
    assert core.txns[core._held[0][2]].pending is not None
    core.unload_partitions({p})
    assert all(partition_for(t, 3) != p for t in core.txns)
    core.load_partition(p, 8, records[p], 2000)
    assert core._held[0][2] in unfenced()
    assert core.expiry_more
    sweep(2000)
    assert unfenced() == set()
    assert [fx.transactional_id for fx in core.retry_stuck(2000)  # type: ignore[union-attr]
            if isinstance(fx, WriteMarkers)] == ["prep"]

    # the count changes mid-sweep: every partition unloaded, loaded again under 5
    core = _core()
    for p in range(3):
        core.load_partition(p, 7, records[p], 10)
    core.abort_timed_out(2000, limit=100)
    assert core.expiry_more and core._held
    core.unload_partitions({0, 1, 2})
    assert core.txns == {}
    core.coordinator_epochs.clear()
    core.config = replace(core.config, num_partitions=5)
    for p in range(5):
        core.load_partition(p, 8, [(encode_key(t), encode_value(v)) for t, v in ids.items()
                                   if partition_for(t, 5) == p], 2000)
    sweep(2000)
    assert len(core.txns) == len(ids) and unfenced() == set()
    assert [fx.transactional_id for fx in core.retry_stuck(2000)  # type: ignore[union-attr]
            if isinstance(fx, WriteMarkers)] == ["prep"]
