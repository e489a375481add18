"""The one buffer a read of known size lands in: allocated once, filled in place by its parts, handed out as views.

Fresh memory is what a large read costs on a VM. Measured here (kernel 6.18, 2 cores), 256 MiB of newly mapped
memory: faulted in one 4 KiB page at a time as bytes arrive, 0.19 CPU-s; all at once (``MAP_POPULATE``), 0.085 s,
but on the event loop, before the first GET is even sent. So a large buffer is mapped unpopulated and its windows
are faulted in at once (``MADV_POPULATE_WRITE``, Linux 5.14+) by the pager, a thread that calls the kernel without
the GIL while the event loop sends the GETs and receives the first bytes; a part whose window the pager has not
reached yet faults its pages in as they are written (the same bytes either way). Where the kernel lacks the advice,
the mapping is populated when made. Transparent huge pages were measured too and left out: 0.025 s when the kernel
had free huge pages at hand, 0.2-0.7 s when it had handed them back to the hypervisor (free page reporting, on by
default in VMs like this one). Below ``MAPPED_MIN`` a ``bytearray`` from the heap is cheaper (its pages are reused).
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
import queue
import sys
import threading

MAPPED_MIN = 1024 * 1024
_POPULATE = getattr(mmap, "MAP_POPULATE", 0)  # Linux: map and fault in every page in one call
_ANONYMOUS = getattr(mmap, "MAP_ANONYMOUS", 0)
_MADV_POPULATE_WRITE = getattr(mmap, "MADV_POPULATE_WRITE", 23 if sys.platform == "linux" else None)

Buffer = bytearray | mmap.mmap


def _libc_madvise() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    """libc's madvise through ctypes, which releases the GIL for the call (mmap.madvise holds it)."""
    if _MADV_POPULATE_WRITE is None or not _ANONYMOUS:
        return None
    try:
        madvise = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    madvise.restype = ctypes.c_int
    probe = mmap.mmap(-1, mmap.PAGESIZE, flags=mmap.MAP_PRIVATE | _ANONYMOUS)
    try:
        return madvise if madvise(_address(probe), mmap.PAGESIZE, _MADV_POPULATE_WRITE) == 0 else None
    finally:
        probe.close()


def _address(mapping: mmap.mmap) -> int:
    """Where ``mapping`` starts (the ctypes view that tells it is dropped at once: no export outlives the call)."""
    return ctypes.addressof(ctypes.c_char.from_buffer(mapping))


_MADVISE = _libc_madvise()
POPULATES_AHEAD = _MADVISE is not None


class _Pager:
    """One daemon thread per process faulting in mapped buffers, in the order they were handed to it."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self._jobs: queue.SimpleQueue[mmap.mmap] = queue.SimpleQueue()
        threading.Thread(target=self._run, name="s3io-pager", daemon=True).start()

    def submit(self, mapping: mmap.mmap) -> None:
        self._jobs.put(mapping)

    def _run(self) -> None:
        assert _MADVISE is not None
        while True:
            mapping = self._jobs.get()
            _MADVISE(_address(mapping), len(mapping), _MADV_POPULATE_WRITE)  # refused: the writes fault pages in
            del mapping  # the buffer may be unmapped as soon as its reader drops it


_pager: _Pager | None = None
_pager_lock = threading.Lock()


def _the_pager() -> _Pager:
    """This process's pager (a forked child starts its own: the parent's thread is not in it)."""
    global _pager
    with _pager_lock:
        if _pager is None or _pager.pid != os.getpid():
            _pager = _Pager()
        return _pager


def allocate(size: int, *, populate_ahead: bool | None = None) -> Buffer:
    """A writable buffer of ``size`` bytes (contents undefined until written): mapped pages for large sizes, left for
    ``page_in`` where the kernel can populate them on advice (``populate_ahead``, default: where it can), else
    populated now.

    The mapping is unmapped when the last view of it is dropped (never closed here: views may outlive the read)."""
    if size < MAPPED_MIN or not _ANONYMOUS:
        return bytearray(size)
    if populate_ahead is None:
        populate_ahead = POPULATES_AHEAD
    flags = mmap.MAP_PRIVATE | _ANONYMOUS | (0 if populate_ahead else _POPULATE)
    return mmap.mmap(-1, size, flags=flags)


def page_in(buffer: Buffer) -> None:
    """Have the pager fault in a mapped buffer, from its start, ahead of the bytes (returns at once; nothing to do for
    heap buffers, or where ``allocate`` populated the mapping)."""
    if isinstance(buffer, mmap.mmap) and POPULATES_AHEAD:
        _the_pager().submit(buffer)


class BufferPool:
    """Mapped buffers of an engine's reads, reused once their reader has let go of them: a warm mapping's pages are
    resident already, where a fresh one's must be faulted in again (256 MiB: ~0.085 CPU-s, most of what a whole read
    of it costs the client; a heap allocator keeps freed memory warm the same way, but glibc maps anything above
    32 MiB afresh and unmaps it when freed).

    A buffer is let go of when nothing but the pool refers to it (no view of it, nothing holding the mapping: its
    reference count), so bytes a caller still holds are never written. ``take(size)`` reuses the smallest let-go
    mapping of ``size`` to ``size + size // 8`` bytes (the slack past ``size`` zeroed: no earlier read's bytes are
    reachable through the new one); on a miss the oldest let-go mappings are unmapped until at most ``max_bytes`` of
    them are left, then a new one is made: idle memory stays about ``max_bytes`` (a read larger than that is never
    kept), so reads of different sizes in turn (a whole object, then ranges of another) each find theirs warm. At most
    twice ``max_bytes`` of mappings are tracked (the oldest are forgotten: unmapped when their reader lets go).
    One event loop (like its engine). ``populate_ahead`` as for ``allocate``.

    While the pager faults a fresh mapping in, it refers to it too: a mapping is reused only after that."""

    __slots__ = ("_held", "_held_bytes", "max_bytes", "populate_ahead", "reused")

    def __init__(self, max_bytes: int, *, populate_ahead: bool | None = None) -> None:
        self.max_bytes = max_bytes
        self.populate_ahead = POPULATES_AHEAD if populate_ahead is None else populate_ahead
        self._held: list[mmap.mmap] = []  # mappings handed out, oldest first: in use, or let go of
        self._held_bytes = 0
        self.reused = 0

    def take(self, size: int) -> Buffer:
        """A writable buffer of at least ``size`` bytes (``size`` exactly below ``MAPPED_MIN``); its contents up to
        ``size`` undefined until written. A fresh mapping is handed to the pager; a reused one is resident."""
        if size < MAPPED_MIN or not _ANONYMOUS:
            return bytearray(size)
        held = self._held
        best = -1
        for index in range(len(held)):
            length = len(held[index])
            if size <= length <= size + size // 8 and _let_go(held, index) and (best < 0 or length < len(held[best])):
                best = index
        if best >= 0:
            mapping = held.pop(best)
            held.append(mapping)
            if len(mapping) > size:
                ctypes.memset(_address(mapping) + size, 0, len(mapping) - size)
            self.reused += 1
            return mapping
        self._unmap_let_go(self.max_bytes)
        mapping = allocate(size, populate_ahead=self.populate_ahead)
        assert isinstance(mapping, mmap.mmap)
        if self.populate_ahead:
            page_in(mapping)
        if size <= self.max_bytes:
            held.append(mapping)
            self._held_bytes += len(mapping)
            while self._held_bytes > 2 * self.max_bytes:
                self._held_bytes -= len(held.pop(0))
        return mapping

    def _unmap_let_go(self, keep: int) -> None:
        """Unmap the oldest mappings nothing but the pool refers to until at most ``keep`` bytes of them are left."""
        held = self._held
        let_go = [index for index in range(len(held)) if _let_go(held, index)]
        idle = sum(len(held[index]) for index in let_go)
        doomed = []
        for index in let_go:  # oldest first
            if idle <= keep:
                break
            idle -= len(held[index])
            doomed.append(index)
        for index in reversed(doomed):
            mapping = held.pop(index)
            self._held_bytes -= len(mapping)
            with contextlib.suppress(BufferError):  # exported after all: unmapped when its last view goes
                mapping.close()


def _let_go(held: list[mmap.mmap], index: int) -> bool:
    """Whether only ``held`` refers to ``held[index]``: every view of a mapping (and anything exported from it, even
    its pager job) holds a reference to it (CPython: the list's and the call's own)."""
    return sys.getrefcount(held[index]) <= 2


def retained(data: object) -> int:
    """Bytes kept alive by ``data``: its whole underlying buffer when it is a view of one (a part of a span)."""
    if isinstance(data, memoryview):
        base = data.obj
        return len(base) if isinstance(base, bytes | bytearray | mmap.mmap) else data.nbytes
    return len(data)  # type: ignore[arg-type]
