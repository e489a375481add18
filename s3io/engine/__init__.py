"""The range engine: coalesced, split, hedged, budgeted and deduplicated range reads over S3Client."""

from s3io.engine.budget import ByteBudget, Lease
from s3io.engine.config import EngineConfig
from s3io.engine.engine import UNKNOWN_SIZE, EngineStats, RangeEngine, RangeSource, Request
from s3io.engine.hedge import Hedger
from s3io.engine.ranges import merge_ranges, slice_merged, split_range
from s3io.engine.singleflight import SingleFlight

__all__ = [
    "UNKNOWN_SIZE",
    "ByteBudget",
    "EngineConfig",
    "EngineStats",
    "Hedger",
    "Lease",
    "RangeEngine",
    "RangeSource",
    "Request",
    "SingleFlight",
    "merge_ranges",
    "slice_merged",
    "split_range",
]
