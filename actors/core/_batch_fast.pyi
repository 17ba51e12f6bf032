import mmap

HARDWARE_CRC: int
CRC_FOLD: int
CRC_FOLD_BUILT: int
LOG_APPEND_VERSION: int

def single_batch(records: bytes | bytearray | memoryview, /) -> tuple[int, ...] | None: ...
def write_batch(fd: int, records: bytes | bytearray | memoryview, base_offset: int,
                batch_length: int, leader_epoch: int,
                index: bytearray | memoryview | mmap.mmap | None = None, slot: int = 0,
                relative_offset: int = 0, position: int = 0, /) -> int: ...
def timestamps_within(records: bytes | bytearray | memoryview, now_ms: int,
                      before_max_ms: int, after_max_ms: int, /) -> bool: ...
def crc32c(data: bytes | bytearray | memoryview, crc: int = 0, /) -> int: ...
def crc32c_streams(data: bytes | bytearray | memoryview, /) -> int: ...
def crc32c_table(data: bytes | bytearray | memoryview, /) -> int: ...

class IndexCore:
    """The hot fields of a mapped index as slots (log_index.IndexCorePy)."""

class SegmentCore:
    """The hot fields of a segment as slots, and its append (log_segment.SegmentCorePy)."""

    def append_one(self, records: bytes | bytearray | memoryview, batch_length: int,
                   leader_epoch: int, size: int, base_offset: int, next_offset: int,
                   max_timestamp: int, defer: bool = False, /) -> None: ...

class LogCore:
    """PartitionLog's base where log_append is built: append_as_leader's entry in C."""

def log_core_register(globals: dict[str, object], /) -> None: ...
