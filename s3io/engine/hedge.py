"""Hedged GETs: when a small GET has not answered after the hedge delay, send an identical second one.

"First byte" is approximated by "the whole GET": hedging applies only to GETs no larger than the engine's
whole_object_threshold (2 MiB by default), whose transfer takes about one round trip, so their completion
time is dominated by time-to-first-byte. (S3Client measures whole exchanges, not the first byte.)

The first of the two to succeed wins and the other is cancelled; cancellation inside S3Client closes its
connection rather than returning it to the pool. If one fails, the other still gets its chance. Extra GETs
are capped with tokens: each hedgeable GET earns ``max_fraction`` of a token, a hedge spends a whole one, so
hedges never exceed ``max_fraction`` of hedgeable GETs (plus nothing: the bucket starts empty and holds at
most ``BURST`` tokens). Hedges are counted in the client's ``metrics.hedges``.

Adaptive delay (``delay=None``): the 95th percentile of the last ``WINDOW`` latencies of hedgeable GETs,
clamped to [``MIN_DELAY``, ``MAX_DELAY``]; ``MAX_DELAY`` until ``WARMUP`` latencies have been seen. A GET that
lost to its hedge is recorded with the time it had run when cancelled (a lower bound), which keeps the
percentile honest when the slow ones never finish.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TypeVar

from s3io.metrics import Metrics

T = TypeVar("T")

WINDOW = 64
WARMUP = 16
MIN_DELAY = 0.05
MAX_DELAY = 2.0
BURST = 10.0
PERCENTILE = 0.95


class Hedger:
    """Runs GETs with an optional hedge; holds the latency ring buffer and the hedge tokens of one engine."""

    def __init__(
        self,
        *,
        enabled: bool,
        delay: float | None,
        max_fraction: float,
        max_size: int,
        metrics: Metrics | None = None,
    ) -> None:
        self.enabled = enabled and max_fraction > 0
        self.fixed_delay = delay
        self.max_fraction = max_fraction
        self.max_size = max_size
        self.metrics = metrics
        self.hedges = 0
        self.hedge_wins = 0
        self.hedgeable = 0
        self._tokens = 0.0
        self._latencies: deque[float] = deque(maxlen=WINDOW)

    def delay(self) -> float:
        """Seconds to wait for a GET before hedging it."""
        if self.fixed_delay is not None:
            return self.fixed_delay
        if len(self._latencies) < WARMUP:
            return MAX_DELAY
        ordered = sorted(self._latencies)
        p95 = ordered[min(len(ordered) - 1, math.ceil(PERCENTILE * len(ordered)) - 1)]
        return min(MAX_DELAY, max(MIN_DELAY, p95))

    def observe(self, seconds: float) -> None:
        """Record the latency of one hedgeable GET."""
        self._latencies.append(seconds)

    def applies_to(self, size: int | None) -> bool:
        return self.enabled and size is not None and size <= self.max_size

    async def run(self, fetch: Callable[[], Awaitable[T]], size: int | None) -> T:
        """``await fetch()``, hedged with a second ``fetch()`` if it is slow and a token is available."""
        if not self.applies_to(size):
            return await fetch()
        self.hedgeable += 1
        self._tokens = min(BURST, self._tokens + self.max_fraction)
        loop = asyncio.get_running_loop()
        started = loop.time()
        primary = asyncio.ensure_future(fetch())
        backup: asyncio.Future[T] | None = None
        try:
            done, _ = await asyncio.wait({primary}, timeout=self.delay())
            if done or self._tokens < 1.0:
                result = await primary
                self.observe(loop.time() - started)
                return result
            self._tokens -= 1.0
            self.hedges += 1
            if self.metrics is not None:
                self.metrics.hedges += 1
            backup = asyncio.ensure_future(fetch())
            winner = await _first_success(primary, backup)
            self.observe(loop.time() - started)
            if winner is backup:
                self.hedge_wins += 1
            return winner.result()
        finally:
            await _cancel_all(primary, backup)


async def _first_success(primary: asyncio.Future[T], backup: asyncio.Future[T]) -> asyncio.Future[T]:
    """The first of the two to succeed; if both fail, raise the primary's error."""
    pending = {primary, backup}
    while pending:
        done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        for fut in (primary, backup):
            if fut in done and not fut.cancelled() and fut.exception() is None:
                return fut
    if primary.cancelled():
        raise asyncio.CancelledError
    raise primary.exception()  # type: ignore[misc]


async def _cancel_all(*futures: asyncio.Future[T] | None) -> None:
    """Cancel the unfinished futures and wait for them, so their connections are closed before we return."""
    live = [fut for fut in futures if fut is not None and not fut.done()]
    for fut in live:
        fut.cancel()
    if live:
        await asyncio.gather(*live, return_exceptions=True)
    for fut in futures:
        if fut is not None and fut.done() and not fut.cancelled():
            fut.exception()
