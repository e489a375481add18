"""Patch integer fields of a parquet footer (Thrift compact protocol), to make corrupt footers on purpose.

Walks the FileMetaData struct and records where each integer field lies, keyed by its path of field ids and list
indices; ``patch`` rewrites chosen ColumnMetaData integers and the footer length. For tests only.
"""

from __future__ import annotations

import struct
from typing import Any

# ColumnMetaData field ids (parquet.thrift)
TOTAL_COMPRESSED_SIZE, DATA_PAGE_OFFSET, DICTIONARY_PAGE_OFFSET = 7, 9, 11
_ROW_GROUPS, _COLUMNS, _META_DATA = 4, 1, 3  # FileMetaData.row_groups, RowGroup.columns, ColumnChunk.meta_data


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return result, pos


def _encode_varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        if not n:
            out.append(byte)
            return bytes(out)
        out.append(byte | 0x80)


def _zigzag(n: int) -> int:
    return (n << 1) ^ (n >> 63)


def _unzigzag(n: int) -> int:
    return (n >> 1) ^ -(n & 1)


def _struct(buf: bytes, pos: int, path: tuple[Any, ...], out: dict[tuple[Any, ...], tuple[int, int, int]]) -> int:
    last = 0
    while True:
        header = buf[pos]
        pos += 1
        if header == 0:
            return pos
        kind, delta = header & 0x0F, header >> 4
        if delta:
            field = last + delta
        else:
            raw, pos = _varint(buf, pos)
            field = _unzigzag(raw)
        last = field
        pos = _value(buf, pos, kind, (*path, field), out)


def _value(
    buf: bytes, pos: int, kind: int, path: tuple[Any, ...], out: dict[tuple[Any, ...], tuple[int, int, int]]
) -> int:
    if kind in (1, 2):  # booleans live in the header
        return pos
    if kind == 3:  # byte
        return pos + 1
    if kind in (4, 5, 6):  # i16, i32, i64
        start = pos
        raw, pos = _varint(buf, pos)
        out[path] = (start, pos, _unzigzag(raw))
        return pos
    if kind == 7:  # double
        return pos + 8
    if kind == 8:  # binary
        length, pos = _varint(buf, pos)
        return pos + length
    if kind in (9, 10):  # list, set
        header = buf[pos]
        pos += 1
        count, element = header >> 4, header & 0x0F
        if count == 15:
            count, pos = _varint(buf, pos)
        for index in range(count):
            pos = pos + 1 if element in (1, 2) else _value(buf, pos, element, (*path, index), out)
        return pos
    if kind == 11:  # map
        count, pos = _varint(buf, pos)
        if count:
            kinds = buf[pos]
            pos += 1
            for index in range(count):
                pos = _value(buf, pos, kinds >> 4, (*path, "key", index), out)
                pos = _value(buf, pos, kinds & 0x0F, (*path, "value", index), out)
        return pos
    if kind == 12:
        return _struct(buf, pos, path, out)
    raise ValueError(f"thrift compact type {kind}")


def patch(data: bytes, changes: dict[tuple[int, int, int], int]) -> bytes:
    """``data`` with ColumnMetaData integers replaced: ``{(row_group, column, field_id): value}``."""
    length = struct.unpack("<I", data[-8:-4])[0]
    start = len(data) - 8 - length
    footer = data[start:-8]
    found: dict[tuple[Any, ...], tuple[int, int, int]] = {}
    _struct(footer, 0, (), found)
    edits = []
    for (row_group, column, field), value in changes.items():
        begin, end, _ = found[(_ROW_GROUPS, row_group, _COLUMNS, column, _META_DATA, field)]
        edits.append((begin, end, _encode_varint(_zigzag(value))))
    patched = bytearray()
    previous = 0
    for begin, end, encoded in sorted(edits):
        patched += footer[previous:begin] + encoded
        previous = end
    patched += footer[previous:]
    return data[:start] + bytes(patched) + struct.pack("<I", len(patched)) + b"PAR1"
