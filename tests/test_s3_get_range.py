"""GetRange: a GET's range as a value that renders its header and judges the answer's Content-Range (no server)."""

from __future__ import annotations

import pytest

from s3io.s3.get_range import BOUNDED, FROM, SUFFIX, WHOLE, GetRange


def test_each_kind_renders_its_own_header_and_the_legacy_offsets_map_onto_them() -> None:
    cases = [
        (GetRange.whole(), WHOLE, None, (None, None)),
        (GetRange.bounded(6, 11), BOUNDED, "bytes=6-10", (6, 11)),
        (GetRange.starting_at(1024), FROM, "bytes=1024-", (1024, None)),
        (GetRange.starting_at(0), WHOLE, None, (0, None)),
        (GetRange.suffix(8), SUFFIX, "bytes=-8", (-8, None)),
    ]
    for want, kind, header, offsets in cases:
        assert want.kind == kind and want.header() == header
        assert GetRange.from_offsets(*offsets) == want


def test_impossible_ranges_are_refused_when_built() -> None:
    for build in (
        lambda: GetRange.bounded(5, 4),
        lambda: GetRange.bounded(-1, 4),
        lambda: GetRange.starting_at(-3),
        lambda: GetRange.suffix(0),
    ):
        with pytest.raises(ValueError):
            build()


def test_expected_length_is_known_for_bounded_and_suffix_ranges_only() -> None:
    assert GetRange.bounded(10, 25).expected_length == 15
    assert GetRange.suffix(64).expected_length == 64
    assert GetRange.starting_at(3).expected_length is None and GetRange.whole().expected_length is None


def test_a_206_is_judged_against_the_range_asked_for() -> None:
    assert GetRange.bounded(0, 10).content_range_error(0, 9, 100, 10) is None
    assert GetRange.bounded(0, 10).content_range_error(0, 9, 5, 10) is not None  # ends past the size it names
    assert GetRange.suffix(4).content_range_error(96, 99, 100, 4) is None
    assert "asked bytes=-4" in (GetRange.suffix(4).content_range_error(0, 3, 100, 4) or "")
    assert "no Range" in (GetRange.whole().content_range_error(0, 9, 10, 10) or "")
    assert GetRange.starting_at(5).content_range_error(5, 99, 100, 95) is None
    assert GetRange.bounded(5, 15).content_range_error(5, 14, None, 10) is None  # its end is known: checked
    # "from byte 5 on" answered with 10 bytes of an unstated size: it may have stopped short of the end
    assert "names no size" in (GetRange.starting_at(5).content_range_error(5, 14, None, 10) or "")
