"""Per-client counters, readable as an immutable snapshot: requests, retries, timeouts, bytes, latency."""

from __future__ import annotations

import bisect
from collections import Counter
from dataclasses import dataclass, field

# Upper bounds (seconds) of the latency histogram buckets; the last bucket is open-ended.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


@dataclass(frozen=True)
class MetricsSnapshot:
    """A point-in-time copy of a client's counters; subtract two to measure one piece of work."""

    requests: dict[tuple[str, int | str], int] = field(default_factory=dict)  # (operation, status) -> n
    retries: dict[str, int] = field(default_factory=dict)  # reason -> n
    timeouts: dict[str, int] = field(default_factory=dict)  # phase -> n
    bytes_in: int = 0
    bytes_out: int = 0
    hedges: int = 0
    latency_buckets: tuple[int, ...] = (0,) * (len(LATENCY_BUCKETS) + 1)

    @property
    def request_count(self) -> int:
        return sum(self.requests.values())

    @property
    def retry_count(self) -> int:
        return sum(self.retries.values())

    @property
    def timeout_count(self) -> int:
        return sum(self.timeouts.values())

    def requests_for(self, operation: str) -> int:
        return sum(n for (op, _), n in self.requests.items() if op == operation)

    def __sub__(self, other: MetricsSnapshot) -> MetricsSnapshot:
        return MetricsSnapshot(
            requests=_sub(self.requests, other.requests),
            retries=_sub(self.retries, other.retries),
            timeouts=_sub(self.timeouts, other.timeouts),
            bytes_in=self.bytes_in - other.bytes_in,
            bytes_out=self.bytes_out - other.bytes_out,
            hedges=self.hedges - other.hedges,
            latency_buckets=tuple(a - b for a, b in zip(self.latency_buckets, other.latency_buckets, strict=True)),
        )

    def summary(self) -> str:
        return (
            f"requests={self.request_count} retries={self.retry_count} timeouts={self.timeout_count} "
            f"bytes_in={self.bytes_in} bytes_out={self.bytes_out} hedges={self.hedges}"
        )


def _sub(a: dict, b: dict) -> dict:
    keys = set(a) | set(b)
    return {k: a.get(k, 0) - b.get(k, 0) for k in keys if a.get(k, 0) - b.get(k, 0)}


class Metrics:
    """Mutable counters owned by one client (one event loop): cheap to bump, read via ``snapshot()``."""

    __slots__ = ("_latency", "_requests", "_retries", "_timeouts", "bytes_in", "bytes_out", "hedges")

    def __init__(self) -> None:
        self._requests: Counter = Counter()
        self._retries: Counter = Counter()
        self._timeouts: Counter = Counter()
        self.bytes_in = 0
        self.bytes_out = 0
        self.hedges = 0
        self._latency = [0] * (len(LATENCY_BUCKETS) + 1)

    def request(self, operation: str, status: int | str, seconds: float) -> None:
        self._requests[(operation, status)] += 1
        self._latency[bisect.bisect_left(LATENCY_BUCKETS, seconds)] += 1

    def retry(self, reason: str) -> None:
        self._retries[reason] += 1

    def timeout(self, phase: str) -> None:
        self._timeouts[phase] += 1

    def snapshot(self) -> MetricsSnapshot:
        return MetricsSnapshot(
            requests=dict(self._requests),
            retries=dict(self._retries),
            timeouts=dict(self._timeouts),
            bytes_in=self.bytes_in,
            bytes_out=self.bytes_out,
            hedges=self.hedges,
            latency_buckets=tuple(self._latency),
        )
