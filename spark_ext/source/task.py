"""Reading one partition on an executor: one event loop, all pieces concurrently, batches in piece order.

The event loop runs in a helper thread for the life of the task, and hands batches to Spark's (synchronous)
iterator through a queue of at most ``QUEUED_BATCHES``. So the loop's deadline timers and open connections keep
running while Spark consumes a batch (a loop that only ran inside ``next()`` would see a slow consumer as a
stalled socket), and a slow consumer pauses the producer instead of growing memory. Errors cross the queue
and are raised in Spark's thread with the file they name; a consumer that stops early cancels the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pyarrow as pa

from s3io.dataset import ParquetReader
from s3io.engine import RangeEngine
from spark_ext.source.conversions import spark_conversions
from spark_ext.source.metrics import TaskMetrics, log_task_metrics
from spark_ext.source.partition import S3ParquetPartition
from spark_ext.source.planner import make_client
from spark_ext.source.session_check import check_session, task_local_property
from spark_ext.source.types import conform_to_spark

QUEUED_BATCHES = 4
STOP_JOIN_SECONDS = 30.0

logger = logging.getLogger("spark_ext.source")

_BATCH, _DONE, _ERROR = "batch", "done", "error"


def read_partition(partition: Any) -> Iterator[pa.RecordBatch]:
    """The batches of one partition, each with exactly the read's target schema; nothing for an empty one."""
    if not isinstance(partition, S3ParquetPartition) or not partition.pieces:
        return iter(())
    check_session(partition.spec.session_settings, task_local_property)
    return _ThreadedStream(partition).batches()


async def partition_batches(partition: S3ParquetPartition, metrics: TaskMetrics) -> AsyncIterator[pa.RecordBatch]:
    """Read the partition's pieces through one client, engine and ParquetReader; yield Spark-shaped batches."""
    spec = partition.spec
    options = spec.options
    client = make_client(options)
    try:
        engine = RangeEngine(client, options.engine)
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
            conversions=spark_conversions(case_sensitive=options.case_sensitive),
        )
        try:
            async for batch in batches:
                out = conform_to_spark(batch.rename_columns(list(spec.output_names)), spec.target_schema)
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


class _ThreadedStream:
    """Runs ``partition_batches`` on its own event loop in a thread; ``batches()`` is Spark's iterator."""

    def __init__(self, partition: S3ParquetPartition) -> None:
        self.partition = partition
        self.metrics = TaskMetrics.for_partition(partition)
        self._items: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._slots: asyncio.Semaphore | None = None
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"s3parquet-partition-{partition.index}", daemon=True)

    def batches(self) -> Iterator[pa.RecordBatch]:
        self._thread.start()
        self._started.wait()
        finished = False
        try:
            while True:
                kind, value = self._items.get()
                if kind == _BATCH:
                    self._release_slot()
                    yield value
                elif kind == _DONE:
                    finished = True
                    return
                else:
                    finished = True
                    raise value
        finally:
            if not finished:
                self._cancel()
            self._thread.join(STOP_JOIN_SECONDS)

    def _run(self) -> None:
        try:
            asyncio.run(self._produce())
        except BaseException as exc:  # never lose an error: the consumer is waiting on the queue
            self._items.put((_ERROR, exc))
        finally:
            self._started.set()

    async def _produce(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        self._slots = asyncio.Semaphore(QUEUED_BATCHES)
        self._started.set()
        started = time.monotonic()
        failed: BaseException | None = None
        try:
            async with contextlib.aclosing(partition_batches(self.partition, self.metrics)) as stream:
                async for batch in stream:
                    await self._slots.acquire()
                    self._items.put((_BATCH, batch))
            self._items.put((_DONE, None))
        except asyncio.CancelledError as exc:
            failed = exc
            self._items.put((_DONE, None))
        except BaseException as exc:
            failed = exc
            _add_note(exc, self.partition)
            self._items.put((_ERROR, exc))
        finally:
            self.metrics.elapsed = time.monotonic() - started
            log_task_metrics(self.metrics, failed)

    def _release_slot(self) -> None:
        loop, slots = self._loop, self._slots
        if loop is not None and slots is not None:
            try:
                loop.call_soon_threadsafe(slots.release)
            except RuntimeError:  # the loop has already finished
                pass

    def _cancel(self) -> None:
        loop, task = self._loop, self._task
        if loop is not None and task is not None:
            try:
                loop.call_soon_threadsafe(task.cancel)
            except RuntimeError:
                pass


def _add_note(exc: BaseException, partition: S3ParquetPartition) -> None:
    try:
        exc.add_note(f"s3parquet: while reading {partition!r}")
    except AttributeError:  # pragma: no cover - add_note exists from Python 3.11
        pass


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
