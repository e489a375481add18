"""Errors of the compaction job; each says what happened and what is left to do."""

from __future__ import annotations

import math
import time

from s3io.table.conditional import MissingETag

__all__ = [
    "CompactionError",
    "ConditionalWritesUnsupported",
    "InputChanged",
    "LockHeld",
    "LockLost",
    "MissingETag",
    "VerificationFailed",
]


class CompactionError(Exception):
    """Base class of the compaction's own errors."""


class LockHeld(CompactionError):
    """Another job holds the prefix's lock and it has not expired."""

    def __init__(self, url: str, owner: str, job_id: str, expires_at: float | None) -> None:
        self.url = url
        self.owner = owner
        self.job_id = job_id
        self.expires_at = expires_at
        if expires_at is not None and math.isfinite(expires_at):
            until = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(expires_at))
            super().__init__(
                f"{url} is being compacted: lock held by {owner} (job {job_id}) until {until}; "
                "retry after that time (a dead job's lock is taken over once it expires)"
            )
            return
        super().__init__(
            f"{url} is locked by {owner} (job {job_id}), and when that lock ends cannot be judged (an unreadable "
            "lock object, or a store that gives no Last-Modified), so it is never taken over: if no compaction is "
            f"running on this prefix, delete {url.rstrip('/')}/_s3io_compaction/LOCK and run again"
        )


class LockLost(CompactionError):
    """Our lock expired or was taken over: we stop before the next protocol step (fencing)."""


class VerificationFailed(CompactionError):
    """A written output does not hold exactly the rows of its inputs; it was not committed."""


class InputChanged(CompactionError):
    """An input was replaced or deleted by someone else after it was planned."""


class ConditionalWritesUnsupported(CompactionError):
    """The store ignores If-None-Match / If-Match on PUT or DELETE, on which the lock and the journal depend."""
