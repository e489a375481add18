"""``df.write.format("s3parquet")``: Spark's Python data source writer, on s3io's write protocol.

Spark calls ``writer(schema, overwrite)`` once on the driver side (in a Python worker), pickles the writer into
every task, where ``write`` uploads the task's files without completing them (spark_task.py), and pickles it again into
another worker where ``commit(messages)`` (every task succeeded) or ``abort(messages)`` (one failed) runs. So the
job's identity (its job id) is fixed in ``writer()`` and travels in the pickle; nothing a task does is seen by the
commit except its message. ``commit`` is s3io.write.commit_write (one journal commit, then the files are visible
at once; an overwrite replaces the prefix, or with ``partitionOverwriteMode=dynamic`` the partitions written);
``abort`` undoes every upload of the job; a job already past its commit point is finished instead, and both
``commit`` and ``abort`` then raise WriteIsCommitted (the rows ARE there, with the job id): a failed ``save()`` never
reads as "nothing written" when its rows are visible.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from s3io import blocking
from s3io.errors import InvalidConfig
from s3io.table import journal, layout
from s3io.table.journal import COMMITTED, DONE, PUBLISHED, WriteEntry
from s3io.table.write_protocol import CommittedNotFinished
from s3io.write import WriteReport, WriteSpec, abort_write, check_append, commit_write
from spark_ext.spark_settings import SessionDefaults
from spark_ext.writer.options import WriteTarget, parse_write_options, with_session_options
from spark_ext.writer.spark_task import S3ParquetCommitMessage, run_task

logger = logging.getLogger("spark_ext.writer")


def write_spec(target: WriteTarget, schema: StructType, job_id: str, time_zone: str | None) -> WriteSpec:
    """The WriteSpec of a Spark write: the rows' Arrow schema as Spark sends it (timestamps in the session's zone),
    and Spark's own schema of the data columns for the footer's row metadata."""
    import pyspark

    partition = {c.lower() for c in target.options.partition_by}
    unknown = [c for c in target.options.partition_by if c.lower() not in {f.name.lower() for f in schema.fields}]
    if unknown:
        raise InvalidConfig(
            f"partitionBy: no column {unknown[0]!r} in the DataFrame (columns: {', '.join(schema.fieldNames())})"
        )
    data = StructType([f for f in schema.fields if f.name.lower() not in partition])
    return WriteSpec(
        bucket=target.bucket,
        prefix=target.prefix,
        job_id=job_id,
        schema=to_arrow_schema(schema, timezone=time_zone or "UTC"),
        options=target.options,
        row_metadata=data.json(),
        spark_version=pyspark.__version__,
    )


class S3ParquetWriter(DataSourceArrowWriter):
    """One batch write job (see the module doc); picklable, and pickled into every task and the commit."""

    def __init__(self, target: WriteTarget, spec: WriteSpec) -> None:
        self.target = target
        self.spec = spec

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return S3ParquetCommitMessage(run_task(self.target, self.spec, iterator))

    def commit(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        report = blocking.run(self._commit(messages))
        logger.info("s3parquet: %s", report.summary())
        for warning in report.warnings:
            logger.warning("s3parquet write %s: %s", self.spec.job_id, warning)

    def abort(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        aborted = blocking.run(self._abort(messages))
        logger.warning(
            "s3parquet write %s to %s failed: %d upload(s) aborted", self.spec.job_id, self.target.url, len(aborted)
        )

    async def _commit(self, messages: Sequence[WriterCommitMessage | None]) -> WriteReport:
        outputs = [_output(m) for m in messages]
        if any(o is None for o in outputs):
            raise InvalidConfig("s3parquet: commit() was given a failed task's message; nothing was committed")
        async with self.target.store.client() as client:
            try:
                return await commit_write(client, self.spec, [o for o in outputs if o is not None])
            except BaseException as exc:
                await self._undo(client, outputs, exc)
                raise

    async def _abort(self, messages: Sequence[WriterCommitMessage | None]) -> list[str]:
        """Spark's abort (a task or the commit failed): undo the write, unless its commit point was passed."""
        async with self.target.store.client() as client:
            return await self._undo(client, [_output(m) for m in messages], None)

    async def _undo(self, client: Any, outputs: Sequence[Any], failure: BaseException | None) -> list[str]:
        """Roll the write back (nothing of it visible), or, past its commit point, finish it and raise
        WriteIsCommitted: the rows are there, and a retry of an append would write them twice."""
        entry = await journal.read_entry(
            client, WriteEntry, self.spec.bucket, layout.write_key(self.spec.prefix, self.spec.job_id)
        )
        aborted = await abort_write(client, self.spec, outputs)  # a committed write is finished, never undone
        if entry is not None and entry.state in (COMMITTED, PUBLISHED, DONE):
            raise WriteIsCommitted(self.spec.job_id, self.target.url, failure)
        return aborted


RETRY_ADVICE = "do not retry an append (it would write the rows twice)"


class WriteIsCommitted(CommittedNotFinished):
    """A Spark write failed after its commit point: its rows ARE committed (visible to every journal-aware reader);
    do not retry an append. Raised instead of a failure that would read as "nothing was written"."""

    def __init__(self, job_id: str, url: str, failure: BaseException | None, *, advice: str = RETRY_ADVICE) -> None:
        first = str(failure).splitlines()[0] if failure is not None and str(failure) else ""
        happened = f" ({type(failure).__name__}: {first})" if failure is not None else ""
        super().__init__(
            f"s3parquet write job {job_id} to {url} IS committed: its rows are visible; the job failed after its "
            f"commit point{happened}; {advice}"
        )
        self.job_id = job_id


def _output(message: WriterCommitMessage | None) -> Any:
    return message.output if isinstance(message, S3ParquetCommitMessage) else None


def batch_writer(
    options: Mapping[str, str], defaults: SessionDefaults, schema: StructType, overwrite: bool
) -> S3ParquetWriter:
    """The writer of one ``df.write...save()`` (called in ``S3ParquetDataSource.writer``)."""
    target = parse_write_options(with_session_options(options, defaults), overwrite=overwrite)
    spec = write_spec(target, schema, layout.new_job_id(), defaults.time_zone)
    blocking.run(check_table_schema(target, spec))  # a conflict is refused here, before any task uploads
    return S3ParquetWriter(target, spec)


async def check_table_schema(target: WriteTarget, spec: WriteSpec) -> None:
    """The table's schema and partition columns against this write's (s3io.write.check_append): SchemaMismatch
    naming both, on the driver, before any task starts."""
    async with target.store.client() as client:
        await check_append(client, spec)
