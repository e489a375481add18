"""Two byte-bounded caches of ParquetReader: parsed footers (LRU) and small objects kept for their next read.

Footers are small and re-read often (schema inference, then planning, then reading): an LRU by footer bytes.
Small objects are fetched whole to read their footer; their bytes wait here for the data read of the same
object, which takes them out. A full cache refuses new objects instead of evicting old ones: a sequential
scan (footers of files 1..N, then data of files 1..N) then hits for the first files instead of missing for all.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass

import pyarrow.parquet as pq

FOOTER_OVERHEAD = 1024  # bytes charged per cached footer on top of its thrift size (Python and C++ objects)


@dataclass(frozen=True, slots=True)
class Footer:
    """A parsed footer and the size of the object it came from (learned from the GET when the listing had none)."""

    metadata: pq.FileMetaData
    size: int


class FooterCache:
    """LRU of parsed footers bounded by their serialized size (plus FOOTER_OVERHEAD each)."""

    def __init__(self, max_bytes: int) -> None:
        if max_bytes < 0:
            raise ValueError(f"max_bytes must not be negative, got {max_bytes!r}")
        self.max_bytes = max_bytes
        self._entries: OrderedDict[Hashable, tuple[Footer, int]] = OrderedDict()
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: Hashable) -> Footer | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        self._entries.move_to_end(key)
        return entry[0]

    def put(self, key: Hashable, footer: Footer) -> None:
        cost = footer.metadata.serialized_size + FOOTER_OVERHEAD
        if cost > self.max_bytes:
            return
        old = self._entries.pop(key, None)
        if old is not None:
            self.bytes -= old[1]
        self._entries[key] = (footer, cost)
        self.bytes += cost
        while self.bytes > self.max_bytes:
            _, (_, evicted) = self._entries.popitem(last=False)
            self.bytes -= evicted

    def clear(self) -> None:
        self._entries.clear()
        self.bytes = 0


class KeptObjects:
    """Whole small objects waiting for their data read; bounded by bytes, refusing (not evicting) when full."""

    def __init__(self, max_bytes: int) -> None:
        if max_bytes < 0:
            raise ValueError(f"max_bytes must not be negative, got {max_bytes!r}")
        self.max_bytes = max_bytes
        self._entries: dict[Hashable, bytes] = {}
        self.bytes = 0
        self.refused = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._entries

    def offer(self, key: Hashable, data: bytes) -> bool:
        """Keep ``data`` if it fits; True when kept."""
        if key in self._entries:
            return True
        if self.bytes + len(data) > self.max_bytes:
            self.refused += 1
            return False
        self._entries[key] = data
        self.bytes += len(data)
        return True

    def take(self, key: Hashable) -> bytes | None:
        """The kept bytes of ``key`` (removed from the cache), or None."""
        data = self._entries.pop(key, None)
        if data is not None:
            self.bytes -= len(data)
        return data

    def clear(self) -> None:
        self._entries.clear()
        self.bytes = 0
