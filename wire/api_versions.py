"""The Kafka API versions actorlog advertises in its ApiVersions response.

Clients pick, per API, the highest version both sides support, so this table
decides what the request handlers must understand. Every range below lies
inside what kafka-python 3.x's `kafka.protocol` schemas define (so the codec
can decode the request and encode the response at each version) and is
checked both ways by tests/wire/test_kafka_codec.py.

Why these ranges:

- Minimums follow the schemas' `validVersions`: versions Kafka 4.0 removed
  (KIP-896) are not offered; no current client needs them.
- Produce and Fetch stop at 12: version 13 replaces topic names by topic ids,
  which actorlog does not implement.
- The ranges make kafka-python infer a broker of 3.8 (Produce 11 is in range,
  Produce 13 is not), so it writes magic 2 record batches (it needs >= 0.11).
- ApiVersions 0-4: librdkafka retries at v0 after UNSUPPORTED_VERSION, and
  kafka-python 3.x opens with v4.
- Versions whose only change is a new field the handlers must fill or honour
  are noted beside each entry; the handler for that API owns that duty.
- Not advertised on purpose: GetTelemetrySubscriptions (71) and
  ConsumerGroupHeartbeat (68), so clients stay on the classic protocols.
"""

from __future__ import annotations

from typing import NamedTuple

from kafka.protocol.api_key import ApiKey


class ApiVersionRange(NamedTuple):
    """One entry of the ApiVersions response: an API and its version range."""

    api_key: int
    min_version: int
    max_version: int


def _entry(api_key: ApiKey, min_version: int, max_version: int) -> ApiVersionRange:
    return ApiVersionRange(int(api_key), min_version, max_version)


ADVERTISED: tuple[ApiVersionRange, ...] = (
    # v9+ flexible; v10/v11 add CurrentLeader tags (left out when default).
    _entry(ApiKey.Produce, 3, 12),
    # v4 is the first with isolation_level; v7 sessions; v12 flexible + tags.
    _entry(ApiKey.Fetch, 4, 12),
    # v7 asks for timestamp -3 (max timestamp); v8+ (tiered storage) left out.
    _entry(ApiKey.ListOffsets, 1, 7),
    # KIP-279/320: consumers validate their position after a leader change. v2 is the
    # first Kafka 4.0 keeps (KIP-896); v3 adds replica_id, v4 is flexible.
    _entry(ApiKey.OffsetForLeaderEpoch, 2, 4),
    # v9+ flexible (librdkafka >= 2.x uses 12); v10+ answers topic ids, v12 may ask by id.
    _entry(ApiKey.Metadata, 0, 12),
    # v10 switches to topic ids, left out.
    _entry(ApiKey.OffsetCommit, 2, 9),
    # v8 batches several groups per request; v10 topic ids, left out.
    _entry(ApiKey.OffsetFetch, 1, 9),
    # v4 batches coordinator keys; v6 (share groups) left out.
    _entry(ApiKey.FindCoordinator, 0, 4),
    _entry(ApiKey.JoinGroup, 0, 9),
    _entry(ApiKey.Heartbeat, 0, 4),
    # v3 batches members (group.instance.id).
    _entry(ApiKey.LeaveGroup, 0, 5),
    _entry(ApiKey.SyncGroup, 0, 5),
    # v6 only adds the GROUP_ID_NOT_FOUND error, left out.
    _entry(ApiKey.DescribeGroups, 0, 5),
    # v4 states filter, v5 types filter.
    _entry(ApiKey.ListGroups, 0, 5),
    _entry(ApiKey.ApiVersions, 0, 4),
    # v7 answers each created topic's id.
    _entry(ApiKey.CreateTopics, 2, 7),
    # v6 names each topic by its name or its id (KIP-516) and answers both.
    _entry(ApiKey.DeleteTopics, 1, 6),
    # v3+ carries producer id/epoch for an epoch bump; v6 (2PC) is unstable.
    _entry(ApiKey.InitProducerId, 0, 5),
    _entry(ApiKey.DescribeConfigs, 1, 4),
    # The admin APIs (issue 12): every version kafka-python's schemas define, but
    # DescribeLogDirs v5 (only adds IsCordoned): kafka-python would infer a 4.3 broker.
    _entry(ApiKey.DeleteRecords, 0, 2),
    _entry(ApiKey.AlterConfigs, 0, 2),
    _entry(ApiKey.DescribeLogDirs, 1, 4),
    _entry(ApiKey.CreatePartitions, 0, 3),
    _entry(ApiKey.DeleteGroups, 0, 2),
    _entry(ApiKey.IncrementalAlterConfigs, 0, 1),
    _entry(ApiKey.OffsetDelete, 0, 0),
    _entry(ApiKey.DescribeTopicPartitions, 0, 0),
    # v1 adds EndpointType (1 = brokers, the only type served); v2 (fenced brokers) left out.
    _entry(ApiKey.DescribeCluster, 0, 1),
    # ACLs (authorizer.class.name = acl; SECURITY_DISABLED without). v0 left Kafka in 4.0.
    _entry(ApiKey.DescribeAcls, 1, 3),
    _entry(ApiKey.CreateAcls, 1, 3),
    _entry(ApiKey.DeleteAcls, 1, 3),
    # SCRAM users (KIP-554): Describe, resp. Alter, on the cluster; only v0 exists.
    _entry(ApiKey.DescribeUserScramCredentials, 0, 0),
    _entry(ApiKey.AlterUserScramCredentials, 0, 0),
    # Answered by the Processor on SASL listeners (actors/processor.py); after a v0
    # handshake the tokens come bare, size-prefixed (librdkafka requires v0 advertised).
    _entry(ApiKey.SaslHandshake, 0, 1),
    _entry(ApiKey.SaslAuthenticate, 0, 2),
    # Decided by the cluster's controller (preferred and unclean elections).
    _entry(ApiKey.ElectLeaders, 0, 2),
    # Partition reassignment (KIP-455), decided by the cluster's controller; v1 carries
    # AllowReplicationFactorChange.
    _entry(ApiKey.AlterPartitionReassignments, 0, 1),
    _entry(ApiKey.ListPartitionReassignments, 0, 0),
    # Transactions (KIP-98). v4+ of AddPartitionsToTxn batches transactions for brokers
    # (KIP-890) and v4+/v5 of the others are KIP-890's transaction version 2: left out.
    _entry(ApiKey.AddPartitionsToTxn, 0, 3),
    _entry(ApiKey.AddOffsetsToTxn, 0, 3),
    _entry(ApiKey.EndTxn, 0, 3),
    # v3 carries KIP-447's group metadata (generation, member id, instance id).
    _entry(ApiKey.TxnOffsetCommit, 0, 3),
    _entry(ApiKey.DescribeTransactions, 0, 0),
    # v1 filters by duration; v2's transactional id pattern is not served.
    _entry(ApiKey.ListTransactions, 0, 1),
    # KIP-664: a partition's active producers (only v0 exists)
    _entry(ApiKey.DescribeProducers, 0, 0),
)

ADVERTISED_BY_KEY: dict[int, ApiVersionRange] = {entry.api_key: entry for entry in ADVERTISED}


# --- names -------------------------------------------------------------------
# The one table of API names: kafka-python's ApiKey enum, generated from
# Kafka's schemas. Metrics use Kafka's own names ("ListOffsets"), traces the
# snake_case form ("list_offsets").


def _snake_case(name: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() and i else c.lower() for i, c in enumerate(name))


API_SNAKE_NAMES: dict[int, str] = {int(key): _snake_case(key.name) for key in ApiKey}
API_KEYS_BY_SNAKE_NAME: dict[str, int] = {name: key for key, name in API_SNAKE_NAMES.items()}


_API_NAMES: dict[int, str] = {}


def api_name(api_key: int) -> str:
    """Kafka's name for an API key, or `Unknown(<key>)` (looked up once per key: this runs
    for every request, and an enum lookup by value is slow)."""
    name = _API_NAMES.get(api_key)
    if name is None:
        try:
            name = ApiKey(api_key).name
        except ValueError:
            name = f"Unknown({api_key})"
        if len(_API_NAMES) < 1024:  # client-chosen keys cannot grow it without bound
            _API_NAMES[api_key] = name
    return name


def api_snake_name(api_key: int) -> str:
    """The snake_case name traces use ("list_offsets"), or `api_<key>`."""
    return API_SNAKE_NAMES.get(api_key, f"api_{api_key}")


STAGES: tuple[str, ...] = ("request_queue", "local", "remote", "response_queue", "send")
"""Kafka's split of a request's time (RequestQueueTime, LocalTime, RemoteTime,
ResponseQueueTime, ResponseSendTime); they add up to the total. The Processor
counts them per API and the trace tools rebuild them per sampled request."""


def is_advertised(api_key: int, api_version: int) -> bool:
    """True when actorlog serves this API at this version."""
    entry = ADVERTISED_BY_KEY.get(api_key)
    return entry is not None and entry.min_version <= api_version <= entry.max_version
