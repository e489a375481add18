"""Compaction of small parquet files under an S3 prefix, with a journaled commit protocol (see PROTOCOL.md).

Blocking API: ``spark_ext.compact(spark, "s3://bucket/prefix/", target_file_size=..., ...)`` (this package is
callable: it calls ``spark_ext.compact.job.compact``). Command line: ``python -m spark_ext.compact``.

Driver side: ``compact_prefix`` (the whole job), ``recover_prefix`` (``--recover``), ``plan_compaction`` (pure).
Worker side: ``rewrite_group`` / ``execute_group_task`` (one group, e.g. inside a Spark task).
Reader side (s3io.table, re-exported here): ``read_journal_before`` + list + ``resolve_visible_files``
(apply the journal to a listing), or ``list_visible_files`` (all three).

The names below are imported on first use, so importing one module of this package (as the readers and the stream
do) does not import the driver, the rewrite and the Spark executor.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

_SOURCES = {  # public name -> the module that defines it
    "TableChecksum": "spark_ext.compact.checksum",
    "table_checksum": "spark_ext.compact.checksum",
    "CrashPoint": "spark_ext.compact.crash",
    "Progress": "spark_ext.compact.driver",
    "compact_prefix": "spark_ext.compact.driver",
    "recover_prefix": "spark_ext.compact.driver",
    "CompactionError": "spark_ext.compact.errors",
    "ConditionalWritesUnsupported": "spark_ext.compact.errors",
    "InputChanged": "spark_ext.compact.errors",
    "LockHeld": "spark_ext.compact.errors",
    "LockLost": "spark_ext.compact.errors",
    "MissingETag": "spark_ext.compact.errors",
    "VerificationFailed": "spark_ext.compact.errors",
    "fetch_file_facts": "spark_ext.compact.facts",
    "CompactionLock": "spark_ext.compact.lock",
    "CompactionOptions": "spark_ext.compact.options",
    "CompactionGroup": "spark_ext.compact.grouping",
    "CompactionPlan": "spark_ext.compact.grouping",
    "FileFacts": "spark_ext.compact.grouping",
    "plan_compaction": "spark_ext.compact.grouping",
    "ProgressBar": "spark_ext.compact.progress_bar",
    "RecoveryReport": "spark_ext.compact.recover",
    "recover": "spark_ext.compact.recover",
    "CompactionReport": "spark_ext.compact.report",
    "GroupReport": "spark_ext.compact.report",
    "ExecuteGroups": "spark_ext.compact.rewrite",
    "GroupOutput": "spark_ext.compact.rewrite",
    "GroupResult": "spark_ext.compact.rewrite",
    "GroupTask": "spark_ext.compact.rewrite",
    "RewriteSettings": "spark_ext.compact.rewrite",
    "execute_group_task": "spark_ext.compact.rewrite",
    "in_process_executor": "spark_ext.compact.rewrite",
    "rewrite_group": "spark_ext.compact.rewrite",
    "run_group_task": "spark_ext.compact.rewrite",
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
    from spark_ext.compact.report import CompactionReport


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
