"""One task of a write: record batches in, right-sized parquet files out, each an upload left uncompleted.

A task (a Spark task, or the one task of ``s3io.write_parquet``) splits each batch by partition directory
(partitioning.py) and buffers each directory's rows. When a directory's buffer reaches its row-group budget the rows
are encoded as one row group of that directory's open file, whose bytes go straight to the file's multipart upload
(s3io.s3.multipart, staged: parts in parallel under slots the task's files share, never completed here). A file is
closed (footer written, upload left pending) as soon as it reaches ``target_file_size``; the next rows of that
directory start a new file. So a file never exceeds the target by more than one row group, and the last row group
of a file is sized to land on the target: the budget is the smaller of ``row_group_bytes`` and the Arrow bytes
that, at the compression ratio the file has shown so far, fill what is left of the target.

At most ``max_open_files`` directories hold a buffer or an open file; rows of one more close the least recently
written directory's file (counted in ``closed_early``: it may be small; rows clustered by directory never need
it). Encoding runs in a worker thread (``cpu``), so the event loop keeps the uploads going meanwhile. The task's
result (``TaskOutput``) names every file (key, upload id, parts' ETags, size, rows): the commit completes them.
On any failure every upload the task started is aborted.
"""

from __future__ import annotations

import asyncio
import collections
import math
import time
from collections.abc import AsyncIterable, Callable, Iterable
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from s3io.errors import InvalidConfig, SchemaMismatch
from s3io.parquet.sink import ByteSink
from s3io.resilience.upload_pace import PartsInFlight, UploadPace
from s3io.s3.client import S3Client
from s3io.s3.multipart import MultipartWriter
from s3io.table.crash import WRITE_ENV_VAR, CrashPoint, maybe_crash, resolve
from s3io.table.journal import NewFile
from s3io.table.write_names import data_file_name
from s3io.write.options import WriteOptions
from s3io.write.partitioning import Partitioner
from s3io.write.spark_schema import CALENDAR_VERSION, spark_footer

CPU_THREAD_NAME = "s3io-write-cpu"


@dataclass(frozen=True, slots=True)
class WriteSpec:
    """What every task and the commit of one write share. Picklable (it travels to Spark tasks).

    ``schema``: the rows' Arrow schema, partition columns included; ``row_metadata``: Spark's schema of the data
    columns as JSON, when Spark writes (else mapped from Arrow); ``spark_version``: the version key written."""

    bucket: str
    prefix: str
    job_id: str
    schema: pa.Schema
    options: WriteOptions = field(default_factory=WriteOptions)
    row_metadata: str | None = None
    spark_version: str = CALENDAR_VERSION

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"

    def partitioner(self) -> Partitioner:
        return Partitioner(self.schema, self.options.partition_by)

    def file_schema(self, partitioner: Partitioner) -> pa.Schema:
        """The schema of the files: the data columns, with the schema's metadata and Spark's footer keys."""
        data = partitioner.data_schema
        keys = spark_footer(data, row_metadata=self.row_metadata, version=self.spark_version)
        return data.with_metadata({**(data.metadata or {}), **keys})

    def file_key(self, directory: str, task: int, index: int) -> str:
        return f"{self.prefix}{directory}{data_file_name(self.job_id, task, index, self.options.codec_suffix)}"


@dataclass(frozen=True, slots=True)
class TaskOutput:
    """What a task hands to the commit: its files (uploads to complete) and what it took."""

    job_id: str
    task: int
    files: tuple[NewFile, ...]
    rows: int
    closed_early: int = 0  # files closed before their target because too many directories were open
    requests: int = 0
    retries: int = 0
    seconds: float = 0.0
    slow_parts: int = 0  # part attempts cut for slowness (upload_pace): each lowered, or had lowered, the parts below
    parts_in_flight: int = 0  # the fewest parts in flight the task went down to (0: it uploaded none)


class _OpenFile:
    """One file being written: a ParquetWriter whose bytes go to a pending upload."""

    def __init__(self, key: str, schema: pa.Schema, options: WriteOptions, upload: MultipartWriter) -> None:
        self.key = key
        self.upload = upload
        self.sink = ByteSink()
        self.writer = pq.ParquetWriter(
            self.sink,
            schema,
            compression=options.compression,
            coerce_timestamps="us",  # Spark reads no TIMESTAMP(NANOS); finer values fail instead of being cut
            allow_truncated_timestamps=False,
        )
        self.rows = 0
        self.arrow_bytes = 0

    @property
    def encoded(self) -> int:
        return self.sink.position

    def encode(self, table: pa.Table) -> bytes:
        """Write ``table`` as one row group; the bytes that came out."""
        try:
            self.writer.write_table(table, row_group_size=max(1, table.num_rows))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            finer = "timestamp" in str(exc)
            hint = " (timestamps are written in microseconds: round finer values first)" if finer else ""
            raise InvalidConfig(f"cannot write s3://{self.upload.bucket}/{self.key}: {exc}{hint}") from exc
        self.rows += table.num_rows
        self.arrow_bytes += table.nbytes
        return self.sink.take()

    def close(self) -> bytes:
        self.writer.close()
        return self.sink.take()


@dataclass
class _Directory:
    """One partition directory's rows waiting to be encoded, and its open file."""

    name: str
    buffered: list[pa.RecordBatch] = field(default_factory=list)
    buffered_bytes: int = 0
    file: _OpenFile | None = None


class TaskWriter:
    """``async with TaskWriter(client, spec, task) as w: await w.write(batch)``; ``await w.close()`` -> TaskOutput.

    Leaving the block without ``close()`` (or on an error) aborts every upload the task started."""

    def __init__(
        self,
        client: S3Client,
        spec: WriteSpec,
        task: int,
        *,
        cpu: Executor | None = None,
        crash_at: CrashPoint | str | None = None,
        progress: Callable[[TaskWriter], None] | None = None,
    ) -> None:
        """``crash_at``: a test's crash point (``CrashPoint.TASK_AFTER_PART``; else from the environment);
        ``progress``: called after each row group is encoded (``rows_encoded``, ``bytes_encoded``, ``files_closed``)."""
        self.client = client
        self.spec = spec
        self.task = task
        self.options = spec.options
        self.partitioner = spec.partitioner()
        self.file_schema = spec.file_schema(self.partitioner)
        self._cpu = cpu
        self._crash = resolve(crash_at, WRITE_ENV_VAR)
        self._own_cpu: ThreadPoolExecutor | None = None
        self._slots: PartsInFlight | None = None
        self._directories: collections.OrderedDict[str, _Directory] = collections.OrderedDict()  # least recent first
        self._files: list[NewFile] = []
        self._started: list[MultipartWriter] = []
        self._staging: list[asyncio.Task[None]] = []  # closed files whose last parts are still going up
        self._next_index = 0
        self._ratio = 1.0  # encoded / Arrow bytes, learnt from the files written so far
        self.rows = 0
        self.rows_encoded = 0  # rows encoded into row groups so far
        self.bytes_encoded = 0  # parquet bytes handed to uploads so far
        self._progress = progress
        self.files_closed = 0
        self.closed_early = 0
        self._before = client.stats()
        self._began = time.monotonic()
        self._closed = False

    async def __aenter__(self) -> TaskWriter:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if not self._closed:
            await self.abort()

    # ------------------------------------------------------------------ the task's calls

    async def write(self, batch: pa.RecordBatch) -> None:
        """Take one batch of rows (of ``spec.schema``; a batch of another type that casts to it is cast)."""
        batch = self._conform(batch)
        if batch.num_rows == 0:
            return
        self.rows += batch.num_rows
        for name, rows in await self._on_cpu(self.partitioner.split, batch):
            directory = await self._directory(name)
            directory.buffered.append(rows)
            directory.buffered_bytes += rows.nbytes
            while directory.buffered_bytes >= self._budget(directory):
                await self._flush(directory, whole=False)

    async def write_all(self, batches: Iterable[pa.RecordBatch] | AsyncIterable[pa.RecordBatch]) -> TaskOutput:
        """Write every batch, then close; aborts on any failure."""
        try:
            if isinstance(batches, AsyncIterable):
                async for batch in batches:
                    await self.write(batch)
            else:
                for batch in batches:
                    await self.write(batch)
            return await self.close()
        except BaseException:
            await self.abort()
            raise

    async def close(self, *, empty_file: bool = False) -> TaskOutput:
        """Encode what is buffered, close every file; the files for the commit. ``empty_file``: a task that wrote
        no file writes one without rows (the schema alone)."""
        if empty_file and not self._files and not self._directories:
            self._open(await self._directory(""))
        for directory in list(self._directories.values()):
            await self._finish(directory)
        self._directories.clear()
        await asyncio.gather(*self._staging)
        self._closed = True
        self._shutdown_cpu()
        spent = self.client.stats() - self._before
        return TaskOutput(
            job_id=self.spec.job_id,
            task=self.task,
            files=tuple(self._files),
            rows=self.rows,
            closed_early=self.closed_early,
            requests=spent.request_count,
            retries=spent.retry_count,
            seconds=time.monotonic() - self._began,
            slow_parts=self._slots.slow_cuts if self._slots is not None else 0,
            parts_in_flight=self._slots.lowest if self._slots is not None else 0,
        )

    async def abort(self) -> None:
        """Abort every upload this task started (finished files included: no commit will name them)."""
        self._closed = True
        self._directories.clear()
        for staging in self._staging:
            staging.cancel()
        await asyncio.gather(*self._staging, return_exceptions=True)
        await asyncio.gather(*(upload.abort() for upload in self._started), return_exceptions=True)
        finished = {f.upload_id: f for f in self._files}
        await asyncio.gather(
            *(self.client.abort_multipart_upload(self.spec.bucket, f.key, f.upload_id) for f in finished.values()),
            return_exceptions=True,
        )
        self._shutdown_cpu()

    # ------------------------------------------------------------------ internals

    def _conform(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        schema = self.spec.schema
        if batch.schema.equals(schema, check_metadata=False):
            return batch
        if batch.schema.names != schema.names:
            raise SchemaMismatch(
                f"a batch has the columns {batch.schema.names}, but this write's schema has {schema.names}; "
                "every batch of a write must have the same columns, in the same order"
            )
        try:
            return pa.Table.from_batches([batch]).cast(schema).combine_chunks().to_batches()[0]
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise SchemaMismatch(f"a batch does not fit this write's schema {schema}: {exc}") from exc

    def _budget(self, directory: _Directory) -> float:
        """Arrow bytes to encode as the directory's next row group (see the module doc)."""
        file = directory.file
        left = self.options.target_file_size - (file.encoded if file is not None else 0)
        ratio = file.encoded / file.arrow_bytes if file is not None and file.arrow_bytes else self._ratio
        return max(1.0, min(float(self.options.row_group_bytes), left / max(ratio, 1e-6)))

    async def _directory(self, name: str) -> _Directory:
        """The directory's state, most recent now; a new one may close the least recently written."""
        directory = self._directories.get(name)
        if directory is not None:
            self._directories.move_to_end(name)
            return directory
        if len(self._directories) >= self.options.max_open_files:
            _, oldest = self._directories.popitem(last=False)
            if oldest.file is not None or oldest.buffered:
                self.closed_early += 1
            await self._finish(oldest)
        directory = self._directories[name] = _Directory(name)
        return directory

    async def _flush(self, directory: _Directory, *, whole: bool) -> None:
        """Encode one row group of the directory's buffer (all of it if ``whole``); close the file at its target."""
        table = pa.Table.from_batches(directory.buffered, schema=self.partitioner.data_schema)
        if table.num_rows == 0:
            directory.buffered, directory.buffered_bytes = [], 0
            return
        take = table.num_rows
        if not whole:
            per_row = max(1.0, table.nbytes / table.num_rows)
            take = max(1, min(table.num_rows, math.ceil(self._budget(directory) / per_row)))
        group, rest = table.slice(0, take), table.slice(take)
        directory.buffered = rest.to_batches() if rest.num_rows else []
        directory.buffered_bytes = rest.nbytes if rest.num_rows else 0
        file = directory.file or self._open(directory)
        encoded = await self._on_cpu(file.encode, group.combine_chunks())
        self.rows_encoded += group.num_rows
        self.bytes_encoded += len(encoded)
        if self._progress is not None:
            self._progress(self)
        await file.upload.write(encoded)
        if file.encoded >= self.options.target_file_size:
            await self._close_file(directory)

    async def _finish(self, directory: _Directory) -> None:
        """Encode everything the directory buffers and close its file."""
        while directory.buffered:
            await self._flush(directory, whole=directory.buffered_bytes <= self._budget(directory))
        if directory.file is not None:
            await self._close_file(directory)

    def _open(self, directory: _Directory) -> _OpenFile:
        key = self.spec.file_key(directory.name, self.task, self._next_index)
        self._next_index += 1
        upload = self.client.multipart_writer(
            self.spec.bucket,
            key,
            part_size=self.options.part_size,
            slots=self._upload_slots(),
            after_part=lambda: maybe_crash(CrashPoint.TASK_AFTER_PART, self._crash),
        )
        self._started.append(upload)
        directory.file = _OpenFile(key, self.file_schema, self.options, upload)
        return directory.file

    async def _close_file(self, directory: _Directory) -> None:
        file = directory.file
        assert file is not None
        directory.file = None
        footer = await self._on_cpu(file.close)
        self.bytes_encoded += len(footer)
        self.files_closed += 1
        await file.upload.write(footer)
        if file.arrow_bytes:
            self._ratio = file.encoded / file.arrow_bytes
        self._staging.append(asyncio.create_task(self._stage(file)))  # the next rows need not wait for its parts

    async def _stage(self, file: _OpenFile) -> None:
        """Wait for a closed file's parts (its upload left uncompleted) and record it for the commit."""
        upload_id, parts = await file.upload.stage()
        self._files.append(NewFile(file.key, upload_id, parts, file.encoded, file.rows))
        self._started.remove(file.upload)

    def _upload_slots(self) -> PartsInFlight:
        """The task's parts in flight, shared by its files, paced by the link (s3io.resilience.upload_pace)."""
        if self._slots is None:
            options = self.options
            pace = UploadPace.for_write(
                options.upload_concurrency, options.part_size, self.client.policy, options.upload_floor
            )
            self._slots = PartsInFlight(pace)
        return self._slots

    async def _on_cpu(self, fn: Callable[..., Any], *args: Any) -> Any:
        if self._cpu is None:
            self._own_cpu = self._own_cpu or ThreadPoolExecutor(max_workers=1, thread_name_prefix=CPU_THREAD_NAME)
        return await asyncio.get_running_loop().run_in_executor(self._cpu or self._own_cpu, fn, *args)

    def _shutdown_cpu(self) -> None:
        if self._own_cpu is not None:
            self._own_cpu.shutdown(wait=False, cancel_futures=True)
            self._own_cpu = None
