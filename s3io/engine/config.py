"""EngineConfig: how the range engine shapes, bounds and hedges its GETs, as one immutable value.

Defaults, and the anchors they come from:
- max_concurrency 32: in-flight GETs per engine, half the client's default pool (Policy.max_connections 64),
  so hedges and other callers still find a free connection.
- memory_budget 256 MiB: bytes fetched but not yet handed over; reserved before a GET is issued.
- coalesce_gap 1 MiB: object_store's OBJECT_STORE_COALESCE_DEFAULT; reading a 1 MiB hole costs less than a
  second round trip.
- part_size 16 MiB: twice the AWS CRT S3 client's 8 MiB, as pyarrow coalesces up to 32 MiB: half the requests
  (S3 bills per request) at ~180 ms per part at S3's ~90 MB/s per connection; larger ranges become parallel parts.
  Two 64 MB files through moto: 0.88-0.91 s at 16 MiB vs 1.06-1.11 s at 8 MiB (5 interleaved runs).
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

from dataclasses import dataclass
from typing import ClassVar

from s3io.errors import InvalidConfig
from s3io.settings import Settings
from s3io.settings import option_name as _option
from s3io.units import parse_bool, parse_int, parse_optional_duration, parse_size

MiB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class EngineConfig(Settings):
    """Concurrency, memory, coalescing, splitting and hedging of the range engine; never mutated (use ``replace``).

    Built from keywords, ``from_mapping({"maxConcurrency": "16"})`` or ``resolve(value)`` (see s3io.settings);
    not read from the environment.
    """

    KIND: ClassVar[str] = "engine"

    max_concurrency: int = 32
    memory_budget: int = 256 * MiB
    coalesce_gap: int = 1 * MiB
    part_size: int = 16 * MiB
    whole_object_threshold: int = 2 * MiB
    stream_window: int | None = None
    hedge_enabled: bool = False
    hedge_delay: float | None = None
    hedge_max_fraction: float = 0.05
    cache_bytes: int = 0

    def __post_init__(self) -> None:
        for name in ("max_concurrency", "memory_budget", "part_size"):
            if isinstance(getattr(self, name), bool) or not getattr(self, name) >= 1:
                raise InvalidConfig(f"{_option(name)}: must be a whole number >= 1, got {getattr(self, name)!r}")
        for name in ("coalesce_gap", "whole_object_threshold", "cache_bytes"):
            if isinstance(getattr(self, name), bool) or not getattr(self, name) >= 0:
                raise InvalidConfig(f"{_option(name)}: must be a whole number >= 0, got {getattr(self, name)!r}")
        if self.stream_window is not None and not self.stream_window >= 1:
            raise InvalidConfig(f"streamWindow: must be a size >= 1 or 'none', got {self.stream_window!r}")
        if self.hedge_delay is not None and not self.hedge_delay > 0:
            raise InvalidConfig(
                f"hedgeDelay: must be a positive duration or 'none' (adaptive), got {self.hedge_delay!r}"
            )
        if not 0.0 <= self.hedge_max_fraction <= 1.0:
            raise InvalidConfig(f"hedgeMaxFraction: must be a number in [0, 1], got {self.hedge_max_fraction!r}")

    @property
    def effective_stream_window(self) -> int:
        """Bytes one stream may hold ahead of its consumer: ``stream_window`` or a quarter of the budget."""
        return self.stream_window if self.stream_window is not None else max(1, self.memory_budget // 4)

    @classmethod
    def parse_option(cls, name: str, value: object, *, label: str) -> object:
        return _parse_field(name, value, label=label)


_SIZE_FIELDS = {"memory_budget", "coalesce_gap", "part_size", "whole_object_threshold", "cache_bytes"}


def _parse_field(name: str, value: object, *, label: str) -> object:
    if name == "max_concurrency":
        return parse_int(value, name=label, minimum=1)  # type: ignore[arg-type]
    if name in _SIZE_FIELDS:
        return parse_size(value, name=label)  # type: ignore[arg-type]
    if name == "stream_window":
        if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none", "off")):
            return None
        return parse_size(value, name=label)  # type: ignore[arg-type]
    if name == "hedge_enabled":
        return parse_bool(value, name=label)  # type: ignore[arg-type]
    if name == "hedge_delay":
        return parse_optional_duration(value, name=label)  # type: ignore[arg-type]
    try:
        return float(str(value).strip())
    except ValueError:
        raise InvalidConfig(f"{label}: expected a number in [0, 1] such as 0.05, got {value!r}") from None
