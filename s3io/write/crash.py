"""Crash injection for tests of the write commit: the committing process SIGKILLs itself at a named step.

Pass ``crash_at=WriteCrashPoint.X`` to ``commit_write`` (or set ``S3IO_WRITE_CRASH_AT=x`` under the test switch
``S3IO_TEST_CRASH_POINTS=1``, for a commit that runs where no argument reaches, such as a Spark commit worker):
the first time the commit reaches that step it dies as a killed driver would, with no finally and no atexit. The
mechanism is the compaction's (s3io.table.crash).
"""

from __future__ import annotations

import enum

from s3io.table.crash import maybe_crash, resolve

ENV_VAR = "S3IO_WRITE_CRASH_AT"


class WriteCrashPoint(enum.Enum):
    """Each step of the write commit, in the order a commit reaches them."""

    BEFORE_CLAIM = "before_claim"  # every task's uploads are up, no entry yet
    AFTER_CLAIM = "after_claim"  # the entry says "pending"
    AFTER_COMMIT = "after_commit"  # the entry says "committed", no upload completed
    AFTER_FIRST_COMPLETE = "after_first_complete"  # one upload completed (a plain reader sees that file)
    AFTER_COMPLETES = "after_completes"  # every upload completed, the entry still "committed"
    AFTER_PUBLISH = "after_publish"  # the entry says "published"
    AFTER_FIRST_RETIRE = "after_first_retire"  # an overwrite: one replaced file deleted
    AFTER_RETIRE = "after_retire"  # an overwrite: every replaced file deleted, the entry says "done"
    BEFORE_RETURN = "before_return"  # the commit's own work is over (entry forgotten or left for later)
    TASK_AFTER_PART = "task_after_part"  # a task (not the commit): one part of its first file is up, the rest not


def resolve_write_crash(crash_at: WriteCrashPoint | str | None) -> WriteCrashPoint | None:
    """The crash point from the argument, else from S3IO_WRITE_CRASH_AT under the test switch."""
    return resolve(crash_at, WriteCrashPoint, ENV_VAR)


__all__ = ["ENV_VAR", "WriteCrashPoint", "maybe_crash", "resolve_write_crash"]
