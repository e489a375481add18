"""Crash injection for tests: the job SIGKILLs itself at a named boundary of the commit protocol.

Pass ``crash_at=CrashPoint.X``; the first time the job reaches that boundary it dies with SIGKILL, exactly as an
OOM kill or a lost node would end it: no finally, no atexit. ``S3IO_COMPACT_CRASH_AT=x`` does the same only under
the explicit test switch ``S3IO_TEST_CRASH_POINTS=1``: a variable left in a production environment never kills a
job (it is ignored, with a warning).
"""

from __future__ import annotations

import enum
import logging
import os
import signal
from typing import TypeVar

ENV_VAR = "S3IO_COMPACT_CRASH_AT"
TEST_SWITCH = "S3IO_TEST_CRASH_POINTS"  # "1": crash points may come from ENV_VAR

log = logging.getLogger("s3io.compaction")


class CrashPoint(enum.Enum):
    """Each boundary of the protocol, in the order a job reaches them."""

    AFTER_LOCK_ACQUIRE = "after_lock_acquire"
    AFTER_STAGING_WRITE = "after_staging_write"  # the first group's output is in staging, not verified
    AFTER_VERIFY = "after_verify"  # the first group's output is verified, not committed
    AFTER_COMMIT_RECORD = "after_commit_record"  # the first group is committed; others may still be staged
    AFTER_ALL_COMMITS = "after_all_commits"  # every group committed, none published
    AFTER_COPY = "after_copy"  # the first group's output copied to its final key, journal still "committed"
    AFTER_PUBLISH_RECORD = "after_publish_record"  # the first group's journal entry says "published"
    AFTER_INPUT_DELETE = "after_input_delete"  # one input of the first group deleted, the rest still there
    AFTER_INPUTS_DELETED = "after_inputs_deleted"  # every input of every group deleted
    AFTER_STAGING_DELETE = "after_staging_delete"  # the first group's staging object deleted
    AFTER_DONE_RECORD = "after_done_record"  # the first group's journal entry says "done"
    AFTER_JOURNAL_DELETE = "after_journal_delete"  # the first group's journal entry deleted
    BEFORE_LOCK_RELEASE = "before_lock_release"  # everything done, the lock still held


P = TypeVar("P", bound=enum.Enum)


def resolve(
    crash_at: P | str | None,
    points: type[P] = CrashPoint,
    env_var: str = ENV_VAR,  # type: ignore[assignment]
) -> P | None:
    """The crash point from the argument, else from ``env_var`` under the test switch; None when neither names one.
    ``points``: the enum of crash points (the compaction's, or another protocol's, e.g. s3io.write.crash)."""
    value = crash_at if crash_at is not None else os.environ.get(env_var) or None
    if crash_at is None and value is not None and os.environ.get(TEST_SWITCH) != "1":
        log.warning("%s=%s is ignored: crash points act only under the test switch %s=1", env_var, value, TEST_SWITCH)
        return None
    if value is None or isinstance(value, points):
        return value
    return points(str(value).strip().lower())


def maybe_crash(point: enum.Enum, crash_at: enum.Enum | None) -> None:
    """Die with SIGKILL if ``point`` is the configured crash point."""
    if crash_at is point:
        os.kill(os.getpid(), signal.SIGKILL)
