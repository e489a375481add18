"""Writing parquet under an S3 prefix: tasks upload right-sized files they leave uncompleted, and one commit makes
them visible at once under the journal every journal-aware reader applies (docs/writing.md).

``write_parquet_async`` (api.py; the blocking ``s3io.write_parquet`` is in s3io.api) writes a table or batches;
``TaskWriter`` (one task: a Spark task, or the one of ``write_parquet``) and ``commit_write`` / ``abort_write``
(the driver's side) are what the Spark writer and stream sink (spark_ext.write) are made of. The protocol's steps
and recovery live in the table layer (s3io.table.write_protocol), so a compaction finishes or rolls back what a
dead writer left.
"""

from typing import Any

_SOURCES = {  # public name -> its module, imported on first use: a read that parses a write's options
    "write_parquet_async": "s3io.write.api",  # (spark_ext's source) must not import the commit and compaction
    "WriteReport": "s3io.write.commit",
    "abort_write": "s3io.write.commit",
    "commit_write": "s3io.write.commit",
    "CrashPoint": "s3io.table.crash",
    "WriteOptions": "s3io.write.options",
    "check_append": "s3io.write.schema_check",
    "TaskOutput": "s3io.write.task_writer",
    "TaskWriter": "s3io.write.task_writer",
    "WriteSpec": "s3io.write.task_writer",
}

__all__ = sorted(_SOURCES)


def __getattr__(name: str) -> Any:
    source = _SOURCES.get(name)
    if source is None:
        raise AttributeError(f"module 's3io.write' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(source), name)
