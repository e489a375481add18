"""ParquetReader: footers and record batches of many parquet objects, read concurrently through a RangeEngine.

Small objects (size <= the engine's whole_object_threshold) cost one GET each: the whole object, its footer
parsed from the end of those bytes, decoded from a zero-copy BufferReader. Large objects cost one speculative
tail GET for the footer (a second only when the footer is larger than the tail), then only the column-chunk
ranges of the selected columns in the surviving row groups, a few row groups at a time (see ``plan.plan_units``).

Memory: each read unit reserves the bytes it will fetch before its GET is issued, in piece order, and holds them
until the consumer has taken the unit's batches; its buffer is dropped when they are given back. Reservations go to
a window per iteration (the engine's ``stream_window``, default the whole budget) and to one budget per reader (the
engine's ``memory_budget``), so fetched-but-unconsumed data stays within the budget however slow the consumer.
Reserving in piece order means the unit the consumer waits for was always admitted first: no deadlock. (One task
consuming several iterations of one reader in lockstep can still starve itself, as with ``RangeEngine.stream``.)
Decoded data is not counted but bounded: large row groups decode a batch at a time in worker threads, at most
DECODE_AHEAD of them at once, each at most BATCHES_AHEAD batches ahead of the consumer (``DecodeAhead``); a small
object decodes on the event loop a batch per step. So an iteration holds at most the budget (or one unit larger
than the whole budget, read alone) plus DECODE_AHEAD x (BATCHES_AHEAD + 1) batches (docs/memory.md). Also not
counted: with ignore_corrupt / ignore_missing one whole piece decoded before any of it is yielded, the footer
cache, and small objects kept between ``metadata`` and the read.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
from collections import deque
from collections.abc import AsyncIterator, Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from s3io import errors
from s3io.aio import map_bounded
from s3io.dataset.batches import BatchFinisher
from s3io.dataset.cache import Footer, FooterCache, KeptObjects
from s3io.dataset.decode_ahead import DecodeAhead
from s3io.dataset.pieces import FilePiece
from s3io.dataset.read_units import (
    Predicates,
    UnitPlan,
    combined_schema,
    partition_matches,
    partition_row,
    plan_units,
    select_groups,
    split_predicates,
)
from s3io.engine import ByteBudget, Lease, RangeEngine, SingleFlight
from s3io.engine.consumer import ConsumerWatch
from s3io.engine.engine import Blob
from s3io.parquet.conversions import DEFAULT_CONVERSIONS, ReadConversions, file_adjustment, match_names
from s3io.parquet.decode import DEFAULT_BATCH_SIZE, decode
from s3io.parquet.footer import TAIL_BYTES, FooterNeedsMore, parse_footer
from s3io.parquet.leaves import top_level_leaves
from s3io.parquet.predicates import to_expression
from s3io.parquet.schema import file_schema, unify_schemas
from s3io.parquet.sparse import SparseFile
from s3io.s3.etags import bare_etag
from s3io.s3.types import ObjectInfo

log = logging.getLogger("s3io.dataset")

MiB = 1024 * 1024
DECODE_IN_THREAD_BYTES = 1 * MiB  # units at least this big decode in a worker thread, off the event loop
DECODE_AHEAD = 2  # large row groups decoding and not yet handed over in full, across units
BATCHES_AHEAD = 2  # batches each of them holds decoded ahead of the consumer
MAX_UNIT_BYTES = 64 * MiB  # row groups are packed into units of at most this many fetched bytes (or one group)
FOOTER_CONCURRENCY_FACTOR = 4  # schema(merge=True) fetches at most this x max_concurrency footers at once


@dataclass(frozen=True, slots=True)
class ReaderStats:
    """What a ParquetReader did so far; ``requests`` and ``bytes_in`` are the S3 client's own counters."""

    files: int = 0  # pieces done: read to the end, or found to hold nothing to read
    files_skipped: int = 0  # missing or corrupt pieces skipped (ignore_missing / ignore_corrupt); not in files
    files_pruned: int = 0  # pieces with nothing to read (partition values or statistics rule them out)
    row_groups_read: int = 0
    row_groups_pruned: int = 0  # by statistics, in the pieces planned
    rows: int = 0  # rows yielded (after the exact filter)
    batches: int = 0
    bytes_fetched: int = 0  # bytes handed to the reader by the engine: footer tails, whole objects, chunk ranges
    footers_fetched: int = 0  # footer reads that went to S3 (a small object's whole GET counts as one)
    footer_rereads: int = 0  # second tail GETs, for footers larger than the speculative tail
    footer_cache_hits: int = 0
    kept_object_hits: int = 0  # small objects whose data read reused the GET made for their footer
    peak_held: int = 0  # most bytes held at once by read units (fetched or in flight, not yet consumed)
    requests: int = 0  # HTTP requests of the client (all operations, including any made by others)
    bytes_in: int = 0  # body bytes the client received

    def summary(self) -> str:
        return (
            f"files={self.files} skipped={self.files_skipped} pruned={self.files_pruned} "
            f"row_groups={self.row_groups_read} (pruned {self.row_groups_pruned}) rows={self.rows} "
            f"requests={self.requests} bytes_fetched={self.bytes_fetched} footers={self.footers_fetched} "
            f"(+{self.footer_rereads} rereads, {self.footer_cache_hits} cached) peak_held={self.peak_held}"
        )


@dataclass(slots=True)
class _Counters:
    files: int = 0
    files_skipped: int = 0
    files_pruned: int = 0
    row_groups_read: int = 0
    row_groups_pruned: int = 0
    rows: int = 0
    batches: int = 0
    bytes_fetched: int = 0
    footers_fetched: int = 0
    footer_rereads: int = 0
    footer_cache_hits: int = 0
    kept_object_hits: int = 0


@dataclass(frozen=True, slots=True)
class _Options:
    """The arguments of one ``iter_batches`` call, checked once."""

    schema: pa.Schema
    target: pa.Schema
    partition_schema: pa.Schema
    predicates: Predicates
    expression: Any  # pc.Expression | None
    ignore_missing: bool
    ignore_corrupt: bool
    batch_size: int
    conversions: ReadConversions = DEFAULT_CONVERSIONS
    dictionary_columns: frozenset[str] = frozenset()

    def file_columns(
        self, metadata: pq.FileMetaData, url: str, leaves: dict[str, list[int]] | None = None
    ) -> list[str]:
        """The file's names of the read columns it has (matched as ``conversions`` says), in read order.
        ``leaves``: the file's ``top_level_leaves`` if the caller has them."""
        if not self.conversions.case_insensitive:
            return list(self.schema.names)
        leaves = top_level_leaves(metadata) if leaves is None else leaves
        found = match_names(list(leaves), self.schema.names, self.conversions, url=url)
        return [found[name] for name in self.schema.names if name in found]

    def file_dictionary_columns(
        self, metadata: pq.FileMetaData, url: str, row_groups: Sequence[int], leaves: dict[str, list[int]]
    ) -> list[str]:
        """The file's names of the ``dictionary_columns`` to decode as dictionaries in ``row_groups``: a top-level
        string or binary leaf whose chunk has a dictionary page in every one of them (a column that never had one,
        unique values, would have to be hashed into one: slower than decoding it)."""
        found = match_names(list(leaves), sorted(self.dictionary_columns), self.conversions, url=url)
        chosen = []
        for name in found.values():
            indices = leaves[name]
            leaf = metadata.schema.column(indices[0]) if len(indices) == 1 else None
            if leaf is None or leaf.physical_type != "BYTE_ARRAY" or leaf.path != name:
                continue
            if all(metadata.row_group(rg).column(indices[0]).has_dictionary_page for rg in row_groups):
                chosen.append(name)
        return chosen

    @property
    def buffered(self) -> bool:
        """Decode a whole piece before yielding any of it, so a skipped piece is never partly yielded."""
        return self.ignore_missing or self.ignore_corrupt


@dataclass(slots=True)
class _Fetched:
    """A unit's data: the footer, the row groups to decode, and a zero-copy source (None: nothing to decode)."""

    footer: Footer
    row_groups: list[int]
    source: Blob | list[tuple[int, Blob]] | None  # a small object's bytes, or a large one's fetched segments
    small: bool


@dataclass(eq=False, slots=True)
class _Unit:
    """One planned read of a piece, in piece order; an ``error`` unit carries a planning failure to the consumer."""

    index: int
    piece: FilePiece
    finisher: BatchFinisher | None = None
    plan: UnitPlan | None = None  # None: a small object, fetched whole
    footer: Footer | None = None
    last: bool = True
    reserve: int = 0
    lease: Lease | None = None
    counted: bool = False  # holds a look-ahead slot
    task: asyncio.Task[_Fetched] | None = None
    error: BaseException | None = None


@dataclass(eq=False, slots=True)
class _Job:
    """One step of the consumer: a row group of a unit (all of a small object) to decode, or a unit's failure."""

    unit: _Unit
    row_groups: list[int] = field(default_factory=list)
    work: Callable[[], Iterator[pa.RecordBatch]] | None = None  # None: nothing to decode
    last: bool = True  # the unit's last step
    threaded: bool = False  # decoded in worker threads, ahead of the consumer
    error: BaseException | None = None
    decoding: DecodeAhead | None = None  # set: decoding in worker threads, holds a slot
    _batches: Iterator[pa.RecordBatch] | None = None  # decoding on the event loop (small objects)

    def start(self, run: _Run) -> None:
        """Start decoding in worker threads (the caller holds a slot for it)."""
        assert self.work is not None
        self.decoding = DecodeAhead(self.work(), BATCHES_AHEAD)
        run.decoders.add(self.decoding)

    async def next_batch(self) -> pa.RecordBatch | None:
        """The next finished batch, None after the last (raising the unit's failure or a decoding one)."""
        if self.error is not None:
            raise self.error
        if self.decoding is not None:
            return await self.decoding.next()
        if self.work is None:
            return None
        if self._batches is None:
            self._batches = self.work()
        return next(self._batches, None)

    async def all_batches(self) -> list[pa.RecordBatch]:
        batches = []
        while (batch := await self.next_batch()) is not None:
            batches.append(batch)
        return batches

    async def discard(self, run: _Run) -> None:
        """Done with the job: stop its decoding, if any (waiting for a thread in progress), give back its slot."""
        decoding, self.decoding, self._batches, self.work = self.decoding, None, None, None
        if decoding is not None:
            run.decoders.discard(decoding)
            try:
                await decoding.close()
            finally:
                run.slots.release()


@dataclass(slots=True)
class _Run:
    """The state of one iteration: its units in flight and the tasks to cancel when it ends."""

    window: ByteBudget
    lookahead: asyncio.Semaphore
    queue: asyncio.Queue[_Unit | None] = field(default_factory=asyncio.Queue)
    live: deque[_Unit] = field(default_factory=deque)
    launcher: asyncio.Task[None] | None = None
    prefetch: dict[int, asyncio.Task[Footer]] = field(default_factory=dict)
    jobs: asyncio.Queue[_Job | None] = field(default_factory=asyncio.Queue)
    slots: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(DECODE_AHEAD))
    feeder: asyncio.Task[None] | None = None
    decoders: set[DecodeAhead] = field(default_factory=set)

    def release(self, unit: _Unit) -> None:
        """Give back the unit's bytes and drop its fetched data (the bytes are free only once nothing holds them)."""
        if unit.task is not None and unit.task.done():
            unit.task = None
        if unit.lease is not None:
            unit.lease.release()
        if unit.counted:
            unit.counted = False
            self.lookahead.release()
        try:
            self.live.remove(unit)
        except ValueError:
            pass

    def abort(self) -> list[asyncio.Task[Any]]:
        """Cancel the launcher, the feeder, every unit in flight and every footer prefetch; give back their bytes.

        Decode threads cannot be stopped: the caller closes ``decoders`` (see ``ParquetReader._iterate``).
        """
        tasks: list[asyncio.Task[Any]] = []
        for task in (self.launcher, self.feeder):
            if task is not None and not task.done():
                task.cancel()
                tasks.append(task)
        for unit in list(self.live):
            if unit.task is not None:
                unit.task.cancel()
                tasks.append(unit.task)
            self.release(unit)
        for task in self.prefetch.values():
            task.cancel()
            tasks.append(task)
        self.prefetch.clear()
        return tasks


class ParquetReader:
    """Footers, schemas and record batches of parquet objects through one RangeEngine (one event loop)."""

    def __init__(
        self,
        engine: RangeEngine,
        *,
        footer_cache_bytes: int = 64 * MiB,
        object_cache_bytes: int | None = None,
    ) -> None:
        """``object_cache_bytes`` bounds the small objects kept from ``metadata`` for their data read
        (default: ``footer_cache_bytes``; 0 keeps none, so a footer-then-data read costs two GETs)."""
        self.engine = engine
        config = engine.config
        self._footers = FooterCache(footer_cache_bytes)
        self._kept = KeptObjects(footer_cache_bytes if object_cache_bytes is None else object_cache_bytes)
        self._flights: SingleFlight[Hashable, Any] = SingleFlight()
        self._held = ByteBudget(config.memory_budget)
        self._window_bytes = config.stream_window if config.stream_window is not None else config.memory_budget
        self._unit_bytes = max(config.part_size, min(MAX_UNIT_BYTES, self._window_bytes // 4))
        self._c = _Counters()

    def __repr__(self) -> str:
        return f"ParquetReader({self.engine!r})"

    def stats(self) -> ReaderStats:
        """A snapshot of the counters (see ReaderStats)."""
        client = self.engine.client.stats()
        counters = {f.name: getattr(self._c, f.name) for f in dataclasses.fields(_Counters)}
        return ReaderStats(
            **counters, peak_held=self._held.peak, requests=client.request_count, bytes_in=client.bytes_in
        )

    def clear_cache(self) -> None:
        """Forget cached footers and kept small objects."""
        self._footers.clear()
        self._kept.clear()

    # ----------------------------------------------------------------- footers and schemas

    async def metadata(self, obj: ObjectInfo) -> pq.FileMetaData:
        """The parsed footer of ``obj``: cached, shared with a fetch in flight, or fetched.

        A small object is fetched whole (one GET) and its bytes are kept for a following read of it; a large one
        costs one tail GET of TAIL_BYTES (a second when the footer is larger). CorruptFile names the object.
        """
        return (await self._footer(obj, keep=True)).metadata

    async def schema(
        self,
        objs: Sequence[ObjectInfo],
        *,
        merge: bool = False,
        ignore_missing: bool = False,
        ignore_corrupt: bool = False,
    ) -> pa.Schema:
        """The read schema: the first object's (merge=False) or the union of all footers (see ``unify_schemas``),
        with the first readable file's schema metadata (pandas' index and types), as pyarrow's datasets keep it.

        Types are made plain (no dictionary / large / view types) either way, so it can be used as the read schema.
        With ``ignore_missing`` / ``ignore_corrupt``, such objects are left out (logged); NotFound if none is left.
        """
        objs = list(objs)
        if not objs:
            raise errors.InvalidConfig("schema: no objects given")
        ignoring = ignore_missing or ignore_corrupt
        if not merge and not ignoring:
            return _read_schema([(objs[0].url, file_schema(await self.metadata(objs[0])))])
        if not merge:
            for obj in objs:
                (md,) = await self.metadata_many([obj], ignore_missing=ignore_missing, ignore_corrupt=ignore_corrupt)
                if md is not None:
                    return _read_schema([(obj.url, file_schema(md))])
            footers: list[pq.FileMetaData | None] = [None]
        else:
            footers = await self.metadata_many(objs, ignore_missing=ignore_missing, ignore_corrupt=ignore_corrupt)
        schemas = [(obj.url, file_schema(md)) for obj, md in zip(objs, footers, strict=False) if md is not None]
        if not schemas:
            raise errors.NotFound(f"none of the {len(objs)} objects is a readable parquet file (all were skipped)")
        return _read_schema(schemas)

    async def metadata_many(
        self, objs: Sequence[ObjectInfo], *, ignore_missing: bool = False, ignore_corrupt: bool = False
    ) -> list[pq.FileMetaData | None]:
        """Footers of many objects, fetched concurrently, in order; None for a skipped (missing / corrupt) one."""

        async def one(obj: ObjectInfo) -> pq.FileMetaData | None:
            try:
                return await self.metadata(obj)
            except (errors.NotFound, errors.CorruptFile) as exc:
                missing = isinstance(exc, errors.NotFound)
                if not ((ignore_missing and missing) or (ignore_corrupt and not missing)):
                    raise
                what = "missing" if isinstance(exc, errors.NotFound) else "corrupt"
                log.warning("skipping %s file %s: %s", what, obj.url, exc)
                return None

        return await map_bounded(one, objs, FOOTER_CONCURRENCY_FACTOR * self.engine.config.max_concurrency)

    def _is_small(self, obj: ObjectInfo) -> bool:
        return 0 <= obj.size <= self.engine.config.whole_object_threshold

    async def _footer(self, obj: ObjectInfo, *, keep: bool = False) -> Footer:
        key = _key(obj)
        footer = self._footers.get(key)
        if footer is not None:
            self._c.footer_cache_hits += 1
            return footer
        if self._is_small(obj):
            footer, data = await self._flights.get(("whole", key), lambda: self._load_small(obj), cache=False)
            if keep:
                self._kept.offer(key, data)
            return footer
        return await self._flights.get(("tail", key), lambda: self._load_footer(obj), cache=False)

    async def _load_small(self, obj: ObjectInfo) -> tuple[Footer, Blob]:
        """One GET of the whole object; the footer is parsed from its end."""
        data = await self.engine.fetch_object(obj)
        self._c.bytes_fetched += len(data)
        self._c.footers_fetched += 1
        footer = Footer(parse_footer(data, len(data), obj.url), len(data))
        self._footers.put(_key(obj), footer)
        return footer, data

    async def _load_footer(self, obj: ObjectInfo) -> Footer:
        """One tail GET; when the footer is larger, one more GET for the bytes before that tail."""
        tail, size = await self.engine.fetch_tail(obj, TAIL_BYTES)
        self._c.bytes_fetched += len(tail)
        self._c.footers_fetched += 1
        try:
            metadata = parse_footer(tail, size, obj.url)
        except FooterNeedsMore as more:
            sized = obj if obj.size >= 0 else dataclasses.replace(obj, size=size)
            (head,) = await self.engine.fetch_ranges(sized, [(size - more.needed, size - len(tail))])
            self._c.bytes_fetched += len(head)
            self._c.footer_rereads += 1
            try:
                metadata = parse_footer(b"".join((head, tail)), size, obj.url)
            except FooterNeedsMore as again:
                raise errors.CorruptFile(
                    f"footer length changed between reads ({more.needed} then {again.needed} bytes)",
                    bucket=obj.bucket,
                    key=obj.key,
                ) from None
        footer = Footer(metadata, size)
        self._footers.put(_key(obj), footer)
        return footer

    # ----------------------------------------------------------------- batches

    def iter_batches(
        self,
        pieces: Sequence[FilePiece],
        *,
        schema: pa.Schema,
        partition_schema: pa.Schema | None = None,
        predicates: list | None = None,
        exact_filter: bool = True,
        ignore_missing: bool = False,
        ignore_corrupt: bool = False,
        batch_size: int = DEFAULT_BATCH_SIZE,
        conversions: ReadConversions = DEFAULT_CONVERSIONS,
        dictionary_columns: Sequence[str] = (),
    ) -> AsyncIterator[pa.RecordBatch]:
        """Record batches of ``pieces``, in piece order, each with exactly ``schema`` + ``partition_schema`` fields.

        ``schema``'s names are the columns read and its types the target types. ``predicates`` (the project's
        ``(column, op, value)`` conjunction, on data or partition columns) prune pieces by partition values and
        row groups by statistics; ``exact_filter`` also drops the rows that do not match. A missing object raises
        NotFound unless ``ignore_missing``; a corrupt one CorruptFile unless ``ignore_corrupt`` (then it is skipped
        and logged at WARNING, never partly yielded). ``conversions`` decides how each file's column names and
        types map onto ``schema`` (default: exact names, any lossless cast). Arguments are checked here
        (InvalidConfig); reading starts at the first ``__anext__``; closing the iterator (or cancelling its task)
        cancels every read in flight. ``dictionary_columns`` (string or binary columns of ``schema``) may come as
        dictionary arrays of that type (where the file's pages are dictionary-encoded): a caller that drops rows
        before decoding them (``dictionary_decode``) copies only the strings it keeps.
        """
        unknown = sorted(set(dictionary_columns) - set(schema.names))
        if unknown:
            raise errors.InvalidConfig(f"dictionary_columns: {unknown} are not columns of the read schema")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise errors.InvalidConfig(f"batch_size: must be a whole number >= 1, got {batch_size!r}")
        partition_schema = partition_schema if partition_schema is not None else pa.schema([])
        target = combined_schema(schema, partition_schema)
        split = split_predicates(predicates, schema, partition_schema)
        expression = to_expression(split.all, target) if exact_filter and split.all else None
        options = _Options(
            schema=schema,
            target=target,
            partition_schema=partition_schema,
            predicates=split,
            expression=expression,
            ignore_missing=bool(ignore_missing),
            ignore_corrupt=bool(ignore_corrupt),
            batch_size=batch_size,
            conversions=conversions,
            dictionary_columns=frozenset(dictionary_columns),
        )
        pieces = list(pieces)
        for piece in pieces:
            if not isinstance(piece, FilePiece):
                raise errors.InvalidConfig(f"pieces: expected FilePiece items, got {type(piece).__name__}")
        return self._iterate(pieces, options)

    async def _iterate(self, pieces: list[FilePiece], options: _Options) -> AsyncIterator[pa.RecordBatch]:
        run = _Run(ByteBudget(self._window_bytes), asyncio.Semaphore(2 * self.engine.config.max_concurrency))
        loop = asyncio.get_running_loop()
        run.launcher = loop.create_task(self._launch(pieces, options, run))
        run.feeder = loop.create_task(self._feed(options, run))
        watch = ConsumerWatch("the parquet read", run.abort)
        skipping: int | None = None
        pending: list[pa.RecordBatch] = []
        try:
            while True:
                watch.check()
                job = await run.jobs.get()
                if job is None:
                    return
                unit = job.unit
                if unit.index == skipping:
                    await job.discard(run)
                    run.release(unit)
                    continue
                if not options.buffered:
                    while (batch := await job.next_batch()) is not None:
                        self._c.rows += batch.num_rows
                        self._c.batches += 1
                        yield batch
                        watch.follow()
                        watch.check()
                    await job.discard(run)
                    self._c.row_groups_read += len(job.row_groups)
                    if job.last:
                        run.release(unit)
                        if unit.last:
                            self._c.files += 1
                    job = unit = batch = None  # type: ignore[assignment]  # hold nothing while waiting for the next
                    continue
                try:
                    batches = await job.all_batches()
                except (errors.NotFound, errors.CorruptFile) as exc:
                    if not self._ignorable(exc, options):
                        raise
                    self._skip(unit, exc)
                    skipping, pending = unit.index, []
                    for other in run.live:  # the piece's later units: their fetches are of no use now
                        if other.index == skipping and other.task is not None:
                            other.task.cancel()
                    await job.discard(run)
                    run.release(unit)
                    continue
                await job.discard(run)
                self._c.row_groups_read += len(job.row_groups)
                pending.extend(batches)
                if job.last:
                    run.release(unit)
                    if unit.last:
                        self._c.files += 1
                        ready, pending = pending, []
                        for batch in ready:
                            self._c.rows += batch.num_rows
                            self._c.batches += 1
                            yield batch
                            watch.follow()
                            watch.check()
                job = unit = batch = batches = ready = None  # type: ignore[assignment]
        finally:
            watch.close()
            await asyncio.gather(*run.abort(), return_exceptions=True)
            if run.decoders:  # a thread cannot be stopped: wait for the ones in progress, drop what they decoded
                await asyncio.gather(*(decoder.close() for decoder in list(run.decoders)), return_exceptions=True)

    @staticmethod
    def _ignorable(exc: BaseException, options: _Options) -> bool:
        return (isinstance(exc, errors.NotFound) and options.ignore_missing) or (
            isinstance(exc, errors.CorruptFile) and options.ignore_corrupt
        )

    def _skip(self, unit: _Unit, exc: BaseException) -> None:
        self._c.files_skipped += 1
        what = "missing" if isinstance(exc, errors.NotFound) else "corrupt"
        log.warning("skipping %s file %s: %s", what, unit.piece.url, exc)

    async def _unit_jobs(self, unit: _Unit, options: _Options) -> list[_Job]:
        """The jobs of one unit once fetched: one per row group (one for all of a small object), or its failure."""
        if unit.error is not None:
            return [_Job(unit, error=unit.error)]
        if unit.task is None:  # pruned while planning: nothing to read
            return [_Job(unit)]
        assert unit.finisher is not None
        if not unit.task.done():  # not ``await``: a fetch cancelled for a skipped piece must not stop the feed
            await asyncio.wait([unit.task])
        if unit.task.cancelled():
            return [_Job(unit)]
        try:
            fetched = unit.task.result()
        except Exception as exc:
            return [_Job(unit, error=exc)]
        if fetched.source is None or not fetched.row_groups:
            return [_Job(unit)]
        url = unit.piece.url
        metadata = fetched.footer.metadata
        # the file's top-level leaves, worked out once for both where either needs them
        leaves = (
            top_level_leaves(metadata) if options.conversions.case_insensitive or options.dictionary_columns else None
        )
        columns = options.file_columns(metadata, url, leaves)
        dictionary_columns = (
            options.file_dictionary_columns(metadata, url, fetched.row_groups, leaves)
            if leaves is not None and options.dictionary_columns
            else []
        )
        int96_unit = options.conversions.int96_unit
        data = fetched.source
        if fetched.small:
            assert not isinstance(data, list)
            groups: list[list[int]] = [fetched.row_groups]
            size = len(data)
        else:
            assert isinstance(data, list)
            groups = [[rg] for rg in fetched.row_groups]
            size = sum(len(segment) for _, segment in data)
        finisher = unit.finisher
        adjustment = file_adjustment(options.conversions, metadata, url)
        threaded = size >= DECODE_IN_THREAD_BYTES

        def work(row_groups: list[int]) -> Iterator[pa.RecordBatch]:
            # A file object of its own per call: two row groups of a unit may decode at once, in two threads.
            source: Any = (
                pa.BufferReader(pa.py_buffer(data))
                if not isinstance(data, list)
                else SparseFile(fetched.footer.size, data, url)
            )
            decoded = decode(
                source,
                metadata,
                row_groups,
                columns,
                url=url,
                batch_size=options.batch_size,
                int96_unit=int96_unit,
                use_threads=threaded,  # a large row group's columns decode in parallel
                dictionary_columns=dictionary_columns,
            )
            if adjustment is not None:
                decoded = (adjustment.apply(batch) for batch in decoded)
            return finisher.finish_each(decoded)

        return [
            _Job(unit, row_groups, functools.partial(work, row_groups), last=i == len(groups) - 1, threaded=threaded)
            for i, row_groups in enumerate(groups)
        ]

    async def _feed(self, options: _Options, run: _Run) -> None:
        """Turn units, in order, into jobs for the consumer; large row groups start decoding in worker threads.

        At most DECODE_AHEAD of them are decoding (a batch at a time, at most BATCHES_AHEAD batches ahead of the
        consumer each) and not yet handed over in full, across units: the next unit's first row group decodes while
        this unit's last one is handed over. Only units already fetched are decoded, whose bytes the budget holds
        anyway; the decoded batches are not counted (see the module doc).
        """
        try:
            while (unit := await run.queue.get()) is not None:
                for job in await self._unit_jobs(unit, options):
                    if job.threaded and job.work is not None:
                        await run.slots.acquire()
                        job.start(run)
                    run.jobs.put_nowait(job)
                unit = job = None  # type: ignore[assignment]  # hold nothing while waiting for the next unit
        finally:
            run.jobs.put_nowait(None)

    # ----------------------------------------------------------------- planning and fetching

    async def _launch(self, pieces: list[FilePiece], options: _Options, run: _Run) -> None:
        """Plan each piece in order, reserve its units' bytes in order, and start a fetch task per unit."""
        ahead = self.engine.config.max_concurrency
        next_prefetch = 0
        try:
            for index, piece in enumerate(pieces):
                while next_prefetch < len(pieces) and next_prefetch <= index + ahead:
                    ahead_piece = pieces[next_prefetch]
                    obj = ahead_piece.obj
                    if (
                        not self._is_small(obj)
                        and self._footers.get(_key(obj)) is None
                        and self._partition_may_match(ahead_piece, options)
                    ):
                        run.prefetch[next_prefetch] = asyncio.get_running_loop().create_task(self._footer(obj))
                    next_prefetch += 1
                try:
                    units = await self._plan_piece(index, piece, options, run)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    run.queue.put_nowait(_Unit(index, piece, error=exc))
                    if isinstance(exc, errors.S3IOError) and self._ignorable(exc, options):
                        continue
                    break
                for unit in units:
                    if unit.finisher is None:  # pruned: passes through the queue only to keep the count in order
                        run.queue.put_nowait(unit)
                        continue
                    await run.lookahead.acquire()
                    unit.counted = True
                    unit.lease = Lease(run.window, self._held)
                    run.live.append(unit)
                    await unit.lease.resize(unit.reserve)
                    unit.task = asyncio.get_running_loop().create_task(self._fetch_unit(unit, options))
                    run.queue.put_nowait(unit)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # a bug here must reach the consumer, not leave it waiting forever
            run.queue.put_nowait(_Unit(len(pieces), pieces[-1], error=exc))
        finally:
            for task in run.prefetch.values():
                task.cancel()
            stale = list(run.prefetch.values())
            run.prefetch.clear()
            if stale:
                await asyncio.gather(*stale, return_exceptions=True)
            run.queue.put_nowait(None)

    @staticmethod
    def _partition_may_match(piece: FilePiece, options: _Options) -> bool:
        """Whether the piece survives partition pruning (True when unsure: planning reports the error)."""
        if not options.predicates.partition:
            return True
        try:
            row = partition_row(piece.partition_values, options.partition_schema, piece.url)
            return partition_matches(row, options.partition_schema, options.predicates)
        except Exception:
            return True

    async def _plan_piece(self, index: int, piece: FilePiece, options: _Options, run: _Run) -> list[_Unit]:
        """The units of one piece (none when it is pruned); may await its footer (large objects)."""
        url = piece.url
        row = partition_row(piece.partition_values, options.partition_schema, url)
        if not partition_matches(row, options.partition_schema, options.predicates):
            self._c.files_pruned += 1
            return [_Unit(index, piece)]
        finisher = BatchFinisher(
            options.schema,
            options.target,
            row,
            options.expression,
            url,
            options.conversions,
            dictionary_columns=options.dictionary_columns,
        )
        obj = piece.obj
        if self._is_small(obj):
            footer = self._footers.get(_key(obj))
            if footer is not None and not self._groups(footer, piece, options, count=False):
                self._kept.take(_key(obj))
                self._count_pruned(footer, piece, [])
                self._c.files_pruned += 1
                return [_Unit(index, piece)]
            return [_Unit(index, piece, finisher, reserve=max(0, obj.size))]
        prefetched = run.prefetch.pop(index, None)
        footer = await prefetched if prefetched is not None else await self._footer(obj)
        groups = self._groups(footer, piece, options)
        if not groups:
            self._c.files_pruned += 1
            return [_Unit(index, piece)]
        config = self.engine.config
        plans = plan_units(
            footer.metadata,
            footer.size,
            groups,
            options.file_columns(footer.metadata, url),
            unit_bytes=self._unit_bytes,
            coalesce_gap=config.coalesce_gap,
            url=url,
        )
        return [
            _Unit(index, piece, finisher, plan, footer, last=i == len(plans) - 1, reserve=plan.fetch_bytes)
            for i, plan in enumerate(plans)
        ]

    def _groups(self, footer: Footer, piece: FilePiece, options: _Options, *, count: bool = True) -> list[int]:
        groups = select_groups(
            footer.metadata, piece.row_groups, options.predicates, options.schema, piece.url, options.conversions
        )
        if count:
            self._count_pruned(footer, piece, groups)
        return groups

    def _count_pruned(self, footer: Footer, piece: FilePiece, groups: list[int]) -> None:
        considered = footer.metadata.num_row_groups if piece.row_groups is None else len(set(piece.row_groups))
        self._c.row_groups_pruned += considered - len(groups)

    async def _fetch_unit(self, unit: _Unit, options: _Options) -> _Fetched:
        """The data of one unit: chunk ranges of a large object, or a small object whole (kept, or one GET)."""
        piece, obj = unit.piece, unit.piece.obj
        if unit.plan is not None:
            assert unit.footer is not None
            segments: list[tuple[int, Blob]] = []
            if unit.plan.ranges:
                sized = obj if obj.size >= 0 else dataclasses.replace(obj, size=unit.footer.size)
                segments = await self.engine.fetch_segments(sized, list(unit.plan.ranges))  # read in place
                self._c.bytes_fetched += sum(end - start for start, end in unit.plan.ranges)
            return _Fetched(unit.footer, list(unit.plan.row_groups), segments, small=False)
        key = _key(obj)
        data = self._kept.take(key)
        footer = self._footers.get(key)
        if data is not None:
            self._c.kept_object_hits += 1
            if footer is None:  # evicted from the footer cache meanwhile: parse it again from the kept bytes
                footer = Footer(parse_footer(data, len(data), obj.url), len(data))
                self._footers.put(key, footer)
        elif footer is not None:
            data = await self.engine.fetch_object(obj)
            self._c.bytes_fetched += len(data)
        else:
            footer, data = await self._flights.get(("whole", key), lambda: self._load_small(obj), cache=False)
            self._kept.take(key)  # a concurrent metadata() of the same object may have kept the shared bytes
        assert footer is not None and data is not None
        groups = self._groups(footer, piece, options)
        if not groups:
            self._c.files_pruned += 1
        return _Fetched(footer, groups, data if groups else None, small=True)


def _key(obj: ObjectInfo) -> Hashable:
    """Cache key of one version of an object: its ETag when the listing gave one."""
    return (obj.bucket, obj.key, bare_etag(obj.etag) if obj.etag else None)


def _read_schema(schemas: list[tuple[str, pa.Schema]]) -> pa.Schema:
    """``unify_schemas`` of the files, keeping the first one's schema metadata."""
    return unify_schemas(schemas).with_metadata(schemas[0][1].metadata)
