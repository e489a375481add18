"""RangeEngine: reads byte ranges and whole objects through S3Client with coalescing, parallel parts, a
concurrency limit, a memory budget, single-flight deduplication, hedging, and one task per streamed request.

Composition of one GET, outermost first: byte budget (reserved per call before any GET) → single-flight
(identical GETs in flight are shared) → concurrency slot → hedge → ``S3Client.get_range`` (deadlines,
retries, ETag-pinned resume).

Version safety: every GET of one read is pinned with If-Match to ``obj.etag`` when known; otherwise to the
ETag this engine first saw for that object (kept in a bounded map, so a footer and the column chunks read
in later calls come from one version), else to the first response of the read. GETs issued in parallel
before any ETag is known are compared afterwards: differing ETags or sizes raise ObjectChanged. Partial
data is never returned: any failed part fails the call with an error naming the object.

Integrity: a small object is one whole-object GET, which the client checks against the checksum its store keeps. A
large object read whole (``fetch_object``) is read in parts, which S3's checksums do not cover one by one: once every
part has landed, the one buffer they landed in is checked against the full-object checksum (one HEAD, pinned to the
read's ETag, ``object_checksum``); on a mismatch nothing is returned, the object is read again (the parts it shared
or cached are dropped first), and ChecksumMismatch names it after ``FULL_READ_ATTEMPTS``. Ranges are not checked:
no checksum S3 keeps covers an arbitrary range (docs/integrity.md).
"""

from __future__ import annotations

import asyncio
import bisect
import functools
import itertools
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from s3io import errors
from s3io.aio import map_bounded
from s3io.engine.budget import ByteBudget, Lease
from s3io.engine.buffers import BufferPool, retained
from s3io.engine.config import EngineConfig
from s3io.engine.consumer import ConsumerWatch
from s3io.engine.hedge import Hedger
from s3io.engine.ranges import Range, check_range, iter_parts, merge_ranges, slice_merged
from s3io.engine.singleflight import SingleFlight
from s3io.metrics import Metrics, MetricsSnapshot
from s3io.resilience.retryable import classify
from s3io.resilience.slots import Slots
from s3io.s3.checksums import StoredChecksum
from s3io.s3.etags import same_etag
from s3io.s3.get_range import BOUNDED, WHOLE, GetRange
from s3io.s3.object_reads import stated_size
from s3io.s3.types import GetResult, ObjectInfo
from s3io.scatter import Pieces

FULL_READ_ATTEMPTS = 3  # reads of a large object whose parts failed its full-object checksum, before giving up
UNKNOWN_SIZE = -1  # ObjectInfo.size of an object whose size is not known (e.g. built from a path alone)
MAX_LEARNED_PINS = 4096
# fetch_ranges keeps the bytes between two ranges only when they are closer than this; the gap bytes of a GET that
# merged farther ones land in scratch (``Pieces``): a gap's fresh pages cost more than a few more pieces to receive.
KEPT_GAP = 64 * 1024
# A whole object smaller than this is read as the transport's chunks joined, not into a buffer of the engine's: below
# it the transport reads the body chunk by chunk anyway (s3io.transport.landing.RECEIVE_INTO_MIN), so a buffer of
# ours would add an allocation, zeroing it, its page faults and two GC-tracked views to the same one copy (2,000
# objects of 100 KiB: 13 us of a ~110 us GET each, benchmarks/object_reads).
WHOLE_INTO_MIN = 256 * 1024
WHOLE_OBJECT = GetRange.whole()

# a read's bytes: a read-only view of the one buffer its parts landed in, or bytes (a whole object under
# WHOLE_INTO_MIN: the transport's one chunk; b"")
Blob = bytes | memoryview
Result = Blob | list[Blob]


@dataclass(frozen=True, eq=False, slots=True)
class Request:
    """One item of ``RangeEngine.stream``: some ranges of an object, or the whole object (``ranges=None``).

    Compared by identity: the stream yields back this very object with its result.
    """

    obj: ObjectInfo
    ranges: tuple[Range, ...] | None = None

    def __post_init__(self) -> None:
        if self.ranges is not None:
            object.__setattr__(self, "ranges", tuple((start, end) for start, end in self.ranges))


@dataclass(frozen=True, slots=True)
class EngineStats:
    """What the engine did so far; the client's ``stats()`` counts the HTTP requests themselves."""

    calls: int = 0  # reads asked of the engine (fetch_* calls and stream items)
    ranges_requested: int = 0
    bytes_requested: int = 0
    merged_ranges: int = 0  # non-empty requested ranges after coalescing
    coalesced_ranges: int = 0  # requested ranges that shared a GET with another
    gets: int = 0  # GETs issued by the engine (not counting hedges and the client's retries)
    shared_gets: int = 0  # GETs avoided because an identical one was in flight
    cache_hits: int = 0
    bytes_fetched: int = 0
    hedges: int = 0
    hedge_wins: int = 0
    reserved: int = 0
    peak_reserved: int = 0

    def summary(self) -> str:
        return (
            f"calls={self.calls} ranges={self.ranges_requested} merged={self.merged_ranges} gets={self.gets} "
            f"shared={self.shared_gets} cache_hits={self.cache_hits} bytes_requested={self.bytes_requested} "
            f"bytes_fetched={self.bytes_fetched} hedges={self.hedges} peak_reserved={self.peak_reserved}"
        )


@dataclass(slots=True)
class _Counters:
    calls: int = 0
    ranges_requested: int = 0
    bytes_requested: int = 0
    merged_ranges: int = 0
    coalesced_ranges: int = 0
    gets: int = 0
    bytes_fetched: int = 0


@dataclass(frozen=True, slots=True)
class _RangePlan:
    """The GETs for one fetch_ranges call: merged ranges, or the whole (small, known-size) object."""

    merged: list[Range]
    whole: bool
    fetch_bytes: int


class _Identity:
    """The version of one object across the GETs of one read: every response must agree on ETag and size."""

    __slots__ = ("etag", "obj", "size")

    def __init__(self, obj: ObjectInfo, pin: str | None) -> None:
        self.obj = obj
        self.etag = pin
        self.size: int | None = obj.size if obj.size >= 0 else None

    def verify(self, result: GetResult) -> None:
        if result.etag is not None:
            if self.etag is None:
                self.etag = result.etag
            elif not same_etag(result.etag, self.etag):
                raise errors.ObjectChanged(
                    f"object changed between GETs of one read (ETag {result.etag}, expected {self.etag})",
                    bucket=self.obj.bucket,
                    key=self.obj.key,
                )
        if result.object_size is not None:
            if self.size is None:
                self.size = result.object_size
            elif result.object_size != self.size:
                raise errors.ObjectChanged(
                    f"object is {result.object_size} bytes, expected {self.size}",
                    bucket=self.obj.bucket,
                    key=self.obj.key,
                )


@dataclass(eq=False, slots=True)
class _Slot:
    """A launched stream item: its request, its lease, its task (or the error that stopped the launcher)."""

    index: int
    request: Request | None = None
    lease: Lease | None = None
    task: asyncio.Task[Result] | None = None
    error: BaseException | None = None
    end: bool = False


@dataclass(slots=True)
class _StreamState:
    """The launched, not yet consumed items of one stream, and its launcher task."""

    detach: Callable[[asyncio.Task[Any]], bool]  # the engine's SingleFlight.detach: is an item's GET shared?
    live: deque[_Slot] = field(default_factory=deque)
    failed_at: int | None = None
    launcher: asyncio.Task[None] | None = None

    def abort(self) -> list[asyncio.Task[Any]]:
        """Cancel the launcher and every unconsumed item, release their budget; returns the tasks to await. An item
        whose GET other reads joined is left to finish it for them (``stop``), not awaited."""
        tasks: list[asyncio.Task[Any]] = []
        if self.launcher is not None:
            self.launcher.cancel()
            tasks.append(self.launcher)
        for slot in self.live:
            if slot.task is not None and self.stop(slot.task):
                tasks.append(slot.task)
            if slot.lease is not None:
                slot.lease.release()
        self.live.clear()
        return tasks

    def stop(self, task: asyncio.Task[Any]) -> bool:
        """Cancel an item's task (True), unless other reads wait on the GET it runs: then it runs on for them, its
        outcome dropped (False); it is cancelled when the last of them leaves (SingleFlight's rule)."""
        if self.detach(task):
            task.add_done_callback(_outcome_dropped)
            return False
        task.cancel()
        return True


def _finished(task: asyncio.Task[Any]) -> asyncio.Future[None]:
    """A future that resolves when ``task`` is done; cancelling it leaves the task alone."""
    done: asyncio.Future[None] = task.get_loop().create_future()

    def wake(_: asyncio.Task[Any]) -> None:
        if not done.done():
            done.set_result(None)

    task.add_done_callback(wake)
    return done


def _outcome_dropped(task: asyncio.Task[Any]) -> None:
    """A detached item's result or error: nobody reads it (retrieved here, so asyncio does not log it as lost)."""
    if not task.cancelled():
        task.exception()


class RangeSource(Protocol):
    """What the engine (and the dataset reader above it) needs of a client: ranged GETs (written ``into`` a buffer
    of the range's length when one is given), the metrics they are counted in, a snapshot of them. S3Client is one;
    a test may hand the engine any other."""

    metrics: Metrics

    async def get_range(
        self, bucket: str, key: str, want: GetRange, *, if_match: str | None = None, into: memoryview | None = None
    ) -> GetResult: ...

    async def head_object(self, bucket: str, key: str, *, if_match: str | None = None) -> ObjectInfo: ...

    def stats(self) -> MetricsSnapshot: ...


@runtime_checkable
class ChecksumSource(Protocol):
    """What a source offers to check a large object read whole in parts (S3Client does): the checksum its store keeps
    for the whole object, pinned to an ETag, or None. A source without it has those reads unchecked."""

    async def object_checksum(self, bucket: str, key: str, *, if_match: str | None = None) -> StoredChecksum | None: ...


class RangeEngine:
    """Range reads of S3 objects for the parquet layer; one event loop (like its S3Client)."""

    def __init__(self, client: RangeSource, config: EngineConfig | None = None) -> None:
        self.client = client
        self.config = config if config is not None else EngineConfig()
        self.budget = ByteBudget(self.config.memory_budget)
        self.hedger = Hedger(
            enabled=self.config.hedge_enabled,
            delay=self.config.hedge_delay,
            max_fraction=self.config.hedge_max_fraction,
            max_size=self.config.whole_object_threshold,
            metrics=client.metrics,
        )
        self._slots = Slots(self.config.max_concurrency)  # GETs in flight; an uncontended take is a plain call
        self._flights: SingleFlight[tuple[Any, ...], GetResult] = SingleFlight(
            max_bytes=self.config.cache_bytes, size_of=lambda result: retained(result.data)
        )
        self._pins: OrderedDict[tuple[str, str], str] = OrderedDict()
        self._counters = _Counters()
        # the mapped buffers of this engine's reads, reused once let go of (warm pages; at most a budget's worth)
        self._buffers = BufferPool(self.config.memory_budget)

    def __repr__(self) -> str:
        return f"RangeEngine({self.client!r}, {self.config.describe()})"

    def stats(self) -> EngineStats:
        """A snapshot of the engine's counters (see EngineStats)."""
        c = self._counters
        return EngineStats(
            calls=c.calls,
            ranges_requested=c.ranges_requested,
            bytes_requested=c.bytes_requested,
            merged_ranges=c.merged_ranges,
            coalesced_ranges=c.coalesced_ranges,
            gets=c.gets,
            shared_gets=self._flights.joins,
            cache_hits=self._flights.hits,
            bytes_fetched=c.bytes_fetched,
            hedges=self.hedger.hedges,
            hedge_wins=self.hedger.hedge_wins,
            reserved=self.budget.reserved,
            peak_reserved=self.budget.peak,
        )

    # ----------------------------------------------------------------- public reads

    async def fetch_ranges(self, obj: ObjectInfo, ranges: Sequence[Range]) -> list[Blob]:
        """The bytes of each ``[start, end)`` range, in request order; all or nothing.

        Ranges closer than ``coalesce_gap`` share a GET; a range is a read-only ``memoryview`` (no copy) of a buffer
        holding its run (itself and the ranges within ``KEPT_GAP`` of it), which it keeps alive while it is held; the
        bytes a GET brings between runs land in scratch and are not kept."""
        reservation, run = self._prepare_ranges(obj, list(ranges))
        return await self._direct(obj, reservation, run)

    async def fetch_segments(self, obj: ObjectInfo, ranges: Sequence[Range]) -> list[tuple[int, Blob]]:
        """Bytes covering every ``[start, end)`` range as ``(offset, bytes)`` segments in offset order; all or nothing.

        The GETs of ``fetch_ranges``; one segment per run of ranges closer than ``KEPT_GAP`` (a span's bytes between
        runs are received into scratch, not kept), no range cut out of it: a reader over segments (``SparseFile``)
        reads them in place, and a read outside every range fails there (``RangeNotFetched``) instead of decoding
        bytes that happened to be fetched.
        """
        ranges = list(ranges)
        plan = self._plan_ranges(obj, ranges)

        async def run(lease: Lease) -> list[tuple[int, Blob]]:
            return await self._read_segments(obj, ranges, plan)

        return await self._direct(obj, plan.fetch_bytes, run)

    async def fetch_object(self, obj: ObjectInfo) -> Blob:
        """The whole object: one GET when the size is known and at most part_size, else parallel parts, all landing
        in one buffer (a read-only ``memoryview`` of it is returned; ``bytes`` for an object under WHOLE_INTO_MIN)."""
        reservation, run = self._prepare_object(obj)
        return await self._direct(obj, reservation, run)

    async def fetch_tail(self, obj: ObjectInfo, n: int) -> tuple[Blob, int]:
        """The last ``n`` bytes (all of a smaller object) and the object's size; a suffix GET if size is unknown."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise errors.InvalidConfig(
                f"tail: n must be a whole number >= 1, got {n!r}", bucket=obj.bucket, key=obj.key
            )
        if obj.size >= 0:
            start = max(0, obj.size - n)
            reservation, run = self._prepare_ranges(obj, [(start, obj.size)])
            data = await self._direct(obj, reservation, run)
            return data[0], obj.size

        async def tail(lease: Lease) -> tuple[Blob, int]:
            return await self._read_tail(obj, n, lease)

        return await self._direct(obj, n, tail)

    async def stream(self, requests: Iterable[Request]) -> AsyncIterator[tuple[Request, Result]]:
        """``(request, result)`` for each request, in request order; each request is fetched by its own task.

        ``result`` is the bytes (``Blob``) of a whole-object request and a list of them for a ranges request.
        Look-ahead is bounded by bytes (the engine's budget and this stream's window, stream_window) and by
        count (2 x max_concurrency requests). Budget contract: the bytes of a result stay reserved until
        the consumer asks for the next item (or closes the stream); keeping a result longer than that is
        the consumer's own memory. An error stops the stream at the failed request (earlier results are
        yielded first) and names the object; later requests are cancelled. When the stream is closed
        (``aclose``, ``contextlib.aclosing``), or the task iterating it is cancelled (even between two items),
        every outstanding task is cancelled and its budget released (an item whose GET other reads joined is left to
        finish it for them, and cancelled when they leave); resumed after that, the stream raises instead of ending.
        A task that ends otherwise hands the stream to the next (``asyncio.wait_for`` per item works).
        One task consuming several streams in lockstep must keep their windows together below memory_budget.
        """
        window = ByteBudget(self.config.effective_stream_window)
        lookahead = Slots(2 * self.config.max_concurrency)
        queue: asyncio.Queue[_Slot] = asyncio.Queue()
        state = _StreamState(self._flights.detach)
        state.launcher = asyncio.get_running_loop().create_task(self._launch(requests, window, lookahead, queue, state))
        watch = ConsumerWatch("the engine's stream", state.abort)
        try:
            while True:
                watch.check()
                slot = await queue.get()
                if slot.end:
                    return
                if slot.error is not None:
                    raise slot.error
                assert slot.task is not None and slot.request is not None and slot.lease is not None
                if not slot.task.done():
                    # not ``await slot.task``: this consumer's cancellation would cancel the item with it, even one
                    # whose GET other reads share; abort (below) decides that
                    await _finished(slot.task)
                result = slot.task.result()
                try:
                    yield slot.request, result
                finally:
                    slot.lease.release()
                    lookahead.give()
                    if state.live and state.live[0] is slot:
                        state.live.popleft()
                watch.follow()
        finally:
            watch.close()
            await asyncio.gather(*state.abort(), return_exceptions=True)

    # ----------------------------------------------------------------- planning

    def _prepare_ranges(self, obj: ObjectInfo, ranges: list[Range]) -> tuple[int, Callable[[Lease], Awaitable[Any]]]:
        plan = self._plan_ranges(obj, ranges)

        async def run(lease: Lease) -> list[Blob]:
            return await self._read_ranges(obj, ranges, plan)

        return plan.fetch_bytes, run

    def _prepare_object(
        self, obj: ObjectInfo, *, own_task: bool = False
    ) -> tuple[int, Callable[[Lease], Awaitable[Any]]]:
        run = functools.partial(self._read_object, obj, own_task=own_task)
        return (obj.size if obj.size >= 0 else self.config.part_size), run

    def _plan_ranges(self, obj: ObjectInfo, ranges: list[Range]) -> _RangePlan:
        try:
            for start, end in ranges:
                check_range(start, end)
        except errors.InvalidConfig as exc:
            raise exc.with_context(bucket=obj.bucket, key=obj.key) from None
        if obj.size >= 0:
            for start, end in ranges:
                if end > obj.size:
                    raise errors.InvalidConfig(
                        f"range ({start}, {end}) ends past the end of the object ({obj.size} bytes)",
                        bucket=obj.bucket,
                        key=obj.key,
                    )
        if not any(end > start for start, end in ranges):
            return _RangePlan([], False, 0)
        if 0 <= obj.size <= self.config.whole_object_threshold:
            return _RangePlan([(0, obj.size)], True, obj.size)
        merged = merge_ranges(ranges, self.config.coalesce_gap)
        return _RangePlan(merged, False, sum(end - start for start, end in merged))

    # ----------------------------------------------------------------- execution

    async def _direct(self, obj: ObjectInfo, reservation: int, run: Callable[[Lease], Awaitable[Any]]) -> Any:
        """Run one read under its own lease on the engine budget, released when the result is returned."""
        lease = Lease(self.budget)
        try:
            await lease.resize(reservation)
            return await _named(obj, run(lease))
        finally:
            lease.release()

    async def _read_ranges(self, obj: ObjectInfo, ranges: list[Range], plan: _RangePlan) -> list[Blob]:
        if not self._count_ranges(ranges, plan):
            return [b""] * len(ranges)
        held, blobs = await self._read_held(obj, ranges, plan)
        return slice_merged(ranges, held, blobs)

    async def _read_segments(self, obj: ObjectInfo, ranges: list[Range], plan: _RangePlan) -> list[tuple[int, Blob]]:
        if not self._count_ranges(ranges, plan):
            return []
        held, blobs = await self._read_held(obj, ranges, plan)
        return [(start, blob) for (start, _), blob in zip(held, blobs, strict=True)]

    async def _read_held(
        self, obj: ObjectInfo, ranges: list[Range], plan: _RangePlan
    ) -> tuple[list[Range], list[Blob]]:
        """(the runs kept, their bytes) of a ranges read: the whole object when the plan reads it whole, else the
        ranges merged within ``KEPT_GAP`` (each inside one of the plan's spans) with the gaps between them not kept."""
        identity = self._identity(obj)
        if plan.whole:
            held, blobs = plan.merged, [await self._read_whole(obj, identity)]
        else:
            held = merge_ranges(ranges, min(KEPT_GAP, self.config.coalesce_gap))
            blobs = await self._read_kept(obj, plan.merged, held, identity)
        self._learn(obj, identity)
        return held, blobs

    def _count_ranges(self, ranges: list[Range], plan: _RangePlan) -> bool:
        """Count one ranges call; False when it has nothing to fetch."""
        c = self._counters
        c.calls += 1
        c.ranges_requested += len(ranges)
        c.bytes_requested += sum(end - start for start, end in ranges)
        if not plan.merged:
            return False
        nonempty = sum(1 for start, end in ranges if end > start)
        c.merged_ranges += len(plan.merged)
        c.coalesced_ranges += max(0, nonempty - len(plan.merged)) if not plan.whole else max(0, nonempty - 1)
        return True

    async def _read_object(self, obj: ObjectInfo, lease: Lease, *, own_task: bool = False) -> Blob:
        """``own_task``: this read is all its task does (a stream's item), so a GET it shares runs in that task."""
        self._counters.calls += 1
        identity = self._identity(obj)
        part_size = self.config.part_size
        if 0 <= obj.size <= part_size:
            data = await self._read_whole(obj, identity, own_task=own_task)
        else:
            data = await self._read_checked(obj, identity, lease)
        self._counters.bytes_requested += len(data)
        self._learn(obj, identity)
        return data

    async def _read_checked(self, obj: ObjectInfo, identity: _Identity, lease: Lease) -> Blob:
        """A large (or unsized) object read whole in parts, checked against its full-object checksum when its source
        states one (asked beside the parts when the ETag is known, after them otherwise): read again on a mismatch
        (whether to is ``classify``'s call), never returned unchecked."""
        checksum_of = self.client.object_checksum if isinstance(self.client, ChecksumSource) else None
        attempt = 0
        while True:
            attempt += 1
            head = None
            if checksum_of is not None and identity.etag is not None:
                head = asyncio.ensure_future(checksum_of(obj.bucket, obj.key, if_match=identity.etag))
            try:
                if obj.size > self.config.part_size:
                    (data,) = await self._read_spans(obj, [(0, obj.size)], identity)
                else:
                    data = await self._read_unknown_size(obj, identity, lease)
                if checksum_of is None:
                    return data
                stated: StoredChecksum | None = await (
                    head if head is not None else checksum_of(obj.bucket, obj.key, if_match=identity.etag)
                )
            finally:
                if head is not None:  # cancelled if the parts failed first; its outcome always retrieved
                    head.cancel()
                    await asyncio.gather(head, return_exceptions=True)
            if stated is None or stated.matches(data):
                return data
            mismatch = errors.ChecksumMismatch(
                f"the {len(data)} bytes read in parts do not have the {stated.describe()} the store states for the "
                "object (a part damaged on the way, or another object's bytes): not returned",
                bucket=obj.bucket,
                key=obj.key,
                attempts=attempt,
            )
            self._flights.invalidate_where(lambda key: key[:2] == (obj.bucket, obj.key))
            if not classify(mismatch).retry or attempt >= FULL_READ_ATTEMPTS:
                raise mismatch

    async def _read_unknown_size(self, obj: ObjectInfo, identity: _Identity, lease: Lease) -> Blob:
        """First part learns the size from Content-Range; the rest follow in parallel, pinned to its ETag.

        An answer that does not state the size (a 206 of total "*", a 200 of unstated length cut at the part's
        end) is not taken for the whole object, nor followed part after part (a server that never states it would
        be read forever): one HEAD, pinned to the same ETag, gives the size the rest is read to. The size comes from
        the server, so nothing is allocated for it up front: each later part lands in its own buffer as it is asked
        for, and the parts are joined (a server that claims a petabyte fails at its second part, not at an
        allocation)."""
        part_size = self.config.part_size
        first = await self._get_or_whole(obj, GetRange.bounded(0, part_size), identity)
        position = len(first.data)
        if identity.size is None:
            identity.size = (
                position
                if position < part_size
                else await stated_size(self.client.head_object, obj.bucket, obj.key, etag=identity.etag, held=position)
            )
        size = identity.size
        if size <= position:
            await lease.resize(size)
            return first.data[:size]
        await lease.resize(size)
        rest = await self._read_parts(obj, position, size, identity)
        return b"".join([first.data, *(data for _, data in rest)])

    async def _read_tail(self, obj: ObjectInfo, n: int, lease: Lease) -> tuple[Blob, int]:
        self._counters.calls += 1
        identity = self._identity(obj)
        result = await self._get_or_whole(obj, GetRange.suffix(n), identity)
        size = identity.size if identity.size is not None else len(result.data)
        data = result.data
        if len(data) > n:
            data = data[-n:]
        if len(data) != min(n, size):
            raise errors.Truncated(
                f"suffix GET returned {len(data)} bytes, expected {min(n, size)}", bucket=obj.bucket, key=obj.key
            )
        await lease.resize(len(data))
        self._counters.ranges_requested += 1
        self._counters.bytes_requested += len(data)
        self._learn(obj, identity)
        return data, size

    async def _read_whole(self, obj: ObjectInfo, identity: _Identity, *, own_task: bool = False) -> Blob:
        """One GET without a Range header, into a buffer of the size we were told (if any), which it must match."""
        size = identity.size
        into = None
        if size is not None and size >= WHOLE_INTO_MIN:
            into = memoryview(self._buffers.take(size))[:size]
        result = await self._get(obj, WHOLE_OBJECT, identity, exact=False, into=into, own_task=own_task)
        if size is not None and len(result.data) != size:
            raise errors.Truncated(
                f"GET returned {len(result.data)} bytes of a {size}-byte object", bucket=obj.bucket, key=obj.key
            )
        return result.data if into is None else into.toreadonly()

    async def _read_spans(self, obj: ObjectInfo, spans: list[Range], identity: _Identity) -> list[Blob]:
        """Each ``[start, end)`` span in one buffer of its own, filled by part_size parts landing at their offsets."""
        views = [memoryview(self._buffers.take(end - start))[: end - start] for start, end in spans]
        await self._fill(obj, identity, [(start, end, view) for (start, end), view in zip(spans, views, strict=True)])
        return [view.toreadonly() for view in views]

    async def _read_kept(
        self, obj: ObjectInfo, spans: list[Range], runs: list[Range], identity: _Identity
    ) -> list[Blob]:
        """The bytes of each run (``runs``: in offset order, each inside one span), side by side in one buffer the
        size of the runs alone (a let-go one of the engine's, or fresh and faulted in by the pager); a span's bytes
        between its runs land in scratch (``Pieces``), never in memory kept for the caller."""
        buffer = self._buffers.take(sum(end - start for start, end in runs))
        offsets = list(itertools.accumulate((end - start for start, end in runs), initial=0))
        views = [memoryview(buffer)[offsets[i] : offsets[i + 1]] for i in range(len(runs))]
        jobs: list[tuple[int, int, memoryview | Pieces]] = []
        first = 0
        for start, end in spans:
            last = bisect.bisect_right(runs, (end, end), lo=first)  # the runs inside this span: first .. last - 1
            if runs[first:last] == [(start, end)]:
                jobs.append((start, end, views[first]))  # no gap: a plain buffer (a GET others may share)
            else:
                kept = [(runs[i][0], views[i]) for i in range(first, last)]
                jobs.append((start, end, Pieces.of_runs(start, end, kept)))
            first = last
        await self._fill(obj, identity, jobs)
        return [view.toreadonly() for view in views]

    async def _fill(
        self, obj: ObjectInfo, identity: _Identity, jobs: list[tuple[int, int, memoryview | Pieces]]
    ) -> None:
        """Fill each ``(start, end, target)``: ``[start, end)`` of the object landing in ``target`` by part_size parts
        at their offsets.

        One fixed set of workers (as many as parts may be in flight, never more) takes the parts of every span in
        turn: a read of many small spans starts a few tasks, not max_concurrency per span."""
        part_size = self.config.part_size
        parts = [
            (target[offset - start : stop - start], offset, stop)
            for start, end, target in jobs
            for offset, stop in iter_parts(start, end, part_size)
        ]

        async def part(job: tuple[memoryview | Pieces, int, int]) -> None:
            window, offset, stop = job
            await self._get(obj, GetRange.bounded(offset, stop), identity, into=window)

        await map_bounded(part, parts, self.config.max_concurrency)

    async def _read_parts(self, obj: ObjectInfo, start: int, end: int, identity: _Identity) -> list[tuple[int, Blob]]:
        """``[start, end)`` (whose end a server told) as ``(offset, bytes)`` of part_size parts, each in its own
        buffer, fetched concurrently, in offset order; the parts are asked for one at a time (``iter_parts``)."""

        async def part(span: Range) -> tuple[int, Blob]:
            return span[0], (await self._get(obj, GetRange.bounded(*span), identity)).data

        return await map_bounded(part, iter_parts(start, end, self.config.part_size), self.config.max_concurrency)

    async def _get_or_whole(self, obj: ObjectInfo, want: GetRange, identity: _Identity) -> GetResult:
        """A GET whose range may not fit the object; S3 answers 416 for any range of an empty object."""
        try:
            return await self._get(obj, want, identity, exact=False)
        except errors.RequestError as exc:
            if exc.status != 416:
                raise
        return await self._get(obj, WHOLE_OBJECT, identity, exact=False)

    async def _get(
        self,
        obj: ObjectInfo,
        want: GetRange,
        identity: _Identity,
        *,
        exact: bool = True,
        into: memoryview | Pieces | None = None,
        own_task: bool = False,
    ) -> GetResult:
        """One GET, pinned to the read's ETag; checked against the read's identity.

        Reads share a GET (single-flight, and its cache) only when the read knows the version: an unpinned GET is
        pinned, once it has a slot, to whatever its read learnt meanwhile and checked against that read's identity,
        which another read joining it would not share (it would get ObjectChanged for a version it never saw), so it
        is this read's alone. With ``into`` the bytes land there: in place when this read issued the GET, copied
        there once when it shared another read's."""
        pin = identity.etag
        if pin is None or isinstance(into, Pieces):
            # Nothing another read could join or reuse (a GET of no known version is this read's alone; pieces hold
            # this read's runs only): issued directly, without single-flight's task and shield (~10 % of a small GET).
            result = await self._issue(obj, want, identity, into)
        else:
            key = (obj.bucket, obj.key, pin, want.kind, want.start, want.end, want.length)  # str/int: hashed in C
            fetch = functools.partial(self._issue, obj, want, identity, into)
            # in a task that is this read's alone (a stream's item, which the stream detaches rather than cancel while
            # others share its GET), the GET runs right here; elsewhere in a task of its own that no caller cancels
            result = await (self._flights.run_here(key, fetch) if own_task else self._flights.get(key, fetch))
        identity.verify(result)
        if into is not None and result.data is not into and len(result.data) <= len(into):
            into[: len(result.data)] = result.data  # another read's GET (or a hedge's own buffer): one copy
        if exact and want.kind == BOUNDED and len(result.data) != want.expected_length:
            start, end = want.start, want.end
            assert end is not None
            size = identity.size
            if size is not None and end > size:
                raise errors.InvalidConfig(
                    f"range ({start}, {end}) ends past the end of the object ({size} bytes)",
                    bucket=obj.bucket,
                    key=obj.key,
                )
            raise errors.Truncated(
                f"GET of ({start}, {end}) returned {len(result.data)} bytes", bucket=obj.bucket, key=obj.key
            )
        return result

    async def _issue(
        self, obj: ObjectInfo, want: GetRange, identity: _Identity, into: memoryview | Pieces | None = None
    ) -> GetResult:
        """The GET itself: a concurrency slot, then the hedger around S3Client.get_range.

        The pin is read once the slot is ours: a part that waited for a slot is pinned to the ETag of any
        part of the same read that answered meanwhile. Only the first of a hedged pair writes ``into``: two GETs
        never write one buffer.
        """
        slots = self._slots
        if not slots.try_take():
            await slots.take()
        try:
            pin = identity.etag
            self._counters.gets += 1
            if self.hedger.enabled:
                result = await self._hedged(obj, want, pin, into)
            else:  # the default: the GET itself, without the hedger's frame (or a closure) in every resume of it
                result = await self.client.get_range(obj.bucket, obj.key, want, if_match=pin, into=into)
            identity.verify(result)
        finally:
            slots.give()
        self._counters.bytes_fetched += len(result.data)
        return result

    def _hedged(
        self, obj: ObjectInfo, want: GetRange, pin: str | None, into: memoryview | Pieces | None
    ) -> Awaitable[GetResult]:
        """The GET under the hedger: a second one if the first is slow; only the first writes ``into``."""
        size = want.expected_length
        if size is None and want.kind == WHOLE:
            size = obj.size if obj.size >= 0 else None
        targets = [into]

        def fetch() -> Awaitable[GetResult]:
            target = targets.pop() if targets else None
            return self.client.get_range(obj.bucket, obj.key, want, if_match=pin, into=target)

        return self.hedger.run(fetch, size)

    # ----------------------------------------------------------------- stream plumbing

    async def _launch(
        self,
        requests: Iterable[Request],
        window: ByteBudget,
        lookahead: Slots,
        queue: asyncio.Queue[_Slot],
        state: _StreamState,
    ) -> None:
        """Reserve (window, then engine budget) and start one task per request, in order, ahead of the consumer."""
        index = 0
        try:
            for index, request in enumerate(requests):
                if not isinstance(request, Request):
                    raise errors.InvalidConfig(f"stream: expected Request items, got {type(request).__name__}")
                obj = request.obj
                if request.ranges is None:
                    reservation, run = self._prepare_object(obj, own_task=True)
                else:
                    reservation, run = self._prepare_ranges(obj, list(request.ranges))
                if not lookahead.try_take():
                    await lookahead.take()
                slot = _Slot(index, request, Lease(window, self.budget))
                state.live.append(slot)
                assert slot.lease is not None
                if not slot.lease.take_now(reservation):
                    await slot.lease.resize(reservation)
                if state.failed_at is not None:
                    return
                slot.task = asyncio.get_running_loop().create_task(_stream_item(state, slot, obj, run(slot.lease)))
                queue.put_nowait(slot)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            queue.put_nowait(_Slot(index, error=exc))
            return
        queue.put_nowait(_Slot(index + 1, end=True))

    # ----------------------------------------------------------------- version pins

    def _identity(self, obj: ObjectInfo) -> _Identity:
        pin = obj.etag or self._pins.get((obj.bucket, obj.key))
        return _Identity(obj, pin)

    def learned_etag(self, bucket: str, key: str) -> str | None:
        """The ETag a read of an object listed without one saw (later reads of it are pinned to it), or None."""
        return self._pins.get((bucket, key))

    def _learn(self, obj: ObjectInfo, identity: _Identity) -> None:
        """Remember the ETag of an object read without one, so later reads of it see the same version."""
        if obj.etag is not None or identity.etag is None:
            return
        key = (obj.bucket, obj.key)
        self._pins[key] = identity.etag
        self._pins.move_to_end(key)
        while len(self._pins) > MAX_LEARNED_PINS:
            self._pins.popitem(last=False)

    def forget(self, obj: ObjectInfo) -> None:
        """Drop the learned ETag of an object, so the next read without an ETag accepts its current version."""
        self._pins.pop((obj.bucket, obj.key), None)


async def _stream_item(state: _StreamState, slot: _Slot, obj: ObjectInfo, work: Awaitable[Any]) -> Any:
    """One stream item's task: ``work``, any failure named as ``_named`` names it (in this frame, not a second one). A
    failed item stops the stream there (the launcher and the items after it cancelled, their budget released); a
    cancelled one gives its budget back."""
    try:
        return await work
    except asyncio.CancelledError:
        if slot.lease is not None:
            slot.lease.release()
        raise
    except BaseException as exc:
        _stop_stream_at(state, slot)
        if not isinstance(exc, Exception):
            raise
        named = _named_error(obj, exc)
        raise named from named.__cause__


def _stop_stream_at(state: _StreamState, slot: _Slot) -> None:
    """Item ``slot`` failed: the stream stops there. Its budget and that of every later item (cancelled, perhaps
    before it ever ran) is released, and the launcher is cancelled."""
    if slot.lease is not None:
        slot.lease.release()
    if state.failed_at is None or slot.index < state.failed_at:
        state.failed_at = slot.index
    if state.launcher is not None:
        state.launcher.cancel()
    for other in state.live:
        if other.index > slot.index and other.task is not None:
            state.stop(other.task)
            if other.lease is not None:
                other.lease.release()


async def _named(obj: ObjectInfo, work: Awaitable[Any]) -> Any:
    """Await ``work``; any failure comes out as an S3IOError naming the object."""
    try:
        return await work
    except Exception as exc:
        named = _named_error(obj, exc)
        raise named from named.__cause__


def _named_error(obj: ObjectInfo, exc: Exception) -> errors.S3IOError:
    """``exc`` as a read of ``obj`` raises it: an S3IOError naming the object, its ``__cause__`` the error behind it
    (an S3IOError keeps its own; anything else becomes the cause of a new one)."""
    if isinstance(exc, errors.S3IOError):
        named = exc.with_context(bucket=obj.bucket, key=obj.key)
        named.__cause__ = exc.__cause__
        return named
    named = errors.S3IOError(f"read failed: {exc!r}", bucket=obj.bucket, key=obj.key, cause=exc)
    named.__cause__ = exc
    return named
