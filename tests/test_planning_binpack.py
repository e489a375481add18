"""Bin-packing reproduces Spark's FilePartition numbers; large files split at row-group boundaries."""

from __future__ import annotations

import pickle
import random

import pytest

from s3io.errors import InvalidConfig
from s3io.s3.types import ObjectInfo
from spark_ext.planning.binpack import (
    FileSplit,
    max_split_bytes,
    needs_row_group_split,
    plan_partitions,
    split_row_groups,
)
from spark_ext.planning.hive import PartitionedObject

KiB = 1024
MiB = 1024 * KiB
DEFAULTS = {"max_partition_bytes": 128 * MiB, "open_cost": 4 * MiB}


def _files(n: int, size: int, prefix: str = "t/f") -> list[ObjectInfo]:
    return [ObjectInfo("b", f"{prefix}{i:04d}.parquet", size, etag=f'"{i}"') for i in range(n)]


def test_2000_small_files_give_63_partitions_of_32_like_spark_local2() -> None:
    # Measured with Spark 4.3, local[2]: spark.read on 2,000 files of 100 KiB plans 63 partitions.
    # maxSplitBytes = min(128 MiB, max(4 MiB, 2000 * (100 KiB + 4 MiB) / 2)) = 128 MiB; each file costs
    # 100 KiB + 4 MiB, so 32 fit (31 * 4,296,704 + 102,400 <= 134,217,728 < 32 * 4,296,704 + 102,400).
    partitions = plan_partitions(_files(2000, 100 * KiB), min_partitions=2, **DEFAULTS)
    assert len(partitions) == 63
    assert [len(p) for p in partitions] == [32] * 62 + [16]
    assert sorted(s.key for p in partitions for s in p) == [f.key for f in _files(2000, 100 * KiB)]


def test_many_min_partitions_shrink_the_split_size_like_spark() -> None:
    # bytesPerCore = 2000 * 4,296,704 / 200 = 42,967,040 -> 10 files per partition (9 * 4,296,704 + 102,400 fits).
    sizes = [100 * KiB] * 2000
    assert max_split_bytes(sizes, min_partitions=200, **DEFAULTS) == 42_967_040
    partitions = plan_partitions(_files(2000, 100 * KiB), min_partitions=200, **DEFAULTS)
    assert [len(p) for p in partitions] == [10] * 200


def test_max_split_bytes_is_floored_by_open_cost() -> None:
    assert max_split_bytes([1000, 1000], min_partitions=1000, **DEFAULTS) == 4 * MiB
    assert max_split_bytes([10 * 1024 * MiB], min_partitions=2, **DEFAULTS) == 128 * MiB


def test_mixed_sizes_match_spark_next_fit_decreasing() -> None:
    # Measured with Spark 4.3 on a 300 MiB file and ten 10 MiB files (byte splits 128/128/44 MiB):
    # partitions of 1, 1, 7 and 4 splits. We split at row groups instead: 3 x 100 MiB.
    files = [ObjectInfo("b", "big", 300 * MiB), *_files(10, 10 * MiB, prefix="s")]
    partitions = plan_partitions(files, min_partitions=2, row_group_sizes={"s3://b/big": [100 * MiB] * 3}, **DEFAULTS)
    shape = [[(s.key, s.row_groups) for s in p] for p in partitions]
    assert shape[0] == [("big", (0,))]
    assert shape[1] == [("big", (1,))]
    assert shape[2] == [("big", (2,)), ("s0000.parquet", None), ("s0001.parquet", None)]
    assert shape[3] == [(f"s{i:04d}.parquet", None) for i in range(2, 10)]


def test_large_file_without_row_group_sizes_stays_whole() -> None:
    files = [ObjectInfo("b", "big", 300 * MiB), *_files(10, 10 * MiB, prefix="s")]
    partitions = plan_partitions(files, min_partitions=2, **DEFAULTS)
    assert [(s.key, s.row_groups, s.length) for s in partitions[0]] == [("big", None, 300 * MiB)]
    assert [len(p) for p in partitions] == [1, 9, 1]


def test_row_groups_are_grouped_consecutively_up_to_max_split() -> None:
    assert split_row_groups([60, 60, 60, 60, 10], 128) == [(0, 1), (2, 3), (4,)]
    assert split_row_groups([200, 10, 10], 128) == [(0,), (1, 2)]
    assert split_row_groups([], 128) == []


def test_file_with_one_huge_row_group_stays_one_split() -> None:
    info = ObjectInfo("b", "huge", 1024 * MiB)
    partitions = plan_partitions([info], min_partitions=2, row_group_sizes={"huge": [1000 * MiB]}, **DEFAULTS)
    assert partitions == [[FileSplit("b", "huge", 1024 * MiB, None, None, 1024 * MiB)]]


def test_split_lengths_are_row_group_bytes_and_keep_identity() -> None:
    info = PartitionedObject(ObjectInfo("b", "t/a=1/f", 400 * MiB, etag='"e"'), (1,))
    partitions = plan_partitions([info], min_partitions=1, row_group_sizes={"t/a=1/f": [90 * MiB] * 4}, **DEFAULTS)
    splits = [s for p in partitions for s in p]
    assert [(s.row_groups, s.length) for s in splits] == [((i,), 90 * MiB) for i in range(4)]
    assert all(s.etag == '"e"' and s.size == 400 * MiB and s.partition_values == (1,) for s in splits)
    assert splits[0].url == "s3://b/t/a=1/f"


def test_small_file_ignores_row_group_sizes() -> None:
    partitions = plan_partitions(
        [ObjectInfo("b", "k", 10 * MiB)], min_partitions=1, row_group_sizes={"k": [5 * MiB, 5 * MiB]}, **DEFAULTS
    )
    assert partitions[0][0].row_groups is None


def test_needs_row_group_split_only_above_max_split() -> None:
    assert needs_row_group_split(129 * MiB, 128 * MiB)
    assert not needs_row_group_split(128 * MiB, 128 * MiB)


def test_empty_files_produce_no_split_like_spark() -> None:
    files = [ObjectInfo("b", "z0", 0), ObjectInfo("b", "z1", 0), ObjectInfo("b", "n", 1000)]
    assert [[s.key for s in p] for p in plan_partitions(files, min_partitions=2, **DEFAULTS)] == [["n"]]
    assert plan_partitions([], min_partitions=2, **DEFAULTS) == []


def test_output_is_deterministic_whatever_the_input_order() -> None:
    files = (
        _files(300, 100 * KiB) + _files(50, 3 * MiB, prefix="m") + [ObjectInfo("other", "t/f0000.parquet", 100 * KiB)]
    )
    expected = plan_partitions(files, min_partitions=4, **DEFAULTS)
    shuffled = files[:]
    random.Random(7).shuffle(shuffled)
    assert plan_partitions(shuffled, min_partitions=4, **DEFAULTS) == expected
    first = expected[0]
    assert [s.key for s in first[:3]] == ["m0000.parquet", "m0001.parquet", "m0002.parquet"]  # ties by URL


def test_splits_are_picklable_for_executors() -> None:
    split = FileSplit("b", "k", 10, '"e"', (0, 2), 7, (1, "x", None))
    assert pickle.loads(pickle.dumps(split)) == split


@pytest.mark.parametrize(
    ("kwargs", "option"),
    [
        ({"max_partition_bytes": 0, "open_cost": 0, "min_partitions": 1}, "maxPartitionBytes"),
        ({"max_partition_bytes": 1, "open_cost": -1, "min_partitions": 1}, "openCostInBytes"),
        ({"max_partition_bytes": 1, "open_cost": 0, "min_partitions": 0}, "minPartitionNum"),
    ],
)
def test_bad_sizing_arguments_name_the_option(kwargs: dict[str, int], option: str) -> None:
    with pytest.raises(InvalidConfig, match=option):
        plan_partitions(_files(1, 10), **kwargs)
