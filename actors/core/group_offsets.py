"""OffsetCommit and OffsetFetch: committed offsets, written to ``__consumer_offsets`` first."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence

from actors.core.group_base import (
    _OFFSET_STORE_ERRORS,
    GroupCoreBase,
    _PendingCommit,
    _PendingTxnCommit,
)
from actors.core.group_metadata import (
    GroupMetadata,
    GroupState,
    OffsetAndMetadata,
    RequestId,
    TopicPartition,
)
from actors.core.group_types import (
    Effect,
    OffsetCommitPartition,
    OffsetCommitResponse,
    OffsetDeleteResponse,
    OffsetFetchPartition,
    OffsetFetchResponse,
    Respond,
)
from actors.core.offsets_codec import (
    OffsetCommitKey,
    OffsetCommitValue,
    OffsetsRecordError,
    Record,
    decode_record,
    offset_commit_record,
    offset_tombstone,
)
from wire.errors import ErrorCode

CONSUMER_PROTOCOL_TYPE = "consumer"
# completed topic deletions a coordinator remembers, to apply a resent one once
DELETIONS_REMEMBERED = 4096
# a topic deletion's tombstones share an append per __consumer_offsets partition, at most
# this many records and about this many bytes of keys a batch (under 80 KB with the
# records' overhead): well under message.max.bytes (1 MB by default), also where an admin
# lowered it
TOMBSTONES_PER_APPEND = 1000
TOMBSTONE_BYTES_PER_APPEND = 64 * 1024


def subscribed_topics(subscription: bytes) -> set[str] | None:
    """The topics of a consumer protocol Subscription (any version: the topic array comes
    right after the version), or None if the bytes are not one."""
    data = bytes(subscription)
    try:
        count = int.from_bytes(data[2:6], "big", signed=True)
        if count < 0 or len(data) < 6:
            return None
        pos, topics = 6, set()
        for _ in range(count):
            size = int.from_bytes(data[pos:pos + 2], "big", signed=True)
            if size < 0 or pos + 2 + size > len(data):
                return None
            topics.add(data[pos + 2:pos + 2 + size].decode("utf-8"))
            pos += 2 + size
        return topics
    except UnicodeDecodeError:
        return None


class GroupOffsets(GroupCoreBase):
    """The offsets part of the group core (a part of GroupCoordinatorCore)."""

    __slots__ = ()

    def offset_commit(
        self,
        request_id: RequestId,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        partitions: Sequence[OffsetCommitPartition],
        now_ms: int,
    ) -> list[Effect]:
        """An OffsetCommit. Generation -1 with an empty member id is a "simple" commit.

        Simple commits are accepted only while the group is Empty or unknown
        (a consumer using ``assign()`` and Kafka only for offset storage).
        """
        fx: list[Effect] = []

        def refuse(code: ErrorCode) -> list[Effect]:
            return self._respond(
                fx,
                request_id,
                OffsetCommitResponse(tuple((p.topic, p.partition, code) for p in partitions)),
            )

        group = self._groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                # A member of a generation we do not know: this group is not ours (any more).
                return refuse(ErrorCode.ILLEGAL_GENERATION)
            group = GroupMetadata(group_id)
            return self._store_offsets(request_id, group, partitions, now_ms, fx, new_group=True)
        if group.is_state(GroupState.DEAD):
            return refuse(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        if group.is_static_member_fenced(member_id, group_instance_id):
            return refuse(ErrorCode.FENCED_INSTANCE_ID)
        if generation_id < 0 and group.is_state(GroupState.EMPTY):
            return self._store_offsets(request_id, group, partitions, now_ms, fx)
        if not group.has(member_id):
            return refuse(ErrorCode.UNKNOWN_MEMBER_ID)
        if generation_id != group.generation_id:
            return refuse(ErrorCode.ILLEGAL_GENERATION)
        if group.is_state(GroupState.COMPLETING_REBALANCE):
            # The member has its new generation but no assignment yet.
            return refuse(ErrorCode.REBALANCE_IN_PROGRESS)
        # Stable, or PreparingRebalance: commits are still allowed; the
        # heartbeat tells the member to rejoin.
        member = group.members[member_id]
        self._reset_heartbeat(group, member, now_ms, member.session_timeout_ms, fx)
        return self._store_offsets(request_id, group, partitions, now_ms, fx)

    def _store_offsets(
        self,
        request_id: RequestId,
        group: GroupMetadata,
        partitions: Sequence[OffsetCommitPartition],
        now_ms: int,
        fx: list[Effect],
        new_group: bool = False,
    ) -> list[Effect]:
        order: list[tuple[str, int, ErrorCode]] = []
        offsets: dict[TopicPartition, OffsetAndMetadata] = {}
        records: list[Record] = []
        for p in partitions:
            metadata = p.metadata or ""
            if len(metadata.encode("utf-8")) > self.config.offset_metadata_max_bytes:
                order.append((p.topic, p.partition, ErrorCode.OFFSET_METADATA_TOO_LARGE))
                continue
            order.append((p.topic, p.partition, ErrorCode.NONE))
            value = OffsetAndMetadata(p.offset, p.leader_epoch, metadata, now_ms)
            offsets[(p.topic, p.partition)] = value
            records.append(
                offset_commit_record(
                    group.group_id,
                    p.topic,
                    p.partition,
                    OffsetCommitValue(p.offset, p.leader_epoch, metadata, now_ms),
                )
            )
        if not records:
            return self._respond(fx, request_id, OffsetCommitResponse(tuple(order)))
        if new_group:
            self._hold(group)
        append_id = self._append(group, tuple(records), fx)
        self._pending_appends[append_id] = _PendingCommit(request_id, group, order, offsets)
        return fx

    def offset_fetch(
        self,
        request_id: RequestId,
        group_id: str,
        partitions: Sequence[TopicPartition] | None,
        require_stable: bool = False,
    ) -> list[Effect]:
        """An OffsetFetch; ``partitions=None`` asks for every committed offset of the group.

        Answered whatever the group's state (it may use Kafka for offsets only).
        A partition with no commit gets offset -1 and no error.
        """
        group = self._groups.get(group_id)
        offsets = group.offsets if group is not None else {}
        wanted = sorted(offsets) if partitions is None else list(partitions)
        result = []
        unstable: set[TopicPartition] = set()
        if require_stable:
            for groups in self._txn_offsets.values():
                unstable.update(groups.get(group_id, {}))
        for topic, partition in wanted:
            o = offsets.get((topic, partition))
            if (topic, partition) in unstable:
                result.append(OffsetFetchPartition(topic, partition, -1, -1, "",
                                                   ErrorCode.UNSTABLE_OFFSET_COMMIT))
            elif o is None:
                result.append(OffsetFetchPartition(topic, partition, -1, -1, ""))
            else:
                result.append(
                    OffsetFetchPartition(topic, partition, o.offset, o.leader_epoch, o.metadata)
                )
        return [Respond(request_id, OffsetFetchResponse(ErrorCode.NONE, tuple(result)))]

    def _on_commit_appended(
        self, pending: _PendingCommit, error_code: ErrorCode, fx: list[Effect]
    ) -> None:
        if error_code is ErrorCode.NONE:
            if not pending.group.is_state(GroupState.DEAD):
                pending.group.offsets.update(pending.offsets)
            code = ErrorCode.NONE
        else:
            code = _OFFSET_STORE_ERRORS.get(error_code, error_code)
        result = tuple(
            (topic, partition, code if err is ErrorCode.NONE else err)
            for topic, partition, err in pending.order
        )
        self._respond(fx, pending.request_id, OffsetCommitResponse(result))

    def topics_deleted(self, topics: Sequence[str]) -> list[Effect]:
        """Kafka's onPartitionsDeleted: every group loses its offsets of deleted topics
        (with tombstones), so consumers of a namesake made later start where
        auto.offset.reset says, not at the old topic's offsets."""
        return self._remove_topics(set(topics))

    def _drop_pending_offsets(self, group_id: str,
                              dropped: Callable[[TopicPartition], bool]) -> None:
        """Kafka's GroupMetadata.removeOffsets: offsets removed from a group are removed
        from its commits still being written and its open transactions' commits too, or
        the append's answer (or the transaction's commit marker) would put them back."""
        for pending in self._pending_appends.values():
            if (isinstance(pending, _PendingCommit | _PendingTxnCommit)
                    and pending.group.group_id == group_id):
                for tp in [tp for tp in pending.offsets if dropped(tp)]:
                    del pending.offsets[tp]
        for by_group in self._txn_offsets.values():
            offsets = by_group.get(group_id)
            if offsets:
                for tp in [tp for tp in offsets if dropped(tp)]:
                    del offsets[tp]

    def topic_deletions(self, started: Mapping[str, str], completed: Mapping[str, str],
                        now_ms: int) -> list[Effect]:
        """A cluster's topic deletions (name -> topic id, "" for none), from UpdateMetadata.

        At a completion (the controller deleted the znodes) every group loses every offset
        of that topic, with tombstones, in memory, in pending commits and in open
        transactions (Kafka's removeOffsets; Kafka does it at the start, from the first
        UpdateMetadata naming the partitions deleted; a start is not acted on here, so a
        deletion that never completes takes nothing). No namesake's offset can be here
        yet: the controller makes a namesake only after the completion, whose
        UpdateMetadata this node's ReplicaManager handles (telling this coordinator)
        before its handlers learn of the namesake, and the handlers refuse commits to a
        topic being deleted. A completion heard twice (a resend) is applied once: a
        namesake's offsets committed in between stay. ``started`` and ``now_ms`` are
        kept for the message's shape and the log.
        """
        del started, now_ms
        return self._remove_topics(self.new_completions(completed, record=True))

    def new_completions(self, completed: Mapping[str, str], record: bool = False) -> set[str]:
        """The names of ``completed`` not applied before (``record``: now marked applied)."""
        fences: set[str] = set()
        for name, topic_id in completed.items():
            key = (name, topic_id)
            if key in self._deletions_done:
                continue
            if record:
                self._deletions_done[key] = None
                if len(self._deletions_done) > DELETIONS_REMEMBERED:
                    del self._deletions_done[next(iter(self._deletions_done))]
            fences.add(name)
        return fences

    def topics_deleted_in(self, topics: set[str], partitions: set[int] | None) -> list[Effect]:
        """Deletions met while the groups of ``partitions`` (None: all) were being loaded,
        applied to those groups once they are: the groups held then had them on arrival,
        and those restored after would have the deleted topics' offsets back."""
        return self._remove_topics(topics, partitions)

    def _remove_topics(self, names: set[str],
                       partitions: Collection[int] | None = None) -> list[Effect]:
        """Every group (of ``partitions`` of __consumer_offsets, if given) loses its
        offsets of ``names``, with tombstones: committed ones, those of commits still
        being appended (their records are in the log before the tombstones) and those of
        open transactions (Kafka's GroupMetadata.removeOffsets). Given partitions, only
        their groups are looked at (the index ``unload`` uses), not every group held: a
        single node's load applies the deletions it held to each partition restored."""
        fx: list[Effect] = []
        if not names:
            return fx

        # a commit still being appended is in the log before the tombstone: it goes too
        gone: dict[str, tuple[GroupMetadata, set[TopicPartition]]] = {}
        for pending in self._pending_appends.values():
            if isinstance(pending, _PendingCommit) and (
                    partitions is None
                    or self.partition_for(pending.group.group_id) in partitions):
                tps = [tp for tp in pending.offsets if tp[0] in names]
                for tp in tps:
                    del pending.offsets[tp]
                if tps:
                    gone.setdefault(pending.group.group_id, (pending.group, set()))[1].update(tps)
        for group in self.groups_of(partitions):
            tps = [tp for tp in group.offsets if tp[0] in names]
            for tp in tps:
                del group.offsets[tp]
            if tps:
                gone.setdefault(group.group_id, (group, set()))[1].update(tps)
        # the tombstones of many groups share an append per partition of
        # __consumer_offsets (Kafka's cleanupGroupMetadata appends one per group): a
        # topic every group consumed made one append per group, each encoded, sent,
        # written and waited for on its own (20,000 groups: 20,000 appends, in the worker
        # loop the shards share); a batch of at most TOMBSTONES_PER_APPEND records or
        # about TOMBSTONE_BYTES_PER_APPEND bytes. A failed append is not sent again (nor
        # is Kafka's, appended with acks 0 and its error only logged): the offsets are
        # gone from memory but not from the log, and a load after a failover brings
        # them back (a later deletion of the topic or the offsets' retention removes
        # them). Sent again it could be written after a commit of the same key
        # acknowledged meanwhile (the topic made anew, the append that failed by a
        # timeout written after all) and lose that commit at the next load, which is
        # worse. The batch enlarges the hole: one failure loses up to
        # TOMBSTONES_PER_APPEND records of many groups, not one group's.
        by_partition: dict[int, list[Record]] = {}
        for group, taken in gone.values():
            by_partition.setdefault(self.partition_for(group.group_id), []).extend(
                offset_tombstone(group.group_id, t, p) for t, p in sorted(taken))
        for partition, tombstones in sorted(by_partition.items()):
            batch: list[Record] = []
            size = 0
            for record in tombstones:
                if batch and (len(batch) >= TOMBSTONES_PER_APPEND
                              or size + len(record.key) > TOMBSTONE_BYTES_PER_APPEND):
                    self._append_to(partition, tuple(batch), fx)
                    batch, size = [], 0
                batch.append(record)
                size += len(record.key)
            self._append_to(partition, tuple(batch), fx)
        for pending in self._pending_appends.values():  # in an open transaction
            if isinstance(pending, _PendingTxnCommit) and (
                    partitions is None
                    or self.partition_for(pending.group.group_id) in partitions):
                for tp in [tp for tp in pending.offsets if tp[0] in names]:
                    del pending.offsets[tp]
        for by_group in self._txn_offsets.values():
            for group_id, offsets in by_group.items():
                if partitions is not None and self.partition_for(group_id) not in partitions:
                    continue  # (groups with open transactions: few next to those held)
                for tp in [tp for tp in offsets if tp[0] in names]:
                    del offsets[tp]
        return fx

    def offset_delete(
        self,
        request_id: RequestId,
        group_id: str,
        partitions: Sequence[TopicPartition],
    ) -> list[Effect]:
        """OffsetDelete, with Kafka's rules: an Empty group loses the offsets asked for; a
        consumer group with members keeps those of topics it subscribes to
        (GROUP_SUBSCRIBED_TO_TOPIC) and loses the others; any other group with members
        refuses (NON_EMPTY_GROUP). The offsets get tombstones in ``__consumer_offsets``.
        """
        fx: list[Effect] = []
        group = self._groups.get(group_id)
        if group is None or group.is_state(GroupState.DEAD):
            return self._respond(fx, request_id,
                                 OffsetDeleteResponse(ErrorCode.GROUP_ID_NOT_FOUND))
        subscribed: set[str] = set()
        if not group.is_state(GroupState.EMPTY):
            if group.protocol_type != CONSUMER_PROTOCOL_TYPE:
                return self._respond(fx, request_id,
                                     OffsetDeleteResponse(ErrorCode.NON_EMPTY_GROUP))
            for member in group.members.values():
                names = ([group.protocol_name] if group.protocol_name
                         else [name for name, _ in member.protocols])
                for name in names:
                    topics = subscribed_topics(member.metadata(name))
                    subscribed |= topics or set()
        results = []
        gone = []
        deleted: set[TopicPartition] = set()
        for topic, partition in partitions:
            if topic in subscribed:
                results.append((topic, partition, ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC))
                continue
            results.append((topic, partition, ErrorCode.NONE))
            deleted.add((topic, partition))
            if group.offsets.pop((topic, partition), None) is not None:
                gone.append(offset_tombstone(group_id, topic, partition))
        self._drop_pending_offsets(group_id, deleted.__contains__)
        if gone:
            self._append(group, tuple(gone), fx)
        return self._respond(fx, request_id,
                             OffsetDeleteResponse(ErrorCode.NONE, tuple(results)))

    # --- transactional offsets (KIP-98, KIP-447) --------------------------------------

    def txn_offset_commit(
        self,
        request_id: RequestId,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        partitions: Sequence[OffsetCommitPartition],
        now_ms: int,
    ) -> list[Effect]:
        """A TxnOffsetCommit: written now as the producer's transactional batch, visible
        to OffsetFetch only once its transaction commits (:meth:`complete_txn`).

        With KIP-447's group metadata (generation >= 0) the member is checked as for
        an OffsetCommit; without it (older clients) any producer may commit.
        """
        fx: list[Effect] = []

        def refuse(code: ErrorCode) -> list[Effect]:
            return self._respond(fx, request_id, OffsetCommitResponse(
                tuple((p.topic, p.partition, code) for p in partitions)))

        group = self._groups.get(group_id)
        new_group = group is None
        if group is None:
            group = GroupMetadata(group_id)
        elif group.is_state(GroupState.DEAD):
            return refuse(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        elif generation_id >= 0 or member_id:
            if group.is_static_member_fenced(member_id, group_instance_id):
                return refuse(ErrorCode.FENCED_INSTANCE_ID)
            if member_id and not group.has(member_id):
                return refuse(ErrorCode.UNKNOWN_MEMBER_ID)
            if generation_id >= 0 and generation_id != group.generation_id:
                return refuse(ErrorCode.ILLEGAL_GENERATION)
        order: list[tuple[str, int, ErrorCode]] = []
        offsets: dict[TopicPartition, OffsetAndMetadata] = {}
        records: list[Record] = []
        for p in partitions:
            metadata = p.metadata or ""
            if len(metadata.encode("utf-8")) > self.config.offset_metadata_max_bytes:
                order.append((p.topic, p.partition, ErrorCode.OFFSET_METADATA_TOO_LARGE))
                continue
            order.append((p.topic, p.partition, ErrorCode.NONE))
            offsets[(p.topic, p.partition)] = OffsetAndMetadata(p.offset, p.leader_epoch,
                                                                metadata, now_ms)
            records.append(offset_commit_record(
                group_id, p.topic, p.partition,
                OffsetCommitValue(p.offset, p.leader_epoch, metadata, now_ms)))
        if not records:
            return self._respond(fx, request_id, OffsetCommitResponse(tuple(order)))
        if new_group:
            self._hold(group)
        append_id = self._append(group, tuple(records), fx, (producer_id, producer_epoch))
        self._pending_appends[append_id] = _PendingTxnCommit(request_id, group, producer_id,
                                                             order, offsets)
        return fx

    def _on_txn_commit_appended(self, pending: _PendingTxnCommit, error_code: ErrorCode,
                                fx: list[Effect]) -> None:
        if error_code is ErrorCode.NONE:
            if self._groups.get(pending.group.group_id) is pending.group:
                by_group = self._txn_offsets.setdefault(pending.producer_id, {})
                by_group.setdefault(pending.group.group_id, {}).update(pending.offsets)
            # else its partition was unloaded meanwhile (and maybe loaded anew, from the
            # log, which has this commit): not held here, as unload drops them
            code = ErrorCode.NONE
        elif error_code is ErrorCode.INVALID_PRODUCER_EPOCH:
            code = ErrorCode.PRODUCER_FENCED
        else:
            code = _OFFSET_STORE_ERRORS.get(error_code, error_code)
        result = tuple(
            (topic, partition, code if err is ErrorCode.NONE else err)
            for topic, partition, err in pending.order)
        self._respond(fx, pending.request_id, OffsetCommitResponse(result))

    def complete_txn(self, producer_id: int, partition: int, commit: bool) -> list[Effect]:
        """The marker of ``producer_id``'s transaction is in ``partition`` of
        ``__consumer_offsets``: its offsets for the groups stored there become the
        committed ones (commit) or are dropped (abort)."""
        by_group = self._txn_offsets.get(producer_id)
        if not by_group:
            return []
        for group_id in [g for g in by_group if self.partition_for(g) == partition]:
            offsets = by_group.pop(group_id)
            group = self._groups.get(group_id)
            if commit and group is not None and not group.is_state(GroupState.DEAD):
                group.offsets.update(offsets)
        if not by_group:
            del self._txn_offsets[producer_id]
        return []

    def has_pending_txn_offsets(self, group_id: str) -> bool:
        return any(group_id in groups for groups in self._txn_offsets.values())

    def load_txn_offsets(self, producer_id: int,
                         records: Sequence[tuple[bytes, bytes | None]]) -> None:
        """Offsets of a transaction still open when its partition was loaded: pending."""
        for key_bytes, value_bytes in records:
            try:
                key, value = decode_record(key_bytes, value_bytes)
            except OffsetsRecordError:
                self.skipped_records += 1
                continue
            if not isinstance(key, OffsetCommitKey) or not isinstance(value, OffsetCommitValue):
                continue
            if key.group not in self._groups:
                self._hold(GroupMetadata(key.group))
            self._txn_offsets.setdefault(producer_id, {}).setdefault(key.group, {})[
                (key.topic, key.partition)] = OffsetAndMetadata(
                    value.offset, value.leader_epoch, value.metadata, value.commit_timestamp_ms)
