"""Errors of the table's transactions (its lock, its journal, its store check); each says what happened and what is
left to do. Compaction's own errors (s3io.compaction.errors) derive from ``TableError`` too, and ``TableError`` from
``S3IOError``, the root of every error s3io raises on purpose."""

from __future__ import annotations

import math
import time

from s3io.errors import S3IOError
from s3io.table.conditional import MissingETag
from s3io.table.layout import lock_key

__all__ = ["ConditionalWritesUnsupported", "LockHeld", "LockLost", "MissingETag", "TableError"]


class TableError(S3IOError):
    """Base class of the errors of the table's transactions (writes and compaction)."""


class LockHeld(TableError):
    """Another job holds the table's lock and it has not expired."""

    def __init__(self, url: str, owner: str, job_id: str, expires_at: float | None) -> None:
        self.owner = owner
        self.job_id = job_id
        self.expires_at = expires_at
        if expires_at is not None and math.isfinite(expires_at):
            until = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(expires_at))
            super().__init__(
                f"{url} is being compacted: lock held by {owner} (job {job_id}) until {until}; "
                "retry after that time (a dead job's lock is taken over once it expires)"
            )
        else:
            bucket, _, prefix = url.removeprefix("s3://").partition("/")
            super().__init__(
                f"{url} is locked by {owner} (job {job_id}), and when that lock ends cannot be judged (an unreadable "
                "lock object, or a store that gives no Last-Modified), so it is never taken over: if no compaction is "
                f"running on this prefix, delete s3://{bucket}/{lock_key(prefix)} and run again"
            )
        # ``url`` (S3IOError's) is the table's: set after the message, which names it already
        self.bucket, _, self.key = url.removeprefix("s3://").partition("/")


class LockLost(TableError):
    """Our lock expired or was taken over: we stop before the next protocol step (fencing)."""


class ConditionalWritesUnsupported(TableError):
    """The store lacks what the table's lock and journal need (If-None-Match / If-Match on PUT), or an atomic guard
    of a data file's delete where one is required."""
