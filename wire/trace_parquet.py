"""The trace file codec: the small part of Parquet that trace files use, in pure Python.

The node writes its trace files with this (no pyarrow in the broker: it would
add some 170 MB to ``serve``); every Parquet reader (Spark, pyarrow) reads the
closed files, and :func:`scan` reads any file, closed or not, without a
footer. The layout is in ``wire/trace_format.py``.

Only what the writer needs is here: flat schema, required columns, INT64 and
INT32 as ``PLAIN``, names as a ``PLAIN`` dictionary page plus ``RLE_DICTIONARY``
indices packed at 8, 16 or 32 bits (byte-aligned, so ``array`` does the
packing), one data page per column chunk, no compression, no statistics. The
numbers come out of ``array`` in C, so encoding a row costs well under a
microsecond, most of it mapping names to dictionary indices.
"""

from __future__ import annotations

import json
import struct
import sys
from array import array
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, BinaryIO, NamedTuple

from wire import trace_format as tf

MAGIC = b"PAR1"
_LITTLE = sys.byteorder == "little"

# Parquet enums (parquet.thrift)
_INT32, _INT64, _BYTE_ARRAY = 1, 2, 6
_REQUIRED = 0
_UTF8 = 0  # ConvertedType
_PLAIN, _RLE, _RLE_DICTIONARY = 0, 3, 8
_DATA_PAGE, _DICTIONARY_PAGE = 0, 2
_UNCOMPRESSED = 0

_ARRAY_CODE = {"int": "q", "int32": "i"}
# What the writer fills INT64 columns with: C long where it is 8 bytes (the same bytes
# as "q", but CPython converts a large int to a long in a loop over its digits, to a
# long long through a byte-array step: ids and ns times are large ints).
_WRITE_CODE = {**_ARRAY_CODE, "int": "l" if array("l").itemsize == 8 else "q"}
_PHYSICAL = {"int": _INT64, "int32": _INT32, "str": _BYTE_ARRAY}
for _code, _size in (("q", 8), ("i", 4), ("B", 1), ("H", 2), ("I", 4)):
    assert array(_code).itemsize == _size, f"array('{_code}') is not {_size} bytes here"


class TraceFileError(ValueError):
    """A file that is not a trace file, or one this reader cannot read."""


class HeaderNotWritten(TraceFileError):
    """A file whose header is not whole yet: a running node opened it and has not
    flushed it (or died before), so it holds no record."""


# ------------------------------------------------------------ Thrift compact protocol
# Types of the compact protocol's field headers.
_T_TRUE, _T_FALSE, _T_BYTE, _T_I16, _T_I32, _T_I64 = 1, 2, 3, 4, 5, 6
_T_DOUBLE, _T_BINARY, _T_LIST, _T_SET, _T_MAP, _T_STRUCT = 7, 8, 9, 10, 11, 12


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _zigzag(n: int) -> int:
    return (n << 1) ^ (n >> 63)


_Field = tuple[int, str, Any]  # (field id, kind, value); kind: i32 i64 bin bool struct list_*


def encode_struct(fields: Sequence[_Field]) -> bytes:
    """A Thrift compact struct. ``list_struct`` values are already-encoded structs."""
    out = bytearray()
    last = 0
    for fid, kind, value in fields:
        if value is None:
            continue
        ctype = {"i32": _T_I32, "i64": _T_I64, "bin": _T_BINARY, "struct": _T_STRUCT,
                 "bool": _T_TRUE if value else _T_FALSE}.get(kind, _T_LIST)
        delta = fid - last
        if 0 < delta <= 15:
            out.append((delta << 4) | ctype)
        else:
            out.append(ctype)
            out += _varint(_zigzag(fid))
        last = fid
        if kind in ("i32", "i64"):
            out += _varint(_zigzag(value))
        elif kind == "bin":
            data = value.encode() if isinstance(value, str) else value
            out += _varint(len(data)) + data
        elif kind == "struct":
            out += encode_struct(value)
        elif kind.startswith("list_"):
            etype = {"list_i32": _T_I32, "list_bin": _T_BINARY, "list_struct": _T_STRUCT}[kind]
            n = len(value)
            out += bytes([(n << 4) | etype]) if n < 15 else bytes([0xF0 | etype]) + _varint(n)
            for item in value:
                if kind == "list_i32":
                    out += _varint(_zigzag(item))
                elif kind == "list_bin":
                    data = item.encode() if isinstance(item, str) else item
                    out += _varint(len(data)) + data
                else:
                    out += item
    out.append(0)
    return bytes(out)


class _Reader:
    """Decodes compact structs into ``{field id: value}`` dicts."""

    __slots__ = ("buf", "end", "pos")

    def __init__(self, buf: Any, pos: int, end: int) -> None:
        self.buf = buf
        self.pos = pos
        self.end = end

    def byte(self) -> int:
        if self.pos >= self.end:
            raise TraceFileError("truncated")
        b = self.buf[self.pos]
        self.pos += 1
        return int(b)

    def varint(self) -> int:
        shift = result = 0
        while True:
            b = self.byte()
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7
            if shift > 70:
                raise TraceFileError("bad varint")

    def zigzag(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def binary(self) -> bytes:
        n = self.varint()
        if self.pos + n > self.end:
            raise TraceFileError("truncated")
        data = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        return data

    def value(self, ctype: int) -> Any:
        if ctype in (_T_TRUE, _T_FALSE):  # only inside lists: a byte
            return self.byte() == 1
        if ctype == _T_BYTE:
            return self.byte()
        if ctype in (_T_I16, _T_I32, _T_I64):
            return self.zigzag()
        if ctype == _T_DOUBLE:
            self.pos += 8
            return None
        if ctype == _T_BINARY:
            return self.binary()
        if ctype in (_T_LIST, _T_SET):
            head = self.byte()
            n, etype = head >> 4, head & 0x0F
            if n == 15:
                n = self.varint()
            return [self.value(etype) for _ in range(n)]
        if ctype == _T_MAP:
            n = self.varint()
            if not n:
                return {}
            kv = self.byte()
            return {self.value(kv >> 4): self.value(kv & 0x0F) for _ in range(n)}
        if ctype == _T_STRUCT:
            return self.struct()
        raise TraceFileError(f"unknown Thrift type {ctype}")

    def struct(self) -> dict[int, Any]:
        out: dict[int, Any] = {}
        last = 0
        while True:
            head = self.byte()
            if head == 0:
                return out
            ctype, delta = head & 0x0F, head >> 4
            fid = last + delta if delta else self.zigzag()
            last = fid
            if ctype == _T_TRUE:
                out[fid] = True
            elif ctype == _T_FALSE:
                out[fid] = False
            else:
                out[fid] = self.value(ctype)


def decode_struct(buf: Any, pos: int = 0, end: int | None = None) -> tuple[dict[int, Any], int]:
    """A compact struct at ``pos``: its fields by id, and the position after it."""
    r = _Reader(buf, pos, len(buf) if end is None else end)
    return r.struct(), r.pos


# -------------------------------------------------------------------- writing
class _Names(dict):  # type: ignore[type-arg]
    """A column's dictionary: key -> index. Keys may be strings, classes (their
    ``__name__``) or anything whose ``str`` is the name, so the hot path never
    formats a name; only a new key is turned into text, once."""

    def __init__(self) -> None:
        super().__init__()
        self.texts: list[bytes] = []
        self.page = bytearray()  # the PLAIN dictionary page body, grown as names come

    def __missing__(self, key: Any) -> int:
        text = key if type(key) is str else (key.__name__ if isinstance(key, type) else str(key))
        data = text.encode("utf-8", "replace")
        i = self[key] = len(self.texts)
        self.texts.append(data)
        self.page += struct.pack("<I", len(data)) + data
        return i


class Repeat(NamedTuple):
    """One value ``times`` times (a column part of :meth:`SegmentWriter.write_columns`)."""

    value: Any
    times: int


def _columns_of(rows: Sequence[Sequence[Any]], pause: Callable[[], None] | None,
                every: int) -> list[list[tuple[Any, ...]]]:
    """``rows`` turned into columns, in slices of ``every`` rows (all at once when 0):
    one list per field of one tuple per slice. ``zip`` does it in C, one pass over
    the rows for every field; ``pause`` runs between two slices."""
    if not rows:
        return []
    step = every if pause is not None and every > 0 else len(rows)
    out: list[list[tuple[Any, ...]]] = []
    for start in range(0, len(rows), step):
        if start and pause is not None:
            pause()
        part = rows[start:start + step] if step < len(rows) else rows
        for f, col in enumerate(zip(*part, strict=True)):
            if f == len(out):
                out.append([])
            out[f].append(col)
    return out


def _picked(transposed: dict[int, list[list[tuple[Any, ...]]]], part: Pick
            ) -> list[tuple[Any, ...]]:
    """The slices of column ``part.field`` of ``part.rows`` (none when there are no rows)."""
    cols = transposed[id(part.rows)]
    return cols[part.field] if cols else []


class Pick(NamedTuple):
    """Field number ``field`` of every row of ``rows`` (a column part): read in place, with no
    transposed copy and no per-row object for the garbage collector to count."""

    rows: Sequence[Sequence[Any]]
    field: int


@dataclass
class _Chunk:
    name: str
    physical: int
    encodings: list[int]
    num_values: int
    start: int
    size: int
    data_page_offset: int
    dictionary_page_offset: int | None


def _page_header(page_type: int, size: int, num_values: int, encoding: int) -> bytes:
    if page_type == _DICTIONARY_PAGE:
        sub = (7, "struct", [(1, "i32", num_values), (2, "i32", encoding)])
    else:
        sub = (5, "struct", [(1, "i32", num_values), (2, "i32", encoding),
                             (3, "i32", _RLE), (4, "i32", _RLE)])
    return encode_struct([(1, "i32", page_type), (2, "i32", size), (3, "i32", size), sub])


def _header_block(meta: dict[str, Any]) -> bytes:
    data = json.dumps(meta, separators=(",", ":")).encode()
    return tf.HEADER_MAGIC + struct.pack("<I", len(data)) + data


class SegmentWriter:
    """Writes one trace file: header, row groups as they come, the footer at close.

    The file object is the caller's; this class never reads the clock or
    touches the file system beyond ``write``/``flush`` (``actors.runtime.tracing``
    owns the files and the thread).
    """

    MAX_DICTIONARY = 4096
    """A name column's dictionary starts afresh at a row group past this many
    names (each row group carries its own dictionary page)."""

    def __init__(self, f: BinaryIO, meta: dict[str, Any],
                 field_types: Sequence[tuple[str, str]] = tf.FIELD_TYPES) -> None:
        self.f = f
        self.field_types = list(field_types)
        self.meta = {"format": tf.FORMAT_NAME, "version": tf.FORMAT_VERSION,
                     "fields": [list(ft) for ft in self.field_types], **meta}
        self._names = [_Names() if t == "str" else None for _n, t in self.field_types]
        self._row_groups: list[bytes] = []
        self.num_rows = 0
        head = MAGIC + _header_block(self.meta)
        f.write(head)
        self.pos = len(head)
        self.closed = False

    @property
    def row_groups(self) -> int:
        return len(self._row_groups)

    def write_rows(self, rows: Sequence[Sequence[Any]]) -> int:
        """Append ``rows`` (tuples in field order) as one row group; returns its bytes."""
        if not rows:
            return 0
        return self.write_columns([[col] for col in zip(*rows, strict=True)], len(rows))

    def write_columns(self, columns: Sequence[Sequence[Any]], n: int,
                      pause: Callable[[], None] | None = None,
                      pause_rows: int = 0) -> int:
        """Append one row group of ``n`` rows; returns its bytes.

        ``columns`` has one entry per field: a list of parts whose lengths add up
        to ``n``, each part a sequence of values, a :class:`Pick` (one field of
        some rows) or a :class:`Repeat` (one value ``times`` times, encoded
        without a per-row step). ``pause`` runs between
        columns once ``pause_rows`` values were encoded since the last pause (between
        every two columns when that is 0), and also every ``pause_rows`` rows of a
        ``Pick`` when it is not 0 (the node's writer lets the actors have the GIL
        there). A small row group is written without a pause: each one hands the GIL
        over twice, for columns of a few microseconds.
        """
        assert not self.closed
        # Each batch of rows picked from is turned into columns once (by identity).
        transposed: dict[int, list[list[tuple[Any, ...]]]] = {}
        for col in columns:
            for part in col:
                if type(part) is Pick and id(part.rows) not in transposed:
                    transposed[id(part.rows)] = _columns_of(part.rows, pause, pause_rows)
        start = self.pos
        parts: list[bytes] = []
        chunks: list[_Chunk] = []
        pos = start
        since_pause = 0  # values encoded since the last pause
        for i, ((name, ftype), col) in enumerate(zip(self.field_types, columns, strict=True)):
            names = self._names[i]
            chunk_start = pos
            if pause is not None and i and since_pause >= pause_rows:
                pause()
                since_pause = 0
            since_pause += n
            if names is None:
                code = _WRITE_CODE[ftype]
                arr = array(code)
                for part in col:
                    if type(part) is Repeat:
                        arr.extend(array(code, [part.value]) * part.times)
                    elif type(part) is Pick:
                        for values in _picked(transposed, part):
                            arr.extend(array(code, values))
                    elif len(col) == 1:
                        arr = array(code, part)
                    else:
                        arr.extend(array(code, part))
                if len(arr) != n:
                    raise ValueError(f"column {name}: {len(arr)} values in a row group of {n}")
                if not _LITTLE:
                    arr.byteswap()
                body = arr.tobytes()
                head = _page_header(_DATA_PAGE, len(body), n, _PLAIN)
                parts += (head, body)
                data_off, dict_off = pos, None
                pos += len(head) + len(body)
                encodings = [_PLAIN, _RLE]
                physical = _PHYSICAL[ftype]
            else:
                if len(names.texts) > self.MAX_DICTIONARY:
                    names = self._names[i] = _Names()
                idx: list[int] = []
                for part in col:
                    if type(part) is Repeat:
                        idx.extend([names[part.value]] * part.times)
                    elif type(part) is Pick:
                        for values in _picked(transposed, part):
                            idx.extend(map(names.__getitem__, values))
                    else:
                        idx.extend(map(names.__getitem__, part))
                if len(idx) != n:
                    raise ValueError(f"column {name}: {len(idx)} values in a row group of {n}")
                count = len(names.texts)
                width, code = (8, "B") if count <= 0x100 else (16, "H") if count <= 0x10000 \
                    else (32, "I")
                groups = (n + 7) // 8
                packed = array(code, idx)
                if groups * 8 > n:
                    packed.extend([0] * (groups * 8 - n))
                if not _LITTLE:
                    packed.byteswap()
                body = bytes([width]) + _varint((groups << 1) | 1) + packed.tobytes()
                dict_body = bytes(names.page)
                dhead = _page_header(_DICTIONARY_PAGE, len(dict_body), count, _PLAIN)
                head = _page_header(_DATA_PAGE, len(body), n, _RLE_DICTIONARY)
                parts += (dhead, dict_body, head, body)
                dict_off = pos
                data_off = pos + len(dhead) + len(dict_body)
                pos = data_off + len(head) + len(body)
                encodings = [_PLAIN, _RLE, _RLE_DICTIONARY]
                physical = _BYTE_ARRAY
            chunks.append(_Chunk(name, physical, encodings, n, chunk_start, pos - chunk_start,
                                 data_off, dict_off))
        data = b"".join(parts)
        self.f.write(data)
        self.pos = pos
        self.num_rows += n
        self._row_groups.append(self._row_group_meta(chunks, start, pos - start, n))
        return len(data)

    def _row_group_meta(self, chunks: list[_Chunk], start: int, size: int, n: int) -> bytes:
        return row_group_meta(chunks, start, size, n, len(self._row_groups))


    def footer(self) -> bytes:
        """FileMetaData, its length and the closing magic."""
        return build_footer(self.meta, self.field_types, self._row_groups, self.num_rows)

    def close(self) -> int:
        """Write the footer (the file becomes a complete Parquet file); returns its bytes."""
        if self.closed:
            return 0
        data = self.footer()
        self.f.write(data)
        self.pos += len(data)
        self.closed = True
        return len(data)


def row_group_meta(chunks: list[_Chunk], start: int, size: int, n: int, ordinal: int) -> bytes:
    """One RowGroup struct of the footer."""
    cols = []
    for c in chunks:
        meta = [
            (1, "i32", c.physical),
            (2, "list_i32", c.encodings),
            (3, "list_bin", [c.name]),
            (4, "i32", _UNCOMPRESSED),
            (5, "i64", c.num_values),
            (6, "i64", c.size),
            (7, "i64", c.size),
            (9, "i64", c.data_page_offset),
            (11, "i64", c.dictionary_page_offset),
        ]
        cols.append(encode_struct([(2, "i64", c.start), (3, "struct", meta)]))
    return encode_struct([
        (1, "list_struct", cols),
        (2, "i64", size),
        (3, "i64", n),
        (5, "i64", start),
        (6, "i64", size),
        (7, "i32", ordinal),
    ])


def build_footer(meta: dict[str, Any], field_types: Sequence[tuple[str, str]],
                 row_groups: Sequence[bytes], num_rows: int) -> bytes:
    """FileMetaData (schema, the encoded row groups, our header as key-value metadata),
    its length and the closing magic."""
    schema = [encode_struct([(4, "bin", "schema"), (5, "i32", len(field_types))])]
    for name, ftype in field_types:
        leaf = [(1, "i32", _PHYSICAL[ftype]), (3, "i32", _REQUIRED), (4, "bin", name)]
        if ftype == "str":
            leaf += [(6, "i32", _UTF8), (10, "struct", [(1, "struct", [])])]
        schema.append(encode_struct(leaf))
    kv = encode_struct([(1, "bin", "actorlog.trace"),
                        (2, "bin", json.dumps(meta, separators=(",", ":")))])
    data = encode_struct([
        (1, "i32", 1),
        (2, "list_struct", schema),
        (3, "i64", num_rows),
        (4, "list_struct", list(row_groups)),
        (5, "list_struct", [kv]),
        (6, "bin", "actorlog trace writer"),
    ])
    return data + struct.pack("<I", len(data)) + MAGIC


# -------------------------------------------------------------------- reading
@dataclass
class RowGroup:
    """One whole row group: columns by field name (Python lists), its row count and span."""

    columns: dict[str, list[Any]]
    num_rows: int
    start: int
    end: int
    chunks: list[_Chunk] = field(default_factory=list)


@dataclass
class Scan:
    """What a walk over a file found."""

    meta: dict[str, Any]
    row_groups: list[RowGroup] = field(default_factory=list)
    end: int = 0  # the position after the last whole row group (where a follower resumes)
    footer_start: int | None = None  # set when the file is closed (a complete Parquet file)


def read_header(data: Any) -> tuple[dict[str, Any], int]:
    """The header block of a trace file: its metadata and the position after it."""
    if len(data) < 8 and (MAGIC + tf.HEADER_MAGIC).startswith(bytes(data)):
        raise HeaderNotWritten("truncated header")
    if bytes(data[:4]) != MAGIC or bytes(data[4:8]) != tf.HEADER_MAGIC:
        raise TraceFileError("not an actorlog trace file")
    if len(data) < 12:
        raise HeaderNotWritten("truncated header")
    (n,) = struct.unpack_from("<I", data, 8)
    if 12 + n > len(data):
        raise HeaderNotWritten("truncated header")
    try:
        meta = json.loads(bytes(data[12:12 + n]))
    except ValueError:
        raise TraceFileError("unreadable header") from None
    if not isinstance(meta, dict) or meta.get("format") != tf.FORMAT_NAME:
        raise TraceFileError("not an actorlog trace file")
    if meta.get("version") != tf.FORMAT_VERSION:
        raise TraceFileError(f"trace format version {meta.get('version')} is not supported")
    return meta, 12 + n


def footer_start(data: Any) -> int | None:
    """Where the footer begins if the file ends in a complete one, else None."""
    n = len(data)
    if n < 12 or bytes(data[n - 4:]) != MAGIC:
        return None
    (size,) = struct.unpack_from("<I", data, n - 8)
    start = n - 8 - size
    if start < 12:
        return None
    try:
        meta, end = decode_struct(data, start, n - 8)
    except TraceFileError:
        return None
    if end != n - 8 or 3 not in meta:
        return None
    return start


def _decode_dictionary(buf: Any, pos: int, end: int, count: int) -> list[str]:
    out = []
    for _ in range(count):
        if pos + 4 > end:
            raise TraceFileError("truncated dictionary page")
        (n,) = struct.unpack_from("<I", buf, pos)
        pos += 4
        out.append(bytes(buf[pos:pos + n]).decode("utf-8", "replace"))
        pos += n
    return out


def _decode_indices(body: Any, n: int) -> list[int]:
    """RLE/bit-packed hybrid indices of a dictionary data page (after its bit-width byte)."""
    width = int(body[0])
    r = _Reader(body, 1, len(body))
    out: list[int] = []
    nbytes = (width + 7) // 8
    while len(out) < n and r.pos < r.end:
        head = r.varint()
        if head & 1:  # bit-packed: groups of 8 values
            count = (head >> 1) * 8
            size = (head >> 1) * width
            raw = body[r.pos:r.pos + size]
            r.pos += size
            if width in (8, 16, 32):
                arr = array({8: "B", 16: "H", 32: "I"}[width])
                arr.frombytes(bytes(raw))
                if not _LITTLE:
                    arr.byteswap()
                out.extend(arr[:count])
            else:
                bits = int.from_bytes(bytes(raw), "little")
                mask = (1 << width) - 1
                out.extend((bits >> (i * width)) & mask for i in range(count))
        else:  # a run of one repeated value
            count = head >> 1
            value = int.from_bytes(bytes(body[r.pos:r.pos + nbytes]), "little")
            r.pos += nbytes
            out.extend([value] * count)
    if len(out) < n:
        raise TraceFileError("truncated dictionary indices")
    return out[:n]


def _read_page(data: Any, pos: int, limit: int) -> tuple[dict[int, Any], int, int]:
    """A page header at ``pos``: (header, body start, body end)."""
    head, body = decode_struct(data, pos, limit)
    if not {1, 2, 3} <= head.keys() or not isinstance(head[3], int):
        raise TraceFileError("not a page header")
    end = body + head[3]
    if end > limit:
        raise TraceFileError("truncated page")
    return head, body, end


def _read_row_group(data: Any, pos: int, limit: int,
                    field_types: list[tuple[str, str]], decode: bool = True) -> RowGroup:
    start = pos
    columns: dict[str, list[Any]] = {}
    chunks: list[_Chunk] = []
    rows = -1
    for name, ftype in field_types:
        chunk_start = pos
        head, body, end = _read_page(data, pos, limit)
        dictionary: list[str] | None = None
        dict_off = None
        if head[1] == _DICTIONARY_PAGE:
            dph = head.get(7) or {}
            dict_off = pos
            pos = end
            if decode:
                dictionary = _decode_dictionary(data, body, end, dph.get(1, 0))
            head, body, end = _read_page(data, end, limit)
        if head[1] != _DATA_PAGE or head[2] != head[3]:
            raise TraceFileError(f"column {name}: unsupported page (type {head[1]})")
        dph = head.get(5) or {}
        n, encoding = dph.get(1, 0), dph.get(2)
        if rows not in (-1, n):
            raise TraceFileError(f"column {name}: {n} values in a row group of {rows}")
        rows = n
        chunks.append(_Chunk(name, _PHYSICAL[ftype],
                             [_PLAIN, _RLE, _RLE_DICTIONARY] if dict_off is not None
                             else [_PLAIN, _RLE], n, chunk_start, end - chunk_start, pos,
                             dict_off))
        if not decode:
            pos = end
            continue
        if ftype == "str":
            if dictionary is None or encoding not in (_RLE_DICTIONARY, 2):
                raise TraceFileError(f"column {name}: expected dictionary-encoded names")
            idx = _decode_indices(data[body:end], n)
            try:
                columns[name] = [dictionary[i] for i in idx]
            except IndexError:
                raise TraceFileError(f"column {name}: index outside its dictionary") from None
        else:
            if encoding != _PLAIN:
                raise TraceFileError(f"column {name}: unsupported encoding {encoding}")
            arr = array(_ARRAY_CODE[ftype])
            arr.frombytes(bytes(data[body:end]))
            if not _LITTLE:
                arr.byteswap()
            if len(arr) != n:
                raise TraceFileError(f"column {name}: {len(arr)} values, expected {n}")
            columns[name] = arr.tolist()
        pos = end
    return RowGroup(columns, max(rows, 0), start, pos, chunks)


def scan(data: Any, start: int | None = None, decode: bool = True) -> Scan:
    """Every whole row group of a trace file (closed or still being written).

    ``data`` is the file's bytes (or an mmap). Walking stops at the footer, at
    the end, or at the first page that is incomplete or unreadable: a torn tail
    (a crash, or a row group being written right now) is skipped. ``start``
    resumes after a previous scan's ``end``.
    """
    meta, pos = read_header(data)
    field_types = [(str(n), str(t)) for n, t in meta["fields"]]
    fstart = footer_start(data)
    limit = fstart if fstart is not None else len(data)
    out = Scan(meta, footer_start=fstart)
    if start is not None:
        pos = max(pos, start)
    while pos < limit:
        try:
            rg = _read_row_group(data, pos, limit, field_types, decode)
        except (TraceFileError, struct.error, IndexError):
            break
        out.row_groups.append(rg)
        pos = rg.end
    out.end = pos
    return out


def salvage(data: Any) -> bytes:
    """A complete Parquet file from a trace file that has no footer (still being
    written, or torn by a crash): its whole row groups and a footer for them."""
    found = scan(data, decode=False)
    field_types = [(str(n), str(t)) for n, t in found.meta["fields"]]
    metas = [row_group_meta(rg.chunks, rg.start, rg.end - rg.start, rg.num_rows, i)
             for i, rg in enumerate(found.row_groups)]
    rows = sum(rg.num_rows for rg in found.row_groups)
    return bytes(data[:found.end]) + build_footer(found.meta, field_types, metas, rows)


def iter_rows(rg: RowGroup, fields: Sequence[str] = tf.FIELDS) -> Iterator[tuple[Any, ...]]:
    """A row group's rows as tuples in ``fields`` order (missing fields: None)."""
    cols = [rg.columns.get(name) or [None] * rg.num_rows for name in fields]
    return zip(*cols, strict=True)
