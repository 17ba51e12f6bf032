"""The inter-node wire fingerprint: a short hash of every message's id, name and shape.

Nodes decode each other's messages strictly (``wire.registry`` checks each
body's arity and field types), so two builds whose messages differ by one
field cannot work together: each dead-letters what the other sends. The
version string does not tell them apart (it is not bumped for such changes);
this fingerprint does. It is computed from the registry itself: for every
message of the ``wire`` modules, in id order, its id, its class name and its
fields in order with their declared types, rows (``NamedTuple`` values inside
a message) spelled out field by field. It uses ``hashlib``, never ``hash()``,
so every process and every run of one build computes the same value.

A node writes it in its broker registration and refuses to start beside a
live node whose fingerprint differs (``actors.broker``).

Test hook: the environment variable named by :data:`TEST_SALT_ENV`, when set,
is mixed into the hash. It changes nothing else, so a test can start a node of
"another build" and check it is refused. Never set it outside tests.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import types
import typing
from collections.abc import Mapping
from functools import cache
from typing import Any

from wire.registry import registered

WIRE_MODULES = (
    "wire.runtime_messages",
    "wire.broker_messages",
    "wire.group_messages",
    "wire.cluster_messages",
    "wire.replication_messages",
    "wire.admin_messages",
    "wire.security_messages",
    "wire.transaction_messages",
    "wire.sim_messages",
)
"""Every module of ``wire`` that registers messages (a test checks the list is whole)."""

TEST_SALT_ENV = "ACTORLOG_TEST_HOOK_WIRE_FINGERPRINT_SALT"
"""Test hook only: a value mixed into this process's fingerprint (see the module's notes)."""

# /2: frames may carry the sender's incarnation (wire.envelope); a build of /1 drops them
FORMAT = "actorlog-wire/2"
LENGTH = 12  # hex digits shown and compared: 48 bits, plenty to tell builds apart


def _is_row(hint: Any) -> bool:
    return isinstance(hint, type) and issubclass(hint, tuple) and hasattr(hint, "_fields")


def shape_of(hint: Any, rows_seen: frozenset[type] = frozenset()) -> str:
    """A type hint spelled out stably (rows field by field; a row inside itself by name)."""
    if hint is Any:
        return "any"
    if hint is None or hint is type(None):
        return "None"
    if _is_row(hint):
        if hint in rows_seen:
            return str(hint.__name__)
        seen = rows_seen | {hint}
        hints = typing.get_type_hints(hint)
        fields = ",".join(f"{f}:{shape_of(hints.get(f, Any), seen)}" for f in hint._fields)
        return f"{hint.__name__}({fields})"
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return "|".join(shape_of(a, rows_seen) for a in args)
    if origin is not None:
        name = getattr(origin, "__name__", None) or str(origin)
        if not args:
            return str(name)
        inner = ",".join("..." if a is Ellipsis else shape_of(a, rows_seen) for a in args)
        return f"{name}[{inner}]"
    if isinstance(hint, type):
        return hint.__name__
    return repr(hint)


@cache
def describe_message(type_id: int, cls: type) -> str:
    """One message's line: ``<id> <name> <field>:<shape> ...``."""
    hints = typing.get_type_hints(cls)
    fields: tuple[str, ...] = typing.cast(Any, cls)._fields
    return " ".join([str(type_id), cls.__name__,
                     *(f"{f}:{shape_of(hints.get(f, Any))}" for f in fields)])


def describe(messages: Mapping[int, type]) -> str:
    """What the fingerprint hashes: a format line, then one line per message in id order."""
    return "\n".join([FORMAT, *(describe_message(i, messages[i]) for i in sorted(messages))])


def fingerprint_of(messages: Mapping[int, type], salt: str = "") -> str:
    text = describe(messages) + (f"\nsalt {salt}" if salt else "")
    return hashlib.sha256(text.encode()).hexdigest()[:LENGTH]


def wire_messages() -> dict[int, type]:
    """The messages of the ``wire`` modules (each imported), by id; not bench's or tests'."""
    for name in WIRE_MODULES:
        importlib.import_module(name)
    return {i: cls for i, cls in registered().items() if cls.__module__ in WIRE_MODULES}


@cache
def wire_fingerprint() -> str:
    """This build's fingerprint (with the test hook's salt, if set), computed once."""
    return fingerprint_of(wire_messages(), os.environ.get(TEST_SALT_ENV, ""))


def mismatch_line(node: str, other: str, own: str) -> str:
    """Why ``node`` (registered with fingerprint ``other``) and this build cannot run together."""
    theirs = (f"runs inter-node wire {other}" if other
              else "runs a build from before inter-node wire fingerprints")
    return f"{node} {theirs}, this build {own}: stop every node to upgrade, see README"


def first_mismatch(own: str, registered_wires: Mapping[int, str]) -> str | None:
    """The refusal line for the lowest node id whose fingerprint is not ``own``; None if none."""
    for node_id in sorted(registered_wires):
        if registered_wires[node_id] != own:
            return mismatch_line(f"node {node_id}", registered_wires[node_id], own)
    return None
