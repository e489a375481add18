"""The buffer a read lands in: the heap for small sizes; above that a mapping whose windows the pager thread faults
in ahead of the bytes (without holding the event loop), or one populated when made where the kernel cannot; and the
engine's pool, which fills a mapping again once nothing but the pool refers to it."""

from __future__ import annotations

import ctypes
import mmap
import multiprocessing
import sys
import time
import weakref

import pytest

from s3io.engine.buffers import MAPPED_MIN, POPULATES_AHEAD, BufferPool, allocate, page_in

MiB = 1024 * 1024
needs_mincore = pytest.mark.skipif(sys.platform != "linux", reason="counts resident pages with Linux's mincore")
needs_advice = pytest.mark.skipif(not POPULATES_AHEAD, reason="needs MADV_POPULATE_WRITE (Linux 5.14+)")


def _resident_kib(buffer: mmap.mmap) -> int:
    """KiB of ``buffer``'s pages that are resident, by ``mincore`` over exactly its range (smaps would show the
    mapping the kernel merged it into)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    pages = -(-len(buffer) // mmap.PAGESIZE)
    vector = (ctypes.c_ubyte * pages)()
    address = ctypes.addressof(ctypes.c_char.from_buffer(buffer))
    assert libc.mincore(address, len(buffer), vector) == 0, ctypes.get_errno()
    return sum(byte & 1 for byte in vector) * mmap.PAGESIZE // 1024


def _resident_within(buffer: mmap.mmap, kib: int, seconds: float) -> int:
    """Poll until ``buffer`` has ``kib`` resident (the pager works in the background), at most ``seconds``."""
    deadline = time.monotonic() + seconds
    while (resident := _resident_kib(buffer)) < kib and time.monotonic() < deadline:
        time.sleep(0.01)
    return resident


def test_small_buffers_come_from_the_heap() -> None:
    buffer = allocate(MAPPED_MIN - 1)
    assert isinstance(buffer, bytearray) and len(buffer) == MAPPED_MIN - 1
    page_in(buffer)  # nothing to do for the heap


@needs_mincore
def test_a_buffer_populated_when_made_is_resident_at_once() -> None:
    buffer = allocate(8 * MiB, populate_ahead=False)
    assert isinstance(buffer, mmap.mmap) and _resident_kib(buffer) == 8 * 1024


@needs_mincore
@needs_advice
def test_the_pager_faults_a_buffer_in_off_the_caller_and_the_bytes_written_first_stay() -> None:
    buffer = allocate(64 * MiB)
    assert isinstance(buffer, mmap.mmap) and len(buffer) == 64 * MiB
    assert _resident_kib(buffer) == 0  # nothing paid on the event loop before the first GET
    view = memoryview(buffer)
    view[16 * MiB : 16 * MiB + 3] = b"abc"  # a part that landed before the pager reached its pages
    assert 0 < _resident_kib(buffer) <= 2 * 1024  # that page (a huge page where the kernel gives them unasked)
    page_in(buffer)
    assert _resident_within(buffer, 64 * 1024, seconds=30) == 64 * 1024
    assert bytes(view[16 * MiB : 16 * MiB + 3]) == b"abc"
    view.release()


def _page_in_after_fork(result: multiprocessing.Queue) -> None:
    buffer = allocate(8 * MiB)
    assert isinstance(buffer, mmap.mmap)
    page_in(buffer)
    result.put(_resident_within(buffer, 8 * 1024, seconds=30))


@needs_mincore
@needs_advice
def test_a_forked_child_pages_in_with_a_pager_of_its_own() -> None:
    parent = allocate(4 * MiB)
    page_in(parent)  # the parent's pager thread exists; a forked child does not have it
    assert isinstance(parent, mmap.mmap) and _resident_within(parent, 4 * 1024, seconds=30) == 4 * 1024
    context = multiprocessing.get_context("fork")
    result = context.Queue()
    child = context.Process(target=_page_in_after_fork, args=(result,))
    child.start()
    try:
        assert result.get(timeout=60) == 8 * 1024
    finally:
        child.join(timeout=60)
        if child.is_alive():
            child.kill()
            child.join()
    assert child.exitcode == 0


def test_a_pool_reuses_a_mapping_only_once_nothing_else_refers_to_it() -> None:
    # populated when made: no pager job refers to a mapping for a while (the engine's pool pages in ahead)
    pool = BufferPool(max_bytes=64 * MiB, populate_ahead=False)
    first = pool.take(8 * MiB)
    assert isinstance(first, mmap.mmap)
    base = weakref.ref(first)
    view = memoryview(first).toreadonly()  # what a read hands its caller
    first[:3] = b"abc"
    del first
    while_held = pool.take(8 * MiB)
    assert while_held is not base() and bytes(view[:3]) == b"abc"  # a held result is never written
    del while_held
    view.release()
    again = pool.take(8 * MiB)
    assert again is base() and pool.reused == 1  # both let go of by now: the oldest of a size is taken
    held_mapping = again  # a reference to the mapping itself holds it too
    del again
    assert pool.take(8 * MiB) is not held_mapping


def test_a_reused_mapping_is_resident_and_its_slack_is_zeroed() -> None:
    pool = BufferPool(max_bytes=64 * MiB, populate_ahead=False)
    buffer = pool.take(8 * MiB)
    buffer[:] = b"\xff" * len(buffer)
    base = weakref.ref(buffer)
    del buffer
    smaller = pool.take(8 * MiB - 64 * 1024)  # within an eighth: the let-go mapping, its tail zeroed
    assert smaller is base() and len(smaller) == 8 * MiB
    assert bytes(smaller[8 * MiB - 64 * 1024 :]) == bytes(64 * 1024)
    if sys.platform == "linux":
        assert _resident_kib(smaller) == 8 * 1024


def test_a_miss_unmaps_the_oldest_let_go_mappings_past_the_bound_and_the_pool_tracks_twice_it_at_most() -> None:
    pool = BufferPool(max_bytes=16 * MiB, populate_ahead=False)
    large, other = pool.take(12 * MiB), pool.take(8 * MiB)
    oldest, newer = weakref.ref(large), weakref.ref(other)
    del large, other  # 20 MiB let go of: more than the pool keeps idle
    small = pool.take(2 * MiB)  # a miss: the oldest let-go one is unmapped, 8 MiB stay warm
    assert oldest() is None and newer() is not None and len(small) == 2 * MiB
    assert pool.take(8 * MiB) is newer()
    held = [pool.take(6 * MiB) for _ in range(6)]  # 2 + 8 + 36 MiB handed out: at most 32 MiB tracked
    forgotten = weakref.ref(held[0])
    del held[0]
    assert forgotten() is None  # the pool forgot it: unmapped as soon as its reader let go
    assert isinstance(pool.take(100), bytearray)  # below MAPPED_MIN: the heap
