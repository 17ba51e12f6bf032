"""Loading: the groups and offsets of a coordinator rebuilt from ``__consumer_offsets``."""

from __future__ import annotations

from collections.abc import Collection, Iterable

from actors.core.group_base import GroupCoreBase
from actors.core.group_metadata import (
    GroupMetadata,
    GroupState,
    MemberMetadata,
    OffsetAndMetadata,
    TopicPartition,
)
from actors.core.group_types import (
    NO_GENERATION,
    CancelTimer,
    Effect,
    JoinGroupResponse,
    Respond,
    SyncGroupResponse,
    heartbeat_timer,
    join_timer,
    pending_member_timer,
)
from actors.core.offsets_codec import (
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    OffsetsRecordError,
    Record,
    RecordKey,
    RecordValue,
    decode_record,
)
from wire.errors import ErrorCode


class GroupLoad(GroupCoreBase):
    """Loading, a part of GroupCoordinatorCore."""

    __slots__ = ()

    def load(
        self, records: Iterable[Record | tuple[bytes, bytes | None]], now_ms: int
    ) -> list[Effect]:
        """Rebuild groups from ``__consumer_offsets`` records, oldest first.

        Later records win, tombstones delete. Groups named by the records are
        replaced; others are left alone. Groups with members come back Stable
        with a fresh session for every member (as in Kafka: live consumers keep
        their generation across a coordinator restart). Records whose key
        version we do not know are skipped and counted in ``skipped_records``;
        a record that is corrupt raises :class:`OffsetsRecordError`.
        """
        decoded: list[tuple[RecordKey, RecordValue | None]] = []
        for rec in records:
            key_bytes, value_bytes = (
                (rec.key, rec.value) if isinstance(rec, Record) else (rec[0], rec[1])
            )
            try:
                decoded.append(decode_record(key_bytes, value_bytes))
            except OffsetsRecordError as e:
                if str(e).startswith("unknown __consumer_offsets key version"):
                    self.skipped_records += 1
                    continue
                raise
        return self.load_decoded(decoded, now_ms)

    def load_decoded(self, records: Iterable[tuple[RecordKey, RecordValue | None]],
                     now_ms: int) -> list[Effect]:
        """:meth:`load` of records already decoded (``decode_record``), oldest first. Only
        the groups the records name are replaced, so records given group by group, in
        any number of calls, rebuild the same groups as one call with them all."""
        metadata: dict[str, GroupMetadataValue | None] = {}
        offsets: dict[str, dict[TopicPartition, OffsetAndMetadata]] = {}
        for key, value in records:
            if isinstance(key, OffsetCommitKey):
                group_offsets = offsets.setdefault(key.group, {})
                if value is None:
                    group_offsets.pop((key.topic, key.partition), None)
                else:
                    assert isinstance(value, OffsetCommitValue)
                    group_offsets[(key.topic, key.partition)] = OffsetAndMetadata(
                        value.offset, value.leader_epoch, value.metadata, value.commit_timestamp_ms
                    )
            else:
                assert isinstance(key, GroupMetadataKey)
                assert value is None or isinstance(value, GroupMetadataValue)
                metadata[key.group] = value
                if value is None:
                    # A deleted group takes its offsets with it.
                    offsets.pop(key.group, None)
        fx: list[Effect] = []
        for gid in set(metadata) | set(offsets):
            old = self._release(gid)
            if old is not None:
                self._forget_timers(old, fx)
            value = metadata.get(gid)
            group_offsets = offsets.get(gid, {})
            if value is None and not group_offsets:
                continue
            group = GroupMetadata(gid, offsets=dict(group_offsets))
            if value is not None:
                self._restore_group(group, value, now_ms, fx)
            self._hold(group)
        return fx

    def _restore_group(
        self, group: GroupMetadata, value: GroupMetadataValue, now_ms: int, fx: list[Effect]
    ) -> None:
        group.generation_id = value.generation
        group.protocol_type = value.protocol_type or None
        group.protocol_name = value.protocol
        group.current_state_timestamp_ms = value.current_state_timestamp_ms
        for mv in value.members:
            protocols = [(value.protocol, mv.subscription)] if value.protocol else []
            group.add(
                MemberMetadata(
                    member_id=mv.member_id,
                    group_instance_id=mv.group_instance_id,
                    client_id=mv.client_id,
                    client_host=mv.client_host,
                    rebalance_timeout_ms=mv.rebalance_timeout_ms,
                    session_timeout_ms=mv.session_timeout_ms,
                    protocol_type=value.protocol_type,
                    protocols=protocols,
                    assignment=mv.assignment,
                )
            )
        if value.leader is not None and value.leader in group.members:
            group.leader_id = value.leader
        group.state = GroupState.STABLE if group.members else GroupState.EMPTY
        for m in group.members.values():
            self._reset_heartbeat(group, m, now_ms, m.session_timeout_ms, fx)

    def unload(self, partitions: Collection[int]) -> list[Effect]:
        """Forget the groups of these ``__consumer_offsets`` partitions (Kafka's
        removeGroupsForPartition): another node leads them now. Members parked in a
        JoinGroup or SyncGroup are answered NOT_COORDINATOR, so they find the new one.
        Their offsets of open transactions go too (Kafka keeps them in the group's
        GroupMetadata, dropped with it, and removeGroupFromAllProducers): the next leader
        reads them from the log and settles them at the markers it meets, which this
        node does not see; kept here, they would stay pending for ever after a load anew
        (OffsetFetch's require_stable answered UNSTABLE_OFFSET_COMMIT) or be made the
        group's offsets by a marker of a later load."""
        fx: list[Effect] = []
        for pid, by_group in list(self._txn_offsets.items()):
            for gid in [g for g in by_group if self.partition_for(g) in partitions]:
                del by_group[gid]
            if not by_group:
                del self._txn_offsets[pid]
        for gid in self.groups_in(partitions):
            group = self._release(gid)
            assert group is not None
            self._forget_timers(group, fx)
            for member in group.members.values():
                if member.join_request_id is not None:
                    fx.append(Respond(member.join_request_id, JoinGroupResponse(
                        ErrorCode.NOT_COORDINATOR, NO_GENERATION, None, None, "",
                        member.member_id)))
                if member.sync_request_id is not None:
                    fx.append(Respond(member.sync_request_id,
                                      SyncGroupResponse(ErrorCode.NOT_COORDINATOR)))
        return fx

    def _forget_timers(self, group: GroupMetadata, fx: list[Effect]) -> None:
        if group.join_deadline_ms is not None:
            fx.append(CancelTimer(join_timer(group.group_id)))
        for mid in group.members:
            fx.append(CancelTimer(heartbeat_timer(group.group_id, mid)))
        for mid in group.pending_members:
            fx.append(CancelTimer(pending_member_timer(group.group_id, mid)))
