"""Every key of the config SPEC does something.

``test_every_key_has_an_effect_test_or_is_reserved`` walks the SPEC: each key
names a test that sets it to a value other than its default and observes
the difference (on the wire, on disk, in the actors or threads it creates),
or is listed in ``RESERVED`` with the issue that will use it. The effect
tests not found elsewhere are here, on brokers started in this process with
settings far from the defaults:

- ``tuned``: the runtime and network keys (names, counts, threads, gateway,
  frames, socket buffers, traces, partitions of new topics).
- ``logs``: the log keys, isolated per topic by topic-level overrides so that
  each broker default is the only one that can cause what is observed.
- ``strict``: the keys that refuse things (auto-creation, replication factor,
  min.insync.replicas, max.connections, session timeouts, rebalance delay).
"""

from __future__ import annotations

import ast
import functools
import re
import shutil
import socket
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq

from actors.broker import Broker
from actors.core.checkpoint import read_offset_checkpoint
from actors.runtime.config import RESERVED, SPEC, Config
from actors.runtime.node import default_ipc_dir
from actors.runtime.scheduling import thread_policy
from tests.broker.rawclient import (
    CREATE_TOPICS,
    DESCRIBE_CONFIGS,
    METADATA,
    RawClient,
    read_batches,
    record_batch,
)
from tests.broker.test_groups import join
from tests.fixtures.broker import BrokerProcess, free_port
from tests.fixtures.log_files import log_bytes
from tests.fixtures.waiting import wait_for
from wire.errors import ErrorCode

pytestmark = [pytest.mark.clients]
ROOT = Path(__file__).resolve().parents[2]
HERE = "tests/broker/test_config_keys.py"
TLS = "tests/security/test_tls_broker.py"
SASL = "tests/security/test_sasl_broker.py"
ACL = "tests/security/test_acl_broker.py"
REPL = "tests/cluster/test_replication.py"
TSBOUNDS = "tests/broker/test_timestamp_bounds.py"
TXN = "tests/broker/test_transactions.py"
CURVE = "tests/cluster/test_curve_cluster.py"
CURVE_TEST = ("test_curve_cluster_replicates_and_refuses_a_foreign_key_and_a_node_without_"
              "keys")
TXN_CLUSTER = "tests/cluster/test_transactions_cluster.py"
CLEANER = "tests/broker/test_log_cleaner.py"
PRODUCER_EXPIRY = "tests/broker/test_producer_expiry.py"

# key -> the tests that show its effect ("path::function").
EFFECTS: dict[str, list[str]] = {
    "node.name": [f"{HERE}::test_node_name_names_the_node_and_its_gateway_socket"],
    "node.id": [f"{HERE}::test_node_id_is_the_broker_id_clients_see"],
    "actor.gateway.host": [f"{HERE}::test_gateway_tcp_endpoint_takes_frames_up_to_the_limit"],
    "actor.gateway.port": [f"{HERE}::test_gateway_tcp_endpoint_takes_frames_up_to_the_limit"],
    "actor.ipc.dir": [f"{HERE}::test_node_name_names_the_node_and_its_gateway_socket"],
    "actor.max.frame.bytes": [f"{HERE}::test_gateway_tcp_endpoint_takes_frames_up_to_the_limit"],
    "actor.batch.max.messages": [f"{HERE}::test_runtime_tuning_reaches_the_actors"],
    "actor.threads": [f"{HERE}::test_actor_threads_dedicated_gives_every_actor_a_thread"],
    "actor.threads.scheduling": [f"{HERE}::test_worker_loops_run_under_the_scheduling_policy",
                                 f"{HERE}::test_each_process_of_a_broker_schedules_its_loop"],
    "trace.sample.ratio": [f"{HERE}::test_trace_files_rotate_and_only_the_newest_are_kept"],
    "trace.file.max.bytes": [f"{HERE}::test_trace_files_rotate_and_only_the_newest_are_kept"],
    "trace.files.max": [f"{HERE}::test_trace_files_rotate_and_only_the_newest_are_kept"],
    "metrics.port": ["tests/broker/test_metrics.py::test_request_stages_are_exported_and_add_up"],
    "listeners": ["tests/broker/test_listeners.py::test_an_ipv6_listener_serves_real_clients",
                  "tests/security/test_tls_broker.py::"
                  "test_each_listener_has_its_acceptor_and_protocol"],
    "advertised.listeners": ["tests/broker/test_listeners.py::"
                             "test_advertised_listeners_is_what_metadata_tells_clients"],
    "listener.security.protocol.map": [f"{TLS}::test_required_client_auth_protocols_and_suites"],
    "ssl.keystore.type": [f"{TLS}::test_tls_keys_refuse_values_they_cannot_use"],
    "ssl.keystore.location": [f"{TLS}::"
                              "test_ssl_listener_serves_confluent_kafka_kafka_python_and_kcat",
                              f"{TLS}::test_a_tls_listener_without_a_keystore_does_not_start"],
    "ssl.key.password": [f"{TLS}::test_a_tls_listener_without_a_keystore_does_not_start"],
    "ssl.truststore.type": [f"{TLS}::test_tls_keys_refuse_values_they_cannot_use"],
    "ssl.truststore.location": ["tests/security/test_tls_broker.py::"
                                "test_expired_or_foreign_certificates_are_refused_and_logged"],
    "ssl.client.auth": [f"{TLS}::test_mutual_tls_gives_the_certificate_subject_as_principal",
                        f"{TLS}::test_required_client_auth_protocols_and_suites"],
    "ssl.enabled.protocols": [f"{TLS}::test_required_client_auth_protocols_and_suites"],
    "ssl.cipher.suites": [f"{TLS}::test_required_client_auth_protocols_and_suites"],
    "sasl.enabled.mechanisms": [f"{SASL}::test_a_mechanism_not_enabled_is_refused"],
    # branch acl
    "authorizer.class.name": [f"{ACL}::test_a_user_denied_then_allowed_to_produce_and_consume"],
    "super.users": [f"{ACL}::test_admin_client_creates_describes_and_deletes_acls"],
    "actor.curve.secret.key.file": [f"{CURVE}::{CURVE_TEST}"],
    "actor.curve.public.keys.dir": [f"{CURVE}::{CURVE_TEST}"],
    "allow.everyone.if.no.acl.found": [
        f"{ACL}::test_allow_everyone_if_no_acl_found_opens_only_resources_no_acl_names"],
    "connections.max.reauth.ms": [f"{SASL}::"
                                  "test_clients_reauthenticate_before_their_session_ends"],
    "log.dirs": [f"{HERE}::test_log_dirs_hold_the_partitions"],
    "num.processes": ["tests/broker/test_processes.py::"
                      "test_both_processes_serve_clients_of_one_broker",
                      "tests/broker/test_processes.py::test_one_process_starts_no_other"],
    "num.processes.connection.distribution": [
        "tests/broker/test_handoff.py::"
        "test_reuseport_binds_the_port_in_every_process_handoff_in_process_0_alone",
        "tests/broker/test_handoff.py::"
        "test_eight_connections_split_four_four_and_serve_across_processes"],
    "num.processes.shard.placement": [
        "tests/broker/test_processes.py::"
        "test_placement_first_runs_every_partition_in_process_0_and_serves_through_both"],
    "num.network.threads": [f"{HERE}::test_actor_counts_follow_the_thread_keys"],
    "num.io.threads": [f"{HERE}::test_actor_counts_follow_the_thread_keys"],
    "num.partition.shards": [f"{HERE}::test_actor_counts_follow_the_thread_keys"],
    "num.purgatory.shards": [f"{HERE}::test_actor_counts_follow_the_thread_keys"],
    "num.group.coordinators": [f"{HERE}::test_actor_counts_follow_the_thread_keys"],
    "queued.max.requests": ["tests/broker/test_limits.py::"
                            "test_queued_max_requests_pauses_reading_and_loses_nothing"],
    "queued.max.request.bytes": ["tests/actors/test_processor_bounds.py::"
                                 "test_queued_max_request_bytes_stops_reading_until_requests_"
                                 "are_answered",
                                 "tests/broker/test_big_fetches.py::"
                                 "test_clients_that_never_read_cannot_queue_more_request_bytes_"
                                 "than_the_bound"],
    "max.inflight.requests.per.connection": ["tests/broker/test_ordering.py::"
                                             "test_pipeline_beyond_the_in_flight_bound"],
    "max.unsent.response.bytes.per.connection": [
        "tests/actors/test_processor_bounds.py::"
        "test_a_client_that_does_not_read_is_not_read_past_max_unsent_response_bytes"],
    "fetch.max.bytes": ["tests/broker/test_memory_bounds.py::"
                        "test_fetch_max_bytes_caps_a_response_at_whole_batches"],
    "socket.request.max.bytes": ["tests/broker/test_limits.py::"
                                 "test_request_over_socket_request_max_bytes"],
    "socket.send.buffer.bytes": [f"{HERE}::test_socket_buffer_sizes_are_set_on_client_sockets"],
    "socket.receive.buffer.bytes": [
        f"{HERE}::test_socket_buffer_sizes_are_set_on_client_sockets"],
    "max.connections": [f"{HERE}::test_max_connections_closes_connections_over_the_limit"],
    "max.connections.per.ip": ["tests/broker/test_limits.py::"
                               "test_connections_over_the_per_ip_limit_are_closed"],
    "connections.max.idle.ms": ["tests/broker/test_idle_connections.py::"
                                "test_a_quiet_connection_is_closed"],
    "connection.failed.authentication.delay.ms": [
        f"{SASL}::test_a_failed_authentication_is_closed_after_the_configured_delay"],
    "auto.create.topics.enable": [f"{HERE}::test_auto_create_off_answers_unknown_topic"],
    "num.partitions": [f"{HERE}::test_num_partitions_of_auto_created_topics"],
    "default.replication.factor": [f"{HERE}::test_default_replication_factor_of_new_topics"],
    "min.insync.replicas": [f"{HERE}::test_min_insync_replicas_refuses_acks_all"],
    "message.max.bytes": ["tests/broker/test_limits.py::test_batch_over_message_max_bytes"],
    "log.segment.bytes": [f"{HERE}::test_segments_roll_by_size_and_by_time"],
    "log.roll.ms": [f"{HERE}::test_segments_roll_by_size_and_by_time"],
    "log.roll.hours": [f"{HERE}::test_log_roll_hours_stands_in_for_roll_ms"],
    "log.retention.bytes": [f"{HERE}::test_retention_by_size_and_by_time"],
    "log.retention.ms": [f"{HERE}::test_retention_by_size_and_by_time"],
    "log.retention.minutes": [f"{HERE}::test_retention_minutes_and_hours_stand_in_for_ms"],
    "log.retention.hours": [f"{HERE}::test_retention_minutes_and_hours_stand_in_for_ms"],
    "log.retention.check.interval.ms": [f"{HERE}::test_retention_by_size_and_by_time"],
    "log.index.interval.bytes": [f"{HERE}::test_log_index_interval_is_the_topics_default"],
    "log.index.size.max.bytes": [f"{HERE}::test_segments_roll_when_their_index_is_full"],
    "log.flush.interval.messages": [f"{HERE}::test_flush_by_messages_and_by_time"],
    "log.flush.interval.ms": [f"{HERE}::test_flush_by_messages_and_by_time"],
    "log.flush.scheduler.interval.ms": [
        f"{HERE}::test_flush_scheduler_interval_is_how_often_flush_ms_is_checked"],
    "log.initial.task.delay.ms": [
        f"{HERE}::test_flush_scheduler_interval_is_how_often_flush_ms_is_checked"],
    "log.message.timestamp.type": [f"{HERE}::test_log_append_time_stamps_the_batches"],
    "log.message.timestamp.before.max.ms": [
        f"{TSBOUNDS}::test_broker_keys_are_the_topics_defaults"],
    "log.message.timestamp.difference.max.ms": [
        f"{TSBOUNDS}::test_broker_keys_are_the_topics_defaults"],
    "log.message.timestamp.after.max.ms": [f"{TSBOUNDS}::test_the_after_key_alone"],
    "compression.type": ["tests/broker/test_compression_type.py::"
                         "test_the_broker_key_is_the_topics_default"],
    "log.flush.offset.checkpoint.interval.ms": [
        f"{HERE}::test_checkpoints_are_written_while_running"],
    "log.cleanup.policy": [f"{HERE}::test_log_cleanup_policy_is_the_topics_default"],
    "log.cleaner.enable": [f"{HERE}::test_log_cleaner_enable_false_runs_no_cleaner"],
    "log.cleaner.backoff.ms": [f"{CLEANER}::test_a_compacted_topic_keeps_each_keys_latest_record"],
    "log.cleaner.io.buffer.size": [
        f"{CLEANER}::test_a_compacted_topic_keeps_each_keys_latest_record"],
    "log.cleaner.min.cleanable.ratio": [
        f"{CLEANER}::test_the_brokers_compaction_lag_and_dirty_ratio_are_the_topics_defaults"],
    "log.cleaner.min.compaction.lag.ms": [
        f"{CLEANER}::test_the_brokers_compaction_lag_and_dirty_ratio_are_the_topics_defaults"],
    "log.cleaner.delete.retention.ms": [
        f"{CLEANER}::test_tombstones_go_after_the_brokers_delete_retention"],
    "log.cleaner.dedupe.buffer.size": [
        f"{CLEANER}::test_a_small_key_map_cleans_in_several_passes"],
    "request.timeout.ms": [f"{HERE}::test_runtime_tuning_reaches_the_actors"],
    "group.initial.rebalance.delay.ms": [f"{HERE}::test_initial_rebalance_delay_holds_a_new_group"],
    "group.min.session.timeout.ms": [f"{HERE}::test_session_timeout_bounds_refuse_joins"],
    "group.max.session.timeout.ms": [f"{HERE}::test_session_timeout_bounds_refuse_joins"],
    "offsets.topic.num.partitions": [f"{HERE}::test_num_partitions_of_auto_created_topics"],
    "purge.interval.requests": [f"{HERE}::test_runtime_tuning_reaches_the_actors"],
    # replication (issue 15)
    "num.replica.fetchers": [f"{REPL}::test_partitions_spread_over_the_fetchers_and_small_"
                             "fetches_replicate_everything"],
    "replica.fetch.max.bytes": [f"{REPL}::test_partitions_spread_over_the_fetchers_and_small_"
                                "fetches_replicate_everything"],
    "replica.fetch.min.bytes": [f"{REPL}::test_partitions_spread_over_the_fetchers_and_small_"
                                "fetches_replicate_everything"],
    "replica.fetch.response.max.bytes": [f"{REPL}::test_partitions_spread_over_the_fetchers_"
                                         "and_small_fetches_replicate_everything"],
    "replica.fetch.wait.max.ms": [f"{REPL}::test_partitions_spread_over_the_fetchers_and_small_"
                                  "fetches_replicate_everything"],
    "replica.lag.time.max.ms": [f"{REPL}::test_a_paused_follower_leaves_the_isr_and_rejoins"],
    "replica.high.watermark.checkpoint.interval.ms": [
        f"{REPL}::test_followers_hold_the_leaders_log_and_acks_all_is_acknowledged"],
    "replica.fetch.backoff.ms": [f"{REPL}::test_a_leader_killed_twice_under_acks_all_loses_"
                                 "nothing"],
    "replica.socket.timeout.ms": [f"{REPL}::test_a_leader_killed_twice_under_acks_all_loses_"
                                  "nothing"],
    # The cluster's keys, on real nodes over a real ZooKeeper (tests/cluster).
    "zookeeper.connect": ["tests/cluster/test_cluster.py::"
                          "test_no_zookeeper_within_the_connection_timeout_is_one_line"],
    "zookeeper.connection.timeout.ms": [
        "tests/cluster/test_cluster.py::"
        "test_no_zookeeper_within_the_connection_timeout_is_one_line"],
    "zookeeper.session.timeout.ms": [
        "tests/cluster/test_failover.py::"
        "test_controller_kill_9_another_node_takes_over_and_the_old_epoch_is_refused"],
    "broker.rack": ["tests/cluster/test_cluster.py::"
                    "test_nodes_on_three_addresses_register_and_each_answers_for_the_whole_cluster"],
    "delete.topic.enable": ["tests/cluster/test_cluster.py::"
                            "test_delete_topic_enable_false_refuses_deletion"],
    "offsets.topic.replication.factor": [
        "tests/cluster/test_cluster.py::"
        "test_offsets_topic_replication_factor_is_capped_to_the_live_brokers"],
    "unclean.leader.election.enable": ["tests/core/test_controller_state.py::"
                                       "test_unclean_election_enabled_by_config"],
    "controlled.shutdown.enable": [
        "tests/cluster/test_controlled_shutdown.py::"
        "test_controlled_shutdown_retries_what_it_cannot_move_and_can_be_turned_off"],
    "controlled.shutdown.max.retries": [
        "tests/cluster/test_controlled_shutdown.py::"
        "test_controlled_shutdown_retries_what_it_cannot_move_and_can_be_turned_off"],
    "controlled.shutdown.retry.backoff.ms": [
        "tests/cluster/test_controlled_shutdown.py::"
        "test_controlled_shutdown_retries_what_it_cannot_move_and_can_be_turned_off"],
    "auto.leader.rebalance.enable": [f"{REPL}::test_a_preferred_leader_back_in_the_isr_leads_"
                                     "again"],
    "leader.imbalance.per.broker.percentage": [f"{REPL}::test_a_preferred_leader_back_in_the_"
                                               "isr_leads_again"],
    "leader.imbalance.check.interval.seconds": [f"{REPL}::test_a_preferred_leader_back_in_the_"
                                                "isr_leads_again"],
    # Transactions: the topic's keys on a 3-node cluster, the coordinator's on one node.
    "transaction.state.log.num.partitions": [f"{TXN_CLUSTER}::test_transactions_across_nodes"],
    "transaction.state.log.replication.factor": [
        f"{TXN_CLUSTER}::test_transactions_across_nodes"],
    "transaction.state.log.min.isr": [f"{TXN_CLUSTER}::test_transactions_across_nodes"],
    "transaction.max.timeout.ms": [f"{TXN}::test_a_transaction_past_its_timeout_is_aborted"],
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": [
        f"{TXN}::test_a_transaction_past_its_timeout_is_aborted"],
    "producer.id.expiration.ms": [f"{PRODUCER_EXPIRY}::test_an_idle_producer_expires_and_is_"
                                  "then_unknown"],
    "producer.id.expiration.check.interval.ms": [
        f"{PRODUCER_EXPIRY}::test_an_idle_producer_expires_and_is_then_unknown"],
}


@functools.cache
def _functions(path: Path) -> frozenset[str]:
    """The module's top-level functions, parsed once per module: the keys name a few
    hundred tests in a dozen modules (cutting each function's source out of the file,
    read again per function, took minutes of CPU)."""
    return frozenset(n.name for n in ast.parse(path.read_text()).body
                     if isinstance(n, ast.FunctionDef))


def test_every_key_has_an_effect_test_or_is_reserved() -> None:
    keys, covered = set(SPEC), set(EFFECTS) | set(RESERVED)
    assert covered == keys, (f"keys without an effect test or reservation: "
                             f"{sorted(keys - covered)}; stale entries: {sorted(covered - keys)}")
    assert not set(EFFECTS) & set(RESERVED)
    for key, reason in RESERVED.items():
        assert re.search(r"issue \d+", reason), (key, reason)
        assert "reserved" in SPEC[key][2], key  # the help text says so too
    for key, tests in EFFECTS.items():
        for target in tests:
            path, _, name = target.partition("::")
            module = ROOT / path
            assert module.exists(), (key, target)
            functions = _functions(module)
            assert name in functions, (key, target)
            # The key is set (or named) in that test or in the fixtures of its module.
            assert key in module.read_text(), (key, target)


# ----------------------------------------------------------------- brokers


class Running:
    """An in-process broker, and the Python threads its start created."""

    def __init__(self, data_dir: Path, values: dict[str, Any]) -> None:
        self.data_dir = data_dir
        self.config = Config({"listeners": "127.0.0.1:0", "log.dirs": str(data_dir), **values})
        before = {t.ident for t in threading.enumerate()}
        self.broker = Broker(self.config).start()
        self.new_threads = [t for t in threading.enumerate() if t.ident not in before]

    @property
    def port(self) -> int:
        return int(self.broker.port)

    @property
    def node(self) -> Any:
        assert self.broker.node is not None
        return self.broker.node

    def client(self) -> RawClient:
        return RawClient(self.port)

    def assert_placed(self, actor: str, thread_prefix: str) -> None:
        """``actor`` runs where actor.threads puts it; its threads are named
        ``thread_prefix``."""
        coordinator = self.node.actors[actor]
        own_threads = [t.name for t in self.new_threads if t.name.startswith(thread_prefix)]
        if self.config["actor.threads"] == "single":
            # the loop of the shards, handlers and Processors: no thread of its own
            assert coordinator._owner is self.node.actors["shard-0"]._owner
            assert coordinator._owner is self.node.actors["handler-0"]._owner
            assert own_threads == []
        else:
            assert coordinator._owner is coordinator
            assert len(own_threads) == 1


@pytest.fixture(scope="module")
def ipc_base() -> Iterator[str]:
    base = Path(default_ipc_dir())
    base.mkdir(parents=True, exist_ok=True)
    path = tempfile.mkdtemp(prefix="keys-", dir=base)
    yield path
    shutil.rmtree(path, ignore_errors=True)


TUNED: dict[str, Any] = {
    "node.name": "zeta",
    "node.id": 7,
    "actor.gateway.host": "127.0.0.2",
    "actor.max.frame.bytes": 8 * 1024 * 1024,
    "socket.request.max.bytes": 1024 * 1024,
    "actor.batch.max.messages": 7,
    "actor.threads": "dedicated",
    "actor.threads.scheduling": "batch",
    "trace.sample.ratio": 1.0,
    "trace.file.max.bytes": 4096,
    "trace.files.max": 3,
    "num.network.threads": 3,
    "num.io.threads": 3,
    "num.partition.shards": 3,
    "num.purgatory.shards": 2,
    "num.group.coordinators": 2,
    "socket.send.buffer.bytes": 65536,
    "socket.receive.buffer.bytes": 32768,
    "num.partitions": 3,
    "offsets.topic.num.partitions": 4,
    "request.timeout.ms": 12345,
    "purge.interval.requests": 77,
    # log.retention.ms not set: the minutes rule, not the hours (Kafka's precedence)
    "log.retention.minutes": 60,
    "log.retention.hours": 10_000,
    "log.retention.check.interval.ms": 500,
    "log.roll.hours": 1,  # log.roll.ms not set: the hours give it
    # log.flush.interval.ms not set: this gives it too (Kafka's logFlushIntervalMs)
    "log.flush.scheduler.interval.ms": 300,
    "log.initial.task.delay.ms": 0,  # the first flush check at once
}


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory, ipc_base: str) -> Iterator[Running]:
    values = {**TUNED, "actor.ipc.dir": f"{ipc_base}/tuned",
              "actor.gateway.port": free_port("127.0.0.2")}
    running = Running(tmp_path_factory.mktemp("tuned") / "data", values)
    yield running
    running.broker.stop()


LOGS: dict[str, Any] = {
    "log.segment.bytes": 1024,
    "log.roll.ms": 60_000,
    "log.roll.hours": 10_000,  # log.roll.ms set: it wins (Kafka's logRollTimeMillis)
    "log.retention.bytes": 4096,
    "log.retention.ms": 3_600_000,
    "log.retention.check.interval.ms": 500,
    "log.index.interval.bytes": 64,
    "log.index.size.max.bytes": 96,
    "log.flush.interval.messages": 1,
    "log.flush.interval.ms": 200,
    "log.flush.scheduler.interval.ms": 100,  # the check that finds flush.ms passed
    "log.initial.task.delay.ms": 0,
    "log.message.timestamp.type": "LogAppendTime",
}
NEVER = str(2**63 - 1)
CREATE_TIME = {"message.timestamp.type": "CreateTime"}  # the batches' own stamps count


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    running = Running(tmp_path_factory.mktemp("logs") / "data", LOGS)
    yield running
    running.broker.stop()


STRICT: dict[str, Any] = {
    "auto.create.topics.enable": False,
    "default.replication.factor": 2,
    "min.insync.replicas": 2,
    "max.connections": 3,
    "log.flush.offset.checkpoint.interval.ms": 500,
    "group.min.session.timeout.ms": 7000,
    "group.max.session.timeout.ms": 8000,
    "group.initial.rebalance.delay.ms": 600_000,
    "log.cleanup.policy": "compact",
    "log.cleaner.enable": False,
    "log.retention.hours": 1,  # neither log.retention.ms nor .minutes: the hours rule
    "log.retention.check.interval.ms": 500,
}


@pytest.fixture(scope="module")
def strict(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    running = Running(tmp_path_factory.mktemp("strict") / "data", STRICT)
    yield running
    running.broker.stop()


def metadata(client: RawClient, topics: list[str] | None, auto_create: bool = True) -> Any:
    return client.call(METADATA, 9, {
        "topics": None if topics is None else [{"name": t} for t in topics],
        "allow_auto_topic_creation": auto_create,
        "include_cluster_authorized_operations": False,
        "include_topic_authorized_operations": False})


def create(client: RawClient, topic: str, partitions: int = 1, rf: int = 1,
           configs: dict[str, str] | None = None) -> Any:
    response = client.call(CREATE_TOPICS, 7, {
        "topics": [{"name": topic, "num_partitions": partitions, "replication_factor": rf,
                    "assignments": [],
                    "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}],
        "timeout_ms": 10_000, "validate_only": False})
    return response.topics[0]


def produce_batches(client: RawClient, topic: str, count: int, size: int = 300,
                    timestamp_ms: Callable[[int], int] | None = None, acks: int = 1) -> None:
    for i in range(count):
        ts = timestamp_ms(i) if timestamp_ms is not None else None
        batch = record_batch([(b"k", bytes([65 + i % 26]) * size)], timestamp_ms=ts)
        part = client.produce(topic, 0, batch, acks=acks)
        assert part.error_code == 0, part


def segment_count(running: Running, topic: str) -> int:
    return len(list((running.data_dir / f"{topic}-0").glob("*.log")))


# -------------------------------------------------------------- the tuned broker


def test_node_name_names_the_node_and_its_gateway_socket(tuned: Running) -> None:
    assert tuned.node.name == "zeta"
    sockets = list(Path(str(tuned.config["actor.ipc.dir"])).glob("*/zeta.gw"))
    assert len(sockets) == 1 and sockets[0].is_socket()


def test_node_id_is_the_broker_id_clients_see(tuned: Running) -> None:
    with tuned.client() as client:
        response = metadata(client, None)
    assert [b.node_id for b in response.brokers] == [7]
    assert response.controller_id == 7


def test_gateway_tcp_endpoint_takes_frames_up_to_the_limit(tuned: Running) -> None:
    """The gateway listens on actor.gateway.host:port; frames over the limit are dead letters."""
    host, port = tuned.config["actor.gateway.host"], tuned.config["actor.gateway.port"]
    with pytest.raises(OSError):  # only the configured host listens
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    limit = int(tuned.config["actor.max.frame.bytes"])
    dead = tuned.node.dead_letters
    name = f"nobody-{uuid.uuid4().hex}"
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PUSH)
    sock.setsockopt(zmq.LINGER, 2000)
    try:
        sock.connect(f"tcp://{host}:{port}")
        sock.send_multipart([name.encode(), b"x"])  # reaches the gateway: no such actor
        sock.send_multipart([b"_asks", b"y" * (limit + 1)])  # over actor.max.frame.bytes
    finally:
        sock.close()
        ctx.term()
    wait_for(lambda: any(name in reason for reason, _s, _r in dead.last), "the small frame")
    wait_for(lambda: any(f"over the {limit} byte limit" in reason
                           for reason, _s, _r in dead.last), "the big frame refused")


def test_runtime_tuning_reaches_the_actors(tuned: Running) -> None:
    """Tuning without an outside view reaches the live actors that use it.

    What each value does there is tested on those actors directly: frames of at
    most batch_max_messages (tests/runtime/test_runtime.py), the purge trigger
    (tests/core/test_delayed_operation.py), a request abandoned after twice
    request.timeout.ms (the RequestHandler).
    """
    node = tuned.node
    assert node.batch_max_messages == 7
    assert node.max_frame_bytes == 8 * 1024 * 1024
    assert node.actors["handler-0"].abandon_after_ns == 2 * 12345 * 1_000_000
    assert node.actors["purgatory-0"].core.purgatory.purge_interval_requests == 77


def test_actor_counts_follow_the_thread_keys(tuned: Running) -> None:
    names = set(tuned.node.actors)
    for prefix, count in (("processor-", 3), ("handler-", 3), ("shard-", 3),
                          ("purgatory-", 2), ("coordinator-", 2)):
        assert {n for n in names if n.startswith(prefix)} == {f"{prefix}{i}" for i in range(count)}
    with tuned.client() as client:  # and they serve: a produce crosses all of them
        assert create(client, "counted", 6).error_code == 0
        for p in range(6):
            part = client.produce("counted", p, record_batch([(b"k", b"v")]), acks=-1)
            assert part.error_code == 0, part


def _shard_thread_policies(running: Running) -> dict[str, str]:
    """The policy of each thread of this process that runs a PartitionShard, by name."""
    return {t.name: thread_policy(t.native_id) for t in running.new_threads
            if t.name.startswith("PartitionShard") and t.native_id is not None}


def _other_processes_policies(running: Running) -> list[set[str]]:
    """num.processes > 1: the policies the threads of each other process run under."""
    supervisor = running.broker.supervisor
    found = []
    for pid in supervisor.pids() if supervisor is not None else []:
        found.append({thread_policy(int(task.name))
                      for task in Path(f"/proc/{pid}/task").iterdir()})
    return found


def test_worker_loops_run_under_the_scheduling_policy(tuned: Running, strict: Running) -> None:
    # tuned: 'batch'; strict: the default, SCHED_OTHER. This test process runs under
    # SCHED_OTHER, so 'batch' can come only from the setting
    assert thread_policy(threading.get_native_id()) == "normal"
    batch = _shard_thread_policies(tuned)
    assert batch and set(batch.values()) == {"batch"}, batch
    default = _shard_thread_policies(strict)
    assert default and set(default.values()) == {"normal"}, default
    # only the worker loops: the LogManager, the coordinators, ... keep SCHED_OTHER
    others = [t for t in tuned.new_threads if not t.name.startswith("PartitionShard")
              and t.native_id is not None and t.is_alive()]
    assert others and {thread_policy(t.native_id) for t in others} == {"normal"}
    # every other process of the broker has its worker loop under the policy too
    for policies in _other_processes_policies(tuned):
        assert policies == {"normal", "batch"}, policies
    for policies in _other_processes_policies(strict):
        assert policies == {"normal"}, policies


def _process_policies(pid: int) -> set[str]:
    return {thread_policy(int(task.name)) for task in Path(f"/proc/{pid}/task").iterdir()}


@pytest.mark.parametrize(("placement", "threads"),
                         [("spread", "single"), ("first", "single"), ("first", "shared")])
@pytest.mark.parametrize("setting", [None, "batch"])
def test_each_process_of_a_broker_schedules_its_loop(tmp_path: Path, setting: str | None,
                                                     placement: str, threads: str) -> None:
    # `actorlog serve` with two processes: 'batch' puts the worker loop of each under
    # SCHED_BATCH (and nothing else), the default leaves every thread under SCHED_OTHER.
    # Placement first: process 1 has no shard, its loop is handler-0's (shared: each
    # handler's), whose policy is set from the handler
    config: dict[str, Any] = {"num.processes": 2, "num.processes.shard.placement": placement,
                              "actor.threads": threads}
    if setting is not None:
        config["actor.threads.scheduling"] = setting
    b = BrokerProcess(tmp_path / "data", config=config).start()
    try:
        wait_for(lambda: "serves connections" in b.log(), "process 1", timeout=60)
        assert b.proc is not None
        main = b.proc.pid
        children = [int(c) for task in Path(f"/proc/{main}/task").iterdir()
                    for c in (task / "children").read_text().split()]
        assert len(children) == 1, children
        for pid in (main, *children):
            policies = _process_policies(pid)
            expected = {"normal"} if setting is None else {"normal", "batch"}
            assert policies == expected, (pid, policies)
    finally:
        assert b.stop() == 0, b.log()[-3000:]


def test_actor_threads_dedicated_gives_every_actor_a_thread(tuned: Running,
                                                             strict: Running) -> None:
    # dedicated (tuned): a thread per actor; shared (strict, the default): the
    # i-th handler, processor and purgatory run in shard i's thread.
    assert len(tuned.new_threads) >= len(tuned.node.actors)
    assert len(strict.new_threads) < len(strict.node.actors)


def test_socket_buffer_sizes_are_set_on_client_sockets(tuned: Running) -> None:
    with tuned.client() as client:
        assert client.call(18, 0, {}).error_code == 0  # ApiVersions: the Processor adopted it
        sizes = set()
        for i in range(3):
            processor = tuned.node.actors[f"processor-{i}"]
            for conn in list(processor.conns.values()):
                sizes.add((conn.sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF),
                           conn.sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)))
    assert sizes == {(2 * 65536, 2 * 32768)}  # Linux doubles what is set, for its bookkeeping


def test_trace_files_rotate_and_only_the_newest_are_kept(tuned: Running) -> None:
    traces = tuned.data_dir / "traces"
    with tuned.client() as client:
        assert create(client, "traced", 1).error_code == 0
        for _ in range(20):
            produce_batches(client, "traced", 10, size=50)
            tuned.node.tracer.flush()
    files = sorted(traces.glob("zeta-*"))
    # Files are named <node>-<start ns>-<pid>-<sequence>: the writer rotated past
    # trace.file.max.bytes many times, and trace.files.max kept the newest three.
    sequences = [int(f.name.split(".")[0].rsplit("-", 1)[1]) for f in files]
    assert 1 <= len(files) <= 3
    assert max(sequences) > 3


def test_num_partitions_of_auto_created_topics(tuned: Running) -> None:
    with tuned.client() as client:
        topic = f"auto-{uuid.uuid4().hex[:8]}"
        wait_for(lambda: metadata(client, [topic]).topics[0].error_code == 0, "auto-creation")
        assert len(metadata(client, [topic]).topics[0].partitions) == 3
        # The group coordinators create __consumer_offsets once the broker is up, on
        # their own time: when this test is the module's first, that may be later.
        wait_for(lambda: metadata(client, ["__consumer_offsets"],
                                  auto_create=False).topics[0].error_code == 0,
                 "__consumer_offsets")
        offsets = metadata(client, ["__consumer_offsets"], auto_create=False).topics[0]
        assert len(offsets.partitions) == 4  # offsets.topic.num.partitions


def test_log_dirs_hold_the_partitions(tuned: Running) -> None:
    with tuned.client() as client:
        assert create(client, "placed", 2).error_code == 0
    assert (tuned.data_dir / "placed-0").is_dir() and (tuned.data_dir / "placed-1").is_dir()
    assert (tuned.data_dir / "meta.properties").exists()


# --------------------------------------------------------------- the log broker


def test_segments_roll_by_size_and_by_time(logs: Running) -> None:
    with logs.client() as client:
        # log.segment.bytes = 1024: three batches of ~370 bytes make more than one segment.
        assert create(client, "by-size", configs={"segment.ms": NEVER, "retention.bytes": "-1",
                                                  "retention.ms": "-1"}).error_code == 0
        produce_batches(client, "by-size", 6)
        # log.roll.ms = 60 s: batches stamped two minutes apart roll the segment.
        assert create(client, "by-time", configs={"segment.bytes": str(2**30),
                                                  "retention.bytes": "-1", "retention.ms": "-1",
                                                  **CREATE_TIME}).error_code == 0
        now = int(time.time() * 1000)
        produce_batches(client, "by-time", 3, size=10,
                        timestamp_ms=lambda i: now - 600_000 + i * 120_000)
    assert segment_count(logs, "by-size") >= 3
    assert segment_count(logs, "by-time") == 3


def test_segments_roll_when_their_index_is_full(logs: Running) -> None:
    # log.index.size.max.bytes = 96: 12 offset entries, 7 time entries (one slot is kept for
    # the roll entry); every batch is over log.index.interval.bytes, so each adds an entry.
    with logs.client() as client:
        assert create(client, "by-index", configs={
            "segment.bytes": str(2**30), "segment.ms": NEVER, "retention.bytes": "-1",
            "retention.ms": "-1"}).error_code == 0
        produce_batches(client, "by-index", 20)
    assert segment_count(logs, "by-index") >= 2
    for index in (logs.data_dir / "by-index-0").glob("*index"):
        assert index.stat().st_size <= 96, index


def test_retention_by_size_and_by_time(logs: Running) -> None:
    with logs.client() as client:
        # log.retention.bytes = 4096 (retention by time off for this topic)
        assert create(client, "keep-size", configs={"retention.ms": "-1"}).error_code == 0
        produce_batches(client, "keep-size", 30)
        # log.retention.ms = 1 h: records stamped two hours ago go (by size: off)
        assert create(client, "keep-time", configs={"retention.bytes": "-1",
                                                    **CREATE_TIME}).error_code == 0
        old = int(time.time() * 1000) - 2 * 3_600_000
        produce_batches(client, "keep-time", 8, timestamp_ms=lambda i: old + i)
        # log.retention.check.interval.ms = 500: both happen while we watch. A pass may
        # come while the batches are still being written (the log start moves then) and
        # take the rest only at the next: wait for the log to be down to size, not for
        # the first deletion, and read the files knowing a pass may delete some meanwhile.
        keep_size = logs.data_dir / "keep-size-0"
        wait_for(lambda: log_bytes(keep_size) <= 4096 + 1024, "size retention")
        assert log_bytes(keep_size) >= 4096  # whole segments go, never below the limit
        assert client.list_offset("keep-size", 0, -2).offset > 0
        wait_for(lambda: client.list_offset("keep-time", 0, -2).offset == 8, "time retention")


def test_retention_minutes_and_hours_stand_in_for_ms(tuned: Running, strict: Running) -> None:
    """tuned: log.retention.minutes = 60 over log.retention.hours = 10000; strict:
    log.retention.hours = 1. Either way records stamped two hours ago go."""
    old = int(time.time() * 1000) - 2 * 3_600_000
    topic_configs = {"segment.bytes": "1024", "cleanup.policy": "delete", **CREATE_TIME}
    for running in (tuned, strict):
        with running.client() as client:
            assert create(client, "keep-minutes", configs=topic_configs).error_code == 0
            produce_batches(client, "keep-minutes", 8, timestamp_ms=lambda i: old + i)
            wait_for(lambda: client.list_offset("keep-minutes", 0, -2).offset == 8,
                     "time retention by the minutes or hours")


def test_log_roll_hours_stands_in_for_roll_ms(tuned: Running) -> None:
    """tuned: log.roll.hours = 1, log.roll.ms not set. Batches stamped two hours apart
    roll the segment, half an hour apart do not (stamped ahead: retention keeps them)."""
    start = int(time.time() * 1000) + 60_000
    with tuned.client() as client:
        for topic, gap in (("roll-hours", 2 * 3_600_000), ("roll-half-hours", 1_800_000)):
            assert create(client, topic, configs={"retention.ms": "-1",
                                                  **CREATE_TIME}).error_code == 0
            produce_batches(client, topic, 3, size=10,
                            timestamp_ms=lambda i, gap=gap: start + i * gap)
    assert segment_count(tuned, "roll-hours") == 3
    assert segment_count(tuned, "roll-half-hours") == 1


def test_flush_by_messages_and_by_time(logs: Running) -> None:
    with logs.client() as client:
        topics = {"flush-count": {"flush.ms": NEVER},  # only log.flush.interval.messages = 1
                  "flush-time": {"flush.messages": NEVER},  # only log.flush.interval.ms = 200
                  "flush-none": {"flush.messages": NEVER, "flush.ms": NEVER}}
        for topic, configs in topics.items():
            assert create(client, topic, configs={**configs, "retention.ms": "-1",
                                                  "retention.bytes": "-1"}).error_code == 0
            produce_batches(client, topic, 2, size=10)
    path = logs.data_dir / "recovery-point-offset-checkpoint"

    def recovery(topic: str) -> int:
        return read_offset_checkpoint(path).get((topic, 0), -1) if path.exists() else -1

    wait_for(lambda: recovery("flush-count") == 2 and recovery("flush-time") == 2,
               "recovery points at the log end")
    assert recovery("flush-none") == 0  # with neither key it was never flushed


def test_flush_scheduler_interval_is_how_often_flush_ms_is_checked(
        tuned: Running, tmp_path: Path) -> None:
    """Kafka's log flusher runs log.initial.task.delay.ms after the start, then every
    log.flush.scheduler.interval.ms (default: never, the first run the only one); the
    interval also stands in for log.flush.interval.ms when that is not set. tuned: 300 ms
    (no delay), the interval not set: a log left idle is flushed. A broker of
    log.flush.interval.ms 4 s, a delay of 14 s, no scheduler interval: a record appended at
    once is unflushed while the delay runs, flushed by that one check, and one appended
    after it stays unflushed, idle; the next append, past 4 s, flushes it (actorlog also
    checks flush.ms at each append, which Kafka does not). flush.ms is 4 s, not less, as
    the appends that must not flush come up to that long after the log's creation and
    after the check (at 2 s, a stall of 2.2 s put before the second append, as a loaded
    host may have, flushed it at its append and failed the test)."""
    def recovery(running: Running, topic: str) -> int:
        path = running.data_dir / "recovery-point-offset-checkpoint"
        return read_offset_checkpoint(path).get((topic, 0), -1) if path.exists() else -1

    configs = {"retention.ms": "-1", "retention.bytes": "-1"}
    with tuned.client() as client:
        assert create(client, "flush-checked", configs=configs).error_code == 0
        produce_batches(client, "flush-checked", 2, size=10)
    wait_for(lambda: recovery(tuned, "flush-checked") == 2, "the checked log flushed")

    flush_s, delay_s = 4, 14
    before_start = time.monotonic()  # the shard starts later: its check is due after +14 s
    delayed = Running(tmp_path / "data", {"log.flush.interval.ms": flush_s * 1000,
                                          "log.initial.task.delay.ms": delay_s * 1000,
                                          "log.flush.offset.checkpoint.interval.ms": 300})
    try:
        with delayed.client() as client:
            assert create(client, "flush-delayed", configs=configs).error_code == 0
            produce_batches(client, "flush-delayed", 1, size=10)
            produced = time.monotonic()
            wait_for(lambda: recovery(delayed, "flush-delayed") == 0, "its first checkpoint")
            # the record must be older than flush.ms at the check (+14 s from the shard's
            # start, later than before_start), with a margin of 2 s
            if produced - before_start > delay_s - flush_s - 2:
                pytest.skip("this host took over 8 s to start a broker and take a record")
            time.sleep(max(0.0, produced + flush_s + 1 - time.monotonic()))  # flush.ms passed
            if time.monotonic() - before_start < delay_s - 0.5:  # still inside the delay
                assert recovery(delayed, "flush-delayed") == 0
            wait_for(lambda: recovery(delayed, "flush-delayed") == 1, "the one check's flush")
            checked = time.monotonic()  # the check came before this
            produce_batches(client, "flush-delayed", 1, size=10)
            # > flush.ms since the check, and the checkpoint interval: no check comes
            time.sleep(max(0.0, checked + flush_s + 1 - time.monotonic()))
            assert recovery(delayed, "flush-delayed") == 1
            produce_batches(client, "flush-delayed", 1, size=10)
        wait_for(lambda: recovery(delayed, "flush-delayed") == 3, "flushed by the append")
    finally:
        delayed.broker.stop()


def test_log_append_time_stamps_the_batches(logs: Running) -> None:
    with logs.client() as client:
        assert create(client, "stamped", configs={"retention.ms": "-1"}).error_code == 0
        produce_batches(client, "stamped", 1, size=10, timestamp_ms=lambda _i: 1000)
        part = client.fetch("stamped", 0, 0)
    [batch] = read_batches(part.records)
    assert batch.timestamp_type == 1  # LogAppendTime
    assert batch.max_timestamp > 1000


def test_log_index_interval_is_the_topics_default(logs: Running) -> None:
    with logs.client() as client:
        assert create(client, "indexed", configs={"retention.ms": "-1"}).error_code == 0
        response = client.call(DESCRIBE_CONFIGS, 4, {
            "resources": [{"resource_type": 2, "resource_name": "indexed",
                           "configuration_keys": ["index.interval.bytes", "segment.bytes"]}],
            "include_synonyms": False, "include_documentation": False})
    values = {c.name: c.value for c in response.results[0].configs}
    assert values == {"index.interval.bytes": "64", "segment.bytes": "1024"}


# ------------------------------------------------------------- the strict broker


def test_auto_create_off_answers_unknown_topic(strict: Running) -> None:
    with strict.client() as client:
        topic = f"never-{uuid.uuid4().hex[:8]}"
        for _ in range(3):
            answer = metadata(client, [topic]).topics[0]
            assert answer.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert not (strict.data_dir / f"{topic}-0").exists()


def test_default_replication_factor_of_new_topics(strict: Running) -> None:
    with strict.client() as client:
        # default.replication.factor = 2 on one broker: a topic without a factor is refused
        assert create(client, "rf-default", rf=-1).error_code == (
            ErrorCode.INVALID_REPLICATION_FACTOR)
        assert create(client, "rf-one", rf=1).error_code == 0


def test_min_insync_replicas_refuses_acks_all(strict: Running) -> None:
    with strict.client() as client:
        assert create(client, "isr", rf=1).error_code == 0
        batch = record_batch([(b"k", b"v")])
        assert client.produce("isr", 0, batch, acks=-1).error_code == (
            ErrorCode.NOT_ENOUGH_REPLICAS)
        assert client.produce("isr", 0, batch, acks=1).error_code == 0


def test_log_cleanup_policy_is_the_topics_default(strict: Running) -> None:
    """Topics without their own cleanup.policy take the broker's (from the file: STATIC);
    a compacted one refuses DeleteRecords as Kafka does."""
    with strict.client() as client:
        assert create(client, "policy", rf=1).error_code == 0
        assert create(client, "policy-delete", rf=1,
                      configs={"cleanup.policy": "delete"}).error_code == 0
        described = client.call(DESCRIBE_CONFIGS, 4, {
            "resources": [{"resource_type": 2, "resource_name": "policy",
                           "configuration_keys": ["cleanup.policy"]}],
            "include_synonyms": False, "include_documentation": False})
        [entry] = described.results[0].configs
        assert (entry.value, entry.config_source) == ("compact", 4)  # STATIC_BROKER_CONFIG
        for topic, code in (("policy", ErrorCode.POLICY_VIOLATION), ("policy-delete", 0)):
            assert client.produce(topic, 0, record_batch([(b"k", b"v")]),
                                  acks=1).error_code == 0
            response = client.call(21, 2, {"topics": [{"name": topic, "partitions": [
                {"partition_index": 0, "offset": 1}]}], "timeout_ms": 5000})
            assert response.topics[0].partitions[0].error_code == code, topic


def test_log_cleaner_enable_false_runs_no_cleaner(strict: Running) -> None:
    """No LogCleaner actor: compacted topics (the default here) keep every record."""
    assert "log-cleaner" not in strict.node.actors
    with strict.client() as client:
        assert create(client, "uncleaned", rf=1, configs={"segment.bytes": "1024"}).error_code == 0
        produce_batches(client, "uncleaned", 12)  # one key: all superseded but the last
    assert not (strict.data_dir / "cleaner-offset-checkpoint").exists()
    assert segment_count(strict, "uncleaned") > 3


def test_checkpoints_are_written_while_running(strict: Running) -> None:
    with strict.client() as client:
        assert create(client, "checked", rf=1).error_code == 0
        for _ in range(3):
            assert client.produce("checked", 0, record_batch([(b"k", b"v")]),
                                  acks=1).error_code == 0
    path = strict.data_dir / "replication-offset-checkpoint"
    wait_for(lambda: path.exists() and read_offset_checkpoint(path).get(("checked", 0)) == 3,
               "the high watermark checkpointed (log.flush.offset.checkpoint.interval.ms)")


def test_max_connections_closes_connections_over_the_limit(strict: Running) -> None:
    clients = [strict.client() for _ in range(3)]
    try:
        for c in clients:
            assert c.call(18, 0, {}).error_code == 0
        with strict.client() as extra:
            assert extra.is_closed_by_peer(timeout=10)
    finally:
        for c in clients:
            c.close()
    # The broker frees a slot once it has read the close: the next test gets one.
    deadline = time.monotonic() + 15
    while True:
        with strict.client() as probe:
            try:
                if probe.call(18, 0, {}).error_code == 0:
                    break
            except OSError:
                pass
        assert time.monotonic() < deadline, "the closed connections' slots never came back"
        time.sleep(0.1)


def test_session_timeout_bounds_refuse_joins(strict: Running) -> None:
    bootstrap = f"127.0.0.1:{strict.port}"
    for session_ms, code in ((6999, ErrorCode.INVALID_SESSION_TIMEOUT),
                             (8001, ErrorCode.INVALID_SESSION_TIMEOUT),
                             (7500, ErrorCode.MEMBER_ID_REQUIRED)):
        assert join(bootstrap, "bounded", session_ms=session_ms).error_code == code


def test_initial_rebalance_delay_holds_a_new_group(strict: Running) -> None:
    """group.initial.rebalance.delay.ms = 10 min: the first join of a new group waits.

    With the default (3 s) the join below would be answered within the window.
    """
    bootstrap = f"127.0.0.1:{strict.port}"
    first = join(bootstrap, "delayed", session_ms=7500)
    assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED
    host, port = bootstrap.rsplit(":", 1)
    from kafka.protocol.consumer import JoinGroupRequest

    request = JoinGroupRequest(
        group_id="delayed", session_timeout_ms=7500, rebalance_timeout_ms=600_000,
        member_id=first.member_id, group_instance_id=None, protocol_type="consumer",
        protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"m")])
    request.with_header(correlation_id=9, client_id="delay-test")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(bytes(request.encode(version=5, header=True, framed=True)))
        sock.settimeout(6.0)
        with pytest.raises(TimeoutError):
            sock.recv(4)
