"""Compaction on Spark: the blocking entry point, the command line and the Spark executor of s3io.compaction.

Blocking API: ``spark_ext.compact(spark, "s3://bucket/prefix/", target_file_size=..., ...)`` (``job.compact``:
groups run as Spark tasks, ``spark_executor``, or without Spark in this process or in worker processes). Command
line: ``python -m spark_ext.compact``. The job itself (plan, rewrite, commit protocol, recovery) is Spark-free and
lives in s3io.compaction (the protocol: docs/commit-protocol.md); the journal readers apply is s3io.table.

This package is callable, and stays a package: ``python -m spark_ext.compact`` needs a package (or module) of that
name, and ``spark_ext.compact(spark, url, ...)`` a callable at that name. A module object is not callable, and an
attribute ``compact`` of ``spark_ext`` would be replaced by the module as soon as anything imported it; so the
module's class is made callable (``_CallableModule``).

The names below are the public names of s3io.compaction and s3io.table under their former spellings
(``from spark_ext.compact import compact_prefix, CompactionOptions, CrashPoint, ...``), imported on first use, so
that importing this package does not import the compaction job.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

_SOURCES = {  # public name -> the module that defines it
    "TableChecksum": "s3io.compaction.checksum",
    "table_checksum": "s3io.compaction.checksum",
    "CrashPoint": "s3io.table.crash",
    "Progress": "s3io.compaction.driver",
    "compact_prefix": "s3io.compaction.driver",
    "recover_prefix": "s3io.compaction.driver",
    "CompactionError": "s3io.compaction.errors",
    "ConditionalWritesUnsupported": "s3io.compaction.errors",
    "InputChanged": "s3io.compaction.errors",
    "LockHeld": "s3io.compaction.errors",
    "LockLost": "s3io.compaction.errors",
    "MissingETag": "s3io.compaction.errors",
    "VerificationFailed": "s3io.compaction.errors",
    "fetch_file_facts": "s3io.compaction.facts",
    "TableLock": "s3io.table.lock",
    "CompactionOptions": "s3io.compaction.options",
    "CompactionGroup": "s3io.compaction.grouping",
    "CompactionPlan": "s3io.compaction.grouping",
    "FileFacts": "s3io.compaction.grouping",
    "plan_compaction": "s3io.compaction.grouping",
    "ProgressBar": "s3io.compaction.progress_bar",
    "RecoveryReport": "s3io.table.recovery",
    "recover": "s3io.table.recovery",
    "CompactionReport": "s3io.compaction.report",
    "GroupReport": "s3io.compaction.report",
    "ExecuteGroups": "s3io.compaction.rewrite",
    "GroupOutput": "s3io.compaction.rewrite",
    "GroupResult": "s3io.compaction.rewrite",
    "GroupTask": "s3io.compaction.rewrite",
    "RewriteSettings": "s3io.compaction.rewrite",
    "execute_group_task": "s3io.compaction.rewrite",
    "in_process_executor": "s3io.compaction.rewrite",
    "rewrite_group": "s3io.compaction.rewrite",
    "run_group_task": "s3io.compaction.rewrite",
    "JournalEntry": "s3io.table.journal",
    "ObjectRef": "s3io.table.journal",
    "read_journal": "s3io.table.journal",
    "logical_key": "s3io.table.layout",
    "JournalSnapshot": "s3io.table.visibility",
    "apply_journal": "s3io.table.visibility",
    "list_visible_files": "s3io.table.visibility",
    "read_journal_before": "s3io.table.visibility",
    "resolve_visible_files": "s3io.table.visibility",
}

__all__ = sorted(_SOURCES)

if TYPE_CHECKING:
    from s3io.compaction.report import CompactionReport


def __getattr__(name: str) -> Any:
    """A public name, imported from its module on first use (submodules are found by the import system)."""
    source = _SOURCES.get(name)
    if source is None:
        raise AttributeError(f"module 'spark_ext.compact' has no attribute {name!r}")
    value = getattr(importlib.import_module(source), name)
    globals()[name] = value
    return value


class _CallableModule(types.ModuleType):
    """Makes ``spark_ext.compact(spark, url, ...)`` call ``job.compact`` while this stays a package (for ``-m``)."""

    def __call__(self, spark: Any, url: str, **kwargs: Any) -> CompactionReport:
        from spark_ext.compact.job import compact

        return compact(spark, url, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
