"""The one rule of every lease on a table: the lock (a compaction's or an overwrite's), a write's claim and a
stream's lease each end ``ttl`` after their object was last written, on the store's clock.

A holder writes its lease object (creates or renews it, conditionally); the object's Last-Modified is when the
store took that write. The lease has ended once the store's clock (``StoreClock``, from the store probe) is past
``Last-Modified + ttl + clock_skew + 1 s`` (Last-Modified has whole seconds). No machine's wall clock enters: a
challenger whose clock runs fast cannot take a live lease, a holder whose clock runs fast cannot keep a dead one.
"""

from __future__ import annotations

from s3io.s3.capabilities import STORE_CLOCK_RESOLUTION


def lease_end(written_at: float | None, ttl: float, clock_skew: float) -> float | None:
    """When a lease whose object was last written at ``written_at`` (its Last-Modified, store clock) ends on the
    store's clock; None where the store gave no Last-Modified (never judged ended)."""
    if written_at is None:
        return None
    return written_at + ttl + clock_skew + STORE_CLOCK_RESOLUTION


def lease_ended(written_at: float | None, ttl: float, clock_skew: float, store_now: float) -> bool:
    """Whether that lease has ended at ``store_now`` (the store's clock); an unknown Last-Modified never has."""
    end = lease_end(written_at, ttl, clock_skew)
    return end is not None and end < store_now
