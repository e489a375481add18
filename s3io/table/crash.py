"""Crash injection for tests: a job SIGKILLs itself at a named boundary of the table's transactions.

One enum names the boundaries of both protocols, a compaction's (``COMPACTION_POINTS``) and a write's
(``WRITE_POINTS``). Pass ``crash_at=CrashPoint.X`` to ``compact_prefix``, ``commit_write`` or a ``TaskWriter``; the
first time the job reaches that boundary it dies with SIGKILL, exactly as an OOM kill or a lost node would end it:
no finally, no atexit. ``S3IO_COMPACT_CRASH_AT=x`` (a compaction) or ``S3IO_WRITE_CRASH_AT=x`` (a write's commit or
task, e.g. in a Spark commit worker no argument reaches) does the same only under the explicit test switch
``S3IO_TEST_CRASH_POINTS=1``: a variable left in a production environment never kills a job (it is ignored, with a
warning).
"""

from __future__ import annotations

import enum
import logging
import os
import signal

ENV_VAR = "S3IO_COMPACT_CRASH_AT"
WRITE_ENV_VAR = "S3IO_WRITE_CRASH_AT"
TEST_SWITCH = "S3IO_TEST_CRASH_POINTS"  # "1": crash points may come from ENV_VAR

log = logging.getLogger("s3io.compaction")


class CrashPoint(enum.Enum):
    """Each boundary of the two protocols, in the order a job reaches them: a compaction's, then a write's."""

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
    # a write's commit
    BEFORE_CLAIM = "before_claim"  # every task's uploads are up, no entry yet
    AFTER_CLAIM = "after_claim"  # the entry says "pending"
    AFTER_COMMIT = "after_commit"  # the entry says "committed", no upload completed
    AFTER_FIRST_COMPLETE = "after_first_complete"  # one upload completed (a plain reader sees that file)
    AFTER_COMPLETES = "after_completes"  # every upload completed, the entry still "committed"
    AFTER_PUBLISH = "after_publish"  # the entry says "published"
    AFTER_FIRST_RETIRE = "after_first_retire"  # an overwrite: one replaced file deleted
    AFTER_RETIRE = "after_retire"  # an overwrite: every replaced file deleted, the entry says "done"
    BEFORE_RETURN = "before_return"  # the commit's own work is over (entry forgotten or left for later)
    TASK_AFTER_PART = "task_after_part"  # a write's task (not the commit): one part of its first file is up


WRITE_POINTS = tuple(CrashPoint)[tuple(CrashPoint).index(CrashPoint.BEFORE_CLAIM) :]
COMPACTION_POINTS = tuple(p for p in CrashPoint if p not in WRITE_POINTS)


def resolve(crash_at: CrashPoint | str | None, env_var: str = ENV_VAR) -> CrashPoint | None:
    """The crash point from the argument, else from ``env_var`` (a compaction's, or ``WRITE_ENV_VAR``) under the
    test switch; None when neither names one."""
    value = crash_at if crash_at is not None else os.environ.get(env_var) or None
    if crash_at is None and value is not None and os.environ.get(TEST_SWITCH) != "1":
        log.warning("%s=%s is ignored: crash points act only under the test switch %s=1", env_var, value, TEST_SWITCH)
        return None
    if value is None or isinstance(value, CrashPoint):
        return value
    return CrashPoint(str(value).strip().lower())


def maybe_crash(point: enum.Enum, crash_at: enum.Enum | None) -> None:
    """Die with SIGKILL if ``point`` is the configured crash point."""
    if crash_at is point:
        os.kill(os.getpid(), signal.SIGKILL)
