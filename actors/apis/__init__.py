"""The Kafka APIs, one module per family, each a generator driven by a RequestHandler.

Families: ``produce``, ``fetch``, ``list_offsets``, ``offset_for_leader_epoch``,
``metadata`` (Metadata, topic creation and deletion, InitProducerId), ``groups``,
``transactions``, ``describe_producers`` (DescribeProducers, KIP-664), ``configs``
(DescribeConfigs, AlterConfigs, IncrementalAlterConfigs) and ``admin``
(CreatePartitions, DeleteRecords, DescribeLogDirs, DescribeTopicPartitions,
DeleteGroups, OffsetDelete), ``acls`` (Describe/Create/DeleteAcls) and ``users``
(Describe/AlterUserScramCredentials).

An API function gets the handler's context, the request header and the
decoded request; it yields the calls it needs answered (``Call``: a message to
a partition shard, the controller, a group coordinator) and finally returns a
``Respond`` (see ``base``). The handler owns the waiting, so none blocks.
"""

from __future__ import annotations

from actors.apis.admin import (
    handle_alter_partition_reassignments,
    handle_create_partitions,
    handle_delete_groups,
    handle_delete_records,
    handle_describe_log_dirs,
    handle_describe_topic_partitions,
    handle_list_partition_reassignments,
    handle_offset_delete,
)
from actors.apis.base import ApiGen, Call, HandlerContext, Respond
from actors.apis.configs import (
    handle_alter_configs,
    handle_describe_configs,
    handle_incremental_alter_configs,
)
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

__all__ = [
    "ApiGen",
    "Call",
    "HandlerContext",
    "Respond",
    "handle_alter_configs",
    "handle_alter_partition_reassignments",
    "handle_create_partitions",
    "handle_create_topics",
    "handle_delete_groups",
    "handle_delete_records",
    "handle_delete_topics",
    "handle_describe_configs",
    "handle_describe_groups",
    "handle_describe_log_dirs",
    "handle_describe_topic_partitions",
    "handle_fetch",
    "handle_find_coordinator",
    "handle_heartbeat",
    "handle_incremental_alter_configs",
    "handle_init_producer_id",
    "handle_join_group",
    "handle_leave_group",
    "handle_list_groups",
    "handle_list_offsets",
    "handle_list_partition_reassignments",
    "handle_metadata",
    "handle_offset_commit",
    "handle_offset_delete",
    "handle_offset_fetch",
    "handle_offset_for_leader_epoch",
    "handle_produce",
    "handle_sync_group",
]
