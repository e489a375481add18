"""Execute one group: stream its inputs into one parquet file in staging, then prove it holds exactly their rows.

Runs wherever the group is executed (a Spark task, or in-process on the driver). Steps:
1. Fetch the inputs in order, a few ahead (bounded by ``prefetch_bytes``), each whole with one GET If-Match on the
   ETag the plan saw: an input changed or deleted since planning aborts the group (stale data is never compacted).
   That GET is the only read of an input: its footer comes from the same bytes. Inputs that have arrived go to the
   worker thread together (one hand-off, not one per file: thread wake-ups cost more than a tiny file's decode).
2. Check each input's footer: one that does not parse, or whose schema does not fit the group's (the planned one,
   or, for a plan made from the listing, the unification of the inputs taken so far, frozen once the first row
   group is written), or whose Spark footer keys are not the first input's (metadata.py), is left out with what was
   learnt, for the driver to plan again. Decode the others (s3io.parquet.decode; INT96 in microseconds, as UTC
   instants: s3io.parquet.schema.INT96_INSTANT) and buffer their batches until ``row_group_bytes`` of Arrow data;
   then conform them to the group's schema and combine them into one chunk per column (one checksum call per row
   group, not one per input: a fifth of the job's time with thousands of tiny inputs), add them to the input
   checksum, and
   ParquetWriter writes a row group into a small in-memory sink whose bytes go straight to a multipart upload
   (parts in parallel). Columns are dictionary-encoded as pyarrow does by default, except those the first row
   group shows are nearly all distinct and too big for a dictionary page (``dictionary_columns``). Memory stays
   about 2 x row_group_bytes + prefetch_bytes + part_size x (upload_concurrency + 1), whatever the group's size.
   CPU work runs in a worker thread, so the event loop (lock renewal, uploads) never stalls on it; groups run in
   process share one such thread (``in_process_executor``): the work holds the GIL most of the time, so more threads
   only add wake-ups and GIL hand-offs (measured: a fifth less CPU, half the kernel time; the wall 0-10 % shorter).
   If too few inputs are left to be worth a file (the plan's rules), the upload is aborted and the group dissolves.
   The footer, written last, carries the schema metadata the inputs share (metadata.output_metadata), in the
   key-value metadata and in ARROW:schema, which is written then rather than when the writer opens.
3. Read the uploaded object back, a row group at a time, pinned to its ETag, and compare row count and checksums
   (checksum.py) with the inputs'. Any difference deletes the staging object and fails the group.
Nothing here touches the journal: an unverified output can never be committed.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from s3io.compaction.checksum import TableChecksum
from s3io.compaction.errors import CompactionError, InputChanged, VerificationFailed
from s3io.compaction.facts import FooterFactsMemo
from s3io.compaction.grouping import CompactionGroup, FileFacts, first_schema, join_schema, worth_a_group
from s3io.compaction.metadata import footer_metadata, output_metadata, spark_keys, spark_keys_conflict
from s3io.compaction.options import CompactionOptions
from s3io.errors import CorruptFile, NotFound, ObjectChanged, PreconditionFailed, SchemaMismatch
from s3io.parquet.chunks import row_group_byte_span
from s3io.parquet.decode import decode, open_whole, read_batches
from s3io.parquet.schema import INT96_UNIT, conform
from s3io.parquet.sink import ByteSink
from s3io.parquet.sparse import SparseFile
from s3io.s3.capabilities import VERDICTS, StoreCapabilities
from s3io.s3.client import S3Client
from s3io.s3.types import ObjectInfo
from s3io.table import layout
from s3io.table.crash import CrashPoint, maybe_crash, resolve
from s3io.table.footers import read_footer
from s3io.table.journal import ObjectRef

MAX_INFLIGHT_GETS = 16
CPU_THREAD_NAME = "s3io-compact-cpu"
_DEFAULTS = CompactionOptions()
WHOLE_OBJECT_VERIFY_BYTES = 16 * 1024 * 1024  # smaller outputs are read back with one GET


@dataclass(frozen=True, slots=True)
class RewriteSettings:
    """How one group is written; a picklable subset of CompactionOptions, with its defaults."""

    part_size: int = _DEFAULTS.part_size
    upload_concurrency: int = _DEFAULTS.upload_concurrency
    row_group_bytes: int = _DEFAULTS.row_group_bytes
    prefetch_bytes: int = _DEFAULTS.prefetch_bytes
    compression: str = _DEFAULTS.compression
    coerce_timestamps: str | None = _DEFAULTS.coerce_timestamps
    schema_mode: str = _DEFAULTS.schema_mode
    min_input_files: int = _DEFAULTS.min_input_files  # the plan's rule, for what is left once inputs are left out
    threshold: int = _DEFAULTS.threshold

    @classmethod
    def from_options(cls, options: CompactionOptions) -> RewriteSettings:
        return cls(
            part_size=options.part_size,
            upload_concurrency=options.upload_concurrency,
            row_group_bytes=options.row_group_bytes,
            prefetch_bytes=options.prefetch_bytes,
            compression=options.compression,
            coerce_timestamps=options.coerce_timestamps,
            schema_mode=options.schema_mode,
            min_input_files=options.min_input_files,
            threshold=options.threshold,
        )

    def worth_a_file(self, files: int, size: int) -> bool:
        """The plan's rule for a group (grouping.py, rule 5), for what is left once inputs are left out."""
        return worth_a_group(files, size, self.min_input_files, self.threshold)


@dataclass(frozen=True, slots=True)
class GroupOutput:
    """A verified output in staging, the inputs it holds, and what it took to write it."""

    group_id: str
    staging: ObjectRef
    rows: int
    checksums: dict[str, str]
    inputs: tuple[ObjectInfo, ...]  # the planned inputs it holds, in order (those left out are in ``left_out``)
    replaced: dict[str, tuple[tuple[str, str | None], ...]] = field(default_factory=dict)  # earlier outputs' origins
    left_out: tuple[FileFacts, ...] = ()  # planned inputs that do not fit, with their footers' facts or errors
    requests: int = 0  # the client's requests meanwhile (exact when the task has its own client, as in Spark)
    retries: int = 0
    seconds: float = 0.0

    @property
    def input_files(self) -> int:
        return len(self.inputs)

    @property
    def input_bytes(self) -> int:
        return sum(f.size for f in self.inputs)


class GroupDissolved(CompactionError):
    """Too few of a group's inputs fit together to be worth a file; nothing was written. Carries them all."""

    def __init__(self, message: str, left_out: Sequence[FileFacts]) -> None:
        super().__init__(message)
        self.left_out = tuple(left_out)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (str(self), self.left_out))


@dataclass(frozen=True, slots=True)
class GroupTask:
    """Everything a worker needs to execute one group. Picklable (send it to a Spark task)."""

    job_id: str
    group: CompactionGroup
    settings: RewriteSettings = field(default_factory=RewriteSettings)
    crash_at: str | None = None
    store: StoreCapabilities | None = None  # the driver's store verdict (portable: no clock), for the worker's client

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
    left_out: tuple[FileFacts, ...] = ()  # a dissolved group: every input, for the driver to plan again
    failed_requests: int = 0  # the task's requests and retries when it wrote no output (else the output's)
    failed_retries: int = 0

    @property
    def requests(self) -> int:
        return self.output.requests if self.output is not None else self.failed_requests

    @property
    def retries(self) -> int:
        return self.output.retries if self.output is not None else self.failed_retries

    @property
    def leftovers(self) -> tuple[FileFacts, ...]:
        """The inputs this group's task left out, whether it wrote an output or dissolved."""
        return self.output.left_out if self.output is not None else self.left_out


async def rewrite_group(
    client: S3Client,
    group: CompactionGroup,
    staging_key: str,
    *,
    settings: RewriteSettings | None = None,
    crash_at: CrashPoint | str | None = None,
    cpu: Executor | None = None,
) -> GroupOutput:
    """Write ``group``'s inputs as one verified parquet object at ``staging_key`` (see the module doc); decoding,
    encoding and checksums run on ``cpu`` (default: the event loop's default executor)."""
    settings = settings or RewriteSettings()
    crash = resolve(crash_at)
    started = time.monotonic()
    before = client.stats()
    encoder = _Encoder(group.schema, settings)
    writer = client.multipart_writer(
        group.bucket, staging_key, part_size=settings.part_size, concurrency=settings.upload_concurrency
    )
    written = False
    try:
        try:
            async for ready in _fetch_inputs(client, group.files, settings.prefetch_bytes):
                chunk = await _on(cpu, encoder.add_files, ready)
                if chunk:
                    await writer.write(chunk)
            taken = encoder.taken
            if len(taken) < len(group.files) and not settings.worth_a_file(len(taken), sum(f.info.size for f in taken)):
                raise GroupDissolved(
                    f"only {len(taken)} of {len(group.files)} input(s) fit together: not worth a file",
                    [*taken, *encoder.left_out],
                )
            await writer.write(await _on(cpu, encoder.finish))
        except BaseException:
            await asyncio.shield(writer.abort())
            raise
        written = True  # from here on the object may exist (even if close() fails after S3 completed it)
        result = await writer.close()
        staging = ObjectRef(staging_key, result.etag, writer.bytes_written, result.checksum)  # sealed: see protocol
        if not staging.etag:
            head = await client.head_object(group.bucket, staging_key)
            staging = ObjectRef(staging_key, head.etag, head.size, result.checksum)
        maybe_crash(CrashPoint.AFTER_STAGING_WRITE, crash)
        assert encoder.schema is not None and encoder.checksum is not None
        readback = await _read_back(client, group.bucket, staging, encoder.schema, cpu)
        problems = encoder.checksum.differences(readback)
        if problems:
            raise VerificationFailed(
                f"s3://{group.bucket}/{staging_key} does not hold exactly the rows of its {len(encoder.taken)} "
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
        inputs=tuple(f.info for f in encoder.taken),
        replaced={f.info.key: f.replaces for f in encoder.taken if f.replaces is not None},
        left_out=tuple(encoder.left_out),
        requests=spent.request_count,
        retries=spent.retry_count,
        seconds=time.monotonic() - started,
    )


async def run_group_task(client: S3Client, task: GroupTask, cpu: Executor | None = None) -> GroupResult:
    """``rewrite_group`` for a task, with every failure turned into a GroupResult (never raises but on cancel)."""
    before = client.stats()
    try:
        output = await rewrite_group(
            client, task.group, task.new_staging_key(), settings=task.settings, crash_at=task.crash_at, cpu=cpu
        )
    except Exception as exc:
        spent = client.stats() - before
        left_out = exc.left_out if isinstance(exc, GroupDissolved) else ()
        return GroupResult(
            task.group.group_id,
            error=str(exc),
            error_kind=type(exc).__name__,
            left_out=left_out,
            failed_requests=spent.request_count,
            failed_retries=spent.retry_count,
        )
    return GroupResult(task.group.group_id, output=output)


def execute_group_task(task: GroupTask, make_client: Callable[[], S3Client]) -> GroupResult:
    """Synchronous entry point for a Spark task or a worker process: the driver's store verdict kept in this process
    (the If-Match form, the checksum forms the store refuses: never sent), then a fresh event loop and client, then
    ``run_group_task``."""
    if task.store is not None:
        VERDICTS.remember(task.store)

    async def main() -> GroupResult:
        async with make_client() as client:
            return await run_group_task(client, task)

    return asyncio.run(main())


ExecuteGroups = Callable[[Sequence[GroupTask]], AsyncIterator[GroupResult] | Awaitable[Sequence[GroupResult]]]


async def results_as_finished(
    tasks: Sequence[GroupTask],
    run_one: Callable[[GroupTask], Awaitable[GroupResult]],
    limit: int,
    cleanup: Callable[[bool], Awaitable[None] | None] | None = None,
) -> AsyncIterator[GroupResult]:
    """``run_one(task)`` for every task, at most ``limit`` at once, yielding results as they finish: what every
    executor shares. On exit (done, failed or closed early) the unfinished are cancelled and awaited, then
    ``cleanup(early)`` runs (awaited if it returns an awaitable); ``early``: not every result was handed out."""
    slots = asyncio.Semaphore(limit)

    async def one(task: GroupTask) -> GroupResult:
        async with slots:
            return await run_one(task)

    running = [asyncio.create_task(one(t)) for t in tasks]
    handed_out = 0
    try:
        for finished in asyncio.as_completed(running):
            result = await finished
            handed_out += 1
            yield result
    finally:
        for t in running:
            t.cancel()
        await asyncio.gather(*running, return_exceptions=True)
        if cleanup is not None:
            pending = cleanup(handed_out < len(running))
            if pending is not None:
                await pending


def in_process_executor(client: S3Client, max_concurrent_groups: int) -> ExecuteGroups:
    """Run groups on this event loop, at most ``max_concurrent_groups`` at once, yielding results as they finish;
    their CPU work shares one thread (see the module doc)."""

    def execute(tasks: Sequence[GroupTask]) -> AsyncIterator[GroupResult]:
        cpu = ThreadPoolExecutor(max_workers=1, thread_name_prefix=CPU_THREAD_NAME)  # threads start on first use

        def cleanup(early: bool) -> None:
            cpu.shutdown(wait=False, cancel_futures=True)  # a cancelled group's last step finishes on its own

        def run_one(task: GroupTask) -> Awaitable[GroupResult]:
            return run_group_task(client, task, cpu)

        return results_as_finished(tasks, run_one, max_concurrent_groups, cleanup)

    return execute


# ------------------------------------------------------------------------------------------ internals


class _Encoder:
    """Check, decode, conform, checksum and encode the inputs; used from one worker thread at a time.

    The output schema is the planned one, or (a plan from the listing) the unification of the inputs taken so
    far; it is frozen when the first row group is written, and inputs that do not fit it are left out, as are
    inputs whose Spark footer keys differ from the first input's (metadata.py). The output's schema metadata is
    decided once every input is known, when it is closed (metadata.output_metadata).
    """

    def __init__(self, schema: pa.Schema | None, settings: RewriteSettings) -> None:
        self.schema = schema
        self.settings = settings
        self.checksum: TableChecksum | None = None
        self.taken: list[FileFacts] = []
        self.left_out: list[FileFacts] = []
        self._example = ""  # the input the schema was first taken from, for messages
        self._spark: dict[bytes, bytes] | None = None  # the Spark footer keys of the first input taken
        self._spark_example = ""
        self._fits: list[pa.Schema] = []  # input schemas already known to fit (a landing zone has a handful)
        self._fitted: dict[int, pa.Schema] = {}  # by id: the very schema objects (the memo's) that fitted before
        self._footer_facts = FooterFactsMemo()
        self._sink = ByteSink()
        self._writer: pq.ParquetWriter | None = None
        self._pending: list[tuple[pa.RecordBatch, str]] = []  # decoded, not yet conformed: the schema may widen
        self._pending_bytes = 0

    def add_file(self, info: ObjectInfo, data: bytes) -> bytes:
        """Take one input (or leave it out, noted in ``left_out``); the encoded bytes ready for the upload."""
        try:
            reader = open_whole(data, info.url, int96_unit=INT96_UNIT)
        except CorruptFile as exc:
            self.left_out.append(FileFacts(info, error=exc.message))
            return b""
        metadata = reader.metadata
        facts = self._footer_facts(info, metadata)
        if facts.schema is None:  # a footer no output can hold (facts.error says why)
            self.left_out.append(facts)
            return b""
        conflict = self._fit(facts.schema, info.url)
        if conflict is not None:
            self.left_out.append(dataclasses.replace(facts, conflict=conflict or None))
            return b""
        self.taken.append(facts)
        rows = 0
        for batch in read_batches(reader, range(metadata.num_row_groups), None, url=info.url):
            rows += batch.num_rows
            if batch.num_rows:
                self._pending.append((batch, info.url))
                self._pending_bytes += batch.get_total_buffer_size()  # each buffer whole: decoded batches are no slices
            if self._pending_bytes >= self.settings.row_group_bytes:
                self._flush()
        if rows != metadata.num_rows:
            raise CorruptFile(
                f"decoded {rows} rows but the footer says {metadata.num_rows}", bucket=info.bucket, key=info.key
            )
        return self._sink.take()

    def add_files(self, ready: Sequence[tuple[ObjectInfo, bytes]]) -> bytes:
        """``add_file`` for each of ``ready``, in order; the encoded bytes of them all."""
        return b"".join(self.add_file(info, data) for info, data in ready)

    def finish(self) -> bytes:
        """Write what is buffered and the footer (naming the original files of every row); the last bytes."""
        self._flush(last=True)
        assert self._writer is not None
        assert self.schema is not None and self.checksum is not None
        origins = tuple(ref for f in self.taken for ref in f.refs())
        modified = tuple(when for f in self.taken for when in f.refs_modified())
        kept = output_metadata([f.schema.metadata if f.schema else None for f in self.taken], self.checksum.rows)
        footer = footer_metadata(self.schema, kept)
        self._writer.add_key_value_metadata({**footer, **layout.inputs_metadata(origins, modified)})
        self._writer.close()
        return self._sink.take()

    def _fit(self, schema: pa.Schema, url: str) -> str | None:
        """None if an input of ``schema`` (its metadata the footer's) fits the output (which may widen it); else
        why not ("" if only because the output's schema is frozen: it is planned again with its peers, not
        reported as a conflict). Spark's footer keys must be the first input's: they say how Spark reads it."""
        if self._fitted.get(id(schema)) is schema:  # fitted before, so fits still: the output only ever widens
            return None
        keys = spark_keys(schema.metadata)
        if self._spark is not None:
            conflict = spark_keys_conflict(self._spark, self._spark_example, keys, url)
            if conflict is not None:
                return conflict
        conflict = self._fit_columns(schema.remove_metadata(), url)
        if conflict is None:
            self._fitted[id(schema)] = schema
            if self._spark is None:
                self._spark, self._spark_example = keys, url
        return conflict

    def _fit_columns(self, schema: pa.Schema, url: str) -> str | None:
        """``_fit`` for the columns alone (``schema`` without metadata)."""
        if any(schema.equals(known) for known in self._fits):
            return None
        mode = self.settings.schema_mode
        if self.schema is None:
            self.schema, self._example = first_schema(schema, url, mode), url
        else:
            try:
                joined = join_schema(self.schema, self._example or "the group", schema, url, mode)
            except SchemaMismatch as exc:
                return exc.message
            if not joined.equals(self.schema):
                if self._writer is not None:
                    return ""
                self.schema = joined
        self._fits.append(schema)
        return None

    def _flush(self, *, last: bool = False) -> None:
        if not self._pending and not (last and self._writer is None):
            return
        assert self.schema is not None
        batches = [conform(batch, self.schema, url=url) for batch, url in self._pending]
        self._pending = []
        self._pending_bytes = 0
        table = pa.Table.from_batches(batches, schema=self.schema).combine_chunks()
        if self._writer is None:
            self.checksum = TableChecksum.for_schema(self.schema)
            self._writer = pq.ParquetWriter(
                self._sink,
                self.schema,
                compression=self.settings.compression,
                coerce_timestamps=self.settings.coerce_timestamps,
                use_dictionary=dictionary_columns(table),
                store_schema=False,  # ARROW:schema is written at close, with the metadata the inputs share
            )
        assert self.checksum is not None
        if not batches:
            return
        self.checksum.update(table)
        try:
            self._writer.write_table(table, row_group_size=max(1, table.num_rows))
        except pa.ArrowInvalid as exc:
            hint = ""
            if "timestamp" in str(exc):  # values finer than the unit (INT96 decodes in microseconds: never INT96)
                hint = f" (outputs store timestamps in {self.settings.coerce_timestamps}; pass "
                hint += "coerce_timestamps=None to keep each column's own unit, e.g. nanoseconds)"
            raise CompactionError(f"cannot write the compacted output: {exc}{hint}") from exc


DICTIONARY_PAGE_LIMIT = 1024 * 1024  # pyarrow's default dictionary_pagesize_limit: past it a column falls back
DISTINCT_SAMPLE = 8192  # values sampled per column to judge whether it is nearly all distinct


def dictionary_columns(table: pa.Table) -> bool | list[str]:
    """``use_dictionary`` for an output whose first row group is ``table``: every column but those whose values
    are nearly all distinct (>= 90 % of a sample) and whose dictionary would outgrow the writer's dictionary page
    anyway (it would fall back to PLAIN after building, hashing and faulting in a table it then throws away: a
    tenth of the job's CPU with unique ids). Nested schemas keep the writer's default."""
    if table.num_rows == 0 or any(pa.types.is_nested(f.type) for f in table.schema):
        return True
    keep = [name for name, column in zip(table.column_names, table.columns, strict=True) if not _plain(column)]
    return True if len(keep) == table.num_columns else keep


def _plain(column: pa.ChunkedArray) -> bool:
    """Whether a sample of ``column`` is >= 90 % distinct and its dictionary would outgrow the dictionary page."""
    sample = column.slice(0, DISTINCT_SAMPLE)
    if len(sample) < 1024:
        return False
    try:
        distinct = pc.count_distinct(sample, mode="all").as_py()
    except pa.ArrowNotImplementedError:  # dictionary, view and null columns: nothing to judge by
        return False
    return distinct >= 0.9 * len(sample) and distinct / len(sample) * column.nbytes > DICTIONARY_PAGE_LIMIT


async def _fetch_inputs(
    client: S3Client, files: Sequence[ObjectInfo], budget: int
) -> AsyncIterator[list[tuple[ObjectInfo, bytes]]]:
    """The inputs' bytes, in order, as many at a time as have arrived (one hand-off to the encoder's thread for
    them all); later inputs are fetched ahead while their bytes fit ``budget``."""

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

    def fetch_ahead() -> None:
        """Start GETs in order while the bytes fetched and not yet decoded fit the budget (always at least one)."""
        nonlocal inflight, index
        while index < len(files) and (
            not ahead or (inflight + files[index].size <= budget and len(ahead) < MAX_INFLIGHT_GETS)
        ):
            info = files[index]
            ahead.append((info, asyncio.create_task(get(info))))
            inflight += info.size
            index += 1

    try:
        while True:
            fetch_ahead()
            if not ahead:
                break
            info, task = ahead.popleft()
            ready = [(info, await task)]
            while ahead and ahead[0][1].done():
                info, task = ahead.popleft()
                ready.append((info, task.result()))
            fetch_ahead()  # the ready bytes still count against the budget: they are held until decoded
            yield ready
            inflight -= sum(info.size for info, _ in ready)
    finally:
        for _, task in ahead:
            task.cancel()
        await asyncio.gather(*(t for _, t in ahead), return_exceptions=True)


async def _on(cpu: Executor | None, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` in a worker thread: ``cpu``'s, or (None) the event loop's default executor's."""
    return await asyncio.get_running_loop().run_in_executor(cpu, fn, *args)


async def _read_back(
    client: S3Client, bucket: str, staging: ObjectRef, schema: pa.Schema, cpu: Executor | None = None
) -> TableChecksum:
    """The checksum of the uploaded object, read a row group at a time, pinned to its ETag."""
    url = f"s3://{bucket}/{staging.key}"
    checksum = TableChecksum.for_schema(schema)
    size = staging.size
    if size <= WHOLE_OBJECT_VERIFY_BYTES:
        data = (await client.get_object(bucket, staging.key, if_match=staging.etag)).data
        await _on(cpu, _checksum_whole, checksum, data, schema, url)
        return checksum
    footer = await read_footer(client, bucket, staging.key, size, staging.etag)
    metadata, start, tail = footer.metadata, footer.start, footer.tail
    for row_group in range(metadata.num_row_groups):
        rg_start, rg_end = row_group_byte_span(metadata, row_group, None, size)
        data = (await client.get_object(bucket, staging.key, rg_start, rg_end, if_match=staging.etag)).data
        source = SparseFile(size, [(rg_start, data), (start, tail)], url)
        await _on(cpu, _checksum_row_groups, checksum, source, metadata, [row_group], schema, url)
    return checksum


def _checksum_whole(checksum: TableChecksum, data: bytes, schema: pa.Schema, url: str) -> None:
    """Add a whole object's rows to ``checksum``, as ``schema``."""
    reader = open_whole(data, url, int96_unit=INT96_UNIT)
    for batch in read_batches(reader, range(reader.metadata.num_row_groups), None, url=url):
        checksum.update(conform(batch, schema, url=url))


def _checksum_row_groups(
    checksum: TableChecksum,
    source: SparseFile,
    metadata: pq.FileMetaData,
    row_groups: Sequence[int],
    schema: pa.Schema,
    url: str,
) -> None:
    for batch in decode(source, metadata, row_groups, None, url=url, int96_unit=INT96_UNIT):
        checksum.update(conform(batch, schema, url=url))
