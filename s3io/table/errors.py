"""Errors of the table's transactions (its lock, its journal, its store check); each says what happened and what is
left to do. Compaction's own errors (s3io.compaction.errors) derive from ``TableError`` too, and ``TableError`` from
``S3IOError``, the root of every error s3io raises on purpose."""

from __future__ import annotations

import math
import time

from s3io.errors import S3IOError
from s3io.table.conditional import MissingETag

__all__ = ["ConditionalWritesUnsupported", "LockHeld", "LockLost", "MissingETag", "TableError"]


class TableError(S3IOError):
    """Base class of the errors of the table's transactions (writes and compaction)."""


class LockHeld(TableError):
    """Another holder has an exclusive lease of the table (its lock) that has not ended."""

    def __init__(self, name: str, holder: str, expires_at: float | None, lease_url: str) -> None:
        self.name = name
        self.holder = holder
        self.expires_at = expires_at
        if expires_at is not None and math.isfinite(expires_at):
            until = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(expires_at))
            super().__init__(
                f"{name} is held by {holder} until {until}; retry after that time (a dead job's lock is taken over "
                "once it expires)"
            )
        else:
            super().__init__(
                f"{name} is held by {holder}, and when it ends cannot be judged (an unreadable lock object, or a store "
                f"that gives no Last-Modified), so it is never taken over: if no job holds it, delete {lease_url} and "
                "run again"
            )
        # ``url`` (S3IOError's) is the lease object's: set after the message, which names it already
        self.bucket, _, self.key = lease_url.removeprefix("s3://").partition("/")


class LockLost(TableError):
    """Our lock expired or was taken over: we stop before the next protocol step (fencing)."""


class ConditionalWritesUnsupported(TableError):
    """The store lacks what the table's lock and journal need (If-None-Match / If-Match on PUT), or an atomic guard
    of a data file's delete where one is required."""
