"""What ``/metrics`` exports: every family with its ``# HELP`` and ``# TYPE``.

Two sources make a scrape:

* **counters** the actors add to as they work (``node.metrics``, one Counter
  per thread, no lock): requests, errors by code, bytes and records in and
  out per topic, the latency histogram per API, messages sent to each actor;
* **gauges** read when the scrape comes: each actor is asked for its stats
  (``GetStats``), as an operator would ask Kafka's JMX beans: log size, log
  end offset and high watermark per partition, under-replicated and offline
  partitions, consumer group lag, open connections per listener, delayed
  operations per kind, and mailbox depth and handling time per actor.

Counter keys are ``name|label=value,label=value``; a histogram's buckets are
counted per bucket (``le`` the bucket's upper bound) and made cumulative
here, with ``+Inf``, ``_sum`` and ``_count``, as Prometheus expects.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

PREFIX = "actorlog_"

# Upper bounds of the request latency buckets, in seconds (Prometheus' base unit).
LATENCY_BUCKETS_S: tuple[float, ...] = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                        0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
BUCKET_NS = tuple(int(b * 1e9) for b in LATENCY_BUCKETS_S)  # the same, in ns
_BUCKET_TEXT = tuple(repr(b) for b in LATENCY_BUCKETS_S)

# name -> (type, help). Every family the broker exports is here; render() refuses others.
FAMILIES: dict[str, tuple[str, str]] = {
    # requests (counted by the Processor when the response is written)
    "requests_total": ("counter", "Requests answered, by API"),
    "request_time_ns_total": ("counter", "Time from a request's arrival to its response "
                                         "written, summed, by API (nanoseconds)"),
    "request_stage_time_ns_total": ("counter", "Kafka's request-time split (request_queue, "
                                               "local, remote, response_queue, send), summed, "
                                               "by API (nanoseconds)"),
    "request_latency_seconds": ("histogram", "Time from a request's arrival to its response "
                                             "written, by API"),
    "errors_total": ("counter", "Error codes in responses (every partition, topic or group "
                                "entry counts once), by API and Kafka error name"),
    "requests_failed": ("counter", "Requests whose handling raised or whose response "
                                   "could not be encoded (answered with an error or the "
                                   "connection closed)"),
    "requests_refused": ("counter", "Requests refused before handling"),
    "auth_delay_wakeups": ("counter", "Poll wakeups for connections waiting out "
                                      "connection.failed.authentication.delay.ms"),
    "auth_delay_closed_by_peer": ("counter", "Connections a client closed or reset during "
                                             "their connection.failed.authentication.delay.ms "
                                             "(closed at once)"),
    "unsupported_version_warnings_held": ("counter", "Refusals of an unsupported API version "
                                                     "not logged (one line a minute per API, "
                                                     "version and client id, per process)"),
    "request_failure_logs_held": ("counter", "Failed requests not logged (one line a minute "
                                             "per place in the code, per process)"),
    "requests_abandoned": ("counter", "Requests still waiting when their connection closed"),
    "internal_calls_timed_out": ("counter", "Internal calls answered by their deadline (the "
                                            "process of their shard did not answer in time: "
                                            "a Produce's partitions REQUEST_TIMED_OUT, a "
                                            "Fetch's or ListOffsets' NOT_LEADER_OR_FOLLOWER)"),
    "internal_answers_late": ("counter", "Answers to internal calls that came after their "
                                         "deadline had answered them (dropped)"),
    "internal_answers_unknown": ("counter", "Answers to no pending internal call (one to "
                                            "a request abandoned or ended before it came; "
                                            "dropped)"),
    "processes_marked_silent": ("counter", "Times a request handler took another process "
                                           "of the broker as silent (a Fetch's, replica "
                                           "fetch's, ListOffsets' or other call a live "
                                           "process answers at once answered by its "
                                           "deadline)"),
    "processes_answering_again": ("counter", "Times a process taken as silent answered a "
                                             "request handler again (the mark cleared)"),
    "silent_processes_restarted": ("counter", "Times a process taken as silent by a request "
                                              "handler was started again (the mark cleared)"),
    "internal_calls_to_silent": ("counter", "Probes sent to a process taken as silent after "
                                            "the one that marked it: a call a live process "
                                            "answers at once, sent when the last probe went "
                                            "10 s ago or more, with the short deadline "
                                            "(max_wait_ms + carry + 200 ms)"),
    "internal_calls_withheld": ("counter", "Calls a request handler did not send to a "
                                           "process taken as silent (a probe to it "
                                           "outstanding), answered by their short deadline "
                                           "(max_wait_ms + carry + 200 ms)"),
    "requests_dropped_after_close": ("counter", "Answers for connections already closed"),
    "requests_oversized": ("counter", "Requests over socket.request.max.bytes"),
    # topics
    "topic_bytes_in_total": ("counter", "Bytes of record batches appended, by topic"),
    "topic_records_in_total": ("counter", "Records appended, by topic"),
    "topic_bytes_out_total": ("counter", "Bytes of record batches handed to fetchers (clients, "
                                         "followers, group coordinators), by topic"),
    "topic_records_out_total": ("counter", "Offsets handed to fetchers, by topic (records, "
                                           "counting offsets a compaction removed)"),
    # partitions
    "log_size_bytes": ("gauge", "Bytes of a partition's segments"),
    "log_end_offset": ("gauge", "A partition's log end offset"),
    "log_start_offset": ("gauge", "A partition's log start offset"),
    "high_watermark": ("gauge", "A partition's high watermark"),
    "partitions": ("gauge", "Partitions hosted on this broker"),
    "leader_partitions": ("gauge", "Partitions this broker leads"),
    "under_replicated_partitions": ("gauge", "Led partitions whose ISR is smaller than their "
                                             "replica set"),
    "offline_partitions": ("gauge", "Partitions without a leader (this broker's view; 0 on a "
                                    "single node)"),
    "log_cleaner_swaps": ("counter", "Cleaned segments swapped into compacted logs"),
    "log_cleaner_passes_total": ("counter", "Log cleaner passes completed"),
    "log_cleaner_bytes_read_total": ("counter", "Bytes the log cleaner read"),
    "log_cleaner_bytes_written_total": ("counter", "Bytes the log cleaner wrote"),
    "log_cleaner_max_dirty_ratio": ("gauge", "Dirty share of the last log the cleaner chose"),
    # groups
    "consumer_group_lag": ("gauge", "High watermark minus committed offset, by group and "
                                    "partition"),
    "consumer_groups": ("gauge", "Consumer groups loaded by the coordinators"),
    # connections
    "connections": ("gauge", "Open client connections, by listener"),
    "connections_accepted_total": ("counter", "Client connections accepted, by listener"),
    "connections_refused": ("counter", "Connections refused (max.connections)"),
    "process_connections": ("gauge", "num.processes.connection.distribution = handoff: open "
                                     "client connections each process of the broker holds, "
                                     "by listener and process"),
    "connections_handed_busy_total": ("counter", "handoff: connections given to another "
                                                 "process than the first choice because its "
                                                 "link was full"),
    # purgatory
    "purgatory_size": ("gauge", "Delayed operations waiting, by kind (produce, fetch, "
                                "delete_records)"),
    "purgatory_expirations_total": ("counter", "Delayed operations that timed out"),
    # actors
    "actor_mailbox_depth": ("gauge", "Messages sent to an actor by actors of this node and "
                                     "not yet handled"),
    "actor_messages_handled_total": ("counter", "Messages an actor handled"),
    "actor_handle_seconds": ("summary", "Time an actor spent in its handlers, with what "
                                        "lies between two handlers of one batch"),
    "actor_messages_enqueued_total": ("counter", "Messages actors of this node sent to an "
                                                 "actor"),
    "actors_running": ("gauge", "Actors of this node that run (stopped ones, such as idle "
                                "replica fetchers, not counted)"),
    "actor_running": ("gauge", "1 while an actor runs, 0 once stopped (its counters stay)"),
    "actor_crashes": ("counter", "Handler exceptions"),
    "actor_restarts": ("counter", "Actors restarted by supervision"),
    "actor_gave_up": ("counter", "Actors supervision stopped restarting"),
    "mailbox_full_waits": ("counter", "Sends that waited for room in a full mailbox"),
    "messages_refused_oversized": ("counter", "Messages over actor.max.frame.bytes"),
    "direct_link_frames_dropped": ("counter", "Frames a direct link to another process of "
                                              "the broker dropped, its backlog full (that "
                                              "process stopped, hung or away): their "
                                              "messages are dead letters"),
    "direct_link_frames_refused": ("counter", "Frames coming in on a direct link whose "
                                              "announced size was over the node's frame "
                                              "limit: read and dropped, not buffered; each a "
                                              "dead letter"),
    "replica_fetcher_bytes_total": ("counter", "Record bytes a replica fetcher fetched"),
    "replica_fetcher_largest_response_bytes": ("gauge", "Record bytes of a replica fetcher's "
                                                        "largest answer (bounded by "
                                                        "replica.fetch.response.max.bytes)"),
    "dead_letters_total": ("counter", "Messages that could not be delivered"),
}


# ------------------------------------------------------------------ counting


_LATENCY_KEYS: dict[str, tuple[str, ...]] = {}


def latency_keys(api: str) -> tuple[str, ...]:
    """The counter keys of the API's latency buckets, ``le="+Inf"`` last: the one for
    ``elapsed_ns`` is at ``bisect_left(BUCKET_NS, elapsed_ns)``."""
    keys = _LATENCY_KEYS.get(api)
    if keys is None:
        keys = _LATENCY_KEYS[api] = tuple(
            [f"request_latency_seconds_bucket|api={api},le={t}" for t in _BUCKET_TEXT]
            + [f"request_latency_seconds_bucket|api={api},le=+Inf"])
    return keys


def latency_key(api: str, elapsed_ns: int) -> str:
    """The counter key of the bucket ``elapsed_ns`` falls in (``le="+Inf"`` past the last)."""
    return latency_keys(api)[bisect_left(BUCKET_NS, elapsed_ns)]


def error_codes(data: Any) -> list[int]:
    """Every non-zero ``error_code`` in a response body (nested dicts and lists)."""
    found: list[int] = []
    todo = [data]
    while todo:
        item = todo.pop()
        # plain loops, no generator per container: this walks every response
        if isinstance(item, dict):
            code = item.get("error_code")
            if code:
                found.append(int(code))
            for value in item.values():
                if isinstance(value, (dict, list)):
                    todo.append(value)
        elif isinstance(item, list):
            for value in item:
                if isinstance(value, (dict, list)):
                    todo.append(value)
    return found


# ------------------------------------------------------------------ rendering


def _labels(pairs: Iterable[tuple[str, Any]]) -> str:
    text = ",".join(f'{k}="{_escape(str(v))}"' for k, v in pairs)
    return "{" + text + "}" if text else ""


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _parse_key(key: str) -> tuple[str, list[tuple[str, str]]]:
    name, _, labels = key.partition("|")
    pairs = [(k, v) for k, _, v in (kv.partition("=") for kv in labels.split(",") if kv)]
    return name, pairs


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


Sample = tuple[str, list[tuple[str, str]], float]


def render(counters: Mapping[str, int], gauges: Iterable[Sample] = ()) -> str:
    """Prometheus text (version 0.0.4) of the counters and gauges, families in order, each
    with its HELP and TYPE; histograms cumulative with +Inf, _sum and _count."""
    samples: dict[str, list[Sample]] = defaultdict(list)
    buckets: dict[tuple[str, tuple[tuple[str, str], ...]], dict[str, int]] = defaultdict(dict)
    for key, value in counters.items():
        name, pairs = _parse_key(key)
        if name.endswith("_bucket") and name[:-7] in FAMILIES:
            le = dict(pairs).get("le", "+Inf")
            rest = tuple(p for p in pairs if p[0] != "le")
            buckets[(name[:-7], rest)][le] = value
            continue
        family = name
        for suffix in ("_sum", "_count"):
            if name.endswith(suffix) and name[:-len(suffix)] in FAMILIES:
                family = name[:-len(suffix)]
        if family not in FAMILIES:
            family = name  # an unknown counter still shows (as untyped)
        samples[family].append((name, pairs, value))
    for name, pairs, reading in gauges:
        family = name
        for suffix in ("_sum", "_count"):
            if name.endswith(suffix) and name[:-len(suffix)] in FAMILIES:
                family = name[:-len(suffix)]
        samples[family].append((name, pairs, reading))
    for (family, rest), by_le in buckets.items():
        running = 0
        for bound in (*_BUCKET_TEXT, "+Inf"):
            running += by_le.get(bound, 0)
            samples[family].append((family + "_bucket", [*rest, ("le", bound)], running))
        samples[family].append((family + "_count", list(rest), running))
        total_ns = counters.get("request_time_ns_total|" + ",".join(f"{k}={v}" for k, v in rest),
                                0)
        samples[family].append((family + "_sum", list(rest), total_ns / 1e9))
    out: list[str] = []
    for family in [*FAMILIES, *sorted(set(samples) - set(FAMILIES))]:
        kind, text = FAMILIES.get(family, ("untyped", "(no description)"))
        # Prometheus names every counter ..._total; the counter keys the actors add to keep
        # their short names, the exported family gets the suffix.
        shown = family + "_total" if kind == "counter" and not family.endswith("_total") else family
        out.append(f"# HELP {PREFIX}{shown} {text}")
        out.append(f"# TYPE {PREFIX}{shown} {kind}")
        for name, pairs, amount in sorted(samples.get(family, ()),
                                          key=lambda s: (s[0], _order(s[1]))):
            name = shown if name == family else name
            out.append(f"{PREFIX}{name}{_labels(pairs)} {_number(amount)}")
    return "\n".join(out) + "\n"


def _order(pairs: list[tuple[str, str]]) -> list[tuple[str, Any]]:
    """Sort key: ``le`` numerically (+Inf last), other labels as text."""
    return [(k, (float(v) if v != "+Inf" else float("inf")) if k == "le" else v)
            for k, v in pairs]
