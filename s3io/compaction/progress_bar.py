"""A one-line progress bar for the driver: groups and bytes done, rate and ETA, redrawn in place on a terminal."""

from __future__ import annotations

import sys
from typing import TextIO

from s3io.compaction.driver import Progress

WIDTH = 24


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} GB"


def render(event: Progress) -> str:
    """``[#####.....] 3/10 groups  12.0 MB/40.0 MB  4.1 MB/s  ETA 7s  (rewriting)``"""
    fraction = event.bytes_done / event.bytes_total if event.bytes_total else (1.0 if event.phase == "done" else 0.0)
    filled = int(WIDTH * min(1.0, fraction))
    rate = event.bytes_done / event.elapsed if event.elapsed > 0 else 0.0
    remaining = event.bytes_total - event.bytes_done
    eta = f"ETA {remaining / rate:.0f}s" if rate > 0 and remaining > 0 else "ETA -"
    return (
        f"[{'#' * filled}{'.' * (WIDTH - filled)}] {event.groups_done}/{event.groups_total} groups  "
        f"{_size(event.bytes_done)}/{_size(event.bytes_total)}  {_size(rate)}/s  {eta}  ({event.phase})"
    )


class ProgressBar:
    """A progress callback: redraws one line on a terminal, prints a line per change elsewhere (logs, CI)."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream or sys.stderr
        self._tty = self._stream.isatty()
        self._last = ""

    def __call__(self, event: Progress) -> None:
        line = render(event)
        if line == self._last:
            return
        self._last = line
        if self._tty:
            self._stream.write("\r" + line + ("\n" if event.phase == "done" else ""))
        else:
            self._stream.write(line + "\n")
        self._stream.flush()
