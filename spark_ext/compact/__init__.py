"""Compaction of small parquet files under an S3 prefix, with a journaled commit protocol (see PROTOCOL.md).

Blocking API: ``spark_ext.compact(spark, "s3://bucket/prefix/", target_file_size=..., ...)`` (this package is
callable; the same function is ``spark_ext.compact.run``). Command line: ``python -m spark_ext.compact``.

Driver side: ``compact_prefix`` (the whole job), ``recover_prefix`` (``--recover``), ``plan_compaction`` (pure).
Worker side: ``rewrite_group`` / ``execute_group_task`` (one group, e.g. inside a Spark task).
Reader side: ``read_journal_before`` + list + ``resolve_visible_files`` (apply the journal to a listing), or
``list_visible_files`` (all three).
"""

import sys
import types
from typing import Any

from spark_ext.compact.checksum import TableChecksum, table_checksum
from spark_ext.compact.crash import CrashPoint
from spark_ext.compact.driver import Progress, compact_prefix, recover_prefix
from spark_ext.compact.errors import (
    CompactionError,
    ConditionalWritesUnsupported,
    InputChanged,
    LockHeld,
    LockLost,
    MissingETag,
    VerificationFailed,
)
from spark_ext.compact.facts import fetch_file_facts
from spark_ext.compact.job import compact as run
from spark_ext.compact.journal import JournalEntry, ObjectRef, read_journal
from spark_ext.compact.lock import CompactionLock
from spark_ext.compact.options import CompactionOptions
from spark_ext.compact.plan import CompactionGroup, CompactionPlan, FileFacts, plan_compaction
from spark_ext.compact.progress_bar import ProgressBar
from spark_ext.compact.recover import RecoveryReport, recover
from spark_ext.compact.report import CompactionReport, GroupReport
from spark_ext.compact.rewrite import (
    ExecuteGroups,
    GroupOutput,
    GroupResult,
    GroupTask,
    RewriteSettings,
    execute_group_task,
    in_process_executor,
    rewrite_group,
    run_group_task,
)
from spark_ext.compact.visibility import (
    JournalSnapshot,
    apply_journal,
    list_visible_files,
    logical_key,
    read_journal_before,
    resolve_visible_files,
)

__all__ = [
    "CompactionError",
    "CompactionGroup",
    "CompactionLock",
    "CompactionOptions",
    "CompactionPlan",
    "CompactionReport",
    "ConditionalWritesUnsupported",
    "CrashPoint",
    "ExecuteGroups",
    "FileFacts",
    "GroupOutput",
    "GroupReport",
    "GroupResult",
    "GroupTask",
    "InputChanged",
    "JournalEntry",
    "JournalSnapshot",
    "LockHeld",
    "LockLost",
    "MissingETag",
    "ObjectRef",
    "Progress",
    "ProgressBar",
    "RecoveryReport",
    "RewriteSettings",
    "TableChecksum",
    "VerificationFailed",
    "apply_journal",
    "compact_prefix",
    "execute_group_task",
    "fetch_file_facts",
    "in_process_executor",
    "list_visible_files",
    "logical_key",
    "plan_compaction",
    "read_journal",
    "read_journal_before",
    "recover",
    "recover_prefix",
    "resolve_visible_files",
    "rewrite_group",
    "run",
    "run_group_task",
    "table_checksum",
]


class _CallableModule(types.ModuleType):
    """Makes ``spark_ext.compact(spark, url, ...)`` call ``run`` while this stays a package (for ``python -m``)."""

    def __call__(self, spark: Any, url: str, **kwargs: Any) -> CompactionReport:
        return run(spark, url, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
