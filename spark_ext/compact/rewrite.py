"""Execute one group: stream its inputs into one parquet file in staging, then prove it holds exactly their rows.

Runs wherever the group is executed (a Spark task, or in-process on the driver). Steps:
1. Fetch the inputs in order, a few ahead (bounded by ``prefetch_bytes``), each with GET If-Match on the ETag the
   plan saw: an input changed or deleted since planning aborts the group (stale data is never compacted).
2. Decode each input (s3io.parquet.decode), conform its batches to the group's schema, add them to the input
   checksum, and buffer them until ``row_group_bytes`` of Arrow data; then ParquetWriter writes a row group into
   a small in-memory sink whose bytes go straight to a multipart upload (parts in parallel). Memory stays about
   row_group_bytes + prefetch_bytes + part_size x (upload_concurrency + 1), whatever the group's size.
   CPU work runs in a worker thread, so the event loop (lock renewal, uploads) never stalls on it.
3. Read the uploaded object back, a row group at a time, pinned to its ETag, and compare row count and checksums
   (checksum.py) with the inputs'. Any difference deletes the staging object and fails the group.
Nothing here touches the journal: an unverified output can never be committed.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import io
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.parquet as pq

from s3io.errors import CorruptFile, NotFound, ObjectChanged, PreconditionFailed
from s3io.parquet.chunks import row_group_byte_span
from s3io.parquet.decode import decode
from s3io.parquet.footer import FooterNeedsMore, parse_footer, tail_range
from s3io.parquet.schema import conform
from s3io.parquet.sparse import SparseFile
from s3io.s3.client import S3Client
from s3io.s3.types import ObjectInfo
from spark_ext.compact.checksum import TableChecksum
from spark_ext.compact.crash import CrashPoint, maybe_crash, resolve
from spark_ext.compact.errors import CompactionError, InputChanged, VerificationFailed
from spark_ext.compact.grouping import CompactionGroup
from spark_ext.compact.options import CompactionOptions
from spark_ext.journal import layout
from spark_ext.journal.entries import ObjectRef

MAX_INFLIGHT_GETS = 16
WHOLE_OBJECT_VERIFY_BYTES = 16 * 1024 * 1024  # smaller outputs are read back with one GET


@dataclass(frozen=True, slots=True)
class RewriteSettings:
    """How one group is written; a picklable subset of CompactionOptions."""

    part_size: int = 8 * 1024 * 1024
    upload_concurrency: int = 4
    row_group_bytes: int = 64 * 1024 * 1024
    prefetch_bytes: int = 32 * 1024 * 1024
    compression: str = "snappy"
    coerce_timestamps: str | None = "us"

    @classmethod
    def from_options(cls, options: CompactionOptions) -> RewriteSettings:
        return cls(
            part_size=options.part_size,
            upload_concurrency=options.upload_concurrency,
            row_group_bytes=options.row_group_bytes,
            prefetch_bytes=options.prefetch_bytes,
            compression=options.compression,
            coerce_timestamps=options.coerce_timestamps,
        )


@dataclass(frozen=True, slots=True)
class GroupOutput:
    """A verified output in staging, and what it took to write it."""

    group_id: str
    staging: ObjectRef
    rows: int
    checksums: dict[str, str]
    input_files: int
    input_bytes: int
    requests: int = 0  # the client's requests meanwhile (exact when the task has its own client, as in Spark)
    retries: int = 0
    seconds: float = 0.0


@dataclass(frozen=True, slots=True)
class GroupTask:
    """Everything a worker needs to execute one group. Picklable (send it to a Spark task)."""

    job_id: str
    group: CompactionGroup
    settings: RewriteSettings = field(default_factory=RewriteSettings)
    crash_at: str | None = None

    def new_staging_key(self) -> str:
        """A fresh staging key: each attempt of a task writes its own object."""
        return layout.staging_key(self.group.partition_dir, self.job_id, self.group.group_id)


@dataclass(frozen=True, slots=True)
class GroupResult:
    """What a worker sends back: the output, or why the group failed (the staging object is already removed)."""

    group_id: str
    output: GroupOutput | None = None
    error: str | None = None
    error_kind: str | None = None


async def rewrite_group(
    client: S3Client,
    group: CompactionGroup,
    staging_key: str,
    *,
    settings: RewriteSettings | None = None,
    crash_at: CrashPoint | str | None = None,
) -> GroupOutput:
    """Write ``group``'s inputs as one verified parquet object at ``staging_key`` (see the module doc)."""
    settings = settings or RewriteSettings()
    crash = resolve(crash_at)
    started = time.monotonic()
    before = client.stats()
    origins = group.origins or tuple((f.key, f.etag) for f in group.files)
    encoder = _Encoder(group.schema, settings, layout.inputs_metadata(origins))
    writer = client.multipart_writer(
        group.bucket, staging_key, part_size=settings.part_size, concurrency=settings.upload_concurrency
    )
    written = False
    try:
        try:
            async for info, data in _fetch_inputs(client, group.files, settings.prefetch_bytes):
                chunk = await asyncio.to_thread(encoder.add_file, info, data)
                if chunk:
                    await writer.write(chunk)
            await writer.write(await asyncio.to_thread(encoder.finish))
        except BaseException:
            await asyncio.shield(writer.abort())
            raise
        written = True  # from here on the object may exist (even if close() fails after S3 completed it)
        result = await writer.close()
        staging = ObjectRef(staging_key, result.etag, writer.bytes_written)
        if not staging.etag:
            head = await client.head_object(group.bucket, staging_key)
            staging = ObjectRef(staging_key, head.etag, head.size)
        maybe_crash(CrashPoint.AFTER_STAGING_WRITE, crash)
        readback = await _read_back(client, group.bucket, staging, group.schema)
        problems = encoder.checksum.differences(readback)
        if problems:
            raise VerificationFailed(
                f"s3://{group.bucket}/{staging_key} does not hold exactly the rows of its {len(group.files)} "
                f"inputs: {'; '.join(problems)}; not committed"
            )
        maybe_crash(CrashPoint.AFTER_VERIFY, crash)
    except BaseException:
        if written:
            with contextlib.suppress(Exception):
                await asyncio.shield(client.delete_object(group.bucket, staging_key))
        raise
    spent = client.stats() - before
    return GroupOutput(
        group_id=group.group_id,
        staging=staging,
        rows=encoder.checksum.rows,
        checksums=encoder.checksum.digest(),
        input_files=len(group.files),
        input_bytes=group.input_bytes,
        requests=spent.request_count,
        retries=spent.retry_count,
        seconds=time.monotonic() - started,
    )


async def run_group_task(client: S3Client, task: GroupTask) -> GroupResult:
    """``rewrite_group`` for a task, with every failure turned into a GroupResult (never raises but on cancel)."""
    try:
        output = await rewrite_group(
            client, task.group, task.new_staging_key(), settings=task.settings, crash_at=task.crash_at
        )
    except Exception as exc:
        return GroupResult(task.group.group_id, error=str(exc), error_kind=type(exc).__name__)
    return GroupResult(task.group.group_id, output=output)


def execute_group_task(task: GroupTask, make_client: Callable[[], S3Client]) -> GroupResult:
    """Synchronous entry point for a Spark task: a fresh event loop and client, then ``run_group_task``."""

    async def main() -> GroupResult:
        async with make_client() as client:
            return await run_group_task(client, task)

    return asyncio.run(main())


ExecuteGroups = Callable[[Sequence[GroupTask]], AsyncIterator[GroupResult] | Awaitable[Sequence[GroupResult]]]


def in_process_executor(client: S3Client, max_concurrent_groups: int) -> ExecuteGroups:
    """Run groups on this event loop, at most ``max_concurrent_groups`` at once, yielding results as they finish."""

    async def execute(tasks: Sequence[GroupTask]) -> AsyncIterator[GroupResult]:
        slots = asyncio.Semaphore(max_concurrent_groups)

        async def one(task: GroupTask) -> GroupResult:
            async with slots:
                return await run_group_task(client, task)

        running = [asyncio.create_task(one(t)) for t in tasks]
        try:
            for finished in asyncio.as_completed(running):
                yield await finished
        finally:
            for t in running:
                t.cancel()
            await asyncio.gather(*running, return_exceptions=True)

    return execute


# ------------------------------------------------------------------------------------------ internals


class _Sink(io.RawIOBase):
    """A write-only file whose bytes are taken out as they come (ParquetWriter writes here)."""

    def __init__(self) -> None:
        super().__init__()
        self._buffer = bytearray()
        self._position = 0

    def writable(self) -> bool:
        return True

    def write(self, data: bytes | bytearray | memoryview) -> int:  # type: ignore[override]
        self._buffer += data
        self._position += len(data)
        return len(data)

    def tell(self) -> int:
        return self._position

    def take(self) -> bytes:
        out = bytes(self._buffer)
        self._buffer.clear()
        return out


class _Encoder:
    """Decode inputs, conform them, checksum them, and encode row groups; used from one worker thread at a time."""

    def __init__(
        self, schema: pa.Schema, settings: RewriteSettings, metadata: dict[bytes, bytes] | None = None
    ) -> None:
        self.schema = schema
        self.settings = settings
        self.checksum = TableChecksum.for_schema(schema)
        self._sink = _Sink()
        written = schema.with_metadata({**(schema.metadata or {}), **(metadata or {})}) if metadata else schema
        self._writer = pq.ParquetWriter(
            self._sink, written, compression=settings.compression, coerce_timestamps=settings.coerce_timestamps
        )
        self._pending: list[pa.RecordBatch] = []
        self._pending_bytes = 0

    def add_file(self, info: ObjectInfo, data: bytes) -> bytes:
        metadata = parse_footer(data, len(data), info.url)
        rows = 0
        for batch in decode(data, metadata, range(metadata.num_row_groups), None, url=info.url):
            batch = conform(batch, self.schema, url=info.url)
            rows += batch.num_rows
            self.checksum.update(batch)
            if batch.num_rows:
                self._pending.append(batch)
                self._pending_bytes += batch.nbytes
            if self._pending_bytes >= self.settings.row_group_bytes:
                self._flush()
        if rows != metadata.num_rows:
            raise CorruptFile(
                f"decoded {rows} rows but the footer says {metadata.num_rows}", bucket=info.bucket, key=info.key
            )
        return self._sink.take()

    def finish(self) -> bytes:
        self._flush()
        self._writer.close()
        return self._sink.take()

    def _flush(self) -> None:
        if self._pending:
            table = pa.Table.from_batches(self._pending, schema=self.schema)
            try:
                self._writer.write_table(table, row_group_size=max(1, table.num_rows))
            except pa.ArrowInvalid as exc:
                hint = ""
                if "timestamp" in str(exc):
                    hint = f" (outputs store timestamps in {self.settings.coerce_timestamps}; pass "
                    hint += "coerce_timestamps=None to keep nanoseconds)"
                raise CompactionError(f"cannot write the compacted output: {exc}{hint}") from exc
        self._pending = []
        self._pending_bytes = 0


async def _fetch_inputs(
    client: S3Client, files: Sequence[ObjectInfo], budget: int
) -> AsyncIterator[tuple[ObjectInfo, bytes]]:
    """Each input's bytes, in order; later inputs are fetched ahead while their bytes fit ``budget``."""

    async def get(info: ObjectInfo) -> bytes:
        try:
            return (await client.get_object(info.bucket, info.key, if_match=info.etag)).data
        except (ObjectChanged, PreconditionFailed, NotFound) as exc:
            raise InputChanged(
                f"input {info.url} was replaced or deleted after it was planned (ETag {info.etag}); "
                "the group was not compacted"
            ) from exc

    ahead: collections.deque[tuple[ObjectInfo, asyncio.Task[bytes]]] = collections.deque()
    inflight = 0
    index = 0
    try:
        while index < len(files) or ahead:
            while index < len(files) and (
                not ahead or (inflight + files[index].size <= budget and len(ahead) < MAX_INFLIGHT_GETS)
            ):
                info = files[index]
                ahead.append((info, asyncio.create_task(get(info))))
                inflight += info.size
                index += 1
            info, task = ahead.popleft()
            data = await task
            inflight -= info.size
            yield info, data
    finally:
        for _, task in ahead:
            task.cancel()
        await asyncio.gather(*(t for _, t in ahead), return_exceptions=True)


async def _read_back(client: S3Client, bucket: str, staging: ObjectRef, schema: pa.Schema) -> TableChecksum:
    """The checksum of the uploaded object, read a row group at a time, pinned to its ETag."""
    url = f"s3://{bucket}/{staging.key}"
    checksum = TableChecksum.for_schema(schema)
    size = staging.size
    if size <= WHOLE_OBJECT_VERIFY_BYTES:
        data = (await client.get_object(bucket, staging.key, if_match=staging.etag)).data
        metadata = parse_footer(data, len(data), url)
        await asyncio.to_thread(
            _checksum_row_groups, checksum, data, metadata, range(metadata.num_row_groups), schema, url
        )
        return checksum
    start, end = tail_range(size)
    tail = (await client.get_object(bucket, staging.key, start, end, if_match=staging.etag)).data
    try:
        metadata = parse_footer(tail, size, url)
    except FooterNeedsMore as more:
        start = size - more.needed
        tail = (await client.get_object(bucket, staging.key, start, size, if_match=staging.etag)).data
        metadata = parse_footer(tail, size, url)
    for row_group in range(metadata.num_row_groups):
        rg_start, rg_end = row_group_byte_span(metadata, row_group, None, size)
        data = (await client.get_object(bucket, staging.key, rg_start, rg_end, if_match=staging.etag)).data
        source = SparseFile(size, [(rg_start, data), (start, tail)], url)
        await asyncio.to_thread(_checksum_row_groups, checksum, source, metadata, [row_group], schema, url)
    return checksum


def _checksum_row_groups(
    checksum: TableChecksum,
    source: bytes | SparseFile,
    metadata: pq.FileMetaData,
    row_groups: Sequence[int],
    schema: pa.Schema,
    url: str,
) -> None:
    for batch in decode(source, metadata, row_groups, None, url=url):
        checksum.update(conform(batch, schema, url=url))
