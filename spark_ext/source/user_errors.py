"""Errors a Spark user reads in one line: s3parquet's entry points raise s3io's errors concisely, with the Spark fix.

Spark prints a Python data source's error inside its own (``[PYTHON_DATA_SOURCE_ERROR] Failed to create Python data
source instance: Traceback ...``): the traceback under that prefix is cut to the entry point's failing line and the
line that raised (``s3io.errors.concise``), and the error's one-line message names the object or option and the fix;
where the fix is a Spark option (skip corrupt or missing files), it says which.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from s3io.errors import CorruptFile, NotFound, PathNotFound, S3IOError, readable_errors, readable_iteration
from spark_ext.source.worker_heap import freeze_once

F = TypeVar("F", bound=Callable[..., Any])

CORRUPT_FIX = (
    "to skip files that are not readable parquet: .option('ignoreCorruptFiles', 'true') or "
    "spark.sql.files.ignoreCorruptFiles=true"
)
MISSING_FIX = (
    "deleted after the read was planned: load the DataFrame again, or skip such files with "
    ".option('ignoreMissingFiles', 'true')"
)


def with_spark_fix(exc: S3IOError) -> S3IOError:
    """``exc``, saying which Spark option skips what it is about (a corrupt or vanished file)."""
    if isinstance(exc, CorruptFile) and exc.key is not None:
        return exc.with_fix(CORRUPT_FIX)
    if isinstance(exc, NotFound) and not isinstance(exc, PathNotFound) and exc.code in ("NoSuchKey", "NotFound"):
        return exc.with_fix(MISSING_FIX)
    return exc


def spark_facing(fn: F) -> F:
    """An entry point Spark calls (``__init__``, ``schema``, ``partitions``, ...): its S3IOErrors concise and fixed;
    the first call in a PySpark worker freezes the worker's heap (``worker_heap``)."""
    return readable_errors(fn, fix=with_spark_fix, first=freeze_once)


def spark_facing_iteration(items: Iterator[Any]) -> Iterator[Any]:
    """A task's batches, whose S3IOError ends the task concisely, with its fix (the worker's heap frozen first)."""
    freeze_once()
    return readable_iteration(items, fix=with_spark_fix)
