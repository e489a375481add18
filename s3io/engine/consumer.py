"""Which task is consuming an async iterator, and whether it was lost while the iterator waited between items.

An async generator is not told when the task iterating it is cancelled between two items (the generator sits at a
``yield``): its reads would go on in the background. ``ConsumerWatch`` follows the task that last resumed the
iterator and calls ``on_lost`` when that task is cancelled, so the caller can stop its reads at once. A task that
ends otherwise hands the iterator over: ``asyncio.wait_for(it.__anext__(), t)`` resumes it from a fresh task each
time, and that must read on (a task that failed is not asked for its exception: that is its owner's to see).
Once lost, the iterator must say so when it is resumed again, never end as if it had read everything (``lost``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from s3io import errors


class ConsumerWatch:
    """Follows the consuming task (``follow()`` at each resumption); ``on_lost()`` once it is cancelled."""

    __slots__ = ("_on_lost", "_task", "lost", "what")

    def __init__(self, what: str, on_lost: Callable[[], object]) -> None:
        self.what = what
        self.lost = False
        self._on_lost = on_lost
        self._task: asyncio.Task[object] | None = None
        self.follow()

    def follow(self) -> None:
        """Watch the task running now (the one that resumed the iterator)."""
        task = asyncio.current_task()
        if task is self._task:
            return
        self.close()
        self._task = task
        if task is not None:
            task.add_done_callback(self._done)

    def check(self) -> None:
        """Raise if the consuming task was lost: the reads were stopped, so what follows was never read."""
        if self.lost:
            raise errors.S3IOError(
                f"{self.what} was stopped: the task iterating it was cancelled between two items, so the rest was "
                "never read; start the read again (or resume it only from tasks that are not cancelled)"
            )

    def close(self) -> None:
        if self._task is not None:
            self._task.remove_done_callback(self._done)
            self._task = None

    def _done(self, task: asyncio.Task[object]) -> None:
        if task is not self._task:
            return
        self._task = None
        if task.cancelled():
            self.lost = True
            self._on_lost()
