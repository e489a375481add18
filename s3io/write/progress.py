"""Progress of a long ``write_parquet``: rows and bytes encoded (after each row group), rate and ETA, on one
line redrawn in place.

On by default only where someone watches (stderr a terminal), as the compaction's bar (s3io.compaction
.progress_bar); ``progress=False`` turns it off, ``True`` forces it, a callable receives each ``WriteProgress``.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO

from s3io.errors import InvalidConfig

WIDTH = 24
REDRAW_SECONDS = 0.2  # a terminal line is redrawn at most this often (phase changes always)


@dataclass(frozen=True, slots=True)
class WriteProgress:
    """One report: rows encoded of ``rows_total`` (None: a stream of unknown length), parquet bytes encoded for
    upload, files closed, seconds since the write began, and the phase ("writing": after each row group,
    "committing", "done")."""

    rows_done: int
    rows_total: int | None
    bytes_written: int
    files: int
    elapsed: float
    phase: str


ProgressCallback = Callable[[WriteProgress], None]


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{int(n)} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


def render(event: WriteProgress) -> str:
    """``[#####...] 12,000/20,000 rows  12.0 MB  4.1 MB/s  ETA 7s  (writing)``"""
    rate = event.bytes_written / event.elapsed if event.elapsed > 0 else 0.0
    total = event.rows_total
    if total:
        fraction = min(1.0, event.rows_done / total)
        bar = "#" * int(WIDTH * fraction) + "." * (WIDTH - int(WIDTH * fraction))
        row_rate = event.rows_done / event.elapsed if event.elapsed > 0 else 0.0
        left = total - event.rows_done
        eta = "" if left <= 0 else f"ETA {left / row_rate:.0f}s" if row_rate > 0 else "ETA -"
        head = f"[{bar}] {event.rows_done:,}/{total:,} rows"
    else:
        head, eta = f"{event.rows_done:,} rows", ""
    files = f"  {event.files} file{'s' if event.files != 1 else ''}" if event.files else ""
    tail = f"  {eta}" if eta else ""
    return f"{head}  {_size(event.bytes_written)}  {_size(rate)}/s{files}{tail}  ({event.phase})"


class WriteProgressBar:
    """A progress callback: redraws one line on a terminal (at most every REDRAW_SECONDS), a line per phase
    elsewhere."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream or sys.stderr
        self._tty = self._stream.isatty()
        self._phase = ""
        self._drawn = 0.0

    def __call__(self, event: WriteProgress) -> None:
        now = time.monotonic()
        changed = event.phase != self._phase
        if not changed and (not self._tty or now - self._drawn < REDRAW_SECONDS):
            return
        self._phase, self._drawn = event.phase, now
        line = render(event)
        if self._tty:
            self._stream.write("\r" + line + ("\n" if event.phase == "done" else ""))
        else:
            self._stream.write(line + "\n")
        self._stream.flush()


def resolve_progress(progress: bool | ProgressCallback | None) -> ProgressCallback | None:
    """The callback ``progress`` asks for: None (default) a bar when stderr is a terminal, False none, True a bar
    whatever stderr is, a callable itself."""
    if progress is None:
        return WriteProgressBar() if sys.stderr.isatty() else None
    if progress is True:
        return WriteProgressBar()
    if progress is False:
        return None
    if callable(progress):
        return progress
    raise InvalidConfig(f"progress: expected True, False, None or a callable, got {progress!r}")
