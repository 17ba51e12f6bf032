"""Which Kafka API needs which operation on which resource: Kafka's ``KafkaApis`` checks, as data.

The request handlers read this table instead of scattering ``authorize``
calls: for each API key, the checks to make, where each resource name comes
from in the request, the error an unauthorized item gets, and what happens
to it (answered with the error, or left out of the answer as Metadata and
ListGroups do).

Conditional checks carry ``when``:

``always``        every request of the API
``transactional`` the request has a transactional id (Produce, InitProducerId)
``idempotent``    a producer id but no transactional id (Produce, InitProducerId);
                  Kafka (KIP-679) also grants it to a principal that may Write any topic
``consumer``      a Fetch from a consumer (replica id < 0)
``follower``      a Fetch from a replica (replica id >= 0)
``auto_create``   Metadata would create a missing topic
``all_topics``    the request asked for every topic (Metadata with topics null,
                  OffsetFetch without topics): unauthorized ones are left out
``group_key``, ``transaction_key``  FindCoordinator's key type
``config_resource_topic``, ``config_resource_broker``  the DescribeConfigs/AlterConfigs
                  resource type

``either``: the request is allowed if this check or the other holds (CreateTopics:
Create on the cluster, or Create on the topic).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kafka.protocol.api_key import ApiKey

from actors.security.acl import SUPPORTED_OPERATIONS, Operation, ResourceType
from wire.errors import ErrorCode

CLUSTER = "cluster"          # the one cluster resource, kafka-cluster
TOPIC = "topic"              # each topic named in the request
GROUP = "group"              # the request's group id
TRANSACTIONAL_ID = "transactional_id"
KEY = "key"                  # FindCoordinator's coordinator key(s)
CONFIG_RESOURCE = "config_resource"   # DescribeConfigs/AlterConfigs resource name

ANSWER = "answer"            # the item (or the whole request) is answered with the error
HIDE = "hide"                # the item is left out of the answer


@dataclass(frozen=True, slots=True)
class Check:
    operation: Operation
    resource_type: ResourceType
    name_from: str
    error: ErrorCode
    when: str = "always"
    denied: str = ANSWER
    either: Check | None = None


def _make(resource_type: ResourceType, name_from: str, error: ErrorCode
          ) -> Callable[..., Check]:
    def make(op: Operation, when: str = "always", denied: str = ANSWER,
             either: Check | None = None) -> Check:
        return Check(op, resource_type, name_from, error, when, denied, either)
    return make


_topic = _make(ResourceType.TOPIC, TOPIC, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
_group = _make(ResourceType.GROUP, GROUP, ErrorCode.GROUP_AUTHORIZATION_FAILED)
_cluster = _make(ResourceType.CLUSTER, CLUSTER, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
_txn = _make(ResourceType.TRANSACTIONAL_ID, TRANSACTIONAL_ID,
             ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)


Op = Operation
API_CHECKS: dict[int, tuple[Check, ...]] = {
    ApiKey.Produce: (_txn(Op.WRITE, when="transactional"),
                     _cluster(Op.IDEMPOTENT_WRITE, when="idempotent"),
                     _topic(Op.WRITE)),
    ApiKey.Fetch: (_cluster(Op.CLUSTER_ACTION, when="follower"),
                   _topic(Op.READ, when="consumer")),
    ApiKey.ListOffsets: (_topic(Op.DESCRIBE),),
    # KIP-320: ClusterAction on the cluster (a replica), else Describe on each topic
    ApiKey.OffsetForLeaderEpoch: (_cluster(Op.CLUSTER_ACTION, either=_topic(Op.DESCRIBE)),),
    ApiKey.Metadata: (_topic(Op.DESCRIBE),
                      _topic(Op.DESCRIBE, when="all_topics", denied=HIDE),
                      _cluster(Op.CREATE, when="auto_create", either=_topic(Op.CREATE))),
    ApiKey.OffsetCommit: (_group(Op.READ), _topic(Op.READ)),
    ApiKey.OffsetFetch: (_group(Op.DESCRIBE), _topic(Op.DESCRIBE),
                         _topic(Op.DESCRIBE, when="all_topics", denied=HIDE)),
    ApiKey.FindCoordinator: (
        Check(Op.DESCRIBE, ResourceType.GROUP, KEY, ErrorCode.GROUP_AUTHORIZATION_FAILED,
              when="group_key"),
        Check(Op.DESCRIBE, ResourceType.TRANSACTIONAL_ID, KEY,
              ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, when="transaction_key")),
    ApiKey.JoinGroup: (_group(Op.READ),),
    ApiKey.Heartbeat: (_group(Op.READ),),
    ApiKey.LeaveGroup: (_group(Op.READ),),
    ApiKey.SyncGroup: (_group(Op.READ),),
    ApiKey.DescribeGroups: (_group(Op.DESCRIBE),),
    ApiKey.ListGroups: (_cluster(Op.DESCRIBE, either=_group(Op.DESCRIBE, denied=HIDE)),),
    ApiKey.DeleteGroups: (_group(Op.DELETE),),
    ApiKey.OffsetDelete: (_group(Op.DELETE), _topic(Op.READ)),
    ApiKey.ApiVersions: (),
    ApiKey.SaslHandshake: (),
    ApiKey.SaslAuthenticate: (),
    ApiKey.CreateTopics: (_cluster(Op.CREATE, either=_topic(Op.CREATE)),
                          _topic(Op.DESCRIBE_CONFIGS, denied=HIDE)),
    ApiKey.DeleteTopics: (_topic(Op.DELETE),),
    ApiKey.DeleteRecords: (_topic(Op.DELETE),),
    ApiKey.CreatePartitions: (_topic(Op.ALTER),),
    ApiKey.DescribeConfigs: (
        Check(Op.DESCRIBE_CONFIGS, ResourceType.TOPIC, CONFIG_RESOURCE,
              ErrorCode.TOPIC_AUTHORIZATION_FAILED, when="config_resource_topic"),
        Check(Op.DESCRIBE_CONFIGS, ResourceType.CLUSTER, CLUSTER,
              ErrorCode.CLUSTER_AUTHORIZATION_FAILED, when="config_resource_broker")),
    ApiKey.AlterConfigs: (
        Check(Op.ALTER_CONFIGS, ResourceType.TOPIC, CONFIG_RESOURCE,
              ErrorCode.TOPIC_AUTHORIZATION_FAILED, when="config_resource_topic"),
        Check(Op.ALTER_CONFIGS, ResourceType.CLUSTER, CLUSTER,
              ErrorCode.CLUSTER_AUTHORIZATION_FAILED, when="config_resource_broker")),
    ApiKey.IncrementalAlterConfigs: (
        Check(Op.ALTER_CONFIGS, ResourceType.TOPIC, CONFIG_RESOURCE,
              ErrorCode.TOPIC_AUTHORIZATION_FAILED, when="config_resource_topic"),
        Check(Op.ALTER_CONFIGS, ResourceType.CLUSTER, CLUSTER,
              ErrorCode.CLUSTER_AUTHORIZATION_FAILED, when="config_resource_broker")),
    ApiKey.InitProducerId: (_txn(Op.WRITE, when="transactional"),
                            _cluster(Op.IDEMPOTENT_WRITE, when="idempotent")),
    ApiKey.AddPartitionsToTxn: (_txn(Op.WRITE), _topic(Op.WRITE)),
    ApiKey.AddOffsetsToTxn: (_txn(Op.WRITE), _group(Op.READ)),
    ApiKey.EndTxn: (_txn(Op.WRITE),),
    ApiKey.TxnOffsetCommit: (_txn(Op.WRITE), _group(Op.READ), _topic(Op.READ)),
    # Kafka: Describe on each transactional id; ListTransactions leaves out the others
    ApiKey.DescribeTransactions: (_txn(Op.DESCRIBE),),
    ApiKey.ListTransactions: (_txn(Op.DESCRIBE, denied=HIDE),),
    # KIP-664: Read on each topic (checked in actors/apis/describe_producers.py)
    ApiKey.DescribeProducers: (_topic(Op.READ),),
    ApiKey.DescribeAcls: (_cluster(Op.DESCRIBE),),
    ApiKey.CreateAcls: (_cluster(Op.ALTER),),
    ApiKey.DeleteAcls: (_cluster(Op.ALTER),),
    ApiKey.DescribeUserScramCredentials: (_cluster(Op.DESCRIBE),),
    ApiKey.AlterUserScramCredentials: (_cluster(Op.ALTER),),
    ApiKey.DescribeCluster: (_cluster(Op.DESCRIBE),),
    ApiKey.DescribeLogDirs: (_cluster(Op.DESCRIBE),),
    # Kafka hides the topics a principal may not describe, as Metadata does.
    ApiKey.DescribeTopicPartitions: (_topic(Op.DESCRIBE, denied=HIDE),),
    ApiKey.AlterReplicaLogDirs: (_cluster(Op.ALTER),),
    ApiKey.ElectLeaders: (_cluster(Op.ALTER),),
    ApiKey.AlterPartitionReassignments: (_cluster(Op.ALTER),),
    ApiKey.ListPartitionReassignments: (_cluster(Op.DESCRIBE),),
    ApiKey.LeaderAndIsr: (_cluster(Op.CLUSTER_ACTION),),
    ApiKey.StopReplica: (_cluster(Op.CLUSTER_ACTION),),
    ApiKey.UpdateMetadata: (_cluster(Op.CLUSTER_ACTION),),
    ApiKey.ControlledShutdown: (_cluster(Op.CLUSTER_ACTION),),
}
API_CHECKS = {int(k): v for k, v in API_CHECKS.items()}


def checks_for(api_key: int) -> tuple[Check, ...]:
    """The checks of an API; KeyError for an API the table does not know (refuse it)."""
    return API_CHECKS[api_key]


def _consistent() -> None:
    for api_key, checks in API_CHECKS.items():
        for check in checks:
            for one in (check, check.either):
                if one is not None and one.operation not in SUPPORTED_OPERATIONS[
                        one.resource_type]:
                    raise AssertionError(f"API {api_key}: {one.operation.name} is not an "
                                         f"operation of {one.resource_type.name}")


_consistent()
