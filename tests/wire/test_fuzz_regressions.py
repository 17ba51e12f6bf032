"""Inputs the fuzzer found (tests/fuzz_corpus/regressions/<target>/) and the seeds: each is
refused clearly (or served) by the decode path, never an uncaught other exception."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.fuzz_targets import CORPUS_DIR, TARGETS, corpus_files, target
from wire import kafka_codec as kc

INPUTS = [(name, path) for name in TARGETS for path in corpus_files(name)]


@pytest.mark.parametrize(("name", "path"), INPUTS,
                         ids=[f"{n}/{p.parent.name}/{p.name}" for n, p in INPUTS])
def test_input_is_refused_clearly_or_served(name: str, path: Path) -> None:
    target(name)(path.read_bytes())


def test_corpus_is_small_and_has_both_clients() -> None:
    files = [p for p in CORPUS_DIR.rglob("*") if p.is_file() and p.suffix != ".py"]
    assert len(files) >= 30 and sum(p.stat().st_size for p in files) < 200_000
    names = {p.name for p in corpus_files("kafka")}
    assert any(n.startswith("kafka-python-") for n in names)
    assert any(n.startswith("confluent-") for n in names)


def test_null_where_the_schema_allows_none_is_invalid_request() -> None:
    """OffsetFetch v8 with a -1 `groups` length: kafka.protocol reads None, the API
    iterated it (TypeError, a traceback and a closed connection); now refused as Kafka's
    readers refuse it."""
    frame = (CORPUS_DIR / "regressions" / "kafka" / "offset-fetch-v8-null-groups").read_bytes()
    header = kc.parse_request_header(frame)
    assert (header.api_key, header.api_version) == (9, 8)
    with pytest.raises(kc.InvalidRequestError,
                       match="non-nullable field groups was serialized as null"):
        kc.decode_request(header, frame)


def test_huge_length_in_a_body_is_invalid_request() -> None:
    """InitProducerId v4 whose compact string length is a 35-byte varint: the compiled
    decoder raised OverflowError, which the codec did not count as a malformed body."""
    frame = (CORPUS_DIR / "regressions" / "kafka" / "init-producer-id-v4-overflow").read_bytes()
    header = kc.parse_request_header(frame)
    assert (header.api_key, header.api_version) == (22, 4)
    with pytest.raises(kc.InvalidRequestError, match=r"malformed or truncated.*OverflowError"):
        kc.decode_request(header, frame)


def test_null_element_of_a_string_array_is_invalid_request() -> None:
    """DescribeGroups v0 naming a null group: the API hashed None to find its coordinator
    (AttributeError); Kafka's readers refuse a null element of a string array."""
    frame = (CORPUS_DIR / "regressions" / "kafka" / "describe-groups-null-group-id").read_bytes()
    header = kc.parse_request_header(frame)
    assert (header.api_key, header.api_version) == (15, 0)
    with pytest.raises(kc.InvalidRequestError,
                       match="non-nullable field groups element was serialized as null"):
        kc.decode_request(header, frame)


def test_structure_aware_envelope_mutations_reach_the_shape_checks() -> None:
    """Most of mutate_envelope's outputs are still frames, and their entries get as far as
    the registry's shape checks (byte mutations rarely do); none gets past the target."""
    from bench.fuzz_targets import mutate_envelope

    seeds = [p.read_bytes() for p in corpus_files("envelope")]
    run = target("envelope")
    frames = 0
    for i in range(400):
        data = mutate_envelope(seeds[i % len(seeds)], 8192, i)
        if data is not None:
            frames += 1
            run(data)
    assert frames > 300
