"""RangeEngine over a scripted in-memory client: races and failures that a real server cannot stage on cue."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

import s3io
from s3io import GetResult, ObjectInfo
from s3io.engine import EngineConfig, RangeEngine, Request
from s3io.metrics import Metrics, MetricsSnapshot
from s3io.s3.get_range import SUFFIX, WHOLE, GetRange

pytestmark = pytest.mark.timeout(30)

BUCKET = "bkt"


class FakeS3:
    """get_range / get_object over a dict of objects; per-(key, start) delays and hooks run before answering."""

    def __init__(self, objects: dict[str, bytes]) -> None:
        self.metrics = Metrics()
        self.objects = dict(objects)
        self.versions = dict.fromkeys(objects, 1)
        self.delays: dict[tuple[str, int | None], float] = {}
        self.hooks: dict[tuple[str, int | None], Callable[[], None]] = {}
        self.calls: list[tuple[str, int | None, int | None, str | None]] = []
        self.cancelled = 0
        self.in_flight = 0
        self.max_in_flight = 0

    def stats(self) -> MetricsSnapshot:
        return self.metrics.snapshot()

    def etag(self, key: str) -> str:
        return f'"v{self.versions[key]}"'

    def overwrite(self, key: str, data: bytes) -> None:
        self.objects[key] = data
        self.versions[key] += 1

    async def get_range(
        self, bucket: str, key: str, want: GetRange, *, if_match: str | None = None, into: memoryview | None = None
    ) -> GetResult:
        """What the engine calls: the range as (start, end) offsets, as ``calls`` records them; written ``into`` the
        buffer given, as S3Client writes it."""
        if want.kind == SUFFIX:
            return await self.get_object(bucket, key, -want.length, None, if_match=if_match)
        start = None if want.kind == WHOLE else want.start
        result = await self.get_object(bucket, key, start, want.end, if_match=if_match)
        size = len(result.data)
        if into is None or size > len(into):
            return result
        into[:size] = result.data
        return dataclasses.replace(result, data=into if size == len(into) else into[:size])

    async def get_object(
        self, bucket: str, key: str, start: int | None = None, end: int | None = None, *, if_match: str | None = None
    ) -> GetResult:
        self.calls.append((key, start, end, if_match))
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await asyncio.sleep(self.delays.get((key, start), 0.0))
            hook = self.hooks.get((key, start))
            if hook is not None:
                hook()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        finally:
            self.in_flight -= 1
        if key not in self.objects:
            raise s3io.NotFound("not found", bucket=bucket, key=key, status=404)
        if if_match is not None and if_match != self.etag(key):
            raise s3io.ObjectChanged("changed", bucket=bucket, key=key)
        data = self.objects[key]
        first = 0 if start is None else (max(0, len(data) + start) if start < 0 else start)
        last = len(data) if end is None else min(end, len(data))
        return GetResult(data[first:last], self.etag(key), len(data), first)


def run(fake: FakeS3, config: EngineConfig, work: Callable[[RangeEngine], Any]) -> Any:
    async def main() -> Any:
        return await work(RangeEngine(fake, config))

    return asyncio.run(main())


def info(fake: FakeS3, key: str, *, etag: bool = True) -> ObjectInfo:
    return ObjectInfo(BUCKET, key, len(fake.objects[key]), fake.etag(key) if etag else None)


def test_parts_sent_in_parallel_before_any_etag_is_known_must_agree() -> None:
    fake = FakeS3({"k": bytes(400)})
    fake.delays[("k", 200)] = 0.05
    fake.hooks[("k", 200)] = lambda: fake.overwrite("k", b"\1" * 400)

    async def work(engine: RangeEngine) -> None:
        with pytest.raises(s3io.ObjectChanged, match="ETag") as exc:
            await engine.fetch_object(info(fake, "k", etag=False))
        assert exc.value.url == "s3://bkt/k"
        assert engine.budget.reserved == 0

    run(fake, EngineConfig(part_size=100), work)
    assert [call[3] for call in fake.calls] == [None] * 4


def test_a_weak_etag_in_the_answers_names_the_version_the_listing_named() -> None:
    """Some stores mark the ETags of GET answers weak (``W/"..."``) but not those of listings: the one ETag rule
    (s3io.s3.etags) compares the value inside, so the read is not mistaken for a changed object."""

    class WeakAnswers(FakeS3):
        async def get_range(self, *args: Any, **kwargs: Any) -> GetResult:
            result = await super().get_range(*args, **kwargs)
            return dataclasses.replace(result, etag=f"W/{result.etag}")

    fake = WeakAnswers({"k": bytes(range(250))})

    async def work(engine: RangeEngine) -> bytes:
        return await engine.fetch_object(info(fake, "k"))

    assert run(fake, EngineConfig(part_size=100), work) == bytes(range(250))


def test_size_different_from_the_listing_raises_object_changed() -> None:
    fake = FakeS3({"k": b"abc"})
    listed = ObjectInfo(BUCKET, "k", 5)

    async def work(engine: RangeEngine) -> None:
        with pytest.raises(s3io.ObjectChanged, match="3 bytes, expected 5"):
            await engine.fetch_object(listed)

    run(fake, EngineConfig(), work)


def test_a_failed_part_fails_the_read_cancels_its_siblings_and_names_the_object() -> None:
    fake = FakeS3({"k": bytes(1000)})
    for start in range(0, 1000, 100):
        fake.delays[("k", start)] = 5.0

    def fail() -> None:
        raise s3io.ServerError("server error: boom")

    fake.delays[("k", 300)] = 0.01
    fake.hooks[("k", 300)] = fail

    async def work(engine: RangeEngine) -> None:
        with pytest.raises(s3io.ServerError) as exc:
            await engine.fetch_ranges(info(fake, "k"), [(0, 1000)])
        assert "s3://bkt/k" in str(exc.value)
        assert engine.budget.reserved == 0

    run(fake, EngineConfig(part_size=100, whole_object_threshold=0), work)
    assert fake.cancelled == 9


def test_unexpected_errors_are_wrapped_with_the_object_name() -> None:
    fake = FakeS3({"k": bytes(10)})

    def fail() -> None:
        raise RuntimeError("surprise")

    fake.hooks[("k", None)] = fail

    async def work(engine: RangeEngine) -> None:
        with pytest.raises(s3io.S3IOError, match=r"surprise.*object=s3://bkt/k") as exc:
            await engine.fetch_object(info(fake, "k"))
        assert isinstance(exc.value.__cause__, RuntimeError)

    run(fake, EngineConfig(), work)


def test_concurrency_limit_holds_across_callers() -> None:
    fake = FakeS3({f"k{i}": bytes(10) for i in range(20)})
    for i in range(20):
        fake.delays[(f"k{i}", None)] = 0.01

    async def work(engine: RangeEngine) -> None:
        await asyncio.gather(*(engine.fetch_object(info(fake, f"k{i}")) for i in range(20)))

    run(fake, EngineConfig(max_concurrency=3), work)
    assert fake.max_in_flight == 3


def test_stream_error_yields_earlier_results_then_stops_and_cancels_later_requests() -> None:
    fake = FakeS3({f"k{i}": bytes([i]) * 10 for i in range(6)})
    del fake.objects["k2"]
    fake.delays[("k0", None)] = 0.05
    for i in (3, 4, 5):
        fake.delays[(f"k{i}", None)] = 5.0
    requests = [Request(ObjectInfo(BUCKET, f"k{i}", 10)) for i in range(6)]

    async def work(engine: RangeEngine) -> list[bytes]:
        got: list[bytes] = []
        with pytest.raises(s3io.NotFound, match="s3://bkt/k2"):
            async for request, data in engine.stream(requests):
                assert request is requests[len(got)]
                got.append(data)
        assert engine.budget.reserved == 0
        return got

    assert run(fake, EngineConfig(), work) == [bytes([0]) * 10, bytes([1]) * 10]
    assert fake.cancelled == 3


def test_stream_of_ranges_requests_and_invalid_request_stops_in_order() -> None:
    fake = FakeS3({"a": bytes(range(100)), "b": bytes(range(100, 200))})
    requests = [
        Request(info(fake, "a"), [(10, 20), (0, 5)]),
        Request(info(fake, "b"), [(0, 0)]),
        Request(info(fake, "b"), [(50, 500)]),
    ]

    async def work(engine: RangeEngine) -> list[Any]:
        got: list[Any] = []
        with pytest.raises(s3io.InvalidConfig, match=r"past the end.*s3://bkt/b"):
            async for _, data in engine.stream(requests):
                got.append(data)
        return got

    assert run(fake, EngineConfig(), work) == [[bytes(range(10, 20)), bytes(range(5))], [b""]]


def test_cache_serves_a_small_object_fetched_whole_for_its_tail_and_then_its_ranges() -> None:
    fake = FakeS3({"small": bytes(range(200))})

    async def work(engine: RangeEngine) -> None:
        obj = info(fake, "small")
        assert await engine.fetch_tail(obj, 8) == (bytes(range(192, 200)), 200)
        assert await engine.fetch_ranges(obj, [(4, 10)]) == [bytes(range(4, 10))]
        assert engine.stats().cache_hits == 1

    run(fake, EngineConfig(cache_bytes=1024), work)
    assert len(fake.calls) == 1


def test_a_read_of_many_spans_starts_one_fixed_set_of_workers_not_a_set_per_span() -> None:
    """100 scattered ranges, 100 GETs: the read starts at most max_concurrency workers in all, besides the one task
    single-flight runs each GET in (it used to start max_concurrency workers per merged span: 800 more here)."""
    fake = FakeS3({"k": bytes(range(256)) * 4000})
    ranges = [(i * 10_000, i * 10_000 + 100) for i in range(100)]
    created: list[int] = []

    async def work(engine: RangeEngine) -> list[bytes]:
        loop = asyncio.get_running_loop()

        def counting_factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
            created.append(1)
            return asyncio.Task(coro, loop=loop, **kwargs)

        loop.set_task_factory(counting_factory)
        try:
            return await engine.fetch_ranges(info(fake, "k"), ranges)
        finally:
            loop.set_task_factory(None)

    config = EngineConfig(whole_object_threshold=0, coalesce_gap=0, max_concurrency=8)
    got = run(fake, config, work)
    assert [bytes(b) for b in got] == [fake.objects["k"][a:b] for a, b in ranges]
    assert len(fake.calls) == 100
    assert len(created) <= 8 + len(fake.calls), f"{len(created)} tasks for one read of 100 spans"
