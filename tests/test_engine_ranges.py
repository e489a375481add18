"""Pure range planning: coalescing, splitting and cutting results back out by request identity."""

from __future__ import annotations

import itertools
import random

import pytest

from s3io.engine.ranges import merge_ranges, slice_merged, split_range
from s3io.errors import InvalidConfig


def test_merge_sorts_and_merges_within_gap() -> None:
    assert merge_ranges([(100, 110), (0, 10), (15, 20)], gap=5) == [(0, 20), (100, 110)]


def test_merge_keeps_ranges_apart_when_gap_is_larger_than_threshold() -> None:
    assert merge_ranges([(0, 10), (16, 20)], gap=5) == [(0, 10), (16, 20)]


def test_merge_gap_equal_to_threshold_merges() -> None:
    assert merge_ranges([(0, 10), (15, 20)], gap=5) == [(0, 20)]


def test_merge_overlapping_and_contained_ranges() -> None:
    assert merge_ranges([(0, 100), (10, 20), (50, 150), (150, 160)], gap=0) == [(0, 160)]


def test_merge_adjacent_ranges_with_zero_gap() -> None:
    assert merge_ranges([(0, 10), (10, 20)], gap=0) == [(0, 20)]


def test_merge_leaves_out_empty_ranges() -> None:
    assert merge_ranges([(5, 5), (100, 100)], gap=0) == []
    assert merge_ranges([(5, 5), (0, 3)], gap=0) == [(0, 3)]


def test_merge_rejects_malformed_ranges() -> None:
    with pytest.raises(InvalidConfig, match="start <= end"):
        merge_ranges([(10, 5)], gap=0)
    with pytest.raises(InvalidConfig):
        merge_ranges([(-1, 5)], gap=0)
    with pytest.raises(InvalidConfig, match="gap"):
        merge_ranges([(0, 5)], gap=-1)


def test_split_into_parts_with_short_last_part() -> None:
    assert split_range(0, 25, 10) == [(0, 10), (10, 20), (20, 25)]
    assert split_range(5, 25, 10) == [(5, 15), (15, 25)]


def test_split_small_and_empty_ranges() -> None:
    assert split_range(3, 7, 10) == [(3, 7)]
    assert split_range(3, 3, 10) == []
    with pytest.raises(InvalidConfig, match="part_size"):
        split_range(0, 10, 0)


def test_slice_matches_requests_by_position_including_duplicates_and_overlaps() -> None:
    data = bytes(range(256)) * 4
    requested = [(500, 510), (0, 4), (2, 6), (0, 4), (7, 7), (1000, 1024)]
    merged = merge_ranges(requested, gap=10)
    blobs = [data[s:e] for s, e in merged]
    assert slice_merged(requested, merged, blobs) == [data[s:e] for s, e in requested]


def test_slice_returns_blob_itself_when_request_equals_merged_range() -> None:
    blob = b"x" * 10
    [out] = slice_merged([(5, 15)], [(5, 15)], [blob])
    assert out is blob


def test_slice_rejects_request_outside_merged_ranges_and_wrong_blob_sizes() -> None:
    with pytest.raises(ValueError, match="not inside"):
        slice_merged([(0, 20)], [(0, 10)], [b"x" * 10])
    with pytest.raises(ValueError, match="holds 3 bytes"):
        slice_merged([(0, 5)], [(0, 10)], [b"abc"])


def test_merge_then_slice_roundtrip_random() -> None:
    rng = random.Random(1234)
    data = rng.randbytes(10_000)
    for _ in range(200):
        requested = []
        for _ in range(rng.randint(1, 12)):
            start = rng.randrange(0, 10_000)
            requested.append((start, min(10_000, start + rng.randint(0, 500))))
        gap = rng.choice([0, 1, 50, 1000])
        merged = merge_ranges(requested, gap)
        assert merged == sorted(merged)
        assert all(b[0] - a[1] > gap for a, b in itertools.pairwise(merged))
        pieces = [split_range(s, e, 97) for s, e in merged]
        blobs = [b"".join(data[ps:pe] for ps, pe in parts) for parts in pieces]
        assert slice_merged(requested, merged, blobs) == [data[s:e] for s, e in requested]
