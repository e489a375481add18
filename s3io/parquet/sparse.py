"""A read-only random-access file made of the byte segments fetched from one object; everything else is absent.

pyarrow reads it through ``pq.ParquetFile(source, metadata=...)``. Reading a byte that was not fetched raises
``RangeNotFetched`` (never zeros): a planning bug must fail loudly, not decode made-up data.
"""

from __future__ import annotations

import bisect
import io
from collections.abc import Iterable

import pyarrow as pa

Bytes = bytes | bytearray | memoryview


class RangeNotFetched(LookupError):
    """A read touched bytes of the object that were never fetched: the range plan missed them."""

    def __init__(self, start: int, end: int, url: str | None) -> None:
        self.start = start
        self.end = end
        self.url = url
        super().__init__(f"{url or 'object'}: bytes [{start}, {end}) were not fetched")


class SparseFile(io.RawIOBase):
    """Segments ``(offset, bytes)`` of an object of ``size`` bytes, read as a seekable binary file.

    A read inside one segment returns a memoryview slice of it (no copy); a read spanning adjacent or overlapping
    segments is joined (one copy); a read touching a gap raises ``RangeNotFetched``.
    """

    def __init__(self, size: int, segments: Iterable[tuple[int, Bytes]], url: str | None = None) -> None:
        super().__init__()
        self.size = size
        self.url = url
        self._pos = 0
        views = [(start, memoryview(data).cast("B")) for start, data in segments]
        kept: list[tuple[int, memoryview]] = []
        for start, view in sorted(views, key=lambda p: (p[0], -len(p[1]))):
            if start < 0 or start + len(view) > size:
                raise ValueError(f"{url}: segment [{start}, {start + len(view)}) lies outside [0, {size})")
            if not kept or start + len(view) > kept[-1][0] + len(kept[-1][1]):
                kept.append((start, view))  # drops segments contained in an earlier one: ends now increase
        self._starts = [start for start, _ in kept]
        self._views = [view for _, view in kept]
        self._ends = [start + len(view) for start, view in kept]

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self.size}[whence]
        if base + offset < 0:
            raise ValueError(f"{self.url}: negative seek position {base + offset}")
        self._pos = base + offset
        return self._pos

    def read(self, size: int | None = -1) -> memoryview | bytes:
        start = self._pos
        end = self.size if size is None or size < 0 else min(self.size, start + size)
        if end <= start:
            return b""
        data = self.read_range(start, end)
        self._pos = end
        return data

    def readinto(self, buffer: Bytes) -> int:
        data = self.read(len(buffer))
        memoryview(buffer).cast("B")[: len(data)] = data
        return len(data)

    def read_range(self, start: int, end: int) -> memoryview | bytes:
        """Bytes [start, end) of the object; a view when one segment holds them all."""
        i = bisect.bisect_right(self._starts, start) - 1
        if i >= 0 and self._ends[i] >= end:
            offset = start - self._starts[i]
            return self._views[i][offset : offset + end - start]
        return self._join(start, end)

    def whole(self) -> memoryview | None:
        """The whole object when one segment holds all of it, else None."""
        if self._starts and self._starts[0] == 0 and self._ends[0] == self.size:
            return self._views[0]
        return None

    def covers(self, start: int, end: int) -> bool:
        """Whether every byte of [start, end) was fetched."""
        try:
            self.read_range(start, end)
        except RangeNotFetched:
            return False
        return True

    def _join(self, start: int, end: int) -> bytes:
        """Assemble [start, end) from adjacent or overlapping segments, or raise at the first missing byte."""
        pieces = []
        pos = start
        while pos < end:
            i = bisect.bisect_right(self._starts, pos) - 1
            if i < 0 or self._ends[i] <= pos:
                raise RangeNotFetched(pos, end, self.url)
            stop = min(end, self._ends[i])
            pieces.append(self._views[i][pos - self._starts[i] : stop - self._starts[i]])
            pos = stop
        return b"".join(pieces)


def as_native_file(sparse: SparseFile) -> pa.NativeFile:
    """An Arrow file over ``sparse``: a zero-copy BufferReader when one segment is the whole object, else PythonFile."""
    whole = sparse.whole()
    if whole is not None:
        return pa.BufferReader(pa.py_buffer(whole))
    return pa.PythonFile(sparse, mode="r")


def open_source(size: int, segments: Iterable[tuple[int, Bytes]], url: str | None = None) -> pa.NativeFile:
    """An Arrow file over fetched segments of an object of ``size`` bytes (see ``as_native_file``)."""
    return as_native_file(SparseFile(size, segments, url))
