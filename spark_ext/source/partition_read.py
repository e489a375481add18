"""Reading one partition on an executor: one event loop, all pieces concurrently, batches in piece order.

The partition is read on an event loop of its own, in a helper thread, through ``s3io.blocking.BackgroundLoop`` (the
project's one bridge between blocking and asyncio code), which hands batches to Spark's (synchronous) iterator
through a hand-off of at most ``QUEUED_BATCHES``. So the loop's deadline timers and open connections keep running
while Spark consumes a batch (a loop that only ran inside ``next()`` would see a slow consumer as a stalled
socket), and a slow consumer pauses the producer instead of growing memory. Errors cross the hand-off and are
raised in Spark's thread with the file they name; a consumer that stops early cancels the read. The loop and its
thread end with the task, so a reused Python worker keeps nothing of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pyarrow as pa

from s3io.blocking import BackgroundLoop
from s3io.dataset import ParquetReader
from s3io.engine import RangeEngine
from s3io.parquet.values import family
from spark_ext.planning.spark_arrow_types import conform_to_spark
from spark_ext.planning.sql_filter import columns_of
from spark_ext.source.legacy_files import legacy_calendar
from spark_ext.source.partition import S3ParquetPartition
from spark_ext.source.pushed_rows import batch_filter
from spark_ext.source.read_client import read_client
from spark_ext.source.session_check import check_session, task_local_property
from spark_ext.source.spark_conversions import spark_conversions
from spark_ext.source.task_metrics import TaskMetrics, log_task_metrics

QUEUED_BATCHES = 4
STOP_JOIN_SECONDS = 30.0
_UNSET = object()  # the row filter before the first batch's schema is known

logger = logging.getLogger("spark_ext.source")


def read_partition(partition: Any) -> Iterator[pa.RecordBatch]:
    """The batches of one partition, each with exactly the read's target schema; nothing for an empty one."""
    if not isinstance(partition, S3ParquetPartition) or not partition.pieces:
        return iter(())
    check_session(partition.spec.session_settings, task_local_property)
    return _batches(partition)


def _batches(partition: S3ParquetPartition) -> Iterator[pa.RecordBatch]:
    """Spark's iterator over the partition, read on a BackgroundLoop of its own that stops when the iterator ends
    (read to the end, failed, or closed early)."""
    loop = BackgroundLoop(f"s3parquet-partition-{partition.index}")
    metrics = TaskMetrics.for_partition(partition)
    try:
        yield from loop.iterate(lambda: _measured(partition, metrics), max_buffered=QUEUED_BATCHES)
    finally:
        loop.stop(STOP_JOIN_SECONDS)


async def _measured(partition: S3ParquetPartition, metrics: TaskMetrics) -> AsyncIterator[pa.RecordBatch]:
    """``partition_batches``, then the task's metrics line; an error is noted with the partition it ended."""
    started = time.monotonic()
    failed: BaseException | None = None
    try:
        async with contextlib.aclosing(partition_batches(partition, metrics)) as stream:
            async for batch in stream:
                yield batch
    except (asyncio.CancelledError, GeneratorExit) as exc:  # the consumer stopped early (a LIMIT)
        failed = exc
        raise
    except BaseException as exc:
        failed = exc
        exc.add_note(f"s3parquet: while reading {partition!r}")
        raise
    finally:
        metrics.elapsed = time.monotonic() - started
        log_task_metrics(metrics, failed)


async def partition_batches(partition: S3ParquetPartition, metrics: TaskMetrics) -> AsyncIterator[pa.RecordBatch]:
    """Read the partition's pieces through one client, engine and ParquetReader; yield Spark-shaped batches."""
    spec = partition.spec
    options = spec.options
    client = read_client(options, after_contact=True)  # planned by a driver that reached the store
    try:
        engine = RangeEngine(client, options.store.engine)
        reader = ParquetReader(engine)
        batches = reader.iter_batches(
            list(partition.pieces),
            schema=spec.read_schema,
            partition_schema=spec.partition_schema,
            predicates=list(spec.predicates) or None,
            exact_filter=False,
            ignore_missing=options.ignore_missing_files,
            ignore_corrupt=options.ignore_corrupt_files,
            batch_size=spec.batch_size,
            conversions=spark_conversions(case_sensitive=options.case_sensitive, calendar=legacy_calendar(options)),
            dictionary_columns=filtered_strings(spec),
        )
        row_filter: Any = _UNSET
        try:
            async for batch in batches:
                named = batch.rename_columns(list(spec.output_names))
                if row_filter is _UNSET:
                    row_filter = batch_filter(spec.row_filter, spec.pushed_rows, named.schema)
                if row_filter is not None:
                    read_rows = named.num_rows
                    named = named.filter(row_filter)
                    metrics.rows_dropped += read_rows - named.num_rows
                out = conform_to_spark(named, spec.target_schema)  # decodes dictionary columns: the rows kept
                metrics.rows += out.num_rows
                metrics.batches += 1
                yield out
        finally:
            await _aclose(batches)
            metrics.client = client.stats()
            metrics.engine = engine.stats()
            metrics.reader = _stats(reader)
    finally:
        await client.close()


def filtered_strings(spec: Any) -> list[str]:
    """The string and binary columns to read as dictionaries, decoded after the row filter (``conform_to_spark``
    casts them to their values): only the rows it keeps are copied (4,000,000 rows of words, ``k < 10``: 95 ms of
    CPU to 34). Those of a read that filters rows, which its filters do not name (a filter on the column would
    decode it whole anyway)."""
    if spec.row_filter is None and not spec.pushed_rows:
        return []
    named = {
        column.lower()
        for node in (spec.row_filter, *spec.pushed_rows)
        if node is not None
        for column in columns_of(node)
    }
    return [
        field.name
        for field, output in zip(spec.read_schema, spec.output_names, strict=False)
        if family(field.type) in ("string", "binary")
        and output.lower() not in named
        and field.name.lower() not in named
    ]


async def _aclose(iterator: Any) -> None:
    close = getattr(iterator, "aclose", None)
    if close is not None:
        await close()


def _stats(reader: Any) -> Any:
    stats = getattr(reader, "stats", None)
    try:
        return stats() if callable(stats) else None
    except Exception:  # stats are for logs only; never fail a read over them
        return None
