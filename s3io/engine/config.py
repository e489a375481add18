"""EngineConfig: how the range engine shapes, bounds and hedges its GETs, as one immutable value.

Defaults, and the anchors they come from:
- max_concurrency 32: in-flight GETs per engine, half the client's default pool (Policy.max_connections 64),
  so hedges and other callers still find a free connection.
- memory_budget 256 MiB: bytes fetched but not yet handed over; reserved before a GET is issued.
- coalesce_gap 1 MiB: object_store's OBJECT_STORE_COALESCE_DEFAULT; reading a 1 MiB hole costs less than a
  second round trip.
- part_size 16 MiB (the option readPartSize; partSize in a read's options): twice the AWS CRT S3 client's 8 MiB, as
  pyarrow coalesces up to 32 MiB: half the requests (S3 bills per request) at ~180 ms per part at S3's ~90 MB/s per
  connection; larger ranges become parallel parts. Two 64 MB files through moto: 0.88-0.91 s at 16 MiB vs 1.06-1.11 s at
  8 MiB (5 interleaved runs).
- whole_object_threshold 2 MiB: moving 2 MiB takes about one S3 round trip, so an object this small is
  fetched whole in one GET rather than range by range.
- stream_window None: one stream may hold at most memory_budget / 4 ahead of its consumer, so one slow
  consumer cannot take the whole budget from the others.
- hedge_enabled False, hedge_delay None (adaptive: p95 of recent small-GET latencies, clamped to
  [50 ms, 2 s]), hedge_max_fraction 0.05: at most 5 % extra GETs, the tail-at-scale rule of thumb.
- cache_bytes 0: completed GETs are not kept; set it to keep recent GETs of a pinned version in an LRU
  (e.g. a small object fetched whole for its footer, then again for its column chunks). The cache is
  memory in addition to memory_budget.
- memory_budget also bounds the engine's warm buffers: the mapped buffers of reads whose results were let go of, kept
  (at most memory_budget of them idle) so the next read of about their size skips faulting in fresh pages.
"""

from __future__ import annotations

from typing import ClassVar

from s3io.errors import InvalidConfig
from s3io.settings import (
    BOOL,
    OPTIONAL_DURATION,
    SIZE,
    Kind,
    Settings,
    above,
    at_least,
    between,
    count,
    optional_size,
    setting,
    settings,
)

MiB = 1024 * 1024


def _fraction(value: object, name: str) -> float:
    try:
        return float(str(value).strip())
    except ValueError:
        raise InvalidConfig(f"{name}: expected a number in [0, 1] such as 0.05, got {value!r}") from None


@settings
class EngineConfig(Settings):
    """Concurrency, memory, coalescing, splitting and hedging of the range engine; never mutated (use ``replace``).

    Built from keywords, ``from_options({"maxConcurrency": "16"})`` or ``resolve(value)`` (see s3io.settings);
    not read from the environment.
    """

    KIND: ClassVar[str] = "engine option"

    max_concurrency: int = setting(
        "maxConcurrency",
        count(1),
        default=32,
        help="GETs in flight per engine (per task)",
        unit="GETs",
        range=at_least(1),
    )
    memory_budget: int = setting(
        "memoryBudget",
        SIZE,
        default=256 * MiB,
        help="bytes fetched but not yet handed over",
        unit="bytes",
        range=at_least(1),
    )
    coalesce_gap: int = setting(
        "coalesceGap",
        SIZE,
        default=1 * MiB,
        help="ranges closer than this are fetched by one GET",
        unit="bytes",
        range=at_least(0),
    )
    part_size: int = setting(
        "readPartSize",
        SIZE,
        default=16 * MiB,
        aliases=("partSize",),
        unit="bytes",
        range=at_least(1),
        help="the largest range one GET fetches (partSize: this in a read's options, uploadPartSize in a write's)",
    )
    whole_object_threshold: int = setting(
        "wholeObjectThreshold",
        SIZE,
        default=2 * MiB,
        help="an object this small is fetched whole in one GET",
        unit="bytes",
        range=at_least(0),
    )
    stream_window: int | None = setting(
        "streamWindow",
        optional_size(),
        default=None,
        help="bytes one stream may hold ahead of its consumer (default: a quarter of memoryBudget)",
        unit="bytes",
        range=at_least(1),
    )
    hedge_enabled: bool = setting(
        "hedgeEnabled", BOOL, default=False, help="send a second GET for a slow small one", aliases=("hedging",)
    )
    hedge_delay: float | None = setting(
        "hedgeDelay",
        OPTIONAL_DURATION,
        default=None,
        help="when to hedge (default: adaptive, p95 of recent GETs)",
        unit="s",
        range=above(0, none="adaptive"),
    )
    hedge_max_fraction: float = setting(
        "hedgeMaxFraction",
        Kind("number", _fraction),
        default=0.05,
        help="at most this share of GETs hedged",
        range=between(0, 1),
    )
    cache_bytes: int = setting(
        "cacheBytes", SIZE, default=0, help="completed GETs kept in an LRU (0: none)", unit="bytes", range=at_least(0)
    )

    @property
    def effective_stream_window(self) -> int:
        """Bytes one stream may hold ahead of its consumer: ``stream_window`` or a quarter of the budget."""
        return self.stream_window if self.stream_window is not None else max(1, self.memory_budget // 4)
