"""At interpreter exit, wait for the files that only a native thread still holds to be let go.

pyarrow reads a Python file (s3io's fsspec files, wrapped by ``PyFileSystem(FSSpecHandler(fs))``) on its C++ I/O
threads, and a read task drops its reference to the file just *after* completing the future the caller waits on.
Dropping it takes the GIL. If the caller's script ended in that instant, the interpreter is already finalizing, the
C++ thread is ended inside ``PyGILState_Ensure`` and the process aborts with "terminate called without an active
exception" (apache/arrow#34314, #39162; seen here about once in 40 runs of a three-line script). So s3io tracks
the files it hands out, and an exit hook waits, with the GIL released, while any of them is held by native code
and by nothing Python can reach, bounded by ``EXIT_WAIT_SECONDS``. A file a script still holds (in a global, in a
``pyarrow.parquet.ParquetFile``) is reachable, so a normal exit does not wait.
"""

from __future__ import annotations

import atexit
import gc
import sys
import time
import weakref
from typing import Any

EXIT_WAIT_SECONDS = 2.0  # at most this long at exit; a native read still running after it is pyarrow's to end
_FIRST_PAUSE, _LONGEST_PAUSE = 0.001, 0.05

_tracked: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()  # by identity: fsspec's files of
# one object compare equal, so a WeakSet would keep only one of them


def track(obj: Any) -> None:
    """Have the exit hook wait for ``obj`` while only native code holds it."""
    _tracked[id(obj)] = obj


def held_only_natively() -> int:
    """How many tracked objects have a reference Python's ``gc`` cannot see (a C++ holder; also a name in a running
    frame of another thread, which is at worst a wait) and no referrer but their own bound methods (fsspec's read
    cache holds one: a cycle, not a holder). One scan of the heap for all of them."""
    tracked = list(_tracked.values())
    if not tracked:
        return 0
    index = {id(obj): i for i, obj in enumerate(tracked)}
    own = [0] * len(tracked)  # references from the object's own bound methods
    reachable = [False] * len(tracked)
    for referrer in gc.get_referrers(*tracked):
        if referrer is not tracked:
            _tally(referrer, index, own, reachable)
    count = 0
    for i, obj in enumerate(tracked):
        # the references gc does not see, besides `tracked`, this loop's name and getrefcount's argument
        count += not reachable[i] and sys.getrefcount(obj) - 3 - own[i] > 0
    return count


def _tally(referrer: Any, index: dict[int, int], own: list[int], reachable: list[bool]) -> None:
    """Count ``referrer``'s references to tracked objects: its own bound method's, or one that makes it reachable.
    A function of its own, so no name here outlives the count."""
    try:
        owner = getattr(referrer, "__self__", None)
    except Exception:  # a proxy whose attribute lookup fails: not a method, so it holds what it refers to
        owner = None
    for target in gc.get_referents(referrer):
        i = index.get(id(target))
        if i is not None:
            if owner is target:
                own[i] += 1
            else:
                reachable[i] = True


def wait_for_native_holders(timeout: float | None = None) -> float:
    """Sleep (the GIL released, so a waiting native thread can drop its reference) until no tracked object is held
    only natively, or ``timeout`` (default ``EXIT_WAIT_SECONDS``) passed; the seconds waited."""
    timeout = EXIT_WAIT_SECONDS if timeout is None else timeout
    started = time.monotonic()
    pause = _FIRST_PAUSE
    while _held_or_none():
        left = started + timeout - time.monotonic()
        if left <= 0:
            break
        time.sleep(min(pause, left))
        pause = min(pause * 2, _LONGEST_PAUSE)
    return time.monotonic() - started


def _held_or_none() -> int:
    """``held_only_natively``, or 0 if counting fails: an exit hook must never be what ends a process badly."""
    try:
        return held_only_natively()
    except Exception:
        return 0


atexit.register(wait_for_native_holders)
