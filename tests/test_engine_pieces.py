"""Scattered ranges keep only their own bytes: a GET that merged ranges farther apart than ``KEPT_GAP`` receives the
bytes between them into scratch (``Pieces``), and each range is a view of a buffer holding its run alone. Every
guarantee of a GET in place holds piece by piece: resume from the last byte after a reset or a cut, the stall timer,
a slow drip, the chunk-by-chunk path of a small body. Moto behind the fault proxy; the ranges' bytes are checked
against what was uploaded."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest
from support.policies import MID_BODY_FAULTS

import s3io.transport.exchange as exchange_module
from s3io import ObjectInfo, S3Client
from s3io.engine import EngineConfig, RangeEngine
from s3io.engine.buffers import retained
from s3io.engine.engine import KEPT_GAP
from s3io.scatter import SCRATCH_BYTES, Pieces
from testbed.faultproxy import FaultProxy, FaultRule, Latency, Reset, SlowBody, Stall, Truncate

pytestmark = pytest.mark.timeout(120)

KIB, MIB = 1024, 1024 * 1024
FAST = MID_BODY_FAULTS


def test_pieces_of_runs_keep_the_runs_and_send_the_gaps_to_scratch() -> None:
    first, second = bytearray(3), bytearray(SCRATCH_BYTES + 5)
    pieces = Pieces.of_runs(
        100,
        100 + 2 + 3 + 2 * SCRATCH_BYTES + len(second) + 1,
        [(102, memoryview(first)), (105 + 2 * SCRATCH_BYTES, memoryview(second))],
    )
    assert len(pieces) == 2 + 3 + 2 * SCRATCH_BYTES + len(second) + 1
    assert [len(view) for view in pieces.views] == [2, 3, SCRATCH_BYTES, SCRATCH_BYTES, len(second), 1]
    body = random.Random(1).randbytes(len(pieces))
    pieces[0 : len(body)] = body  # what the chunk-by-chunk path does
    assert first == body[2:5] and second == body[5 + 2 * SCRATCH_BYTES : 5 + 2 * SCRATCH_BYTES + len(second)]
    window = pieces[4:10]
    assert len(window) == 6 and [len(view) for view in window.views] == [1, 5]
    first[:] = b"xyz"
    window[0:6] = b"ABCDEF"  # only the kept byte of the window is written
    assert first == b"xyA"
    with pytest.raises(ValueError, match="overlaps another or leaves"):
        Pieces.of_runs(0, 10, [(5, memoryview(bytearray(3))), (6, memoryview(bytearray(2)))])
    with pytest.raises(ValueError, match="written to a window"):
        pieces[0:4] = b"abc"


def _layout(size: int, seed: int) -> list[tuple[int, int]]:
    """Ranges of 48-200 KiB with gaps of 80-700 KiB between them: merged into one GET each (gap < 1 MiB), kept
    apart (gap > KEPT_GAP); two ranges overlap and two touch, which are kept as one run."""
    rnd = random.Random(seed)
    ranges, position = [], 1000
    while position < size - 400 * KIB:
        length = rnd.randrange(48 * KIB, 200 * KIB)
        ranges.append((position, position + length))
        position += length + rnd.randrange(KEPT_GAP + 16 * KIB, 700 * KIB)
    a, b = ranges[1]
    ranges += [(a + 10, b + 5000), (b + 5000, b + 6000)]  # overlapping, then touching
    return ranges


@pytest.fixture
def pieces_received(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many pieces each body received in place had (a spy: the real ``receive_into`` runs)."""
    counts: list[int] = []
    real = exchange_module.receive_into

    async def spy(transport, handler, payload, room, target, watch) -> None:  # type: ignore[no-untyped-def]
        counts.append(len(room.views) if isinstance(room, Pieces) else 1)
        await real(transport, handler, payload, room, target, watch)

    monkeypatch.setattr(exchange_module, "receive_into", spy)
    return counts


async def _fetch(url: str, bucket: str, key: str, size: int, ranges: list[tuple[int, int]]) -> list[Any]:
    async with S3Client(FAST, endpoint_url=url) as s3:
        engine = RangeEngine(s3, EngineConfig(whole_object_threshold=0))
        return await engine.fetch_ranges(ObjectInfo(bucket, key, size), ranges)


FAULTS = {
    "none": None,
    "reset": Reset(after_bytes=900_000),
    "cut": Truncate(after_bytes=900_000),
    "stall": Stall(after_bytes=900_000),
    "slow drip": SlowBody(bytes_per_second=4 * MIB, chunk_bytes=64 * KIB),
}


@pytest.mark.parametrize("fault", FAULTS, ids=list(FAULTS))
async def test_scattered_ranges_get_their_bytes_and_hold_only_their_runs_whatever_breaks_mid_body(
    fault_proxy: FaultProxy, s3_client: Any, bucket: str, fault: str, pieces_received: list[int]
) -> None:
    size = 6 * MIB
    data = random.Random(5).randbytes(size)
    s3_client.put_object(Bucket=bucket, Key="scattered.bin", Body=data)
    if FAULTS[fault] is not None:
        fault_proxy.add_rule(FaultRule(fault=FAULTS[fault], method="GET", times=2))
    ranges = _layout(size, seed=3)
    got = await _fetch(fault_proxy.url, bucket, "scattered.bin", size, ranges)
    assert [bytes(blob) for blob in got] == [data[a:b] for a, b in ranges]
    held = {id(blob.obj): retained(blob) for blob in got}  # each distinct buffer once
    wanted = sum(end - start for start, end in _union(ranges))
    assert sum(held.values()) == wanted  # the runs, not the spans with their gaps (about 5.5 MiB here)
    assert pieces_received and max(pieces_received) > 2  # bodies were received in place, piece by piece


async def test_small_scattered_bodies_go_chunk_by_chunk_into_their_pieces(
    fault_proxy: FaultProxy, s3_client: Any, bucket: str, pieces_received: list[int]
) -> None:
    """Bodies under the in-place minimum are read as chunks and copied into the kept pieces (``Pieces[a:b] = ``)."""
    data = random.Random(6).randbytes(MIB)
    s3_client.put_object(Bucket=bucket, Key="small.bin", Body=data)
    ranges = [(10, 2000), (2000 + KEPT_GAP + 1, 2000 + KEPT_GAP + 900), (200_000, 200_010)]
    got = await _fetch(fault_proxy.url, bucket, "small.bin", len(data), ranges)
    assert [bytes(blob) for blob in got] == [data[a:b] for a, b in ranges]
    assert pieces_received == []  # 200 KiB of body: read as chunks
    assert len([r for r in fault_proxy.requests if r.method == "GET"]) == 1


async def test_two_reads_of_the_same_span_with_different_ranges_each_get_their_own_bytes(
    fault_proxy: FaultProxy, s3_client: Any, bucket: str
) -> None:
    """A GET landing in one read's pieces is never shared with another read (its data holds that read's runs only)."""
    size = 2 * MIB
    data = random.Random(8).randbytes(size)
    s3_client.put_object(Bucket=bucket, Key="twice.bin", Body=data)
    one = [(0, 100 * KIB), (size - 100 * KIB, size)]
    other = [(0, 50 * KIB), (size - 50 * KIB, size), (MIB, MIB + 10)]
    async with S3Client(FAST, endpoint_url=fault_proxy.url) as s3:
        engine = RangeEngine(s3, EngineConfig(whole_object_threshold=0, coalesce_gap=2 * MIB))
        info = ObjectInfo(bucket, "twice.bin", size)
        first, second = await asyncio.gather(engine.fetch_ranges(info, one), engine.fetch_ranges(info, other))
    assert [bytes(b) for b in first] == [data[a:b] for a, b in one]
    assert [bytes(b) for b in second] == [data[a:b] for a, b in other]


def _union(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for start, end in sorted(ranges):
        if merged and start <= merged[-1][1] + KEPT_GAP:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


async def test_a_hedged_gets_bytes_land_in_the_pieces_of_the_read_whichever_get_wins(
    fault_proxy: FaultProxy, s3_client: Any, bucket: str
) -> None:
    """The first GET of a scattered read answers late; its hedge (which lands in a buffer of its own) wins, and its
    body's kept bytes are copied into the read's pieces."""
    data = random.Random(9).randbytes(MIB)
    s3_client.put_object(Bucket=bucket, Key="hedged.bin", Body=data)
    fault_proxy.add_rule(FaultRule(fault=Latency(1.5), method="GET", path="hedged.bin", times=1))
    ranges = [(0, 20 * KIB), (20 * KIB + KEPT_GAP + 1000, 200 * KIB)]
    async with S3Client(FAST, endpoint_url=fault_proxy.url) as s3:
        config = EngineConfig(
            whole_object_threshold=512 * KIB, hedge_enabled=True, hedge_delay=0.2, hedge_max_fraction=1.0
        )
        engine = RangeEngine(s3, config)
        got = await engine.fetch_ranges(ObjectInfo(bucket, "hedged.bin", len(data)), ranges)
        hedges = engine.stats().hedges
    assert [bytes(blob) for blob in got] == [data[a:b] for a, b in ranges]
    assert hedges == 1 and len([r for r in fault_proxy.requests if r.method == "GET"]) == 2
