"""Carry out the controller core's metadata writes on a MetadataStore.

One function per write effect, all fenced by the controller's epoch; the
outcome is the event the core expects back. Refused partition writes are
followed by a read, so the core learns the state it lost to.
"""

from __future__ import annotations

from collections.abc import Hashable

from actors.core.cluster_model import LeaderAndIsr, TopicPartition, WriteCode, WriteResult
from actors.core.controller_events import (
    CreatePartitionStates,
    CreateTopicZnodes,
    DeleteTopicZnodes,
    MarkTopicsForDeletion,
    MetadataWrite,
    MetadataWriteFailed,
    MetadataWritten,
    RemoveTopicDeletionMarkers,
    SetTopicAssignment,
    UpdatePartitionStates,
)
from actors.metadata.store import (
    ControllerFence,
    ControllerMoved,
    MetadataError,
    MetadataStore,
    MetadataUnavailable,
    TopicExists,
    UnknownTopic,
)

_OK = WriteResult(WriteCode.OK, 0)


def execute_write(effect: MetadataWrite, store: MetadataStore,
                  fence: ControllerFence) -> MetadataWritten | MetadataWriteFailed:
    """Perform ``effect``; ControllerMoved propagates (the caller resigns)."""
    try:
        if isinstance(effect, SetTopicAssignment):
            result = store.set_topic_assignment(effect.topic, effect.assignment, fence,
                                                clear_adoption=effect.clear_adoption)
            # refused: the znode as it is now, for the core to try again at its version
            now = ({effect.topic: store.get_topic_assignments([effect.topic]).get(effect.topic)}
                   if result.code is WriteCode.BAD_VERSION else {})
            return MetadataWritten(effect.write_id, {effect.topic: result}, {}, now)
        return MetadataWritten(effect.write_id, *_perform(effect, store, fence))
    except MetadataUnavailable as exc:
        return MetadataWriteFailed(effect.write_id, str(exc))


def _perform(effect: MetadataWrite, store: MetadataStore, fence: ControllerFence
             ) -> tuple[dict[Hashable, WriteResult], dict[TopicPartition, LeaderAndIsr | None]]:
    if isinstance(effect, CreateTopicZnodes):
        try:
            version = store.create_topic(effect.topic, effect.assignment, dict(effect.configs),
                                         fence)
            return {effect.topic: WriteResult(WriteCode.OK, version)}, {}
        except TopicExists as exc:
            return {effect.topic: WriteResult(WriteCode.NODE_EXISTS, -1, str(exc))}, {}
    if isinstance(effect, (CreatePartitionStates, UpdatePartitionStates)):
        states = dict(effect.states)
        if isinstance(effect, CreatePartitionStates):
            results = store.create_partition_states(states, fence)
        else:
            results = store.update_partition_states(states, fence)
        refused = [tp for tp, r in results.items()
                   if r.code in (WriteCode.BAD_VERSION, WriteCode.NODE_EXISTS)]
        current = dict(store.get_partition_states(refused)) if refused else {}
        keyed: dict[Hashable, WriteResult] = {tp: r for tp, r in results.items()}
        return keyed, current
    if isinstance(effect, MarkTopicsForDeletion):
        marked: dict[Hashable, WriteResult] = {}
        for topic in effect.topics:
            try:
                store.mark_topic_for_deletion(topic)
                marked[topic] = _OK
            except UnknownTopic as exc:
                marked[topic] = WriteResult(WriteCode.NO_NODE, -1, str(exc))
        return marked, {}
    if isinstance(effect, DeleteTopicZnodes):
        try:
            store.delete_topic(effect.topic, fence)
            return {effect.topic: _OK}, {}
        except (ControllerMoved, MetadataUnavailable):
            raise
        except MetadataError as exc:  # its znodes kept changing under it
            return {effect.topic: WriteResult(WriteCode.ERROR, -1, str(exc))}, {}
    if isinstance(effect, RemoveTopicDeletionMarkers):
        store.remove_topic_deletions(effect.topics, fence)
        return {t: _OK for t in effect.topics}, {}
    raise TypeError(f"not a metadata write: {effect!r}")
