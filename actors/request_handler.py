"""RequestHandler: decodes Kafka requests and runs the API functions.

All requests of one connection come to the same handler (``conn_id % H``).
Each API function is a generator (actors/apis/base.py); the handler sends
the calls it yields, matches the answers by req_id and resumes it, so many
requests are in progress at once and none blocks the actor.
"""

from __future__ import annotations

import itertools
import os
import struct
import threading
import traceback
from typing import Any

from kafka.protocol.api_key import ApiKey

from actors.apis.acls import handle_create_acls, handle_delete_acls, handle_describe_acls
from actors.apis.admin import (
    handle_alter_partition_reassignments,
    handle_create_partitions,
    handle_delete_groups,
    handle_delete_records,
    handle_describe_log_dirs,
    handle_describe_topic_partitions,
    handle_elect_leaders,
    handle_list_partition_reassignments,
    handle_offset_delete,
)
from actors.apis.authorize import answer_per_item, denial
from actors.apis.base import Access, ApiGen, Call, HandlerContext, Respond
from actors.apis.cluster import handle_describe_cluster
from actors.apis.configs import (
    handle_alter_configs,
    handle_describe_configs,
    handle_incremental_alter_configs,
)
from actors.apis.describe_producers import handle_describe_producers
from actors.apis.fetch import handle_fetch
from actors.apis.groups import (
    handle_describe_groups,
    handle_find_coordinator,
    handle_heartbeat,
    handle_join_group,
    handle_leave_group,
    handle_list_groups,
    handle_offset_commit,
    handle_offset_fetch,
    handle_sync_group,
)
from actors.apis.list_offsets import handle_list_offsets
from actors.apis.metadata import (
    handle_create_topics,
    handle_delete_topics,
    handle_init_producer_id,
    handle_metadata,
)
from actors.apis.offset_for_leader_epoch import handle_offset_for_leader_epoch
from actors.apis.produce import handle_produce
from actors.apis.replica_fetch import handle_replica_fetch
from actors.apis.sasl import handle_sasl_authenticate, handle_sasl_handshake
from actors.apis.transactions import (
    handle_add_offsets_to_txn,
    handle_add_partitions_to_txn,
    handle_describe_transactions,
    handle_end_txn,
    handle_list_transactions,
    handle_txn_offset_commit,
)
from actors.apis.users import (
    handle_alter_user_scram_credentials,
    handle_describe_user_scram_credentials,
)
from actors.core.file_regions import close_region, close_regions
from actors.metrics import error_codes
from actors.runtime.actor import Actor, handles
from actors.runtime.address import Address
from actors.runtime.node import Node
from actors.runtime.scheduling import apply_to_worker_loop
from wire import kafka_codec as kc
from wire.admin_messages import (
    AlterReassignmentsDone,
    AlterTopicConfigsDone,
    CreatePartitionsDone,
    DeleteGroupsDone,
    DeleteRecordsDone,
    DescribeLogDirDone,
    ElectLeadersDone,
    ListReassignmentsDone,
    OffsetDeleteDone,
)
from wire.api_versions import api_name
from wire.broker_messages import (
    AppendDone,
    CreateTopicsDone,
    DeleteTopicsDone,
    DescribeProducersDone,
    FetchReady,
    GetStats,
    KafkaRequest,
    KafkaResponse,
    ListOffsetsDone,
    MetadataApplied,
    MetadataUpdate,
    ProduceReady,
    ReadDone,
)
from wire.cluster_messages import (
    MetadataSync,
    MetadataSynced,
    ProcessStarted,
    TopicsAwaited,
    UpdateMetadata,
)
from wire.errors import ErrorCode, KafkaError
from wire.file_region import FileRegion, RegionAt
from wire.group_messages import (
    DescribeGroupsDone,
    HeartbeatDone,
    JoinGroupDone,
    LeaveGroupDone,
    ListGroupsDone,
    OffsetCommitDone,
    OffsetFetchDone,
    SyncGroupDone,
)
from wire.replication_messages import (
    OffsetForLeaderEpochDone,
    ReplicaFetch,
    ReplicaFetchPartition,
    ReplicaFetchResponse,
    ReplicaReadDone,
)
from wire.security_messages import AclsDone, ScramCredentialsDone
from wire.transaction_messages import (
    AddPartitionsRefused,
    DescribeTxnsDone,
    InitTxnProducerDone,
    ListTxnsDone,
    TxnDone,
)

API_VERSIONS = int(ApiKey.ApiVersions)
FETCH = int(ApiKey.Fetch)

API_TABLE: dict[int, Any] = {
    ApiKey.Produce: handle_produce,
    ApiKey.Fetch: handle_fetch,
    ApiKey.ListOffsets: handle_list_offsets,
    ApiKey.OffsetForLeaderEpoch: handle_offset_for_leader_epoch,
    ApiKey.Metadata: handle_metadata,
    ApiKey.OffsetCommit: handle_offset_commit,
    ApiKey.OffsetFetch: handle_offset_fetch,
    ApiKey.FindCoordinator: handle_find_coordinator,
    ApiKey.JoinGroup: handle_join_group,
    ApiKey.Heartbeat: handle_heartbeat,
    ApiKey.LeaveGroup: handle_leave_group,
    ApiKey.SyncGroup: handle_sync_group,
    ApiKey.DescribeGroups: handle_describe_groups,
    ApiKey.ListGroups: handle_list_groups,
    ApiKey.CreateTopics: handle_create_topics,
    ApiKey.DeleteTopics: handle_delete_topics,
    ApiKey.InitProducerId: handle_init_producer_id,
    ApiKey.DescribeConfigs: handle_describe_configs,
    ApiKey.DeleteRecords: handle_delete_records,
    ApiKey.AlterConfigs: handle_alter_configs,
    ApiKey.DescribeLogDirs: handle_describe_log_dirs,
    ApiKey.CreatePartitions: handle_create_partitions,
    ApiKey.DeleteGroups: handle_delete_groups,
    ApiKey.IncrementalAlterConfigs: handle_incremental_alter_configs,
    ApiKey.OffsetDelete: handle_offset_delete,
    ApiKey.DescribeTopicPartitions: handle_describe_topic_partitions,
    ApiKey.DescribeCluster: handle_describe_cluster,
    ApiKey.ElectLeaders: handle_elect_leaders,
    ApiKey.AlterPartitionReassignments: handle_alter_partition_reassignments,
    ApiKey.ListPartitionReassignments: handle_list_partition_reassignments,
    ApiKey.AddPartitionsToTxn: handle_add_partitions_to_txn,
    ApiKey.AddOffsetsToTxn: handle_add_offsets_to_txn,
    ApiKey.EndTxn: handle_end_txn,
    ApiKey.TxnOffsetCommit: handle_txn_offset_commit,
    ApiKey.DescribeTransactions: handle_describe_transactions,
    ApiKey.ListTransactions: handle_list_transactions,
    ApiKey.DescribeProducers: handle_describe_producers,
    ApiKey.DescribeAcls: handle_describe_acls,
    ApiKey.CreateAcls: handle_create_acls,
    ApiKey.DeleteAcls: handle_delete_acls,
    ApiKey.DescribeUserScramCredentials: handle_describe_user_scram_credentials,
    ApiKey.AlterUserScramCredentials: handle_alter_user_scram_credentials,
    ApiKey.SaslHandshake: handle_sasl_handshake,  # no SASL layer took it: ILLEGAL_SASL_STATE
    ApiKey.SaslAuthenticate: handle_sasl_authenticate,
}


def _withheld(_req_id: int) -> Any:
    """The ``make`` of a call withheld from a process taken as silent (RequestHandler.
    _to_silent): never sent; its short deadline answers it."""
    raise AssertionError("a call withheld from a silent process is never sent")


def _answer(data: dict[str, Any]) -> ApiGen:
    """An API generator that answers at once (a request the ACLs refuse as a whole)."""
    return Respond(data)
    yield


class _InFlight:
    """One request being handled: its generator and what it waits for."""

    __slots__ = (
        "access",
        "calls",
        "gen",
        "header",
        "local_ns",
        "max_wait_ns",
        "msg",
        "remote_ns",
        "replies",
        "reply_to",
        "req_ids",
        "request",
        "start_ns",
        "wait_start_ns",
        "waiting",
    )

    def __init__(self, msg: Any, header: Any, gen: ApiGen, start_ns: int,
                 reply_to: Address | None = None, access: Access | None = None,
                 request: Any = None) -> None:
        self.msg = msg
        self.request = request  # the decoded Kafka request, for an error answer
        self.reply_to = reply_to  # an internal request (a replica fetch): answer this actor
        self.header = header
        self.gen = gen
        self.start_ns = start_ns
        self.local_ns = 0
        self.wait_start_ns = 0
        self.remote_ns = 0
        self.replies: list[Any] = []
        self.waiting = 0
        self.req_ids: list[int] = []
        self.max_wait_ns = 0
        self.access = access
        self.calls: list[Call] = []  # what it waits for: the calls it yielded last


SWEEP_MS = 1000  # how often on_turn looks for abandoned requests (deadlines: sooner)
# A process one of whose calls (Call.silence: a Read, a WatchFetch, a ListOffsets, a
# coordinator's Heartbeat, ...) its deadline answered is marked silent by the handler till
# any answer from it comes (a late one too), or the notice that it was started again. Such
# a call to it meanwhile gets at most its max_wait_ms plus its carry_ms plus this: while a
# process is paused, the calls of a handler sent there before the first deadline passes
# wait their whole 5-10 s, the later ones 200 ms (and the carry). Only one of them at a
# time is sent (the probe: at marking, the call whose deadline just passed, whose late
# answer may still come); the others are answered by that short deadline without being
# sent, so a paused process's link backlog does not grow with every client retry (each
# NOT_LEADER_OR_FOLLOWER is retried within ~200 ms), and a resumed process answers the
# probe at once instead of serving thousands of Reads whose answers would be dropped as
# late. A live process answers a Read in well under a millisecond; one that resumed and is
# slower than this once gets one more NOT_LEADER_OR_FOLLOWER, and its late answer clears
# the mark for the next call.
SILENT_DEADLINE_MS = 200
# A probe unanswered this long is taken as lost, and the next such call to that process is
# sent as a new probe: a handler sends a silent process at most one such call per this.
# 10 s is the longest a silence call's own deadline waits (fetch.READ_DEADLINE_CAP_MS,
# before the carry): a live process, however loaded, answers well within it, and the
# backlog of a paused one grows by at most six calls a minute per handler (not one per
# client retry); a probe lost on the way (its answer too) delays the mark's end by at most
# this.
PROBE_AFTER_MS = 10_000
TIMED_OUT_KEPT = 10_000  # req ids of calls answered by their deadline, kept for late answers
_INT16 = struct.Struct(">h")
_INT16_PAIR = struct.Struct(">hh")
CLIENT_ID_KEPT = 256  # characters of a client id kept (a client may send 32,767 bytes)
OTHERS = "others"  # the shared key of those that came once the table was full


class WarningLimiter:
    """At most one warning per key per interval: an old client retrying a version actorlog
    does not serve opens a connection a time and would log a line per connection. The
    request handlers of a process share one (they may run on threads of their own)."""

    MAX_KEYS = 1024  # keys come from clients (their client id): the table is bounded

    def __init__(self, interval_ns: int = 60 * 1_000_000_000) -> None:
        self.interval_ns = interval_ns
        # key -> [next time it may log, count held back since its last line]
        self.keys: dict[Any, list[int]] = {}
        self.lock = threading.Lock()

    def admit(self, key: Any, now_ns: int) -> tuple[int, bool] | None:
        """None: hold this one back (counted); else log it, with the count of those held
        back since the last line of its key, and whether that key is the shared OTHERS
        (the table was full: a new key is counted there, never evicting one, so a client
        choosing a new client id per connection still gets one line an interval)."""
        with self.lock:
            return self._admit(key, now_ns)

    def _admit(self, key: Any, now_ns: int) -> tuple[int, bool] | None:
        entry = self.keys.get(key)
        if entry is None and len(self.keys) >= self.MAX_KEYS:
            key = OTHERS
            entry = self.keys.get(key)
        if entry is not None and now_ns < entry[0]:
            entry[1] += 1
            return None
        held = entry[1] if entry is not None else 0
        self.keys[key] = [now_ns + self.interval_ns, 0]
        return held, key == OTHERS


def _warning_interval_ns() -> int:
    """One line a minute; tests that must not see a minute pass set a longer interval."""
    ms = os.environ.get("ACTORLOG_WARNING_INTERVAL_MS", "")
    return (int(ms) if ms.isdigit() else 60_000) * 1_000_000


_node_limiters_lock = threading.Lock()


def process_limiter(kind: str, node: Node) -> WarningLimiter:
    """The process's one limiter of ``kind`` for ``node``, shared by that node's request
    handlers: the lines an interval do not grow with num.io.threads. Kept on the node
    object: the nodes of one Python process (the simulation, in-process tests) each have
    theirs, and a node started again (a restart, the simulation's next seed, whose clock
    starts from 0 again) has fresh ones, not its predecessor's next-log times."""
    with _node_limiters_lock:
        limiter = node.limiters.get(kind)
        if limiter is None:
            limiter = node.limiters[kind] = WarningLimiter(_warning_interval_ns())
        return limiter


def _interval_text(interval_ns: int) -> str:
    """A limiter's interval for its log line ("one line a minute")."""
    ms = interval_ns // 1_000_000
    if ms == 60_000:
        return "a minute"
    return f"per {ms // 1000} s" if ms % 1000 == 0 else f"per {ms} ms"


_OWN_CODE = (f"{os.sep}actors{os.sep}", f"{os.sep}wire{os.sep}")


def _failure_site(api_key: int, exc: BaseException) -> tuple[Any, ...]:
    """Where an API failed: the API, the exception's type, its innermost line and the
    innermost line of actorlog's own code (actors/, wire/) it passed: an encoding failure
    ends in the same lines of kafka-python whatever the bug that made it."""
    frames = traceback.extract_tb(exc.__traceback__)
    last = frames[-1] if frames else None
    own = next((f for f in reversed(frames) if any(d in f.filename for d in _OWN_CODE)),
               None)
    return (api_key, type(exc).__name__,
            last.filename if last else "?", (last.lineno or 0) if last else 0,
            own.filename if own else "?", (own.lineno or 0) if own else 0)


def _client_id(frame: bytes) -> str | None:
    """The client id of a request header (its first CLIENT_ID_KEPT characters): at the same
    place in header v1 and later; header v0 (ControlledShutdown v0 only) has none."""
    if len(frame) < 10 or _INT16_PAIR.unpack_from(frame, 0) == (7, 0):
        return None
    (size,) = _INT16.unpack_from(frame, 8)
    if size < 0 or 10 + size > len(frame):
        return None
    return bytes(frame[10:10 + min(size, 4 * CLIENT_ID_KEPT)]).decode(
        "utf-8", "replace")[:CLIENT_ID_KEPT]


class RequestHandler(Actor):
    mailbox_size = 0  # unbounded: the Processors bound the requests (queued.max.requests)

    def __init__(self, node: Any, name: str, *, context: HandlerContext,
                 scheduling: str | None = None, **kw: Any) -> None:
        super().__init__(node, name, **kw)
        self.initial_context = context
        # actor.threads.scheduling, when this handler runs a worker loop of its own (a
        # process with no shard to host it); None: it is a guest, or has a thread alone
        self.scheduling = scheduling
        self.clock = context.clock
        self._monotonic_ns = context.clock.monotonic_ns  # read a few times per request
        self.api_table = dict(API_TABLE)
        self.processors: dict[str, Address] = {}  # a Processor's name -> its Address

    def setup(self) -> None:
        if self.scheduling is not None:  # in the worker loop's thread, as a shard's setup
            apply_to_worker_loop(self.scheduling, self.log.warning)
        self.ctx = self.initial_context
        self.pending: dict[int, tuple[_InFlight, int]] = {}
        # Ids of this life alone: an answer owed to a previous life (its process was killed
        # and restarted with num.processes > 1; a purgatory or shard of another process
        # still answers its waits) must not complete a request of this one. 2^20 ids per
        # millisecond between two lives.
        self.req_ids = itertools.count(1 + ((self.clock.wall_ms() % (1 << 31)) << 20))
        self.closed_for_bad_input = 0
        self.requests = 0
        # by (api key, version, client id): one line a minute a process, with the count
        # held back
        self.unsupported_warnings = process_limiter("unsupported_version", self.node)
        # by API and exception site (_failure_site): an API that fails on every request
        # of a flood logs its traceback once, then one line a minute with the count
        self.failure_warnings = process_limiter("api_failure", self.node)
        # connections this handler closed; all of a connection's requests come
        # here in order, so later ones are recognised (bounded, oldest dropped)
        self.closed_conns: dict[int, None] = {}
        # An internal answer that never comes (its actor crashed mid-request) must
        # not hang the connection: past this, the request is abandoned.
        self.abandon_after_ns = 2 * int(self.ctx.config["request.timeout.ms"]) * 1_000_000
        # when on_turn next looks at what is pending: a second after the last look, or a
        # call's deadline (Call.deadline_ms) if sooner
        self.next_sweep_ns = 0
        # req ids of calls answered by their deadline, for their late answers (bounded,
        # oldest dropped: one that comes later still is logged as unknown)
        self.timed_out_ids: dict[int, None] = {}
        # by target node: one line an interval while a process does not answer
        self.deadline_warnings = process_limiter("call_deadline", self.node)
        # process node -> when its silence was seen (a Call.silence call's deadline answered
        # it); cleared by any answer from it, a late one included (on_reply), or the notice
        # that it was started again (on_process_restarted)
        self.silent_nodes: dict[str, int] = {}
        # silent process node -> when its probe went (the one such call sent to it at a
        # time; at marking, the call whose deadline marked it): another is sent only
        # PROBE_AFTER_MS later (_to_silent). Kept and cleared with silent_nodes.
        self.probes: dict[str, int] = {}
        # by (node, marked or answering again): one line of each an interval
        self.silence_warnings = process_limiter("silent_process", self.node)
        # by sender node: answers to no pending call (on_reply)
        self.unknown_warnings = process_limiter("unknown_answer", self.node)

    # -------------------------------------------------------------- requests
    @handles(KafkaRequest)
    def on_request(self, msg: KafkaRequest) -> None:
        start = self._monotonic_ns()
        self.requests += 1
        if msg.conn_id in self.closed_conns:
            # Pipelined behind a request this handler refused: Kafka would have
            # closed the connection before reading it, so it must not run.
            self.node.metrics.incr("requests_dropped_after_close")
            return
        try:
            header = kc.parse_request_header(msg.frame)
        except kc.UnsupportedVersionError as exc:
            if exc.api_key == API_VERSIONS:
                hdr = kc.RequestHeader(API_VERSIONS, exc.api_version, msg.correlation_id, None, 0)
                self._send(msg, kc.encode_api_versions_response(hdr), True, False, start, 0, 0)
                return
            self._refuse(msg, exc, start)
            return
        except KafkaError as exc:
            self._refuse(msg, exc, start)
            return
        if header.api_key == API_VERSIONS:
            self._send(msg, kc.encode_api_versions_response(header), True, False, start, 0, 0)
            return
        api = self.api_table.get(header.api_key)
        if api is None:
            self._refuse(msg, KafkaError(f"API {header.api_key} is not served"), start)
            return
        try:
            # Produce and Fetch field by field; the other APIs through kafka.protocol
            request = kc.decode_hot_request(header, msg.frame)
            if request is None:
                request = kc.decode_request(header, msg.frame)
        except KafkaError as exc:
            self._refuse(msg, exc, start)
            return
        ctx = self.ctx
        access = Access(msg.principal, msg.client_host, api_name(header.api_key), msg.conn_id)
        ctx.access = access
        if ctx.authorizer is None:  # no ACLs: nothing to refuse, as a whole or per item
            gen = api(ctx, header, request)
        else:
            refusal = denial(ctx, header.api_key, header.api_version, request)
            if refusal is not None:
                gen = _answer(refusal)
            else:
                gen = (answer_per_item(ctx, header.api_key, request,
                                       lambda req: api(ctx, header, req))
                       or api(ctx, header, request))
        state = _InFlight(msg, header, gen, start, access=access, request=request)
        self._advance(state, None)

    @handles(ReplicaFetch)
    def on_replica_fetch(self, msg: ReplicaFetch) -> None:
        """A follower node's fetch: run like an API, answered to its fetcher."""
        assert self.current_sender is not None
        state = _InFlight(msg, None, handle_replica_fetch(self.ctx, msg), self._monotonic_ns(),
                          self.current_sender)
        self._advance(state, None)

    def _refuse(self, msg: KafkaRequest, exc: Exception, start: int) -> None:
        """Kafka closes a connection whose request it cannot parse or does not serve."""
        self.closed_for_bad_input += 1
        self.node.metrics.incr("requests_refused")
        if isinstance(exc, kc.UnsupportedVersionError):
            client_id = _client_id(msg.frame)
            admitted = self.unsupported_warnings.admit(
                (msg.api_key, msg.api_version, client_id), start)
            if admitted is None:
                self.node.metrics.incr("unsupported_version_warnings_held")
            else:
                held, others = admitted
                like = ("of other API versions or client ids (too many to track apart)"
                        if others else "like it")
                self.log.warning(
                    "closing connection {}: request (api {} v{} correlation {}) refused: {} "
                    "(client id {!r}; {} more {} held back since the last such line; "
                    "one line {})", msg.conn_id, msg.api_key, msg.api_version,
                    msg.correlation_id, exc, client_id, held, like,
                    _interval_text(self.unsupported_warnings.interval_ns))
        else:
            self.log.warning("closing connection {}: request (api {} v{} correlation {}) "
                             "refused: {}", msg.conn_id, msg.api_key, msg.api_version,
                             msg.correlation_id, exc)
        self._send(msg, b"", False, True, start, 0, 0)

    def _advance(self, state: _InFlight, replies: list[Any] | None) -> None:
        t0 = self._monotonic_ns()
        if replies is not None:
            state.remote_ns += t0 - state.wait_start_ns
        if state.access is not None:  # the checks of the API see this request's principal
            self.ctx.access = state.access
        try:
            calls = state.gen.send(replies) if replies is not None else next(state.gen)
        except StopIteration as stop:
            respond: Respond = stop.value
            state.local_ns += self._monotonic_ns() - t0
            self._finish(state, respond)
            return
        except Exception as exc:
            if state.reply_to is not None:
                _close_reply_regions(replies)
                self._answer_internal_failure(state, exc)
                return
            _close_reply_regions(replies)
            state.local_ns += self._monotonic_ns() - t0
            code = int(exc.code) if isinstance(exc, KafkaError) else None
            self._answer_failure(state, exc, "failed", code)
            return
        now = self._monotonic_ns()
        state.local_ns += now - t0
        state.wait_start_ns = now
        if len(calls) == 1:  # the common case (a produce or fetch on one shard), plainly
            call = calls[0]
            rid = next(self.req_ids)
            self.pending[rid] = (state, 0)
            state.replies = [None]
            state.waiting = 1
            state.req_ids = [rid]
            state.max_wait_ns = call.max_wait_ms * 1_000_000
            state.calls = calls
            if call.on_timeout is not None:
                if self.silent_nodes and call.silence and call.target.node in self.silent_nodes:
                    call = self._to_silent(call, now)
                    state.calls = [call]
                at = now + call.deadline_ms * 1_000_000
                if at < self.next_sweep_ns:
                    self.next_sweep_ns = at
                if call.make is _withheld:  # not sent: its short deadline answers it
                    return
            self.tell(call.target, call.make(rid))
            return
        state.replies = [None] * len(calls)
        state.waiting = len(calls)
        state.req_ids = []
        state.max_wait_ns = max((c.max_wait_ms for c in calls), default=0) * 1_000_000
        state.calls = calls
        for i, call in enumerate(calls):
            rid = next(self.req_ids)
            self.pending[rid] = (state, i)
            state.req_ids.append(rid)
            if call.on_timeout is not None:
                if self.silent_nodes and call.silence and call.target.node in self.silent_nodes:
                    call = self._to_silent(call, now)
                    if state.calls is calls:  # (the API's own list left as it was)
                        state.calls = list(calls)
                    state.calls[i] = call
                at = now + call.deadline_ms * 1_000_000
                if at < self.next_sweep_ns:
                    self.next_sweep_ns = at
                if call.make is _withheld:  # not sent: its short deadline answers it
                    continue
            self.tell(call.target, call.make(rid))
        if not calls:
            self._advance(state, [])

    @handles(AppendDone, ReadDone, ListOffsetsDone, CreateTopicsDone, DeleteTopicsDone,
             FetchReady, ProduceReady, JoinGroupDone, SyncGroupDone, HeartbeatDone,
             LeaveGroupDone, OffsetCommitDone, OffsetFetchDone, ListGroupsDone,
             DescribeGroupsDone, TopicsAwaited, CreatePartitionsDone,
             AlterTopicConfigsDone, DeleteRecordsDone, DescribeLogDirDone, DeleteGroupsDone,
             OffsetDeleteDone, ReplicaReadDone, InitTxnProducerDone, TxnDone,
             DescribeTxnsDone, ListTxnsDone, ElectLeadersDone, AclsDone, ScramCredentialsDone,
             OffsetForLeaderEpochDone, AlterReassignmentsDone, ListReassignmentsDone,
             AddPartitionsRefused, DescribeProducersDone)
    def on_reply(self, msg: Any) -> None:
        if self.silent_nodes:  # any answer, a late one too, says its process runs again
            sender = self.current_sender
            if sender is not None and sender.node in self.silent_nodes:
                self._heard(sender.node)
        entry = self.pending.pop(msg.req_id, None)
        if entry is None:
            if msg.req_id in self.timed_out_ids:  # its deadline answered it: dropped
                del self.timed_out_ids[msg.req_id]
                self.node.metrics.incr("internal_answers_late")
            else:
                self._unknown_answer(msg)
            _close_reply_regions([msg])
            return
        state, i = entry
        state.replies[i] = msg
        state.waiting -= 1
        if state.waiting == 0:
            self._advance(state, state.replies)

    def _unknown_answer(self, msg: Any) -> None:
        """An answer to no call of this handler: one to a request abandoned (its connection
        closed) or ended by its process's restart, which that process sent after all, or
        one past the TIMED_OUT_KEPT ids of calls answered by their deadline. Dropped and
        counted; one line an interval by its sender's process (a process that resumes after
        a long pause may send many at once)."""
        self.node.metrics.incr("internal_answers_unknown")
        sender = self.current_sender
        admitted = self.unknown_warnings.admit(sender.node if sender is not None else None,
                                               self._monotonic_ns())
        if admitted is not None:
            self.log.warning("answer {} to unknown request {} from {}, dropped (a request "
                             "abandoned or ended before it came; {} more such held back "
                             "since the last line; one line {})", type(msg).__name__,
                             msg.req_id, sender, admitted[0],
                             _interval_text(self.unknown_warnings.interval_ns))

    def _finish(self, state: _InFlight, respond: Respond) -> None:
        if state.reply_to is not None:
            self.tell(state.reply_to, respond.data)
            return
        frame = b""
        regions: list[RegionAt] = []
        if respond.respond:
            try:
                hot = kc.encode_hot_response(state.header, respond.data)
                if hot is not None:  # Produce and Fetch; Fetch records as file regions
                    frame, regions = hot
                elif state.header.api_key == FETCH:  # records as file regions, sent from files
                    frame, regions = kc.join_parts(
                        kc.encode_response_parts(state.header, respond.data))
                else:
                    frame = kc.encode_response(state.header, respond.data)
            except Exception as exc:
                _close_response_regions(respond.data)
                self._answer_failure(state, exc, "response cannot be encoded", None,
                                     close=respond.close)
                return
            # counted once written: an answer that cannot be, is counted by the error
            # answer sent in its place
            codes = respond.error_codes
            if codes is None:
                codes = error_codes(respond.data)
            if codes:  # nearly always none: no call
                self._count_errors(state.header.api_key, codes)
        self._send(state.msg, frame, respond.respond, respond.close, state.start_ns,
                   state.local_ns, state.remote_ns, regions)

    def _answer_failure(self, state: _InFlight, exc: Exception, what: str,
                        code: int | None, close: bool = False) -> None:
        """An API that raised, or whose response cannot be encoded (a value its field
        cannot hold: a string past its length prefix, say), is answered as Kafka's
        KafkaApis.handle answers a failure (requestHelper.handleError): the request's
        error response, every item it named the exception's code (UNKNOWN_SERVER_ERROR
        for any but a KafkaError); the connection is closed only for an API whose answer
        has no error to carry (as Kafka's sendErrorOrCloseConnection). Either way counted
        in requests_failed, and in the error rates by the code of the answer sent."""
        self.node.metrics.incr("requests_failed")
        header = state.header
        unknown = int(ErrorCode.UNKNOWN_SERVER_ERROR)
        code = unknown if code is None else code
        # a KafkaError's message where the answer has a message field; none for
        # UNKNOWN_SERVER_ERROR, not to leak internals (Kafka's ApiError.fromThrowable)
        message = str(exc) if isinstance(exc, KafkaError) and code != unknown else None
        try:
            data = kc.error_response(header.api_key, header.api_version, state.request, code,
                                     message)
            frame = b"" if data is None else kc.encode_response(header, data)
        except Exception:  # the error answer fails too: closed below, its cause logged
            self.log.exception("cannot encode the error answer to {} v{}",
                               header.api_key, header.api_version)
            frame = b""
        try:
            code_name = ErrorCode(code).name
        except ValueError:
            code_name = str(code)
        outcome = (f"answered its error response ({code_name})" if frame
                   else "closing the connection (its answer has no error field)")
        # answered before it is logged: a log line that fails cannot leave it unanswered
        if frame:
            # each item the error answer names counts, as for any answer (errors_total)
            self._count_errors(header.api_key, error_codes(data) or [code])
            self._send(state.msg, frame, True, close, state.start_ns, state.local_ns,
                       state.remote_ns)
        else:
            self._send(state.msg, b"", False, True, state.start_ns, state.local_ns,
                       state.remote_ns)
        self._log_failure(exc, header.api_key, "API {} v{} on connection {} {}: {!r}; {}",
                          header.api_key, header.api_version, state.msg.conn_id, what, exc,
                          outcome)

    def _answer_internal_failure(self, state: _InFlight, exc: Exception) -> None:
        """A follower's ReplicaFetch whose handling raised is answered as an abandoned one
        (UNKNOWN_SERVER_ERROR per partition: its fetcher backs them off, then goes on)
        instead of left to its request timeout."""
        if isinstance(state.msg, ReplicaFetch) and state.reply_to is not None:
            self.tell(state.reply_to, _replica_fetch_failed(state.msg))
        self._log_failure(exc, type(state.msg).__name__, "{} from {} failed: {!r}{}",
                          type(state.msg).__name__, state.reply_to, exc,
                          "; answered in error" if isinstance(state.msg, ReplicaFetch)
                          else "")

    def _log_failure(self, exc: Exception, api: Any, message: str, *args: Any) -> None:
        """A failed request's line, through the process's limiter by API and place in the
        code (_failure_site): the traceback once per place, then one line an interval
        with the count held back. A line that cannot be written (an exception whose repr
        raises) is replaced by a plain one."""
        limiter = self.failure_warnings
        site = _failure_site(api, exc)
        first = site not in limiter.keys  # (a race logs it twice at worst)
        admitted = limiter.admit(site, self._monotonic_ns())
        if admitted is None:
            self.node.metrics.incr("request_failure_logs_held")
            return
        held, _others = admitted
        # the traceback once per site; later lines (one an interval) only count
        log = self.log.opt(exception=exc) if first else self.log
        suffix = (f" ({held} more from the same place held back since the last such line;"
                  f" one line {_interval_text(limiter.interval_ns)})")
        try:
            log.error(message + suffix, *args)
        except Exception:
            log.error("a {} request failed with {} (its log line cannot be written)" + suffix,
                      api, type(exc).__name__)

    def _count_errors(self, api_key: int, codes: list[int]) -> None:
        """Kafka's ErrorsPerSec: each error code in the response, by API and error name."""
        if not codes:
            return
        api = api_name(api_key)
        for code in codes:
            try:
                error = ErrorCode(code).name
            except ValueError:
                error = str(code)
            self.node.metrics.incr(f"errors_total|api={api},error={error}")

    def on_refused(self, address: Address, msg: Any, frame_bytes: int) -> None:
        """A response too large for a frame: the request is not left unanswered.

        The connection is closed after the answers before it (the client sees
        the error and retries; nothing it could parse was sent wrong).
        """
        if type(msg) is KafkaResponse:
            for region in msg.regions:
                close_region(region)
            self.log.error("the API {} response to correlation {} on connection {} is {} bytes, "
                           "over the frame limit; closing the connection", msg.api_key,
                           msg.correlation_id, msg.conn_id, frame_bytes)
            self.tell(address, msg._replace(frame=b"", respond=False, close=True, regions=[]))
        else:
            super().on_refused(address, msg, frame_bytes)

    def _send(self, msg: KafkaRequest, frame: bytes, respond: bool, close: bool, start_ns: int,
              local_ns: int, remote_ns: int, regions: list[RegionAt] | None = None) -> None:
        if close:
            self.closed_conns[msg.conn_id] = None
            if len(self.closed_conns) > 10_000:
                del self.closed_conns[next(iter(self.closed_conns))]
        queue_ns = max(0, start_ns - msg.recv_ns)
        processor = self.processors.get(msg.processor)
        if processor is None:
            processor = self.processors[msg.processor] = Address(self.node.name, msg.processor)
        self.tell(
            processor,
            KafkaResponse(msg.conn_id, msg.seq, frame, respond, close, msg.api_key,
                          msg.correlation_id, msg.recv_ns, [queue_ns, local_ns, remote_ns],
                          regions or []),
        )

    def poll_timeout_ms(self) -> int | None:
        if self.pending:
            # the next sweep: within a second, sooner for a call's deadline
            left_ns = self.next_sweep_ns - self._monotonic_ns()
            return 0 if left_ns <= 0 else min(SWEEP_MS, -(-left_ns // 1_000_000))
        # only a handled message (a request, an answer) makes one pending: the worker
        # loop skips this actor till then (quiet_turns, inline: about once a request)
        self._quiet_at = self.messages_handled
        return None

    def on_turn(self) -> None:
        if not self.pending:
            self._quiet_at = self.messages_handled  # as poll_timeout_ms
            return
        now = self._monotonic_ns()
        if now < self.next_sweep_ns:
            return
        self._sweep(now)

    def _sweep(self, now: int) -> None:
        """What is pending, looked at once a second and at each call's deadline: a call
        past its deadline is answered by it (_time_out); a request waiting on a call without
        one past the abandon time is abandoned (its connection closed). Sets the next
        sweep: in a second, or at the soonest deadline still ahead."""
        next_sweep = now + SWEEP_MS * 1_000_000
        stale: dict[int, _InFlight] = {}
        due: list[int] = []
        abandon_after_ns = self.abandon_after_ns
        for rid, (st, i) in self.pending.items():
            call = st.calls[i]
            if call.on_timeout is not None:
                at = st.wait_start_ns + call.deadline_ms * 1_000_000
                if at <= now:
                    due.append(rid)
                elif at < next_sweep:
                    next_sweep = at
            elif now - st.wait_start_ns > abandon_after_ns + st.max_wait_ns:
                stale[id(st)] = st
        self.next_sweep_ns = next_sweep
        for state in stale.values():
            self._abandon(state, f"got no internal answer in "
                                 f"{self.abandon_after_ns // 1_000_000} ms")
        for rid in due:
            self._time_out(rid, now)

    def _time_out(self, rid: int, now: int) -> None:
        """A call past its deadline: its ``on_timeout`` answer is taken as the real one
        would be, and the real one, should it come, is dropped (on_reply)."""
        entry = self.pending.pop(rid, None)
        if entry is None:  # its request was abandoned, or ended, in this sweep
            return
        state, i = entry
        call = state.calls[i]
        withheld = call.make is _withheld
        if not withheld:  # (a call never sent gets no answer, late or not, to drop)
            self.timed_out_ids[rid] = None
            if len(self.timed_out_ids) > TIMED_OUT_KEPT:
                del self.timed_out_ids[next(iter(self.timed_out_ids))]
        self.node.metrics.incr("internal_calls_timed_out")
        # (one shortened while its process was marked does not mark it again: that process
        # answered since, and was slower than SILENT_DEADLINE_MS alone; nor does a withheld
        # one, shortened too)
        if (call.silence and call.deadline_ms > _short_deadline_ms(call)
                and call.target.node not in self.silent_nodes):
            self._mark_silent(call.target.node, now)
        # (a withheld call is counted in internal_calls_withheld, not logged: it was not
        # sent, so its process did not fail to answer it)
        admitted = None if withheld else self.deadline_warnings.admit(call.target.node, now)
        if admitted is not None:
            what = (f"API {state.header.api_key} on connection {state.msg.conn_id}"
                    if state.header is not None
                    else f"{type(state.msg).__name__} from {state.reply_to}")
            self.log.warning("{} got no answer from {} within {} ms; answered by the call's "
                             "deadline ({} more such held back since the last line; one line "
                             "{})", what, call.target, call.deadline_ms, admitted[0],
                             _interval_text(self.deadline_warnings.interval_ns))
        try:
            assert call.on_timeout is not None  # (only such calls are due)
            reply = call.on_timeout(rid)
        except Exception as exc:  # the API's own answer failed: the request fails as any
            for other in state.req_ids:
                self.pending.pop(other, None)
            _close_reply_regions(state.replies)
            if state.reply_to is not None:
                self._answer_internal_failure(state, exc)
            else:
                self._answer_failure(state, exc, "failed", None)
            return
        state.replies[i] = reply
        state.waiting -= 1
        if state.waiting == 0:
            self._advance(state, state.replies)

    def _to_silent(self, call: Call, now: int) -> Call:
        """A Call.silence call to a process marked silent: its deadline at most its
        max_wait_ms plus its carry_ms plus SILENT_DEADLINE_MS; sent as the new probe if the
        last one went PROBE_AFTER_MS ago or more, else withheld (its ``make`` _withheld:
        not sent, answered by that deadline)."""
        node = call.target.node
        short = call._replace(deadline_ms=min(call.deadline_ms, _short_deadline_ms(call)))
        if now - self.probes[node] < PROBE_AFTER_MS * 1_000_000:
            self.node.metrics.incr("internal_calls_withheld")
            return short._replace(make=_withheld)
        self.probes[node] = now
        self.node.metrics.incr("internal_calls_to_silent")
        return short

    def _mark_silent(self, node: str, now: int) -> None:
        """A call's deadline answered it: ``node``'s process is taken as silent till it
        answers anything (or is started again); that call is its probe."""
        self.silent_nodes[node] = now
        self.probes[node] = now
        self.node.metrics.incr("processes_marked_silent")
        admitted = self.silence_warnings.admit((node, True), now)
        if admitted is not None:
            self.log.warning("process {} is taken as silent: a call to it got no answer by "
                             "its deadline; until it answers, its fetches', ListOffsets' and "
                             "other calls a live process answers at once get at most {} ms "
                             "past their max_wait_ms (and the time to carry their bytes), "
                             "and only one at a time is sent to it (one per {} s at most), "
                             "the others answered by that deadline unsent; Produce appends "
                             "keep their own deadlines ({} more such held back since the "
                             "last line; one line {})", node, SILENT_DEADLINE_MS,
                             PROBE_AFTER_MS // 1000, admitted[0],
                             _interval_text(self.silence_warnings.interval_ns))

    def _heard(self, node: str) -> None:
        """An answer from ``node``, marked silent: it runs again, its calls get their own
        deadlines."""
        now = self._monotonic_ns()
        since = self.silent_nodes.pop(node)
        self.probes.pop(node, None)
        self.node.metrics.incr("processes_answering_again")
        admitted = self.silence_warnings.admit((node, False), now)
        if admitted is not None:
            self.log.warning("process {} answers again, {} ms after it was taken as silent; "
                             "its calls get their own deadlines ({} more such held back since "
                             "the last line; one line {})", node, (now - since) // 1_000_000,
                             admitted[0], _interval_text(self.silence_warnings.interval_ns))

    def _restarted_while_silent(self, node: str) -> None:
        """``node``'s process, marked silent, was started again: a new process, ready (the
        silent one is gone, it did not answer); its calls get their own deadlines.
        Counted apart from processes_answering_again, which says a silent process ran
        again (a pause, not a death)."""
        now = self._monotonic_ns()
        since = self.silent_nodes.pop(node)
        self.probes.pop(node, None)
        self.node.metrics.incr("silent_processes_restarted")
        admitted = self.silence_warnings.admit((node, "restarted"), now)
        if admitted is not None:
            self.log.warning("process {} was started again, {} ms after it was taken as "
                             "silent; no longer taken as silent, its calls get their own "
                             "deadlines ({} more such held back since the last line; one "
                             "line {})", node, (now - since) // 1_000_000, admitted[0],
                             _interval_text(self.silence_warnings.interval_ns))

    def _abandon(self, state: _InFlight, why: str) -> None:
        for rid in state.req_ids:
            self.pending.pop(rid, None)
        _close_reply_regions(state.replies)
        self.node.metrics.incr("requests_abandoned")
        if state.reply_to is not None:
            self.log.error("{} from {} {}; answered in error", type(state.msg).__name__,
                           state.reply_to, why)
            if isinstance(state.msg, ReplicaFetch):  # it backs them off, then goes on
                self.tell(state.reply_to, _replica_fetch_failed(state.msg))
            return
        self.log.error("API {} request (correlation {}) on connection {} {}; closing the "
                       "connection", state.header.api_key, state.msg.correlation_id,
                       state.msg.conn_id, why)
        self._send(state.msg, b"", False, True, state.start_ns, state.local_ns,
                   state.remote_ns)

    @handles(ProcessStarted)
    def on_process_restarted(self, msg: ProcessStarted) -> None:
        """Process ``msg.process`` of this broker died and was started again as generation
        ``msg.generation`` (num.processes > 1; from the ReplicaManager in a cluster, from the
        process itself on a single node): what its actors owed this handler will never
        come. Those requests end now (the connection closes, the client retries) instead
        of after the abandon timeout.

        Every Append this handler sent to that process until now was stamped with an older
        generation, and the new process refuses it should a link still deliver it: what
        ends here is never written later. From now on its Appends to that process carry
        the new generation; a ProcessStarted not newer than what it knows (told twice,
        or late) changes nothing, since what it sent since was stamped with the new one."""
        nodes = self.ctx.topology.process_nodes
        if not msg.restarted or not 0 < msg.process < len(nodes):
            return
        gone = nodes[msg.process]
        generations = self.ctx.process_generations
        if msg.generation <= generations.get(gone, 0):
            return
        generations[gone] = msg.generation
        if gone in self.silent_nodes:  # a new process, ready: not the one that was silent
            self._restarted_while_silent(gone)
        # (a call to it that its deadline answered already waits no more: by call, not by
        # the request's targets; nor does one withheld, never sent: its short deadline
        # answers it)
        states = {id(st): st for st, i in self.pending.values()
                  if st.calls[i].target.node == gone and st.calls[i].make is not _withheld}
        for state in states.values():
            self._abandon(state, f"waited for process {msg.process}, which restarted")

    # -------------------------------------------------------------- metadata
    @handles(MetadataUpdate)
    def on_metadata(self, msg: MetadataUpdate) -> None:
        self.ctx.topics = dict(msg.topics)
        if msg.ack_id:
            self.reply(MetadataApplied(msg.ack_id))

    @handles(UpdateMetadata)
    def on_cluster_metadata(self, msg: UpdateMetadata) -> None:
        """Cluster mode: the controller's UpdateMetadata, fenced and forwarded by the
        ReplicaManager."""
        if self.ctx.cluster is not None:
            self.ctx.apply_metadata(msg)

    @handles(MetadataSync)
    def on_metadata_sync(self, msg: MetadataSync) -> None:
        """Cluster mode: the ReplicaManager's UpdateMetadata before this one are applied
        (they came first, from the same sender); it answers a topic change once every
        handler of the node said so."""
        self.reply(MetadataSynced(msg.version))

    @handles(GetStats)
    def stats(self, _msg: GetStats) -> dict[str, Any]:
        cluster = self.ctx.cluster
        return {"requests": self.requests, "in_flight": len(self.pending),
                "refused": self.closed_for_bad_input, "topics": sorted(self.ctx.topics),
                "metadata_updates": cluster.updates if cluster is not None else 0}


def _short_deadline_ms(call: Call) -> int:
    """The deadline of a Call.silence call to a process taken as silent (at most its own):
    its max_wait_ms, the time to carry its bytes and SILENT_DEADLINE_MS."""
    return max(0, call.max_wait_ms) + call.carry_ms + SILENT_DEADLINE_MS


def _replica_fetch_failed(msg: ReplicaFetch) -> ReplicaFetchResponse:
    """A ReplicaFetch answered in error: UNKNOWN_SERVER_ERROR on each of its partitions."""
    return ReplicaFetchResponse(msg.req_id, [
        ReplicaFetchPartition(r.topic, r.partition, int(ErrorCode.UNKNOWN_SERVER_ERROR),
                              -1, -1, -1, -1, -1, b"") for r in msg.rows])


def _close_reply_regions(replies: list[Any] | None) -> None:
    """Close the file regions of internal answers that will not be used (ReadDone rows)."""
    for reply in replies or ():
        if type(reply) is ReadDone:
            close_regions(reply.rows)


def _close_response_regions(data: Any) -> None:
    """Close the regions in a response dict that could not be encoded (Fetch records)."""
    if isinstance(data, dict):
        for value in data.values():
            _close_response_regions(value)
    elif isinstance(data, list):
        for value in data:
            _close_response_regions(value)
    elif type(data) is FileRegion:
        close_region(data)
