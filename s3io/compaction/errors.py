"""Errors of the compaction job; each says what happened and what is left to do. The lock's and the store check's
are the table layer's (s3io.table.errors), named here too."""

from __future__ import annotations

from s3io.table.errors import ConditionalWritesUnsupported, LockHeld, LockLost, MissingETag, TableError

__all__ = [
    "CompactionError",
    "ConditionalWritesUnsupported",
    "InputChanged",
    "LockHeld",
    "LockLost",
    "MissingETag",
    "TableError",
    "VerificationFailed",
]


class CompactionError(TableError):
    """Base class of the compaction's own errors (the lock's and the store check's are the table layer's)."""


class VerificationFailed(CompactionError):
    """A written output does not hold exactly the rows of its inputs; it was not committed."""


class InputChanged(CompactionError):
    """An input was replaced or deleted by someone else after it was planned."""
