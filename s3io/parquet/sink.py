"""ByteSink: a write-only file for pyarrow's ParquetWriter whose bytes are taken out as they come, so a writer's
output can go straight to an upload, a part at a time, instead of accumulating in one buffer."""

from __future__ import annotations

import io


class ByteSink(io.RawIOBase):
    """``ParquetWriter(ByteSink(), ...)``; after each row group (and the footer), ``take()`` the bytes written."""

    def __init__(self) -> None:
        super().__init__()
        self._buffer = bytearray()
        self.position = 0  # bytes written so far: the file's size once closed

    def writable(self) -> bool:
        return True

    def write(self, data: bytes | bytearray | memoryview) -> int:  # type: ignore[override]
        self._buffer += data
        self.position += len(data)
        return len(data)

    def tell(self) -> int:
        return self.position

    def take(self) -> bytes:
        out = bytes(self._buffer)
        self._buffer.clear()
        return out
