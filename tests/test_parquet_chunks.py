"""Planning over footers: chunk ranges per column, row-group spans, splits at row-group boundaries, pruning."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from s3io.parquet.chunks import (
    _needs_parquet_816_padding,
    chunk_range,
    chunk_ranges,
    plan_row_group_splits,
    row_group_byte_span,
    row_group_bytes,
    select_row_groups,
)

pytestmark = pytest.mark.timeout(30)


@pytest.fixture(scope="module")
def ten_row_groups(tmp_path_factory: pytest.TempPathFactory) -> pq.FileMetaData:
    path = tmp_path_factory.mktemp("plan") / "ten.parquet"
    rng = np.random.default_rng(3)
    table = pa.table(
        {
            "id": np.arange(10_000),
            "noise": rng.random(10_000),
            "nested": pa.array([{"a": int(i), "b": [int(i)]} for i in range(10_000)]),
        }
    )
    pq.write_table(table, path, row_group_size=1000, compression="none")
    return pq.read_metadata(path)


def test_struct_column_ranges_are_all_its_leaves(ten_row_groups: pq.FileMetaData) -> None:
    metadata = ten_row_groups
    assert metadata.num_columns == 4
    nested = chunk_ranges(metadata, [2], ["nested"])
    assert nested == sorted(chunk_range(metadata, 2, leaf) for leaf in (2, 3))
    assert chunk_ranges(metadata, [2], ["id"]) == [chunk_range(metadata, 2, 0)]
    assert chunk_ranges(metadata, [2], ["nope"]) == []
    assert len(chunk_ranges(metadata, [0, 5], None)) == 8


def test_chunk_range_starts_at_the_dictionary_page_when_there_is_one(ten_row_groups: pq.FileMetaData) -> None:
    column = ten_row_groups.row_group(0).column(0)
    assert column.has_dictionary_page
    start, end = chunk_range(ten_row_groups, 0, 0)
    assert start == column.dictionary_page_offset < column.data_page_offset
    assert end - start == column.total_compressed_size


def test_row_group_byte_span_spans_its_chosen_chunks(ten_row_groups: pq.FileMetaData) -> None:
    start, end = row_group_byte_span(ten_row_groups, 4)
    ranges = chunk_ranges(ten_row_groups, [4], None)
    assert (start, end) == (ranges[0][0], ranges[-1][1])
    assert row_group_byte_span(ten_row_groups, 4, ["missing"]) == (0, 0)
    assert row_group_bytes(ten_row_groups, 4) == sum(e - s for s, e in ranges)


def test_splits_pack_consecutive_row_groups_up_to_the_limit(ten_row_groups: pq.FileMetaData) -> None:
    sizes = [row_group_bytes(ten_row_groups, rg) for rg in range(10)]
    limit = sum(sizes[:3])
    splits = plan_row_group_splits(ten_row_groups, limit)
    assert [rg for split in splits for rg in split] == list(range(10))
    assert all(sum(sizes[rg] for rg in split) <= limit for split in splits)
    assert all(len(split) >= 2 for split in splits[:-1])
    assert plan_row_group_splits(ten_row_groups, 10**12) == [list(range(10))]
    assert plan_row_group_splits(ten_row_groups, 1) == [[rg] for rg in range(10)]


def test_splits_keep_the_given_row_groups_and_count_only_chosen_columns(ten_row_groups: pq.FileMetaData) -> None:
    id_size = row_group_bytes(ten_row_groups, 0, ["id"])
    splits = plan_row_group_splits(ten_row_groups, 2 * id_size + 1, row_groups=[1, 4, 5, 9], columns=["id"])
    assert splits == [[1, 4], [5, 9]]
    with pytest.raises(ValueError, match="positive"):
        plan_row_group_splits(ten_row_groups, 0)


def test_select_row_groups_prunes_by_statistics(ten_row_groups: pq.FileMetaData) -> None:
    assert select_row_groups(ten_row_groups, [("id", ">=", 2500), ("id", "<", 4000)]) == [2, 3]
    assert select_row_groups(ten_row_groups, [("id", "in", [5, 9999])]) == [0, 9]
    assert select_row_groups(ten_row_groups, None) == list(range(10))
    assert select_row_groups(ten_row_groups, [("nested", "is null", None)]) == list(range(10))


def test_select_row_groups_with_a_read_schema_prunes_files_missing_the_column(
    ten_row_groups: pq.FileMetaData,
) -> None:
    schema = ten_row_groups.schema.to_arrow_schema().append(pa.field("added_later", pa.string()))
    assert select_row_groups(ten_row_groups, [("added_later", "=", "x")], schema) == []
    assert select_row_groups(ten_row_groups, [("added_later", "is null", None)], schema) == list(range(10))


@pytest.mark.parametrize(
    ("created_by", "padded"),
    [
        ("parquet-mr version 1.2.8 (build abc)", True),
        ("parquet-mr version 1.2.9 (build abc)", False),
        ("parquet-mr version 1.12.3 (build abc)", False),
        ("parquet-cpp-arrow version 26.0.1", False),
        (None, False),
    ],
)
def test_old_parquet_mr_chunks_get_pyarrows_dictionary_header_padding(created_by: str | None, padded: bool) -> None:
    assert _needs_parquet_816_padding(created_by) is padded
