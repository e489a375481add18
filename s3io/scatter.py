"""A body landing in several buffers: the runs of bytes a caller keeps, and the gaps between them, which are received
into scratch memory and never kept.

Why: ranges merged into one GET (closer than the coalescing gap) bring the bytes between them too. Landed in one
buffer, a gap costs fresh pages (faulted in, zeroed) and stays alive as long as any range cut from that buffer;
landed in a small scratch buffer that every gap reuses, it costs a copy from the kernel into memory already in the
cache, and nothing after. 200 ranges of 64 KiB merged into 88 GETs bring 57 MiB of which 12.5 MiB are wanted.

A value below the layers (it imports nothing of s3io): the range engine composes one from the runs it keeps, the S3
layer passes it on as a GET's ``into``, and the transport receives into its ``views``; none of them owns it alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

SCRATCH_BYTES = 256 * 1024
# Gap bytes go here and are never read: concurrent receives may overwrite each other's freely.
_SCRATCH = memoryview(bytearray(SCRATCH_BYTES))


class Pieces:
    """``len(self)`` body bytes, in order, as ``(view, kept)`` pieces: kept bytes land in the caller's buffers, gap
    bytes in scratch. Writable like a buffer of that length (``pieces[a:b] = data`` keeps what falls in kept
    pieces), sliced into a window of itself (``pieces[a:b]``), and received into piece by piece (``views``)."""

    __slots__ = ("_length", "_pieces")

    def __init__(self, pieces: Sequence[tuple[memoryview, bool]]) -> None:
        self._pieces = [(view, kept) for view, kept in pieces if len(view)]
        self._length = sum(len(view) for view, _ in self._pieces)

    @classmethod
    def _made(cls, pieces: list[tuple[memoryview, bool]], length: int) -> Pieces:
        """Pieces already non-empty, of ``length`` bytes in all (a window of others: sliced once per GET)."""
        made = cls.__new__(cls)
        made._pieces = pieces
        made._length = length
        return made

    @classmethod
    def of_runs(cls, start: int, end: int, runs: Sequence[tuple[int, memoryview]]) -> Pieces:
        """``[start, end)`` of an object, its bytes kept where ``runs`` (``(offset, buffer)`` in offset order, inside
        the span, apart) say and received into scratch in between."""
        pieces: list[tuple[memoryview, bool]] = []
        position = start
        for offset, buffer in runs:
            if offset < position or offset + len(buffer) > end:
                raise ValueError(f"run at {offset} of {len(buffer)} bytes overlaps another or leaves [{start}, {end})")
            pieces += _gap(offset - position)
            pieces.append((buffer, True))
            position = offset + len(buffer)
        pieces += _gap(end - position)
        return cls(pieces)

    def __len__(self) -> int:
        return self._length

    @property
    def views(self) -> list[memoryview]:
        """Where each byte lands, in order (scratch for the gaps)."""
        return [view for view, _ in self._pieces]

    @property
    def gaps(self) -> list[bool]:
        """For each of ``views``, whether it is a gap (scratch: its bytes are never read, a receiver may drop them)."""
        return [not kept for _, kept in self._pieces]

    def __getitem__(self, window: slice) -> Pieces:
        start, stop, step = window.indices(self._length)
        if step != 1:
            raise ValueError("pieces are sliced with a step of 1")
        if start == 0 and stop == self._length:
            return self  # the whole (a GET of one part, its room before any byte): pieces are not changed by slicing
        clipped: list[tuple[memoryview, bool]] = []
        position = 0
        for view, kept in self._pieces:
            size = len(view)
            if position + size > start:
                low = start - position if start > position else 0
                high = stop - position if stop - position < size else size
                if low < high:
                    clipped.append((view if low == 0 and high == size else view[low:high], kept))
            position += size
            if position >= stop:
                break
        return Pieces._made(clipped, max(0, stop - start))

    def __setitem__(self, window: slice, data: Any) -> None:
        start, stop, step = window.indices(self._length)
        source = memoryview(data).cast("B")
        if step != 1 or stop - start != len(source):
            raise ValueError(f"{len(source)} bytes written to a window of {stop - start}")
        position = 0
        for view, kept in self._pieces:
            low, high = max(start - position, 0), min(stop - position, len(view))
            if kept and low < high:
                view[low:high] = source[position + low - start : position + high - start]
            position += len(view)
            if position >= stop:
                break


def _gap(length: int) -> list[tuple[memoryview, bool]]:
    """``length`` bytes of scratch, as views of at most SCRATCH_BYTES each."""
    return [(_SCRATCH[: min(SCRATCH_BYTES, length - done)], False) for done in range(0, length, SCRATCH_BYTES)]
