"""Partition discovery agrees with Spark 4.3 (each expected value below was measured with spark.read.parquet)."""

from __future__ import annotations

import pickle
from datetime import UTC, date, datetime
from decimal import Decimal

import pyarrow as pa
import pytest
from pyspark.sql.types import (
    DateType,
    DecimalType,
    DoubleType,
    IntegerType,
    LongType,
    NullType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from s3io.errors import InvalidConfig
from s3io.s3.types import ObjectInfo
from s3io.table.data_files import ListedFile, is_hidden, is_hidden_name, is_summary_file, select_files
from s3io.urls import parse_s3_url
from spark_ext.planning.hive import PartitionSpec, discover_partitions
from spark_ext.planning.partition_types import unescape_path_name

ROOT = "s3://b/t/"


def _listed(*keys: str, root: str = ROOT) -> list[ListedFile]:
    return [ListedFile(ObjectInfo("b", key, 100), root) for key in keys]


def _column(*dirs: str, **kwargs: object) -> tuple[str, list[object]]:
    """The inferred type of one partition column ``p`` and its value for each directory, in the order given."""
    keys = [f"t/p={d}/f{i}.parquet" for i, d in enumerate(dirs)]
    spec = discover_partitions(_listed(*keys), **kwargs)
    assert spec.names == ("p",)
    by_key = {f.info.key: f.values[0] for f in spec.files}
    return spec.columns[0].data_type.simpleString(), [by_key[k] for k in keys]


@pytest.mark.parametrize(
    ("dirs", "expected_type", "expected_values"),
    [
        (["007"], "int", [7]),
        (["+5"], "int", [5]),
        (["-0"], "int", [0]),
        (["2147483648"], "bigint", [2147483648]),
        (["12345678901234567890"], "decimal(20,0)", [Decimal("12345678901234567890")]),
        (["1" * 40], "double", [float("1" * 40)]),
        (["1e5"], "decimal(6,0)", [Decimal(100000)]),
        (["5."], "decimal(1,0)", [Decimal(5)]),
        (["1.0"], "double", [1.0]),
        ([".5"], "double", [0.5]),
        (["1.5d"], "double", [1.5]),
        (["0x1p3"], "double", [8.0]),
        (["Infinity"], "double", [float("inf")]),
        (["-Infinity"], "double", [float("-inf")]),
        ([" 5"], "double", [5.0]),
        (["1_000"], "string", ["1_000"]),
        (["true"], "string", ["true"]),
        (["2016-01-01"], "date", [date(2016, 1, 1)]),
        (["2016-1-1"], "string", ["2016-1-1"]),
        (["2016-02-30"], "string", ["2016-02-30"]),
        (["12016-01-01"], "string", ["12016-01-01"]),
        (["2016-01-01 00%3A00%3A00"], "timestamp", [datetime(2016, 1, 1, tzinfo=UTC)]),
        (["2016-01-01 00:00:00"], "timestamp", [datetime(2016, 1, 1, tzinfo=UTC)]),
        (["2016-01-01 00%3A00%3A00.1"], "timestamp", [datetime(2016, 1, 1, 0, 0, 0, 100000, tzinfo=UTC)]),
        (["2016-01-01 00%3A00%3A00.123456"], "string", ["2016-01-01 00:00:00.123456"]),  # pattern is [.S]
        (["2016-01-01T00%3A00%3A00"], "string", ["2016-01-01T00:00:00"]),
        (["2016-01-01 0%3A00%3A00"], "string", ["2016-01-01 0:00:00"]),
        (["a%2Fb"], "string", ["a/b"]),
        (["%C3%A9"], "string", ["\u00c3\u00a9"]),  # per-character, like Hive's unescapePathName
        (["50%"], "string", ["50%"]),
        (["%zz1"], "string", ["%zz1"]),
        (["b=c"], "string", ["b=c"]),
        (["__HIVE_DEFAULT_PARTITION__"], "void", [None]),
    ],
)
def test_single_value_types_match_spark(dirs: list[str], expected_type: str, expected_values: list[object]) -> None:
    assert _column(*dirs) == (expected_type, expected_values)


def test_nan_partition_value_is_a_double() -> None:
    data_type, values = _column("NaN")
    assert data_type == "double" and values[0] != values[0]


@pytest.mark.parametrize(
    ("dirs", "expected_type", "expected_values"),
    [
        (["1", "1.5"], "double", [1.0, 1.5]),
        (["2147483648", "1.5"], "string", ["2147483648", "1.5"]),  # long + double loses precision: string
        (["1", "2147483648"], "bigint", [1, 2147483648]),
        (["1", "12345678901234567890"], "decimal(20,0)", [Decimal(1), Decimal("12345678901234567890")]),
        (["1.5", "12345678901234567890"], "string", ["1.5", "12345678901234567890"]),
        (["1", "2016-01-01"], "string", ["1", "2016-01-01"]),
        (["2016-01-01", "x"], "string", ["2016-01-01", "x"]),
        (["007", "x"], "string", ["007", "x"]),  # the raw text, not the parsed int
        (["1", "__HIVE_DEFAULT_PARTITION__"], "int", [1, None]),
        (["x", "__HIVE_DEFAULT_PARTITION__"], "string", ["x", None]),
    ],
)
def test_values_resolve_to_a_common_type_like_spark(
    dirs: list[str], expected_type: str, expected_values: list[object]
) -> None:
    assert _column(*dirs) == (expected_type, expected_values)


def test_date_and_timestamp_widen_to_timestamp_at_midnight() -> None:
    assert _column("2016-01-01", "2016-01-02 03%3A04%3A05") == (
        "timestamp",
        [datetime(2016, 1, 1, tzinfo=UTC), datetime(2016, 1, 2, 3, 4, 5, tzinfo=UTC)],
    )


def test_timestamps_are_read_in_the_session_time_zone() -> None:
    # Spark with spark.sql.session.timeZone=America/Los_Angeles: 2016-01-01 00:00:00 is epoch 1451635200.
    _, values = _column("2016-01-01 00%3A00%3A00", time_zone="America/Los_Angeles")
    assert values[0].timestamp() == 1451635200
    _, values = _column("2016-01-01 00%3A00%3A00", time_zone="+08:00")
    assert values[0] == datetime(2015, 12, 31, 16, tzinfo=UTC)


def test_unknown_time_zone_is_rejected_with_the_accepted_form() -> None:
    with pytest.raises(InvalidConfig, match=r"Mars/Base.*Europe/Paris"):
        _column("1", time_zone="Mars/Base")


def test_type_inference_off_gives_strings_and_nulls() -> None:
    assert _column("1", "__HIVE_DEFAULT_PARTITION__", type_inference=False) == ("string", ["1", None])


def test_user_types_override_inference() -> None:
    spec = discover_partitions(
        _listed("t/p=007/f.parquet", "t/p=__HIVE_DEFAULT_PARTITION__/g.parquet"), user_types={"P": StringType()}
    )
    assert [f.values for f in spec.files] == [("007",), (None,)]
    assert spec.columns[0].data_type == StringType()


def test_user_type_that_does_not_fit_names_column_value_and_path() -> None:
    with pytest.raises(InvalidConfig, match=r"'p'.*'x'.*s3://b/t/p=x/f.parquet.*int"):
        discover_partitions(_listed("t/p=x/f.parquet"), user_types={"p": IntegerType()})


def test_several_columns_and_schemas() -> None:
    spec = discover_partitions(
        _listed("t/year=2020/month=01/day=2020-01-05/a.parquet", "t/year=2021/month=12/day=2021-12-31/b.parquet")
    )
    assert spec.names == ("year", "month", "day")
    assert [f.values for f in spec.files] == [(2020, 1, date(2020, 1, 5)), (2021, 12, date(2021, 12, 31))]
    assert spec.spark_schema == StructType(
        [
            StructField("year", IntegerType(), True),
            StructField("month", IntegerType(), True),
            StructField("day", DateType(), True),
        ]
    )
    assert spec.arrow_schema == pa.schema([("year", pa.int32()), ("month", pa.int32()), ("day", pa.date32())])


def test_arrow_types_for_every_inferred_type() -> None:
    spec = PartitionSpec(
        tuple(
            discover_partitions(_listed(f"t/{name}={raw}/f.parquet")).columns[0]
            for name, raw in [
                ("l", "2147483648"),
                ("d", "1.5"),
                ("m", "12345678901234567890"),
                ("ts", "2016-01-01 00%3A00%3A00"),
                ("n", "__HIVE_DEFAULT_PARTITION__"),
                ("s", "x"),
            ]
        ),
        (),
    )
    assert [c.data_type for c in spec.columns] == [
        LongType(),
        DoubleType(),
        DecimalType(20, 0),
        TimestampType(),
        NullType(),
        StringType(),
    ]
    assert spec.arrow_schema.types == [
        pa.int64(),
        pa.float64(),
        pa.decimal128(20, 0),
        pa.timestamp("us", tz="UTC"),
        pa.null(),
        pa.string(),
    ]


def test_column_names_are_unescaped_and_matched_case_insensitively() -> None:
    assert discover_partitions(_listed("t/c%3Dd=1/f.parquet")).names == ("c=d",)
    spec = discover_partitions(_listed("t/A=1/f.parquet", "t/a=2/f.parquet"))
    assert spec.names == ("A",) and [f.values for f in spec.files] == [(1,), (2,)]


def test_walk_stops_at_the_first_plain_directory_above_partitions() -> None:
    # Spark: t/a=1/x/f.parquet has a=1 (plain directories below partitions are skipped).
    assert discover_partitions(_listed("t/a=1/x/f.parquet")).names == ("a",)


def test_conflicting_directory_structures_name_both_paths() -> None:
    with pytest.raises(InvalidConfig, match=r"Conflicting directory structures.*t/x/.*t/y/.*basePath"):
        discover_partitions(_listed("t/x/a=1/f.parquet", "t/y/a=2/f.parquet"))


def test_conflicting_partition_column_names_name_both_paths() -> None:
    with pytest.raises(InvalidConfig, match=r"Conflicting partition column names.*a=1/b=2.*a=1/c=3"):
        discover_partitions(_listed("t/a=1/b=2/f.parquet", "t/a=1/c=3/f.parquet"))
    with pytest.raises(InvalidConfig, match=r"Conflicting partition column names"):
        discover_partitions(_listed("t/a=1/b=2/f.parquet", "t/b=2/a=1/f.parquet"))


def test_file_outside_partition_directories_is_an_error_not_dropped() -> None:
    # Spark silently drops t/f.parquet here; we refuse rather than lose rows.
    with pytest.raises(InvalidConfig, match=r"s3://b/t/a=1/g.parquet has partition columns \(a\).*s3://b/t/f.parquet"):
        discover_partitions(_listed("t/a=1/g.parquet", "t/f.parquet"))


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ("t/a=/f.parquet", "empty partition column value.*'a='"),
        ("t/=1/f.parquet", "empty partition column name"),
        ("t/a=1/a=2/f.parquet", "'a' appears twice"),
    ],
)
def test_malformed_partition_directories_are_errors(key: str, message: str) -> None:
    with pytest.raises(InvalidConfig, match=message):
        discover_partitions(_listed(key))


def test_base_path_moves_where_partitions_start() -> None:
    files = _listed("t/year=2020/m=1/f.parquet", root="s3://b/t/year=2020/")
    assert discover_partitions(files).names == ("m",)
    assert discover_partitions(files, base_path="s3a://b/t").names == ("year", "m")
    assert discover_partitions(files, base_path="s3://b/").names == ("year", "m")


def test_base_path_must_be_above_every_root() -> None:
    with pytest.raises(InvalidConfig, match=r"basePath.*s3://b/other.*not a parent of the path 's3://b/t/'"):
        discover_partitions(_listed("t/a=1/f.parquet"), base_path="s3://b/other")


def test_glob_without_base_path_conflicts_like_spark_and_base_path_fixes_it() -> None:
    # Measured: spark.read.parquet("g/year=*") over year=2020/m=1 and year=2021/m=2 fails with
    # CONFLICTING_DIRECTORY_STRUCTURES; with basePath="g" it gives year and m.
    path = parse_s3_url("s3://b/g/year=*")
    objects = [ObjectInfo("b", "g/year=2020/m=1/f.parquet", 1), ObjectInfo("b", "g/year=2021/m=2/f.parquet", 1)]
    listed = select_files(objects, path)
    with pytest.raises(InvalidConfig, match="Conflicting directory structures"):
        discover_partitions(listed)
    assert discover_partitions(listed, base_path="s3://b/g/").names == ("year", "m")


def test_single_file_path_has_no_partitions_without_base_path() -> None:
    listed = select_files([ObjectInfo("b", "t/a=1/f.parquet", 1)], parse_s3_url("s3://b/t/a=1/f.parquet"))
    assert discover_partitions(listed).names == ()
    assert discover_partitions(listed, base_path="s3://b/t/").names == ("a",)


def test_recursive_file_lookup_disables_discovery() -> None:
    spec = discover_partitions(_listed("t/a=1/f.parquet", "t/x/g.parquet"), recursive_file_lookup=True)
    assert spec.columns == () and [f.values for f in spec.files] == [(), ()]


def test_unpartitioned_files_have_no_columns() -> None:
    spec = discover_partitions(_listed("t/f.parquet", "t/x/g.parquet"))
    assert spec.names == () and len(spec.files) == 2
    assert discover_partitions([]).files == ()


def test_unpartitioned_table_is_the_files_directly_in_its_path_as_in_spark() -> None:
    keys = ["t/part-0.parquet", "t/backup/part-0.parquet", "t/backup/old/part-1.parquet"]
    listed = select_files([ObjectInfo("b", k, 1) for k in keys], parse_s3_url("s3://b/t/"))
    assert [f.direct for f in listed] == [False, False, True]  # sorted by key: backup/old, backup, part-0
    assert [f.info.key for f in discover_partitions(listed).files] == ["t/part-0.parquet"]
    recursive = discover_partitions(listed, recursive_file_lookup=True)
    assert sorted(f.info.key for f in recursive.files) == sorted(keys)
    globbed = select_files([ObjectInfo("b", k, 1) for k in keys], parse_s3_url("s3://b/t/*/"))
    assert [f.info.key for f in discover_partitions(globbed).files] == ["t/backup/part-0.parquet"]


def test_partitioned_table_reads_below_its_partition_directories() -> None:
    keys = ["t/a=1/x/f.parquet", "t/a=2/g.parquet"]
    listed = select_files([ObjectInfo("b", k, 1) for k in keys], parse_s3_url("s3://b/t/"))
    spec = discover_partitions(listed)
    assert spec.names == ("a",) and [f.values for f in spec.files] == [(1,), (2,)]


def test_summary_files_are_listed_only_when_asked_for_and_never_from_hidden_directories() -> None:
    keys = ["t/_common_metadata", "t/_metadata", "t/_SUCCESS", "t/_temporary/_metadata", "t/f.parquet"]
    objects = [ObjectInfo("b", k, 1) for k in keys]
    path = parse_s3_url("s3://b/t/")
    assert [f.info.key for f in select_files(objects, path)] == ["t/f.parquet"]
    listed = select_files(objects, path, summaries=True)
    assert [f.info.key for f in listed] == ["t/_common_metadata", "t/_metadata", "t/f.parquet"]
    assert [is_summary_file(f.info.key) for f in listed] == [True, True, False]


def test_spec_is_picklable() -> None:
    spec = discover_partitions(_listed("t/d=2016-01-01 00%3A00%3A00/x=1.5/f.parquet"))
    assert pickle.loads(pickle.dumps(spec)) == spec


@pytest.mark.parametrize(
    ("relative", "hidden"),
    [
        ("f.parquet", False),
        ("a=1/f.parquet", False),
        ("_c=1/f.parquet", False),  # Spark keeps "_" names that contain "="
        ("_SUCCESS", True),
        ("_metadata", True),
        ("_common_metadata", True),
        ("a=1/_temporary/0/f.parquet", True),
        ("a=1/.f.parquet.crc", True),
        (".hive-staging/f.parquet", True),
        ("a=1/f.parquet._COPYING_", True),
        ("a=1/", True),  # directory marker
        ("a=1_$folder$", True),  # EMR/S3N directory marker
        ("", False),
    ],
)
def test_is_hidden_follows_spark_listing_rules(relative: str, hidden: bool) -> None:
    assert is_hidden(relative) is hidden


def test_is_hidden_name_and_unescape() -> None:
    assert is_hidden_name("_x") and not is_hidden_name("x_") and not is_hidden_name("_x=1")
    assert unescape_path_name("a%3Ab%2") == "a:b%2"
