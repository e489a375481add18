"""``df.writeStream.format("s3parquet")``: the streaming sink, each micro-batch committed exactly once.

Every micro-batch is a write of its own (s3io.write): its tasks upload their files without completing them and
``commit(messages, batchId)`` commits them under the journal. The batch's job id is made from the query's id (Spark
keeps it in the checkpoint: the same after a restart, another for a new checkpoint) and the batch id, which tasks
read from Spark's local properties. So when Spark replays a batch after a driver crash (its sink commit may or may
not have happened), the commit finds the first attempt's entry or the sink's record (s3io.table.sinks) and keeps
what was committed, aborting the replay's uploads: the batch's rows are written once. The sink appends: Spark's
``complete`` output mode (an overwrite of the whole prefix per batch) is refused.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from s3io import blocking
from s3io.errors import InvalidConfig
from s3io.table import journal, layout
from s3io.table.journal import COMMITTED, DONE, PUBLISHED, WriteEntry
from s3io.table.write_names import stream_job_id
from s3io.write import WriteReport, WriteSpec, abort_write, commit_write
from spark_ext.spark_settings import SessionDefaults
from spark_ext.writer.batch import WriteIsCommitted, check_table_schema, write_spec
from spark_ext.writer.options import WriteTarget, parse_write_options, with_session_options
from spark_ext.writer.spark_task import S3ParquetCommitMessage, run_task

logger = logging.getLogger("spark_ext.writer")
QUERY_ID_PROPERTY = "sql.streaming.queryId"  # Spark's local property: the query's id, kept in its checkpoint
BATCH_ID_PROPERTY = "streaming.sql.batchId"  # the micro-batch being run
REPLAY_ADVICE = "a restarted query (same checkpoint) recognises the batch as written and does not write it again"


class S3ParquetStreamWriter(DataSourceStreamArrowWriter):
    """The sink of one streaming query (see the module doc); ``spec.job_id`` is replaced per micro-batch."""

    def __init__(self, target: WriteTarget, spec: WriteSpec) -> None:
        self.target = target
        self.spec = spec

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        query, batch = _micro_batch()
        spec = replace(self.spec, job_id=stream_job_id(query, batch))
        return S3ParquetCommitMessage(run_task(self.target, spec, iterator), query, batch)

    def commit(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:
        report = blocking.run(self._commit(messages, batchId))
        if report is not None:
            logger.info("s3parquet sink, batch %d: %s", batchId, report.summary())
            for warning in report.warnings:
                logger.warning("s3parquet sink, batch %d: %s", batchId, warning)

    def abort(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:
        blocking.run(self._abort(messages, batchId))

    async def _commit(self, messages: Sequence[WriterCommitMessage | None], batch: int) -> WriteReport | None:
        found = [m for m in messages if isinstance(m, S3ParquetCommitMessage)]
        if len(found) != len(messages):
            raise InvalidConfig("s3parquet sink: commit() was given a failed task's message; nothing was committed")
        if not found:
            return None  # a micro-batch without tasks has nothing to commit
        query = _one_query(found, batch)
        spec = replace(self.spec, job_id=stream_job_id(query, batch))
        async with self.target.store.client() as client:
            return await commit_write(client, spec, [m.output for m in found], query_id=query, batch=batch)

    async def _abort(self, messages: Sequence[WriterCommitMessage | None], batch: int) -> None:
        found = [m for m in messages if isinstance(m, S3ParquetCommitMessage)]
        if not found:
            return  # no task reported: their uploads are aborted by this batch's replay (same job id)
        spec = replace(self.spec, job_id=stream_job_id(_one_query(found, batch), batch))
        async with self.target.store.client() as client:
            entry = await journal.read_entry(
                client, WriteEntry, spec.bucket, layout.write_key(spec.prefix, spec.job_id)
            )
            await abort_write(client, spec, [m.output for m in found])  # a committed batch is finished, not undone
        if entry is not None and entry.state in (COMMITTED, PUBLISHED, DONE):
            raise WriteIsCommitted(spec.job_id, self.target.url, None, advice=REPLAY_ADVICE)


def _micro_batch() -> tuple[str, int]:
    """(the query's id, the micro-batch's id) from the task's local properties."""
    from pyspark import TaskContext

    context = TaskContext.get()
    query = context.getLocalProperty(QUERY_ID_PROPERTY) if context is not None else None
    batch = context.getLocalProperty(BATCH_ID_PROPERTY) if context is not None else None
    if not query or batch is None:
        raise InvalidConfig(
            "s3parquet sink: the task does not know its streaming query and micro-batch (Spark's local properties "
            f"{QUERY_ID_PROPERTY} and {BATCH_ID_PROPERTY}); the sink runs only inside a Structured Streaming query"
        )
    return query, int(batch)


def _one_query(messages: Sequence[S3ParquetCommitMessage], batch: int) -> str:
    queries = {m.query_id for m in messages}
    batches = {m.batch for m in messages}
    if len(queries) != 1 or batches != {batch}:
        raise InvalidConfig(
            f"s3parquet sink: the tasks of micro-batch {batch} report queries {sorted(map(str, queries))} and batches "
            f"{sorted(map(str, batches))}; nothing was committed"
        )
    query = next(iter(queries))
    assert query is not None
    return query


def stream_sink(
    options: Mapping[str, str], defaults: SessionDefaults, schema: StructType, overwrite: bool
) -> S3ParquetStreamWriter:
    """The sink of one ``df.writeStream...start()`` (called in ``S3ParquetDataSource.streamWriter``)."""
    if overwrite:
        raise InvalidConfig(
            "s3parquet sink: the 'complete' output mode (each micro-batch replacing the whole output) is not "
            "supported; use outputMode('append'), or write each batch with foreachBatch and a batch overwrite"
        )
    target = parse_write_options(with_session_options(options, defaults), overwrite=False)
    spec = write_spec(target, schema, "stream", defaults.time_zone)
    blocking.run(check_table_schema(target, spec))  # once per query start: a conflict refused before any batch
    return S3ParquetStreamWriter(target, spec)
