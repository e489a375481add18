"""Compaction on Spark: the blocking entry point, the command line and the Spark executor of s3io.compaction.

Blocking API: ``spark_ext.compact(spark, "s3://bucket/prefix/", target_file_size=..., ...)`` (``job.compact``:
groups run as Spark tasks, ``spark_executor``, or without Spark in this process or in worker processes). Command
line: ``python -m spark_ext.compact``. The job itself (plan, rewrite, commit protocol, recovery) is Spark-free and
lives in s3io.compaction (the protocol: docs/commit-protocol.md); the journal readers apply is s3io.table.

This package is callable, and stays a package: ``python -m spark_ext.compact`` needs a package (or module) of that
name, and ``spark_ext.compact(spark, url, ...)`` a callable at that name. A module object is not callable, and an
attribute ``compact`` of ``spark_ext`` would be replaced by the module as soon as anything imported it; so the
module's class is made callable (``_CallableModule``).

The compaction's names are s3io.compaction's and s3io.table's (``from s3io.compaction import CompactionOptions,
ProgressBar, ...``); importing this package imports no compaction job.
"""

from __future__ import annotations

import sys
import types
from typing import TYPE_CHECKING, Any

__all__: list[str] = []

if TYPE_CHECKING:
    from s3io.compaction.report import CompactionReport


class _CallableModule(types.ModuleType):
    """Makes ``spark_ext.compact(spark, url, ...)`` call ``job.compact`` while this stays a package (for ``-m``)."""

    def __call__(self, spark: Any, url: str, **kwargs: Any) -> CompactionReport:
        from spark_ext.compact.job import compact

        return compact(spark, url, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
