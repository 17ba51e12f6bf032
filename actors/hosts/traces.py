"""Copying a node's trace files from its host to this machine (`actorlog cluster traces`).

The host's runner runs ``tar`` in the node's trace dir (``<data dir>/traces``)
and its stdout, the archive, is unpacked here with :mod:`tarfile`; the same
for a local, a netns and an ssh host. A copy is laid out as a node's data dir
(``<dest>/traces/...``), so ``actorlog trace ... --dir <dest>`` reads it as it
reads the node's own. A file the node is still writing may be copied with a
torn tail; the trace readers skip a torn tail.
"""

from __future__ import annotations

import io
import shutil
import tarfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from actors.hosts.runner import HostError, Runner

TRACES = "traces"  # the node's trace dir under its data dir (actors/runtime/node.py)
_NO_DIR = 3
# $1 the trace dir. tar exits 1 when a file changed while it was read (a node writing
# its current file): the archive is whole all the same.
_TAR = r"""
[ -d "$1" ] || { echo "no trace dir $1" >&2; exit 3; }
tar -C "$1" -cf - .
"""


class TraceCopyError(RuntimeError):
    """The node's traces could not be copied; the message says where and why."""


@dataclass(frozen=True)
class Copied:
    files: int
    bytes: int
    source: str  # host:path
    dest: Path


def trace_dir(data_dir: str) -> str:
    return str(PurePosixPath(data_dir) / TRACES)


def copy_traces(runner: Runner, source_dir: str, dest: Path,
                timeout_s: float = 300.0) -> Copied:
    """Every file under ``source_dir`` on the runner's host into ``dest/traces``.

    What an earlier copy put in ``dest/traces`` is replaced.
    """
    where = f"{runner.host.name}:{source_dir}"
    try:
        result = runner.run_bytes(["sh", "-c", _TAR, "sh", source_dir], timeout_s=timeout_s)
    except HostError as exc:
        raise TraceCopyError(str(exc)) from None
    if result.returncode == _NO_DIR:
        raise TraceCopyError(f"no trace dir at {where} (the node never ran there, or "
                             f"its data dir is elsewhere)")
    if result.returncode not in (0, 1) or not result.stdout:
        last = [ln for ln in result.stderr.strip().splitlines() if ln.strip()][-1:]
        raise TraceCopyError(f"tar of {where} exited with {result.returncode}: "
                             f"{last[0] if last else 'no output'}")
    target = dest / TRACES
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    files = size = 0
    try:
        with tarfile.open(fileobj=io.BytesIO(result.stdout), mode="r:") as archive:
            for member in archive.getmembers():
                if member.isfile():
                    files += 1
                    size += member.size
            archive.extractall(target, filter="data")  # no absolute paths, links out, devices
    except (tarfile.TarError, OSError) as exc:
        raise TraceCopyError(f"the archive of {where} does not unpack: {exc}") from None
    return Copied(files, size, where, dest)
