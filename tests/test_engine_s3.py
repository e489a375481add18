"""RangeEngine against a real S3 API (moto), some through the fault-injecting proxy."""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest
from support.consumers import cancel_after_one_item

import s3io
from s3io import ObjectInfo, Policy, S3Client
from s3io.engine import UNKNOWN_SIZE, EngineConfig, RangeEngine, Request
from s3io.engine.buffers import retained
from s3io.engine.engine import KEPT_GAP
from s3io.parquet.sparse import RangeNotFetched, SparseFile
from testbed.faultproxy import FaultProxy, FaultRule, Latency

pytestmark = pytest.mark.timeout(60)

KiB = 1024
T = TypeVar("T")
POLICY = Policy(max_attempts=3, backoff_base=0.01, backoff_cap=0.2)


def put(s3_client: Any, bucket: str, key: str, data: bytes) -> ObjectInfo:
    """Write an object with boto3 and describe it as a listing would (size and ETag)."""
    response = s3_client.put_object(Bucket=bucket, Key=key, Body=data)
    return ObjectInfo(bucket, key, len(data), response["ETag"])


def run(endpoint: str, config: EngineConfig, work: Callable[[RangeEngine], Awaitable[T]]) -> T:
    """Run ``work(engine)`` on a fresh event loop with a fresh client."""

    async def main() -> T:
        async with S3Client(POLICY, endpoint_url=endpoint) as client:
            return await work(RangeEngine(client, config))

    return asyncio.run(main())


def data_of(size: int, seed: int = 0) -> bytes:
    return random.Random(seed).randbytes(size)


def test_small_object_is_exactly_one_get_and_no_head(s3_endpoint: Any, bucket: str, s3_client: Any) -> None:
    data = data_of(10 * KiB)
    obj = put(s3_client, bucket, "small.bin", data)

    async def work(engine: RangeEngine) -> None:
        before = engine.client.stats()
        whole = await engine.fetch_object(obj)
        # the transport's own chunk, not copied into a buffer of the engine's: under WHOLE_INTO_MIN a buffer only
        # adds zeroing, page faults and a copy
        assert type(whole) is bytes and whole == data
        delta = engine.client.stats() - before
        assert delta.request_count == 1 and delta.requests_for("get") == 1 and delta.requests_for("head") == 0
        before = engine.client.stats()
        parts = await engine.fetch_ranges(obj, [(9000, 9100), (0, 10), (5000, 5001)])
        assert parts == [data[9000:9100], data[0:10], data[5000:5001]]
        assert (engine.client.stats() - before).request_count == 1  # whole object: below the threshold

    run(s3_endpoint.url, EngineConfig(), work)


def test_coalescing_reduces_requests_and_returns_exact_bytes(s3_endpoint: Any, bucket: str, s3_client: Any) -> None:
    data = data_of(256 * KiB, seed=1)
    obj = put(s3_client, bucket, "coalesce.bin", data)
    ranges = [(i * 20 * KiB + 7, i * 20 * KiB + 7 + KiB) for i in range(10)][::-1]

    def fetch_with(gap: int) -> tuple[int, int]:
        async def work(engine: RangeEngine) -> tuple[int, int]:
            before = engine.client.stats()
            got = await engine.fetch_ranges(obj, ranges)
            assert got == [data[s:e] for s, e in ranges]
            stats = engine.stats()
            assert stats.ranges_requested == 10 and stats.bytes_requested == 10 * KiB
            return (engine.client.stats() - before).requests_for("get"), stats.merged_ranges

        return run(s3_endpoint.url, EngineConfig(coalesce_gap=gap, whole_object_threshold=0), work)

    assert fetch_with(64 * KiB) == (1, 1)
    assert fetch_with(0) == (10, 10)


def test_large_object_is_split_into_parallel_parts_and_reassembled(
    s3_endpoint: Any, bucket: str, s3_client: Any, fault_proxy: FaultProxy
) -> None:
    data = data_of(300 * KiB + 7, seed=2)
    obj = put(s3_client, bucket, "split.bin", data)
    fault_proxy.add_rule(FaultRule(fault=Latency(0.3), method="GET", path="split.bin"))
    config = EngineConfig(part_size=64 * KiB, whole_object_threshold=0)

    async def work(engine: RangeEngine) -> None:
        assert await engine.fetch_object(obj) == data
        [middle] = await engine.fetch_ranges(obj, [(10, 200 * KiB)])
        assert middle == data[10 : 200 * KiB]

    run(fault_proxy.url, config, work)
    gets = [r for r in fault_proxy.requests if r.method == "GET"]
    assert len(gets) == 5 + 4
    first_five = gets[:5]
    assert sorted(r.range for r in first_five) == sorted(
        f"bytes={s}-{min(s + 64 * KiB, len(data)) - 1}" for s in range(0, len(data), 64 * KiB)
    )
    assert all(r.if_match == obj.etag for r in gets)
    # parallel: every part was asked for before the first part's answer was complete
    assert max(r.time for r in first_five) < min(r.finished for r in first_five if r.finished is not None)


def test_one_engine_reading_again_and_again_never_writes_a_result_its_caller_still_holds(
    s3_endpoint: Any, bucket: str, s3_client: Any
) -> None:
    """An engine reuses the buffers of reads whose callers let go of them (warm pages): a result still held, whole or
    a range of it, or only its buffer, keeps its bytes through later reads of other objects of the same size."""
    one, two = data_of(3 * 1024 * KiB, seed=11), data_of(3 * 1024 * KiB, seed=12)
    first, second = put(s3_client, bucket, "again-1.bin", one), put(s3_client, bucket, "again-2.bin", two)
    config = EngineConfig(part_size=1024 * KiB)
    ranges = [(s, s + 64 * KiB) for s in range(0, 3 * 1024 * KiB - 64 * KiB, 512 * KiB)]

    async def work(engine: RangeEngine) -> None:
        whole = await engine.fetch_object(first)
        base = whole.obj if isinstance(whole, memoryview) else whole
        held = {
            "whole": (whole, one),
            "range": ((await engine.fetch_ranges(first, ranges))[1], one[ranges[1][0] : ranges[1][1]]),
        }
        del whole
        for round_ in range(6):
            obj, data = (second, two) if round_ % 2 else (first, one)
            assert await engine.fetch_object(obj) == data  # dropped at once: its buffer may serve the next read
            assert [bytes(b) for b in await engine.fetch_ranges(obj, ranges)] == [data[a:z] for a, z in ranges]
            assert all(result == expected for result, expected in held.values()) and bytes(base) == one
            if round_ == 2:
                held.clear()  # only the first buffer itself is held now
        assert bytes(base) == one

    run(s3_endpoint.url, config, work)


def test_fetch_segments_returns_each_merged_span_as_one_buffer_its_parts_landed_in(
    s3_endpoint: Any, bucket: str, s3_client: Any
) -> None:
    data = data_of(300 * KiB + 7, seed=5)
    obj = put(s3_client, bucket, "segments.bin", data)
    config = EngineConfig(part_size=64 * KiB, whole_object_threshold=0, coalesce_gap=4 * KiB)
    ranges = [(10, 150 * KiB), (152 * KiB, 160 * KiB), (250 * KiB, 300 * KiB + 7)]

    async def work(engine: RangeEngine) -> tuple[list[tuple[int, bytes]], list[tuple[int, bytes]], int]:
        segments = await engine.fetch_segments(obj, ranges)
        empty = await engine.fetch_segments(obj, [(5, 5)])
        return segments, empty, engine.stats().merged_ranges

    segments, empty, merged = run(s3_endpoint.url, config, work)
    assert empty == []
    assert merged == 2  # the first two ranges coalesce (2 KiB apart); the third stands alone
    # one segment per merged span: its parts (64 KiB each) landed in place in one buffer, nothing joined
    assert [(start, start + len(piece)) for start, piece in segments] == [(10, 160 * KiB), (250 * KiB, 300 * KiB + 7)]
    for start, piece in segments:
        assert isinstance(piece, memoryview) and piece.readonly and piece == data[start : start + len(piece)]
    covered = {(start, start + len(piece)) for start, piece in segments}
    for start, end in ranges:  # every requested byte lies in some segment
        assert all(any(a <= b < z for a, z in covered) for b in (start, (start + end) // 2, end - 1))


def test_fetch_segments_keeps_the_runs_of_ranges_not_the_gaps_their_get_crossed(
    s3_endpoint: Any, bucket: str, s3_client: Any
) -> None:
    """Ranges farther apart than KEPT_GAP but within coalesce_gap share one GET; only their runs are kept, side by
    side in one buffer of their size, and a SparseFile over the segments refuses a read of the gap (a planning miss
    fails loudly instead of decoding bytes a merged GET happened to carry)."""
    data = data_of(2 * 1024 * KiB, seed=6)
    obj = put(s3_client, bucket, "runs.bin", data)
    config = EngineConfig(part_size=256 * KiB, whole_object_threshold=0)  # coalesce_gap: 1 MiB
    ranges = [(100, 200 * KiB), (200 * KiB + KEPT_GAP + 1, 500 * KiB), (900 * KiB, 1000 * KiB)]

    async def work(engine: RangeEngine) -> tuple[list[tuple[int, Any]], int]:
        return await engine.fetch_segments(obj, ranges), engine.stats().merged_ranges

    segments, merged = run(s3_endpoint.url, config, work)
    assert merged == 1  # one GET for all three
    assert [(start, start + len(piece)) for start, piece in segments] == ranges
    assert all(bytes(piece) == data[start : start + len(piece)] for start, piece in segments)
    assert len({id(piece.obj) for _, piece in segments}) == 1
    assert retained(segments[0][1]) == sum(end - start for start, end in ranges)
    sparse = SparseFile(len(data), segments, "s3://bucket/runs.bin")
    assert bytes(sparse.read_range(300 * KiB, 301 * KiB)) == data[300 * KiB : 301 * KiB]
    with pytest.raises(RangeNotFetched, match=r"bytes \[204900, 204901\) were not fetched"):
        sparse.read_range(200 * KiB + 100, 200 * KiB + 101)


def test_fetch_object_of_unknown_size_learns_it_from_the_first_part(
    s3_endpoint: Any, bucket: str, s3_client: Any
) -> None:
    data = data_of(200 * KiB, seed=3)
    put(s3_client, bucket, "unknown.bin", data)
    put(s3_client, bucket, "empty.bin", b"")

    async def work(engine: RangeEngine) -> None:
        before = engine.client.stats()
        assert await engine.fetch_object(ObjectInfo(bucket, "unknown.bin", UNKNOWN_SIZE)) == data
        assert (engine.client.stats() - before).requests_for("get") == 4
        assert await engine.fetch_object(ObjectInfo(bucket, "empty.bin", UNKNOWN_SIZE)) == b""
        assert engine.budget.reserved == 0

    run(s3_endpoint.url, EngineConfig(part_size=64 * KiB), work)


def test_fetch_tail_with_known_and_unknown_size(s3_endpoint: Any, bucket: str, s3_client: Any) -> None:
    data = data_of(100 * KiB, seed=4)
    obj = put(s3_client, bucket, "tail.bin", data)

    async def work(engine: RangeEngine) -> None:
        assert await engine.fetch_tail(obj, 1000) == (data[-1000:], len(data))
        unknown = ObjectInfo(bucket, "tail.bin", UNKNOWN_SIZE)
        before = engine.client.stats()
        assert await engine.fetch_tail(unknown, 1000) == (data[-1000:], len(data))
        assert await engine.fetch_tail(unknown, 10**6) == (data, len(data))
        assert (engine.client.stats() - before).requests_for("get") == 2
        with pytest.raises(s3io.InvalidConfig, match=r"tail\.bin"):
            await engine.fetch_tail(obj, 0)

    run(s3_endpoint.url, EngineConfig(whole_object_threshold=0), work)


def test_identical_concurrent_reads_share_one_get(s3_endpoint: Any, bucket: str, s3_client: Any) -> None:
    data = data_of(64 * KiB, seed=5)
    obj = put(s3_client, bucket, "shared.bin", data)

    async def work(engine: RangeEngine) -> None:
        before = engine.client.stats()
        results = await asyncio.gather(*(engine.fetch_ranges(obj, [(100, 5000)]) for _ in range(5)))
        assert all(r == [data[100:5000]] for r in results)
        assert (engine.client.stats() - before).requests_for("get") == 1
        assert engine.stats().shared_gets == 4

    run(s3_endpoint.url, EngineConfig(whole_object_threshold=0), work)


def test_stream_yields_in_request_order_even_when_later_requests_finish_first(
    s3_endpoint: Any, bucket: str, s3_client: Any, fault_proxy: FaultProxy
) -> None:
    objects = [put(s3_client, bucket, f"order/{i}.bin", data_of(4 * KiB, seed=i)) for i in range(4)]
    fault_proxy.add_rule(FaultRule(fault=Latency(0.5), method="GET", path="order/0.bin"))
    requests = [Request(obj) for obj in objects]

    async def work(engine: RangeEngine) -> list[tuple[Request, Any]]:
        return [item async for item in engine.stream(requests)]

    got = run(fault_proxy.url, EngineConfig(), work)
    assert [request for request, _ in got] == requests
    assert all(a is b for (a, _), b in zip(got, requests, strict=True))
    assert [data for _, data in got] == [data_of(4 * KiB, seed=i) for i in range(4)]
    answered = fault_proxy.wait_for_requests(4, method="GET", completed=True)
    finished = {r.path.rsplit("/", 1)[-1]: r.finished for r in answered}
    assert finished["0.bin"] > max(finished[f"{i}.bin"] for i in range(1, 4))


def test_each_stream_request_is_fetched_by_its_own_task_while_the_consumer_waits(
    s3_endpoint: Any, bucket: str, s3_client: Any
) -> None:
    objects = [put(s3_client, bucket, f"ahead/{i}.bin", data_of(2 * KiB, seed=i)) for i in range(6)]

    async def work(engine: RangeEngine) -> None:
        async with contextlib.aclosing(engine.stream([Request(o) for o in objects])) as results:
            count = 0
            async for _ in results:
                if count == 0:
                    for _ in range(500):  # the consumer sits on item 0; the others still arrive
                        if engine.stats().gets == 6:
                            break
                        await asyncio.sleep(0.01)
                    assert engine.stats().gets == 6
                count += 1
        assert count == 6

    run(s3_endpoint.url, EngineConfig(), work)


def test_memory_budget_is_never_exceeded_with_a_slow_consumer(s3_endpoint: Any, bucket: str, s3_client: Any) -> None:
    size = 64 * KiB
    objects = [put(s3_client, bucket, f"budget/{i}.bin", data_of(size, seed=i)) for i in range(10)]
    budget = 3 * size
    config = EngineConfig(memory_budget=budget, stream_window=budget, whole_object_threshold=0)

    async def work(engine: RangeEngine) -> None:
        got = []
        async for request, data in engine.stream([Request(o, [(0, size)]) for o in objects]):
            assert engine.budget.reserved <= budget
            if not got:
                await asyncio.sleep(0.3)  # slow consumer: the look-ahead must stop at the budget
                assert engine.stats().gets == 3
            await asyncio.sleep(0.01)
            got.append((request.obj.key, data))
        assert [d for _, d in got] == [[data_of(size, seed=i)] for i in range(10)]
        assert 0 < engine.budget.peak <= budget
        assert engine.budget.reserved == 0

    run(s3_endpoint.url, config, work)


def test_slow_consumer_of_one_stream_does_not_stall_another(s3_endpoint: Any, bucket: str, s3_client: Any) -> None:
    size = 32 * KiB
    slow_objects = [put(s3_client, bucket, f"slow/{i}.bin", data_of(size, seed=i)) for i in range(6)]
    fast_objects = [put(s3_client, bucket, f"fast/{i}.bin", data_of(size, seed=100 + i)) for i in range(6)]
    # the budget fits 4 results; each stream's window (budget / 4) lets it hold one ahead of its consumer
    config = EngineConfig(memory_budget=4 * size, whole_object_threshold=0)

    async def work(engine: RangeEngine) -> None:
        fast_done = asyncio.Event()

        async def slow() -> int:
            n = 0
            async for _ in engine.stream([Request(o) for o in slow_objects]):
                if n == 0:
                    await asyncio.wait_for(fast_done.wait(), 20)  # stalls until the other stream has finished
                n += 1
            return n

        async def fast() -> int:
            n = 0
            async for _, data in engine.stream([Request(o) for o in fast_objects]):
                assert data == data_of(size, seed=100 + n)
                n += 1
            fast_done.set()
            return n

        assert await asyncio.gather(slow(), fast()) == [6, 6]
        assert engine.budget.peak <= 4 * size

    run(s3_endpoint.url, config, work)


def test_cancelling_the_consumer_cancels_outstanding_reads_and_releases_budget(
    s3_endpoint: Any, bucket: str, s3_client: Any, fault_proxy: FaultProxy
) -> None:
    objects = [put(s3_client, bucket, f"cancel/{i}.bin", data_of(KiB, seed=i)) for i in range(8)]
    fault_proxy.add_rule(FaultRule(fault=Latency(30), method="GET", path=r"cancel/[1-7]\.bin"))

    async def work(engine: RangeEngine) -> None:
        got = asyncio.Event()

        async def consume() -> None:
            async for _ in engine.stream([Request(o) for o in objects]):
                got.set()
                await asyncio.sleep(3600)

        task = asyncio.create_task(consume())
        await asyncio.wait_for(got.wait(), 20)
        await asyncio.sleep(0.05)
        assert engine.budget.reserved > 0
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert engine.budget.reserved == 0
        for _ in range(200):
            if asyncio.all_tasks() == {asyncio.current_task()}:
                break
            await asyncio.sleep(0.01)
        assert asyncio.all_tasks() == {asyncio.current_task()}

    started = time.monotonic()
    run(fault_proxy.url, EngineConfig(), work)
    assert time.monotonic() - started < 25  # did not wait out the 30 s latency


def test_a_read_that_joined_the_get_of_a_cancelled_stream_gets_its_bytes_from_that_get(
    s3_endpoint: Any, bucket: str, s3_client: Any, fault_proxy: FaultProxy
) -> None:
    """A stream's item runs its GET in its own task (none for the GET itself), and a read of the same version joins
    it. Cancelling the stream's consumer returns at once, but leaves that GET running for the read that joined it:
    that read gets its bytes from it, and no second GET is sent."""
    data = data_of(4 * KiB, seed=21)
    obj = put(s3_client, bucket, "joined/x.bin", data)
    fault_proxy.add_rule(FaultRule(fault=Latency(3), method="GET", path=r"joined/x\.bin", times=1))

    def gets() -> int:
        return sum(1 for r in fault_proxy.requests if r.method == "GET" and r.path.endswith("joined/x.bin"))

    async def work(engine: RangeEngine) -> None:
        async def consume() -> None:
            async for _ in engine.stream([Request(obj)]):
                raise AssertionError("the stream's GET is held 3 s: no item before the cancellation")

        consumer = asyncio.create_task(consume())
        for _ in range(1000):  # until the stream's GET is held at the proxy
            if gets():
                break
            await asyncio.sleep(0.01)
        joined = asyncio.create_task(engine.fetch_object(obj))
        for _ in range(1000):
            if engine.stats().shared_gets:
                break
            await asyncio.sleep(0.01)
        assert engine.stats().shared_gets == 1 and gets() == 1
        consumer.cancel()
        with pytest.raises(asyncio.CancelledError):
            await consumer
        assert not joined.done()  # the consumer left at once; the GET it shared is still held at the proxy
        assert bytes(await asyncio.wait_for(joined, 20)) == data
        assert engine.budget.reserved == 0

    started = time.monotonic()
    run(fault_proxy.url, EngineConfig(), work)
    assert time.monotonic() - started < 25
    assert gets() == 1  # the joined read got its bytes from the stream's GET


def test_a_stream_item_left_running_for_a_joined_read_stops_when_that_read_is_cancelled(
    s3_endpoint: Any, bucket: str, s3_client: Any, fault_proxy: FaultProxy
) -> None:
    """The stream's GET ran on only for the read that joined it; once that read is cancelled too, nobody wants the
    bytes and the GET is cancelled (its connection closed), not waited out."""
    obj = put(s3_client, bucket, "joined/y.bin", data_of(4 * KiB, seed=22))
    fault_proxy.add_rule(FaultRule(fault=Latency(30), method="GET", path=r"joined/y\.bin", times=1))

    async def work(engine: RangeEngine) -> None:
        async def consume() -> None:
            async for _ in engine.stream([Request(obj)]):
                raise AssertionError("the stream's GET is held 30 s")

        consumer = asyncio.create_task(consume())
        joined: asyncio.Task[Any] | None = None
        for _ in range(1000):
            if joined is None and any(r.path.endswith("joined/y.bin") for r in fault_proxy.requests):
                joined = asyncio.create_task(engine.fetch_object(obj))
            if engine.stats().shared_gets:
                break
            await asyncio.sleep(0.01)
        assert joined is not None and engine.stats().shared_gets == 1
        consumer.cancel()
        await asyncio.gather(consumer, return_exceptions=True)
        others = asyncio.all_tasks() - {asyncio.current_task(), joined}
        assert len(others) == 1  # the stream's item, left running for the joined read
        joined.cancel()
        await asyncio.gather(joined, return_exceptions=True)
        for _ in range(500):
            if all(task.done() for task in others):
                break
            await asyncio.sleep(0.01)
        assert all(task.cancelled() for task in others)

    started = time.monotonic()
    run(fault_proxy.url, EngineConfig(), work)
    assert time.monotonic() - started < 20  # did not wait out the held GET


def test_error_stops_the_stream_at_the_failed_request_and_names_the_object(
    s3_endpoint: Any, bucket: str, s3_client: Any
) -> None:
    first = put(s3_client, bucket, "err/first.bin", b"first")
    last = put(s3_client, bucket, "err/last.bin", b"last")
    missing = ObjectInfo(bucket, "err/missing.bin", 10, '"0123"')

    async def work(engine: RangeEngine) -> list[bytes]:
        got: list[bytes] = []
        with pytest.raises(s3io.NotFound) as info:
            async for _, data in engine.stream([Request(first), Request(missing), Request(last)]):
                got.append(data)
        assert f"s3://{bucket}/err/missing.bin" in str(info.value)
        with pytest.raises(s3io.NotFound, match=r"err/missing\.bin"):
            await engine.fetch_ranges(missing, [(0, 5)])
        with pytest.raises(s3io.InvalidConfig, match=r"err/first\.bin"):
            await engine.fetch_ranges(first, [(0, 50)])
        assert engine.budget.reserved == 0
        return got

    assert run(s3_endpoint.url, EngineConfig(), work) == [b"first"]


def test_object_overwritten_after_listing_raises_object_changed(s3_endpoint: Any, bucket: str, s3_client: Any) -> None:
    obj = put(s3_client, bucket, "changed.bin", data_of(64 * KiB, seed=1))
    put(s3_client, bucket, "changed.bin", data_of(64 * KiB, seed=2))

    async def work(engine: RangeEngine) -> None:
        with pytest.raises(s3io.ObjectChanged, match=r"changed\.bin"):
            await engine.fetch_ranges(obj, [(0, 10), (50 * KiB, 60 * KiB)])

    run(s3_endpoint.url, EngineConfig(whole_object_threshold=0, coalesce_gap=0), work)


def test_object_overwritten_between_two_reads_without_etag_raises_object_changed(
    s3_endpoint: Any, bucket: str, s3_client: Any
) -> None:
    data = data_of(64 * KiB, seed=1)
    put(s3_client, bucket, "between.bin", data)
    obj = ObjectInfo(bucket, "between.bin", len(data))  # no ETag: the engine pins the first one it sees

    async def work(engine: RangeEngine) -> None:
        assert await engine.fetch_ranges(obj, [(0, 10)]) == [data[:10]]
        await asyncio.to_thread(put, s3_client, bucket, "between.bin", data_of(64 * KiB, seed=2))
        with pytest.raises(s3io.ObjectChanged, match=r"between\.bin"):
            await engine.fetch_ranges(obj, [(50 * KiB, 60 * KiB)])
        engine.forget(obj)
        assert await engine.fetch_ranges(obj, [(0, 10)]) == [data_of(64 * KiB, seed=2)[:10]]

    run(s3_endpoint.url, EngineConfig(whole_object_threshold=0), work)


def test_object_overwritten_between_parts_of_one_read_raises_object_changed(
    s3_endpoint: Any, bucket: str, s3_client: Any, fault_proxy: FaultProxy
) -> None:
    size = 256 * KiB
    put(s3_client, bucket, "parts.bin", data_of(size, seed=1))
    obj = ObjectInfo(bucket, "parts.bin", size)  # no ETag: the parts after the first are pinned to its ETag
    overwritten = []

    def overwrite_before_third_part(request: Any) -> bool:
        if request.header("Range") == f"bytes={128 * KiB}-{192 * KiB - 1}" and not overwritten:
            put(s3_client, bucket, "parts.bin", data_of(size, seed=2))
            overwritten.append(True)
        return False

    fault_proxy.add_rule(FaultRule(fault=Latency(0), predicate=overwrite_before_third_part))

    async def work(engine: RangeEngine) -> None:
        with pytest.raises(s3io.ObjectChanged, match=r"parts\.bin"):
            await engine.fetch_object(obj)
        assert engine.budget.reserved == 0

    run(fault_proxy.url, EngineConfig(part_size=64 * KiB, max_concurrency=1), work)
    assert overwritten
    gets = [r for r in fault_proxy.requests if r.method == "GET"]
    assert gets[0].if_match is None and all(r.if_match is not None for r in gets[1:])


def test_hedging_is_bounded_and_counted(s3_endpoint: Any, bucket: str, s3_client: Any, fault_proxy: FaultProxy) -> None:
    objects = [put(s3_client, bucket, f"hedge/{i}.bin", data_of(KiB, seed=i)) for i in range(20)]
    fault_proxy.add_rule(FaultRule(fault=Latency(0.3), method="GET", path="hedge/"))
    config = EngineConfig(hedge_enabled=True, hedge_delay=0.05, hedge_max_fraction=0.2)

    async def work(engine: RangeEngine) -> tuple[int, int]:
        before = engine.client.stats()
        results = await asyncio.gather(*(engine.fetch_object(o) for o in objects))
        assert results == [data_of(KiB, seed=i) for i in range(20)]
        delta = engine.client.stats() - before
        return delta.hedges, engine.stats().hedges

    client_hedges, engine_hedges = run(fault_proxy.url, config, work)
    assert client_hedges == engine_hedges
    assert 1 <= engine_hedges <= 4  # at most 20 % of 20 GETs
    # The server sees every GET and every hedge that got onto the wire: a hedge cancelled because its first GET
    # answered before the hedge's request was sent is counted by the engine (it was started) but never seen there
    # (one CI run saw 23 of 20 + 4). That hedges reach the server and win is test_hedge_wins_over_a_stuck_first_get.
    assert 20 <= fault_proxy.count(method="GET", path="hedge/") <= 20 + engine_hedges


def test_hedge_wins_over_a_stuck_first_get(
    s3_endpoint: Any, bucket: str, s3_client: Any, fault_proxy: FaultProxy
) -> None:
    data = data_of(KiB, seed=9)
    obj = put(s3_client, bucket, "stuck.bin", data)
    fault_proxy.add_rule(FaultRule(fault=Latency(30), method="GET", path="stuck.bin", times=1))
    config = EngineConfig(hedge_enabled=True, hedge_delay=0.1, hedge_max_fraction=1.0)

    async def work(engine: RangeEngine) -> None:
        assert await engine.fetch_object(obj) == data
        assert engine.stats().hedge_wins == 1 and engine.client.stats().hedges == 1

    started = time.monotonic()
    run(fault_proxy.url, config, work)
    assert time.monotonic() - started < 25


def test_a_stream_resumed_from_a_fresh_task_per_item_reads_every_item_and_a_lost_consumer_is_loud(
    s3_endpoint: Any, bucket: str, s3_client: Any
) -> None:
    """``asyncio.wait_for(stream.__anext__(), t)`` resumes the stream from a new task each item: a task that ends
    normally hands the stream over, so every item arrives. A consumer cancelled between two items stops the reads;
    resumed after that, the stream raises, never ends as if it had read everything."""
    objects = [put(s3_client, bucket, f"handover/{i}.bin", data_of(KiB, seed=i)) for i in range(12)]

    async def work(engine: RangeEngine) -> None:
        stream = engine.stream([Request(o) for o in objects])
        got = []
        with contextlib.suppress(StopAsyncIteration):
            while True:
                request, _ = await asyncio.wait_for(stream.__anext__(), 20)
                got.append(request.obj.key)
        assert got == [o.key for o in objects]

        lost = engine.stream([Request(o) for o in objects])

        await cancel_after_one_item(lost)
        assert engine.budget.reserved == 0  # its reads were stopped when the task was cancelled
        with pytest.raises(s3io.S3IOError, match="the task iterating it was cancelled between two items"):
            await asyncio.wait_for(lost.__anext__(), 20)
        await lost.aclose()

    run(s3_endpoint.url, EngineConfig(max_concurrency=2), work)
