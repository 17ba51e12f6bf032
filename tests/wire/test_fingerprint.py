"""The inter-node wire fingerprint: what it covers, that any change of shape changes it, and
that every process of one build computes the same one (hashlib, not hash())."""

from __future__ import annotations

import hashlib
import importlib
import os
import pkgutil
import subprocess
import sys
import typing
from pathlib import Path
from typing import Any, NamedTuple

import pytest

import wire
from wire.fingerprint import (
    FORMAT,
    TEST_SALT_ENV,
    WIRE_MODULES,
    describe,
    describe_message,
    fingerprint_of,
    first_mismatch,
    wire_fingerprint,
    wire_messages,
)
from wire.registry import message, registered

ROOT = Path(__file__).resolve().parents[2]


class Member(NamedTuple):
    name: str
    tags: list[str]


class Group(NamedTuple):
    members: list[Member]
    parent: Group | None


class Join(NamedTuple):
    group_id: str
    generation: int
    group: Group | None
    extras: dict[str, Member]


class Leave(NamedTuple):
    group_id: str
    reason: str | None


SMALL: dict[int, type] = {300: Join, 301: Leave}


@message(9931)
class NotOfWire(NamedTuple):
    """A message registered outside ``wire`` (as bench's and tests' are): not fingerprinted."""

    value: int


class WiderRow(NamedTuple):
    """A later build's Member: one more field."""

    name: str
    tags: list[str]
    since: int


class JoinOfWiderRows(NamedTuple):
    """A later build's Join: the same fields, one of them holding WiderRow rows."""

    group_id: str
    generation: int
    group: Group | None
    extras: dict[str, WiderRow]


WiderRow.__name__ = "Member"
JoinOfWiderRows.__name__ = "Join"


def widened(cls: type, extra: str = "added") -> type:
    """``cls`` with one more field at the end: what a later build's message would be."""
    hints = typing.get_type_hints(cls)
    fields: tuple[str, ...] = typing.cast(Any, cls)._fields
    make: Any = NamedTuple
    return typing.cast(type, make(cls.__name__, [(f, hints[f]) for f in fields] + [(extra, int)]))


def test_the_described_text_names_ids_names_fields_and_rows_in_order() -> None:
    assert describe(SMALL) == "\n".join([
        FORMAT,
        "300 Join group_id:str generation:int group:Group(members:list[Member(name:str,"
        "tags:list[str])],parent:Group|None)|None extras:dict[str,Member(name:str,"
        "tags:list[str])]",
        "301 Leave group_id:str reason:str|None",
    ])
    # the fingerprint is that text's sha256, cut short: the same in every process and run
    assert fingerprint_of(SMALL) == hashlib.sha256(describe(SMALL).encode()).hexdigest()[:12]


def test_every_change_of_shape_changes_the_fingerprint() -> None:
    base = fingerprint_of(SMALL)

    class RenamedField(NamedTuple):
        group_id: str
        why: str | None

    class RetypedField(NamedTuple):
        group_id: str
        reason: int | None

    class Reordered(NamedTuple):
        reason: str | None
        group_id: str

    for name, cls in (("Leave", RenamedField), ("Leave", RetypedField), ("Leave", Reordered)):
        cls.__name__ = name
    variants = {
        "a field added": {300: Join, 301: widened(Leave)},
        "a field renamed": {300: Join, 301: RenamedField},
        "a field's type changed": {300: Join, 301: RetypedField},
        "fields reordered": {300: Join, 301: Reordered},
        "a row's field added": {300: JoinOfWiderRows, 301: Leave},
        "an id changed": {300: Join, 302: Leave},
        "a message added": {**SMALL, 303: Member},
        "a message removed": {300: Join},
    }
    prints = {what: fingerprint_of(messages) for what, messages in variants.items()}
    assert base not in prints.values(), prints
    assert len(set(prints.values())) == len(prints), prints


def test_adding_a_field_to_any_message_of_this_build_changes_its_fingerprint() -> None:
    messages = wire_messages()
    base = fingerprint_of(messages)
    assert len(messages) > 100  # every message module is in
    for type_id, cls in messages.items():
        changed = fingerprint_of({**messages, type_id: widened(cls)})
        assert changed != base, f"{type_id} {cls.__name__}: a field added went unnoticed"


def test_the_fingerprint_covers_every_message_module_of_wire() -> None:
    for info in pkgutil.walk_packages(wire.__path__, "wire."):
        importlib.import_module(info.name)
    of_wire = {i for i, cls in registered().items() if cls.__module__.startswith("wire.")}
    missing = sorted({registered()[i].__module__ for i in of_wire - set(wire_messages())})
    assert not missing, f"add to wire.fingerprint.WIRE_MODULES: {missing}"
    assert set(WIRE_MODULES) == {cls.__module__ for cls in wire_messages().values()}
    # messages registered elsewhere (bench's, tests' own) are not part of it
    elsewhere = {i for i, cls in registered().items() if not cls.__module__.startswith("wire.")}
    assert 9931 in elsewhere and not elsewhere & set(wire_messages())


def _fingerprint_in_a_process(env: dict[str, str]) -> str:
    out = subprocess.run(
        [sys.executable, "-c", "from wire.fingerprint import wire_fingerprint as f; print(f())"],
        cwd=ROOT, env={**os.environ, **env}, capture_output=True, text=True, timeout=60,
        check=True)
    return out.stdout.strip()


def test_every_process_of_this_build_computes_the_same_fingerprint() -> None:
    env = {k: v for k, v in os.environ.items() if k != TEST_SALT_ENV}
    mine = fingerprint_of(wire_messages())
    assert len(mine) == 12 and int(mine, 16) >= 0
    if TEST_SALT_ENV not in os.environ:
        assert wire_fingerprint() == mine
    seen = {_fingerprint_in_a_process({**env, "PYTHONHASHSEED": seed}) for seed in ("1", "2")}
    assert seen == {mine}


def test_the_test_hook_perturbs_the_fingerprint_of_that_process_only() -> None:
    salted = _fingerprint_in_a_process({TEST_SALT_ENV: "another build"})
    assert salted != fingerprint_of(wire_messages())
    assert salted == fingerprint_of(wire_messages(), "another build")


@pytest.mark.parametrize(("wires", "line"), [
    ({1: "aaaaaaaaaaaa", 2: "aaaaaaaaaaaa"}, None),
    ({}, None),
    ({3: "bbbbbbbbbbbb", 1: "aaaaaaaaaaaa", 2: "cccccccccccc"},
     "node 2 runs inter-node wire cccccccccccc, this build aaaaaaaaaaaa: stop every node to "
     "upgrade, see README"),
    ({4: ""}, "node 4 runs a build from before inter-node wire fingerprints, this build "
              "aaaaaaaaaaaa: stop every node to upgrade, see README"),
])
def test_the_refusal_names_the_first_node_of_another_wire(wires: dict[int, str],
                                                          line: str | None) -> None:
    assert first_mismatch("aaaaaaaaaaaa", wires) == line


def test_describe_message_is_one_line_per_message() -> None:
    assert describe_message(301, Leave) == "301 Leave group_id:str reason:str|None"
