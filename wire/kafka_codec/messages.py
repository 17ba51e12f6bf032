"""Which kafka.protocol classes serve which API, the request header, and the codec's errors."""

from __future__ import annotations

import struct
from typing import NamedTuple

from kafka.protocol.admin import (
    AlterConfigsRequest,
    AlterConfigsResponse,
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    CreateAclsRequest,
    CreateAclsResponse,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeAclsRequest,
    DescribeAclsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    DescribeLogDirsRequest,
    DescribeLogDirsResponse,
    DescribeTopicPartitionsRequest,
    DescribeTopicPartitionsResponse,
    ElectLeadersRequest,
    ElectLeadersResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
)
from kafka.protocol.admin.cluster import DescribeClusterRequest, DescribeClusterResponse
from kafka.protocol.admin.transactions import (
    DescribeProducersRequest,
    DescribeProducersResponse,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
)
from kafka.protocol.admin.users import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
)
from kafka.protocol.api_key import ApiKey
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.consumer import (
    FetchRequest,
    FetchResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
    MetadataResponse,
)
from kafka.protocol.producer import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ProduceRequest,
    ProduceResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from wire.api_versions import ADVERTISED_BY_KEY, api_name, is_advertised
from wire.errors import ErrorCode, KafkaError


class InvalidRequestError(KafkaError):
    """The frame is truncated, malformed or names an API key Kafka does not have.

    Kafka closes the connection on such a request; the code is for logs and
    metrics.
    """

    code = ErrorCode.INVALID_REQUEST


class UnsupportedVersionError(KafkaError):
    """The API or this version of it is not served by actorlog.

    Only ApiVersions gets an answer (see `encode_api_versions_response`);
    for every other API Kafka closes the connection.
    """

    code = ErrorCode.UNSUPPORTED_VERSION

    def __init__(
        self, message: str, api_key: int, api_version: int, correlation_id: int | None
    ) -> None:
        super().__init__(message)
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id


class RequestHeader(NamedTuple):
    """A parsed request header; `header_size` is where the body starts in the frame."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    header_size: int


_MESSAGE_CLASSES: dict[int, tuple[type[ApiMessage], type[ApiMessage]]] = {
    ApiKey.Produce: (ProduceRequest, ProduceResponse),
    ApiKey.Fetch: (FetchRequest, FetchResponse),
    ApiKey.ListOffsets: (ListOffsetsRequest, ListOffsetsResponse),
    ApiKey.Metadata: (MetadataRequest, MetadataResponse),
    ApiKey.OffsetForLeaderEpoch: (OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse),
    ApiKey.OffsetCommit: (OffsetCommitRequest, OffsetCommitResponse),
    ApiKey.OffsetFetch: (OffsetFetchRequest, OffsetFetchResponse),
    ApiKey.FindCoordinator: (FindCoordinatorRequest, FindCoordinatorResponse),
    ApiKey.JoinGroup: (JoinGroupRequest, JoinGroupResponse),
    ApiKey.Heartbeat: (HeartbeatRequest, HeartbeatResponse),
    ApiKey.LeaveGroup: (LeaveGroupRequest, LeaveGroupResponse),
    ApiKey.SyncGroup: (SyncGroupRequest, SyncGroupResponse),
    ApiKey.DescribeGroups: (DescribeGroupsRequest, DescribeGroupsResponse),
    ApiKey.ListGroups: (ListGroupsRequest, ListGroupsResponse),
    ApiKey.ApiVersions: (ApiVersionsRequest, ApiVersionsResponse),
    ApiKey.CreateTopics: (CreateTopicsRequest, CreateTopicsResponse),
    ApiKey.DeleteTopics: (DeleteTopicsRequest, DeleteTopicsResponse),
    ApiKey.InitProducerId: (InitProducerIdRequest, InitProducerIdResponse),
    ApiKey.DescribeConfigs: (DescribeConfigsRequest, DescribeConfigsResponse),
    ApiKey.DeleteRecords: (DeleteRecordsRequest, DeleteRecordsResponse),
    ApiKey.AlterConfigs: (AlterConfigsRequest, AlterConfigsResponse),
    ApiKey.DescribeLogDirs: (DescribeLogDirsRequest, DescribeLogDirsResponse),
    ApiKey.CreatePartitions: (CreatePartitionsRequest, CreatePartitionsResponse),
    ApiKey.DeleteGroups: (DeleteGroupsRequest, DeleteGroupsResponse),
    ApiKey.IncrementalAlterConfigs: (IncrementalAlterConfigsRequest,
                                     IncrementalAlterConfigsResponse),
    ApiKey.OffsetDelete: (OffsetDeleteRequest, OffsetDeleteResponse),
    ApiKey.DescribeTopicPartitions: (DescribeTopicPartitionsRequest,
                                     DescribeTopicPartitionsResponse),
    ApiKey.DescribeCluster: (DescribeClusterRequest, DescribeClusterResponse),
    ApiKey.DescribeAcls: (DescribeAclsRequest, DescribeAclsResponse),
    ApiKey.CreateAcls: (CreateAclsRequest, CreateAclsResponse),
    ApiKey.DeleteAcls: (DeleteAclsRequest, DeleteAclsResponse),
    ApiKey.DescribeUserScramCredentials: (DescribeUserScramCredentialsRequest,
                                          DescribeUserScramCredentialsResponse),
    ApiKey.AlterUserScramCredentials: (AlterUserScramCredentialsRequest,
                                       AlterUserScramCredentialsResponse),
    ApiKey.SaslHandshake: (SaslHandshakeRequest, SaslHandshakeResponse),
    ApiKey.SaslAuthenticate: (SaslAuthenticateRequest, SaslAuthenticateResponse),
    ApiKey.ElectLeaders: (ElectLeadersRequest, ElectLeadersResponse),
    ApiKey.AlterPartitionReassignments: (AlterPartitionReassignmentsRequest,
                                         AlterPartitionReassignmentsResponse),
    ApiKey.ListPartitionReassignments: (ListPartitionReassignmentsRequest,
                                        ListPartitionReassignmentsResponse),
    ApiKey.AddPartitionsToTxn: (AddPartitionsToTxnRequest, AddPartitionsToTxnResponse),
    ApiKey.AddOffsetsToTxn: (AddOffsetsToTxnRequest, AddOffsetsToTxnResponse),
    ApiKey.EndTxn: (EndTxnRequest, EndTxnResponse),
    ApiKey.TxnOffsetCommit: (TxnOffsetCommitRequest, TxnOffsetCommitResponse),
    ApiKey.DescribeTransactions: (DescribeTransactionsRequest, DescribeTransactionsResponse),
    ApiKey.ListTransactions: (ListTransactionsRequest, ListTransactionsResponse),
    ApiKey.DescribeProducers: (DescribeProducersRequest, DescribeProducersResponse),
}

_API_VERSIONS = int(ApiKey.ApiVersions)
_KNOWN_API_KEYS = frozenset(int(key) for key in ApiKey)
_INT32 = struct.Struct(">i")
# Everything the library's compiled decoders raise on short or bad input
# (UnicodeDecodeError is a ValueError).
_DECODE_ERRORS = (struct.error, IndexError, ValueError, TypeError, AssertionError,
                  OverflowError)


def _check_served(api_key: int, api_version: int, correlation_id: int | None) -> None:
    if api_key not in _MESSAGE_CLASSES or api_key not in ADVERTISED_BY_KEY:
        raise UnsupportedVersionError(
            f"API {api_name(api_key)} ({api_key}) is not supported",
            api_key,
            api_version,
            correlation_id,
        )
    if not is_advertised(api_key, api_version):
        entry = ADVERTISED_BY_KEY[api_key]
        raise UnsupportedVersionError(
            f"{api_name(api_key)} v{api_version} is not supported "
            f"(supported: v{entry.min_version}-v{entry.max_version})",
            api_key,
            api_version,
            correlation_id,
        )


def request_class(api_key: int, api_version: int) -> type[ApiMessage]:
    """The kafka.protocol request class for an advertised API version."""
    _check_served(api_key, api_version, None)
    return _MESSAGE_CLASSES[api_key][0][api_version]  # type: ignore[no-any-return,index]


def response_class(api_key: int, api_version: int) -> type[ApiMessage]:
    """The kafka.protocol response class for an advertised API version.

    Instances are built with keyword arguments, nested structs with the
    classes hung on it, e.g. `MetadataResponse.MetadataResponseTopic`.
    """
    _check_served(api_key, api_version, None)
    return _MESSAGE_CLASSES[api_key][1][api_version]  # type: ignore[no-any-return,index]


def _is_flexible(cls: type[ApiMessage], api_version: int) -> bool:
    return bool(cls.flexible_version_q(api_version))
