"""``s3io.write_parquet_async``: a table or a stream of record batches written under an S3 prefix, as Spark would
write it, committed atomically under the journal (s3io.write.commit).

One task writes every row (partitioned, rolled at the target size, parts uploaded in parallel); the commit makes
the files visible at once. It runs on the caller's event loop (encoding in a worker thread); the blocking
``s3io.write_parquet`` (s3io.api) runs it on s3io's background loop, so it also works inside Jupyter.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Mapping
from typing import Any

import pyarrow as pa

from s3io.engine import EngineConfig
from s3io.errors import InvalidConfig
from s3io.policy import Policy
from s3io.store import KEYWORD_FIELDS, StoreConfig
from s3io.table import layout
from s3io.transport.credentials import Credentials
from s3io.write.commit import WriteReport, abort_write, commit_write
from s3io.write.options import WriteOptions
from s3io.write.progress import ProgressCallback, WriteProgress, resolve_progress
from s3io.write.schema_check import check_append
from s3io.write.task_writer import TaskWriter, WriteSpec

log = logging.getLogger("s3io.write")

Data = pa.Table | pa.RecordBatch | pa.RecordBatchReader | Iterable[pa.RecordBatch] | AsyncIterable[pa.RecordBatch]


async def write_parquet_async(
    data: Data | Any,
    url: str,
    *,
    partition_by: str | Iterable[str] = (),
    target_file_size: int | str | None = None,
    mode: str = "append",
    schema: pa.Schema | None = None,
    options: WriteOptions | None = None,
    store: StoreConfig | None = None,
    endpoint_url: str | None = None,
    region: str | None = None,
    credentials: Credentials | str | None = None,
    policy: Policy | Mapping[str, object] | None = None,
    engine: EngineConfig | Mapping[str, object] | None = None,
    progress: bool | ProgressCallback | None = None,
    **option_values: Any,
) -> WriteReport:
    """Write ``data`` as parquet files under the directory ``url`` and commit them; returns the WriteReport.

    - ``data``: a pyarrow Table or RecordBatch, a RecordBatchReader, an (async) iterable of RecordBatches (all of
      one schema: ``schema``, else the first batch's), or a pandas DataFrame.
    - ``partition_by``: columns whose values name Hive directories (``day=2024-06-01/``), left out of the files.
    - ``target_file_size``: bytes (or "128MB"); files are rolled there, never more than one row group over.
    - ``mode``: "append" (add files), or "overwrite" (replace every data file under ``url``; with
      ``partition_overwrite_mode="dynamic"``, only those of the partition directories written).
    - an append (and a dynamic overwrite) is checked against the table's schema and partition columns before
      anything is uploaded (SchemaMismatch naming both); ``merge_schema=True`` allows new nullable columns.
    - ``progress``: a bar of rows, bytes, rate and ETA on stderr (None, the default: only when stderr is a
      terminal; True: always; False: never), or a callable receiving each ``WriteProgress``.
    - any other WriteOptions field as a keyword (``compression``, ``grace_period``, ...), or ``options``.
    - the store: ``store`` (a StoreConfig) and the keywords over it, as for ``read_parquet``, and the encryption of
      every object written: ``sse`` ("AES256", "aws:kms", "aws:kms:dsse"), ``sse_kms_key_id``, ``sse_bucket_key``,
      ``sse_customer_key`` (SSE-C); ``requester_pays``, ``proxy``, ``ca_bundle`` (docs/security.md).
    Journal-aware readers (s3io, the s3parquet source) see all of the write or none of it; see docs/writing.md for
    what a plain reader sees when.
    """
    store_settings = {name: option_values.pop(name) for name in KEYWORD_FIELDS if name in option_values}
    changes: dict[str, Any] = dict(option_values)
    changes["mode"] = mode
    if partition_by:
        changes["partition_by"] = (partition_by,) if isinstance(partition_by, str) else tuple(partition_by)
    if target_file_size is not None:
        changes["target_file_size"] = target_file_size
    parsed = WriteOptions.from_options(changes, options)
    bucket, prefix = layout.parse_prefix(url)
    batches, first_schema = await _batches(data, schema)
    config = StoreConfig.from_kwargs(
        store,
        endpoint_url=endpoint_url,
        region=region,
        credentials=credentials,
        policy=policy,
        engine=engine,
        **store_settings,
    )
    spec = WriteSpec(bucket, prefix, layout.new_job_id(), first_schema, parsed)
    report = resolve_progress(progress)
    began = time.monotonic()

    def tell(task: TaskWriter, phase: str) -> None:
        if report is not None:
            elapsed = time.monotonic() - began
            encoded, files = task.rows_encoded, task.files_closed
            report(WriteProgress(encoded, rows_total, task.bytes_encoded, files, elapsed, phase))

    rows_total = sum(b.num_rows for b in batches) if isinstance(batches, list) else None
    async with config.client() as client:
        await check_append(client, spec)
        async with TaskWriter(client, spec, 0, progress=lambda t: tell(t, "writing")) as task:
            output = await task.write_all(batches)
        tell(task, "committing")
        try:
            result = await commit_write(client, spec, [output])
        except BaseException as failure:
            await _abort_keeping(failure, client, spec, output)
            raise
        tell(task, "done")
        return result


async def _abort_keeping(failure: BaseException, client: Any, spec: WriteSpec, output: Any) -> None:
    """Abort the write's uploads; an abort that fails too (a store without AbortMultipartUpload, the network) is
    logged and noted on the error that made the write fail, which stays the one raised."""
    try:
        await abort_write(client, spec, [output])
    except Exception as abort_error:
        log.warning("s3io.write: aborting the uploads of %s failed: %s", spec.url, abort_error)
        failure.add_note(
            f"aborting the write's uploads failed too ({abort_error}); a later write, compaction or --recover on the "
            "prefix aborts them once they are older than abandonUploadsAfter"
        )


async def _batches(
    data: Any, schema: pa.Schema | None
) -> tuple[Iterable[pa.RecordBatch] | AsyncIterable[pa.RecordBatch], pa.Schema]:
    """``data`` as record batches, and their schema."""
    if _is_pandas(data):
        data = pa.Table.from_pandas(data, preserve_index=None)
    if isinstance(data, pa.Table):
        return data.to_batches(), schema or data.schema
    if isinstance(data, pa.RecordBatch):
        return [data], schema or data.schema
    if isinstance(data, pa.RecordBatchReader):
        return data, schema or data.schema
    if isinstance(data, AsyncIterable):
        iterator = data.__aiter__()
        try:
            first = await iterator.__anext__()
        except StopAsyncIteration:
            if schema is None:
                raise InvalidConfig("data: no batch at all, and no schema= to write an empty table with") from None
            return [], schema
        return _chain_async(first, iterator), schema or first.schema
    if isinstance(data, Iterable):
        items = list(data)
        if not items and schema is None:
            raise InvalidConfig("data: no batch at all, and no schema= to write an empty table with")
        if not all(isinstance(b, pa.RecordBatch) for b in items):
            raise InvalidConfig("data: expected pyarrow RecordBatches in the iterable")
        return items, schema or items[0].schema
    raise InvalidConfig(
        f"data: expected a pyarrow Table, RecordBatch, RecordBatchReader, an iterable of RecordBatches or a pandas "
        f"DataFrame, got {type(data).__name__}"
    )


async def _chain_async(first: pa.RecordBatch, rest: AsyncIterator[pa.RecordBatch]) -> AsyncIterator[pa.RecordBatch]:
    yield first
    async for batch in rest:
        yield batch


def _is_pandas(data: Any) -> bool:
    return type(data).__module__.startswith("pandas") and type(data).__name__ == "DataFrame"
