"""File regions: bytes of a file that travel as (fd, position, length), never read.

A Fetch response's records are sent from the segment file (``os.sendfile``)
instead of being copied into the response, so a 55 MB response costs a
region and a header, not 55 MB of heap. A region's ``fd`` is a descriptor
of its own (a ``dup`` of the segment's), owned by whichever message or
queue holds the region and closed by whoever ends up with it: retention or
DeleteRecords may unlink the segment meanwhile, and the open descriptor
keeps its bytes readable until they are sent, as Kafka keeps a deleted
segment's file open.

Descriptors are meaningful within one process only: regions travel between
actors of one node process (the Read message asks for them; a reader in
another process asks for bytes instead).
"""

from __future__ import annotations

from typing import NamedTuple


class FileRegion(NamedTuple):
    """``length`` bytes at ``position`` of the open file ``fd`` (owned by the holder)."""

    fd: int
    position: int
    length: int


class RegionAt(NamedTuple):
    """A region that goes at byte ``at`` of a frame sent without it (KafkaResponse)."""

    at: int
    fd: int
    position: int
    length: int
