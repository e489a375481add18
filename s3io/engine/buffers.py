"""The one buffer a read of known size lands in: allocated once, filled in place by its parts, handed out as views.

Fresh memory is what a large read costs on a VM: touching 256 MiB of newly mapped pages one fault at a time took
0.14-0.17 CPU-s here, against 0.08-0.10 s when the kernel maps them all at once (``MAP_POPULATE``) and 0.02 s
for the copy itself. Joining parts (``bytes.join``) pays those faults once per join; a buffer the parts land in
pays them once. Below ``MAPPED_MIN`` a ``bytearray`` from the heap is cheaper (its pages are reused).
"""

from __future__ import annotations

import mmap

MAPPED_MIN = 1024 * 1024
_POPULATE = getattr(mmap, "MAP_POPULATE", 0)  # Linux: map and fault in every page in one call
_ANONYMOUS = getattr(mmap, "MAP_ANONYMOUS", 0)

Buffer = bytearray | mmap.mmap


def allocate(size: int) -> Buffer:
    """A writable buffer of ``size`` bytes (contents undefined until written): mapped pages for large sizes.

    The mapping is unmapped when the last view of it is dropped (never closed here: views may outlive the read)."""
    if size < MAPPED_MIN or not _ANONYMOUS:
        return bytearray(size)
    return mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | _ANONYMOUS | _POPULATE)


def retained(data: object) -> int:
    """Bytes kept alive by ``data``: its whole underlying buffer when it is a view of one (a part of a span)."""
    if isinstance(data, memoryview):
        base = data.obj
        return len(base) if isinstance(base, bytes | bytearray | mmap.mmap) else data.nbytes
    return len(data)  # type: ignore[arg-type]
