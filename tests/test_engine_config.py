"""EngineConfig: documented defaults, validation naming the field, parsing from string options."""

from __future__ import annotations

import pytest

from s3io.engine.config import EngineConfig, MiB
from s3io.errors import InvalidConfig


def test_defaults() -> None:
    config = EngineConfig()
    assert config.max_concurrency == 32
    assert config.memory_budget == 256 * MiB
    assert config.coalesce_gap == 1 * MiB
    assert config.part_size == 16 * MiB
    assert config.whole_object_threshold == 2 * MiB
    assert config.hedge_enabled is False and config.hedge_delay is None and config.hedge_max_fraction == 0.05
    assert config.effective_stream_window == 64 * MiB


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"max_concurrency": 0}, "maxConcurrency"),
        ({"memory_budget": 0}, "memoryBudget"),
        ({"part_size": 0}, "partSize"),
        ({"coalesce_gap": -1}, "coalesceGap"),
        ({"whole_object_threshold": -1}, "wholeObjectThreshold"),
        ({"hedge_delay": 0.0}, "hedgeDelay"),
        ({"hedge_max_fraction": 1.5}, "hedgeMaxFraction"),
        ({"stream_window": 0}, "streamWindow"),
    ],
)
def test_invalid_values_name_the_field(changes: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidConfig, match=field):
        EngineConfig(**changes)  # type: ignore[arg-type]


def test_from_mapping_parses_strings_with_camel_or_snake_case_keys() -> None:
    config = EngineConfig.from_mapping(
        {
            "maxconcurrency": "8",
            "memory_budget": "64MiB",
            "coalesceGap": "0",
            "PART_SIZE": "16m",
            "hedgeEnabled": "true",
            "hedge-delay": "200ms",
            "hedgeMaxFraction": "0.1",
            "streamWindow": "none",
            "cacheBytes": "1MiB",
        }
    )
    assert config.max_concurrency == 8
    assert config.memory_budget == 64 * MiB
    assert config.coalesce_gap == 0
    assert config.part_size == 16 * MiB
    assert config.hedge_enabled is True and config.hedge_delay == pytest.approx(0.2)
    assert config.hedge_max_fraction == pytest.approx(0.1)
    assert config.stream_window is None and config.cache_bytes == 1 * MiB
    assert EngineConfig.from_mapping({"hedgeDelay": "none"}).hedge_delay is None


def test_from_mapping_errors_name_the_option_and_the_form() -> None:
    with pytest.raises(InvalidConfig, match=r"unknown engine option 'bogus'.*partSize"):
        EngineConfig.from_mapping({"bogus": "1"})
    with pytest.raises(InvalidConfig, match=r"partSize.*64KiB"):
        EngineConfig.from_mapping({"partSize": "lots"})
    with pytest.raises(InvalidConfig, match=r"hedgeMaxFraction.*0.05"):
        EngineConfig.from_mapping({"hedgeMaxFraction": "some"})
    with pytest.raises(InvalidConfig, match="maxConcurrency"):
        EngineConfig.from_mapping({"maxConcurrency": "0"})
