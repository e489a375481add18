"""Compaction of small parquet files under an S3 prefix, with a journaled commit protocol (docs/commit-protocol.md).

Spark-free: the job runs its groups in this process, in worker processes (``process_executor``), or wherever an
``ExecuteGroups`` sends them (spark_ext.compact's Spark executor). It writes the journal that every reader applies
(s3io.table) and honours the leases of streams (s3io.stream_state).

Driver side: ``compact_prefix`` (the whole job), ``recover_prefix`` (``--recover``), ``plan_compaction`` (pure).
Worker side: ``rewrite_group`` / ``execute_group_task`` (one group, e.g. inside a Spark task or a worker process).
"""

from s3io.compaction.checksum import TableChecksum, table_checksum
from s3io.compaction.driver import Progress, compact_prefix, recover_prefix
from s3io.compaction.errors import (
    CompactionError,
    ConditionalWritesUnsupported,
    InputChanged,
    LockHeld,
    LockLost,
    MissingETag,
    VerificationFailed,
)
from s3io.compaction.facts import fetch_file_facts
from s3io.compaction.grouping import CompactionGroup, CompactionPlan, FileFacts, plan_compaction
from s3io.compaction.options import CompactionOptions
from s3io.compaction.process_executor import process_executor
from s3io.compaction.progress_bar import ProgressBar
from s3io.compaction.report import CompactionReport, GroupReport
from s3io.compaction.rewrite import (
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
from s3io.table.crash import CrashPoint
from s3io.table.lock import TableLock
from s3io.table.recovery import RecoveryReport, recover

__all__ = [
    "CompactionError",
    "CompactionGroup",
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
    "LockHeld",
    "LockLost",
    "MissingETag",
    "Progress",
    "ProgressBar",
    "RecoveryReport",
    "RewriteSettings",
    "TableChecksum",
    "TableLock",
    "VerificationFailed",
    "compact_prefix",
    "execute_group_task",
    "fetch_file_facts",
    "in_process_executor",
    "plan_compaction",
    "process_executor",
    "recover",
    "recover_prefix",
    "rewrite_group",
    "run_group_task",
    "table_checksum",
]
