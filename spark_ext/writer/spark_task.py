"""What a Spark task of a write runs: its Arrow batches through s3io's TaskWriter, the uploads left for the commit.

Spark calls ``write`` in a Python worker with the task's batches; the task's number is its partition id (so file
names match Spark's ``part-<partition>-...``); every attempt of a task writes files of the same names as uploads
of its own, and the commit completes only the attempt Spark committed (the others are aborted).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import WriterCommitMessage

from s3io import blocking
from s3io.write import TaskOutput, TaskWriter, WriteSpec
from spark_ext.writer.options import WriteTarget


@dataclass(frozen=True)
class S3ParquetCommitMessage(WriterCommitMessage):
    """One task's files, for the commit (picklable); a stream's also names its query and micro-batch."""

    output: TaskOutput
    query_id: str | None = None
    batch: int | None = None


def task_number() -> int:
    """This task's partition id (0 outside a Spark task)."""
    from pyspark import TaskContext

    context = TaskContext.get()
    return context.partitionId() if context is not None else 0


def run_task(target: WriteTarget, spec: WriteSpec, batches: Iterator[pa.RecordBatch]) -> TaskOutput:
    """Write ``batches`` as one task of ``spec``. This thread pulls Spark's batches (each ``next`` may wait on the
    JVM); the encoding and the uploads run on s3io's background loop meanwhile."""
    client = target.store.client()
    writer = TaskWriter(client, spec, task_number())
    try:
        for batch in batches:
            blocking.run(writer.write(batch))
        return blocking.run(writer.close())
    except BaseException:
        blocking.run(writer.abort())
        raise
    finally:
        blocking.run(client.close())
