"""Byte-range planning as pure functions: coalesce nearby ranges, split large ones, cut results back out.

Ranges are half-open ``(start, end)`` byte offsets. Results are matched to requests by position in the
request list (identity), never by the order in which GETs complete.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator, Sequence

from s3io.errors import InvalidConfig

Range = tuple[int, int]


def check_range(start: int, end: int) -> None:
    """Raise InvalidConfig unless ``0 <= start <= end`` (whole numbers)."""
    if type(start) is int and type(end) is int and 0 <= start <= end:
        return  # the usual case, in one test (a ranges read checks each range a few times on its way down)
    if isinstance(start, bool) or isinstance(end, bool) or not isinstance(start, int) or not isinstance(end, int):
        raise InvalidConfig(f"range: expected (start, end) whole numbers, got ({start!r}, {end!r})")
    if start < 0 or end < start:
        raise InvalidConfig(f"range: expected 0 <= start <= end, got ({start}, {end})")


def merge_ranges(ranges: Iterable[Range], gap: int) -> list[Range]:
    """Sorted union of the non-empty ranges, also merging neighbours separated by at most ``gap`` bytes.

    Like object_store's ``merge_ranges``: one GET per merged range trades ``gap`` wasted bytes for a round trip.
    Empty ranges need no bytes and are left out.
    """
    if gap < 0:
        raise InvalidConfig(f"gap: must not be negative, got {gap!r}")
    ordered = []
    for start, end in ranges:
        check_range(start, end)
        if end > start:
            ordered.append((start, end))
    ordered.sort()
    merged: list[Range] = []
    for start, end in ordered:
        if merged and start - merged[-1][1] <= gap:
            last_start, last_end = merged[-1]
            merged[-1] = (last_start, max(last_end, end))
        else:
            merged.append((start, end))
    return merged


def split_range(start: int, end: int, part_size: int) -> list[Range]:
    """``[start, end)`` as consecutive parts of at most ``part_size`` bytes (the last may be shorter)."""
    return list(iter_parts(start, end, part_size))


def iter_parts(start: int, end: int, part_size: int) -> Iterator[Range]:
    """``split_range`` one part at a time: a span whose end came from a server (a Content-Range total that may be
    a lie of a petabyte) costs nothing until its parts are asked for."""
    check_range(start, end)
    if part_size < 1:
        raise InvalidConfig(f"part_size: must be at least 1, got {part_size!r}")
    return ((offset, min(offset + part_size, end)) for offset in range(start, end, part_size))


def slice_merged(
    requested: Sequence[Range], merged: Sequence[Range], blobs: Sequence[bytes | memoryview]
) -> list[bytes | memoryview]:
    """The bytes of each requested range, in request order, cut from ``blobs[i]`` holding ``merged[i]``.

    Every non-empty requested range must lie inside one merged range (as ``merge_ranges`` guarantees); a
    request equal to its merged range gets that blob itself, any other a ``memoryview`` of it: nothing is copied.
    """
    if len(merged) != len(blobs):
        raise ValueError(f"{len(merged)} merged ranges but {len(blobs)} blobs")
    for (start, end), blob in zip(merged, blobs, strict=True):
        if len(blob) != end - start:
            raise ValueError(f"blob for ({start}, {end}) holds {len(blob)} bytes, expected {end - start}")
    starts = [start for start, _ in merged]
    out: list[bytes | memoryview] = []
    for start, end in requested:
        check_range(start, end)
        if start == end:
            out.append(b"")
            continue
        i = bisect.bisect_right(starts, start) - 1
        if i < 0 or end > merged[i][1]:
            raise ValueError(f"requested range ({start}, {end}) is not inside any merged range")
        base, base_end = merged[i]
        blob = blobs[i]
        out.append(blob if start == base and end == base_end else memoryview(blob)[start - base : end - base])
    return out
