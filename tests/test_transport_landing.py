"""Bodies received in place: a GET ``into`` a buffer (what the range engine's parts do) has the rest of a large body
written straight from the socket into it, and keeps every guarantee of the chunk-by-chunk path: the stall timer per
read, resume from the last byte under the ETag pin, no reuse of a connection holding bytes past the body; a
256 MiB read copies its bytes once, into one buffer.

Servers: moto behind the fault proxy (stalls, resets, truncations, a slow drip), the scripted server (bytes after
the body, keep-alive reuse), the benchmarks' in-memory endpoint in its own process (the 256 MiB read, so that the
server's memory is not the client's).
"""

from __future__ import annotations

import asyncio
import hashlib
import mmap
import random
import time
import tracemalloc
from collections.abc import Iterator

import pytest
from support.policies import MID_BODY_FAULTS

import s3io.transport.exchange as exchange_module
import s3io.transport.landing as landing
from s3io import Credentials, ObjectInfo, S3Client
from s3io.engine import EngineConfig, RangeEngine
from s3io.s3.get_range import GetRange
from s3io.transport.landing import RECEIVE_INTO_MIN
from testbed.faultproxy import FaultProxy, FaultRule, Reset, SlowBody, Stall, Truncate
from testbed.memory_endpoint import MemoryEndpoint
from testbed.scripted_s3 import Reply, Request, ScriptedS3, etag_of

pytestmark = pytest.mark.timeout(120)

MIB = 1024 * 1024
FAST = MID_BODY_FAULTS


@pytest.fixture
def received_in_place(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of the body rests ``exchange`` received in place (a spy: the real ``receive_into`` runs)."""
    sizes: list[int] = []
    real = exchange_module.receive_into

    async def spy(transport, handler, payload, view, target, watch) -> None:  # type: ignore[no-untyped-def]
        sizes.append(len(view))
        await real(transport, handler, payload, view, target, watch)

    monkeypatch.setattr(exchange_module, "receive_into", spy)
    return sizes


def _put(s3_client, bucket: str, key: str, size: int, seed: int = 1) -> bytes:
    data = random.Random(seed).randbytes(size)
    s3_client.put_object(Bucket=bucket, Key=key, Body=data)
    return data


def _view_of(data: object, buffer: bytearray) -> bool:
    return isinstance(data, memoryview) and data.obj is buffer and len(data) == len(buffer)


def _gets(proxy: FaultProxy, key: str) -> list:
    return [r for r in proxy.requests if r.method == "GET" and r.path.endswith("/" + key)]


async def test_a_large_body_lands_in_the_buffer_given_straight_from_the_socket(
    fault_proxy: FaultProxy, s3_client, bucket: str, received_in_place: list[int]
) -> None:
    data = _put(s3_client, bucket, "whole.bin", 3 * MIB + 17)
    async with S3Client(FAST, endpoint_url=fault_proxy.url) as s3:
        into = bytearray(3 * MIB)
        ranged = await s3.get_range(bucket, "whole.bin", GetRange.bounded(17, 3 * MIB + 17), into=into)
        whole_into = bytearray(len(data))
        whole = await s3.get_object(bucket, "whole.bin", into=whole_into)
        small = await s3.get_object(bucket, "whole.bin", 0, 100)  # no buffer given: bytes, as always
    assert _view_of(ranged.data, into) and into == data[17:]
    assert _view_of(whole.data, whole_into) and whole_into == data
    assert isinstance(small.data, bytes) and small.data == data[:100]
    assert len(received_in_place) == 2 and all(size >= RECEIVE_INTO_MIN for size in received_in_place)
    connections = {r.connection_id for r in _gets(fault_proxy, "whole.bin")}
    assert len(connections) == 1  # a body received in place leaves its connection fit for the next request


async def test_a_stall_mid_body_in_place_recovers_within_the_stall_timeout_and_fetches_only_the_rest(
    fault_proxy: FaultProxy, s3_client, bucket: str, received_in_place: list[int]
) -> None:
    data = _put(s3_client, bucket, "stall.bin", 4 * MIB)
    fault_proxy.add_rule(FaultRule(fault=Stall(after_bytes=MIB), method="GET", times=1))
    into = bytearray(4 * MIB)
    async with S3Client(FAST, endpoint_url=fault_proxy.url) as s3:
        started = time.monotonic()
        result = await s3.get_range(bucket, "stall.bin", GetRange.bounded(0, 4 * MIB), into=into)
        elapsed = time.monotonic() - started
        stats = s3.stats()
    assert _view_of(result.data, into) and into == data
    assert elapsed < FAST.stall_timeout + 15  # the stall timer ends the silent receive, not the kernel
    first, retry = _gets(fault_proxy, "stall.bin")
    resumed_at = int(retry.range.split("=")[1].split("-")[0])
    assert MIB <= resumed_at < 4 * MIB and retry.header("If-Match") == result.etag
    assert retry.connection_id != first.connection_id
    assert stats.timeouts == {"stall": 1}
    assert received_in_place and received_in_place[0] > 2 * MIB  # the stalled body was being received in place


@pytest.mark.parametrize("fault", [Reset(after_bytes=600_000), Truncate(after_bytes=600_000)], ids=["reset", "cut"])
async def test_a_body_broken_mid_receive_in_place_resumes_from_the_last_byte(
    fault_proxy: FaultProxy, s3_client, bucket: str, fault: object, received_in_place: list[int]
) -> None:
    data = _put(s3_client, bucket, "broken.bin", 3 * MIB)
    fault_proxy.add_rule(FaultRule(fault=fault, method="GET", times=1))
    into = bytearray(3 * MIB - 200)
    async with S3Client(FAST, endpoint_url=fault_proxy.url) as s3:
        result = await s3.get_range(bucket, "broken.bin", GetRange.bounded(100, 3 * MIB - 100), into=into)
        stats = s3.stats()
    assert _view_of(result.data, into) and into == data[100 : 3 * MIB - 100]
    _, retry = _gets(fault_proxy, "broken.bin")
    resumed_at = int(retry.range.split("=")[1].split("-")[0])
    assert 100 < resumed_at <= 100 + 600_000 and retry.range.endswith(f"-{3 * MIB - 101}")
    assert stats.retry_count == 1 and received_in_place


async def test_a_slow_drip_received_in_place_is_not_killed_by_the_stall_timer(
    fault_proxy: FaultProxy, s3_client, bucket: str, received_in_place: list[int]
) -> None:
    data = _put(s3_client, bucket, "drip.bin", 400_000)
    fault_proxy.add_rule(FaultRule(fault=SlowBody(bytes_per_second=160_000, chunk_bytes=8192), method="GET"))
    into = bytearray(len(data))
    async with S3Client(FAST, endpoint_url=fault_proxy.url) as s3:
        result = await s3.get_object(bucket, "drip.bin", into=into)  # ~2.5 s of transfer, stall timeout 1 s
        stats = s3.stats()
    assert _view_of(result.data, into) and into == data
    assert stats.retry_count == 0 and stats.timeout_count == 0 and received_in_place


DATA = random.Random(7).randbytes(2 * MIB)


@pytest.fixture
def server() -> Iterator[ScriptedS3]:
    with ScriptedS3({"obj.bin": DATA, "other.bin": b"the other object"}) as scripted:
        yield scripted


def _client(server: ScriptedS3) -> S3Client:
    return S3Client(FAST, endpoint_url=server.url, credentials=Credentials("AKIDEXAMPLE", "secret"), region="us-east-1")


async def test_bytes_past_a_body_received_in_place_are_never_read_as_the_next_answer(
    server: ScriptedS3, received_in_place: list[int]
) -> None:
    evil = b'HTTP/1.1 200 OK\r\nETag: "evil"\r\nContent-Length: 4\r\n\r\nEVIL'

    def script(request: Request) -> Reply | None:
        if request.key == "obj.bin":
            return Reply(200, {"ETag": etag_of(DATA)}, DATA, after=evil)
        return None

    server.script = script
    async with _client(server) as s3:
        into = bytearray(len(DATA))
        assert _view_of((await s3.get_object("bucket", "obj.bin", into=into)).data, into) and into == DATA
        for _ in range(500):  # the server has put the extra answer on the wire (bounded wait)
            if server.after_written.is_set():
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)
        assert (await s3.get_object("bucket", "other.bin")).data == b"the other object"
    assert len(received_in_place) == 1
    assert server.connections_opened == 2


async def test_an_answer_longer_than_the_buffer_is_never_received_in_place(
    server: ScriptedS3, received_in_place: list[int]
) -> None:
    """A 200 to a ranged GET (a proxy that ignores Range) carries the whole object: its body is not the rest of the
    range, so it is read chunk by chunk, the range cut out, and the connection closed once the range is in."""
    server.script = lambda request: Reply(200, {"ETag": etag_of(DATA)}, DATA) if request.key == "obj.bin" else None
    async with _client(server) as s3:
        into = bytearray(MIB)
        result = await s3.get_range("bucket", "obj.bin", GetRange.bounded(1000, 1000 + MIB), into=into)
        assert (await s3.get_object("bucket", "other.bin")).data == b"the other object"
    assert _view_of(result.data, into) and into == DATA[1000 : 1000 + MIB]
    assert received_in_place == [] and server.connections_opened == 2


def test_a_256_mib_read_lands_in_one_buffer_and_copies_its_bytes_once() -> None:
    """fetch_object of 256 MiB (16 parts of 16 MiB, in parallel): the result is a read-only view of one mapped buffer
    of 256 MiB, and the Python heap never holds more than a few reads' worth of chunks: no part and no whole was
    ever joined (joining them took 2 x 256 MiB of fresh memory)."""
    size = 256 * MIB
    block = random.Random(3).randbytes(MIB + 4093)  # a period that no part boundary aligns with
    data = (block * (size // len(block) + 1))[:size]
    digest = hashlib.sha256(data).digest()
    with MemoryEndpoint(seed=(data, "bench", "big.bin")) as server:
        del data

        async def read() -> tuple[memoryview, int, int]:
            async with S3Client(
                FAST.replace(operation_timeout=60), endpoint_url=server.url, credentials=Credentials("a", "b")
            ) as s3:
                engine = RangeEngine(s3, EngineConfig())
                tracemalloc.start()
                try:
                    view = await engine.fetch_object(ObjectInfo("bench", "big.bin", size))
                    _, peak = tracemalloc.get_traced_memory()
                finally:
                    tracemalloc.stop()
                return view, peak, s3.stats().request_count

        view, peak, requests = asyncio.run(read())
    assert isinstance(view, memoryview) and view.readonly and len(view) == size
    assert isinstance(view.obj, mmap.mmap) and len(view.obj) == size  # one buffer, the parts at their offsets
    assert hashlib.sha256(view).digest() == digest
    assert requests == 17  # the 16 parts, and the HEAD that asks for the full-object checksum
    assert peak < 16 * MIB, f"the Python heap peaked at {peak / MIB:.1f} MiB during a read that should copy once"


@pytest.mark.parametrize("drop", [True, False], ids=["dropped-in-the-kernel", "copied-to-scratch"])
def test_the_gaps_of_merged_ranges_are_dropped_in_the_kernel_on_a_plain_socket(
    monkeypatch: pytest.MonkeyPatch, drop: bool
) -> None:
    """Scattered ranges merged into GETs: the bytes between them are dropped by the kernel (``MSG_TRUNC``, never
    copied) where the socket allows, received into scratch where not; the ranges are the same bytes either way. A gap
    of 636 KiB is three scratch views in a row, and each is dropped (only the first was, before: 60 % dropped)."""
    size = 8 * MIB
    data = random.Random(7).randbytes(size)
    ranges = [(start, start + 64 * 1024) for start in range(0, size - 64 * 1024, 700 * 1024)]  # gaps of 636 KiB
    receivers: list[landing._ReceiveInto] = []
    real = landing._ReceiveInto

    def spy(*args, **kwargs) -> landing._ReceiveInto:  # type: ignore[no-untyped-def]
        receivers.append(real(*args, **kwargs))
        return receivers[-1]

    monkeypatch.setattr(landing, "_ReceiveInto", spy)
    if not drop:
        monkeypatch.setattr(landing, "_DROP", 0)
    with MemoryEndpoint(seed=(data, "bench", "ranges.bin")) as server:

        async def read() -> list[bytes]:
            async with S3Client(FAST, endpoint_url=server.url, credentials=Credentials("a", "b")) as s3:
                engine = RangeEngine(s3, EngineConfig(whole_object_threshold=0))
                return [bytes(b) for b in await engine.fetch_ranges(ObjectInfo("bench", "ranges.bin", size), ranges)]

        got = asyncio.run(read())
    assert got == [data[a:b] for a, b in ranges]
    gap_bytes = (ranges[-1][1] - ranges[0][0]) - sum(b - a for a, b in ranges)
    dropped = sum(receiver.dropped for receiver in receivers)
    assert receivers, "the merged GETs were received in place"
    if drop:  # not all: aiohttp's first read (with the headers), and bytes that arrive between a drop and the read
        first_reads = len(receivers) * exchange_module.RECV_BYTES
        assert 0.75 * (gap_bytes - first_reads) <= dropped <= gap_bytes, (dropped, gap_bytes, first_reads)
    else:
        assert dropped == 0
