"""Writing parquet under an S3 prefix: tasks upload right-sized files they leave uncompleted, and one commit makes
them visible at once under the journal every journal-aware reader applies (docs/writing.md).

``write_parquet_async`` (api.py; the blocking ``s3io.write_parquet`` is in s3io.api) writes a table or batches;
``TaskWriter`` (one task: a Spark task, or the one of ``write_parquet``) and ``commit_write`` / ``abort_write``
(the driver's side) are what the Spark writer and stream sink (spark_ext.write) are made of. The protocol's steps
and recovery live in the table layer (s3io.table.write_protocol), so a compaction finishes or rolls back what a
dead writer left.
"""

from s3io.write.api import write_parquet_async
from s3io.write.commit import WriteReport, abort_write, commit_write
from s3io.write.crash import WriteCrashPoint
from s3io.write.options import WriteOptions
from s3io.write.task import TaskOutput, TaskWriter, WriteSpec

__all__ = [
    "TaskOutput",
    "TaskWriter",
    "WriteCrashPoint",
    "WriteOptions",
    "WriteReport",
    "WriteSpec",
    "abort_write",
    "commit_write",
    "write_parquet_async",
]
