"""Replacing a partition's segments by cleaned copies, so that a crash at any point
leaves a readable, correct log.

The cleaner writes the new segments (log and both indexes, fsynced) into a
staging directory inside the partition directory. The swap then:

1. writes the swap manifest (``cleaner-swap.json``, version 2: which old
   segments go, which new ones come from which staging directory) atomically;
   this is the commit point. Every new segment's ``.txnindex`` is staged (the
   owner writes them from its index just before);
2. moves each new segment's files into the partition directory (indexes
   first, the log last; a new segment may take an old one's name);
3. deletes the old segments that no new one replaced;
4. removes the manifest and the staging directory.

Opening a partition completes a swap whose manifest is there (every step is
idempotent: a file already moved is not in staging any more, a file already
deleted is gone) and removes staging directories without a manifest, which
are cleanings that never committed: the old segments are all still there.
"""

from __future__ import annotations

import json
import os
import shutil
from bisect import bisect_right
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from actors.core.checkpoint import fsync_dir, write_atomically
from actors.core.log_index import OFFSET_INDEX_SUFFIX, TIME_INDEX_SUFFIX
from actors.core.txn_index import (
    TXN_INDEX_SUFFIX,
    AbortedTxn,
    read_txn_index,
    txn_index_path,
    write_txn_index,
)

MANIFEST = "cleaner-swap.json"
STAGING_PREFIX = "cleaner-staging-"
_LOG = ".log"


MANIFEST_VERSION = 2


class SwapManifest(NamedTuple):
    staging: str  # the staging directory's name, inside the partition directory
    old_bases: tuple[int, ...]  # the segments that go
    new_bases: tuple[int, ...]  # the segments that come (from staging)
    # 2: every new segment's .txnindex is staged (the entries whose marker it holds), and
    # the old segments' files go. 1 (an actorlog from before): a .txnindex may not be
    # staged, so the old segments' entries are merged into the new segments' files
    # before anything moves (merge_v1_txn_indexes).
    version: int = MANIFEST_VERSION


class SwapError(RuntimeError):
    """A manifest that cannot be read or names files that are not there."""


def staging_name(pass_id: int) -> str:
    return f"{STAGING_PREFIX}{pass_id}"


def segment_files(base: int) -> tuple[str, str, str, str]:
    """The names of one segment's files, in the order they are moved (the log last). The
    aborted-transaction index (``.txnindex``) is staged for every cleaned segment, empty
    when it holds no abort marker: moved in, an empty one removes the file of an old
    segment of that base instead (no segment keeps entries it does not hold)."""
    stem = f"{base:020d}"
    return (stem + TXN_INDEX_SUFFIX, stem + OFFSET_INDEX_SUFFIX, stem + TIME_INDEX_SUFFIX,
            stem + _LOG)


def write_manifest(partition_dir: Path, manifest: SwapManifest) -> None:
    data = {"version": manifest.version, "staging": manifest.staging,
            "old": list(manifest.old_bases), "new": list(manifest.new_bases)}
    write_atomically(partition_dir / MANIFEST, json.dumps(data).encode())


def read_manifest(partition_dir: Path) -> SwapManifest | None:
    path = partition_dir / MANIFEST
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise SwapError(f"{path}: cannot read the swap manifest: {exc}") from None
    try:
        manifest = SwapManifest(str(data["staging"]), tuple(int(b) for b in data["old"]),
                                tuple(int(b) for b in data["new"]), int(data["version"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise SwapError(f"{path}: malformed swap manifest: {exc!r}") from None
    if manifest.version not in (1, MANIFEST_VERSION):
        raise SwapError(f"{path}: swap manifest version {manifest.version} is not known "
                        f"(1 or {MANIFEST_VERSION})")
    return manifest


def missing_staging_files(partition_dir: Path, manifest: SwapManifest,
                          txn_index: bool = True) -> list[Path]:
    """The staged files a swap needs that are not there; ``txn_index=False``: the
    cleaner's files only (the owner stages the .txnindex files itself, just before the
    commit)."""
    staging = partition_dir / manifest.staging
    return [staging / name for base in manifest.new_bases for name in segment_files(base)
            if not (staging / name).exists()
            and (txn_index or not name.endswith(TXN_INDEX_SUFFIX))]


def stage_txn_indexes(partition_dir: Path, staging: str,
                      entries: dict[int, list[AbortedTxn]]) -> None:
    """The owner's part before the commit: each new segment's ``.txnindex`` (the entries
    whose marker it holds; empty when none), fsynced into the staging directory."""
    directory = partition_dir / staging
    for base, held in entries.items():
        write_txn_index(txn_index_path(directory, base), held)
    fsync_dir(directory)


def commit_swap(partition_dir: Path, manifest: SwapManifest,
                after_step: Callable[[str], None] | None = None) -> None:
    """Commit and carry out a swap (the live path: a version 2 manifest, every file staged,
    the .txnindex files too); ``after_step`` is a test hook called after each step by
    name, where a test process may crash."""
    if manifest.version != MANIFEST_VERSION:
        raise SwapError(f"a swap is committed with manifest version {MANIFEST_VERSION}, "
                        f"not {manifest.version}")
    missing = missing_staging_files(partition_dir, manifest)
    if missing:
        raise SwapError(f"staging file {missing[0]} is missing")
    write_manifest(partition_dir, manifest)
    _step(after_step, "manifest")
    complete_swap(partition_dir, manifest, after_step)


def complete_swap(partition_dir: Path, manifest: SwapManifest,
                  after_step: Callable[[str], None] | None = None) -> None:
    """Steps 2-4 above; safe to run again after a crash at any point of a previous run."""
    staging = partition_dir / manifest.staging
    if manifest.version == 1:
        manifest = merge_v1_txn_indexes(partition_dir, manifest)
        _step(after_step, "version 1 .txnindex merged")
    for base in manifest.new_bases:
        for name in segment_files(base):
            source = staging / name
            if not source.exists():
                continue
            if name.endswith(TXN_INDEX_SUFFIX) and source.stat().st_size == 0:
                (partition_dir / name).unlink(missing_ok=True)  # no aborts in it
                source.unlink()
            else:
                os.replace(source, partition_dir / name)
            _step(after_step, f"move {name}")
    fsync_dir(partition_dir)
    replaced = set(manifest.new_bases)
    for base in manifest.old_bases:
        if base in replaced:
            continue
        for name in reversed(segment_files(base)):  # the log first: no log without its data
            (partition_dir / name).unlink(missing_ok=True)
        _step(after_step, f"delete {base}")
    fsync_dir(partition_dir)
    (partition_dir / MANIFEST).unlink(missing_ok=True)
    _step(after_step, "manifest removed")
    shutil.rmtree(staging, ignore_errors=True)
    fsync_dir(partition_dir)


def merge_v1_txn_indexes(partition_dir: Path, manifest: SwapManifest) -> SwapManifest:
    """Make a version 1 manifest's swap a version 2 one: every aborted entry of the old
    and the new segments' .txnindex files (in the partition directory, and in staging:
    an actorlog from before 5fbf483 staged none, one since staged them, and its run may
    have moved some in), staged for the new segment holding its marker, then the
    manifest rewritten as version 2. The swap then goes on as any other, and step 3
    deletes the old segments' files with no entry lost. A crash before the rewrite runs
    this again: the same entries (the staged files hold them, the old files are still
    there), the same files."""
    staging = partition_dir / manifest.staging
    staging.mkdir(exist_ok=True)
    found: dict[AbortedTxn, None] = {}
    for base in (*manifest.old_bases, *manifest.new_bases):
        for directory in (partition_dir, staging):
            found.update(dict.fromkeys(read_txn_index(txn_index_path(directory, base))))
    ordered = sorted(manifest.new_bases)
    held: dict[int, list[AbortedTxn]] = {base: [] for base in ordered}
    for entry in sorted(found, key=lambda e: (e.last_offset, e.first_offset, e.producer_id)):
        held[ordered[max(bisect_right(ordered, entry.last_offset) - 1, 0)]].append(entry)
    stage_txn_indexes(partition_dir, manifest.staging, held)
    upgraded = manifest._replace(version=MANIFEST_VERSION)
    write_manifest(partition_dir, upgraded)
    return upgraded


def recover_swaps(partition_dir: Path) -> bool:
    """At open: finish a committed swap, drop uncommitted staging. True if a swap was
    finished (its new segments' indexes are checked like any others on load)."""
    manifest = read_manifest(partition_dir)
    if manifest is not None:
        complete_swap(partition_dir, manifest)
    for name in os.listdir(partition_dir):
        if name.startswith(STAGING_PREFIX):
            shutil.rmtree(partition_dir / name, ignore_errors=True)
    return manifest is not None


def discard_staging(partition_dir: Path, staging: str) -> None:
    shutil.rmtree(partition_dir / staging, ignore_errors=True)


def _step(after_step: Callable[[str], None] | None, name: str) -> None:
    if after_step is not None:
        after_step(name)

