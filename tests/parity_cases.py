"""The cases of the differential suite (tests/test_spark_parity.py): files, how to read them, and the deliberate
differences, each with the phrase of docs/spark.md that documents it and a check of what each reader does.

A case is read twice in one Spark session: ``spark.read.parquet`` over a local copy (the oracle) and
``spark.read.format("s3parquet")`` over the same bytes in moto. Paths and option values may hold ``{root}``,
replaced by each side's root directory (``file:/...`` or ``s3://bucket/case``).
"""

from __future__ import annotations

import io
import json
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq


@dataclass(frozen=True)
class Outcome:
    """What one reader did with a case: an error (first line), or a schema and the rows as canonical JSON."""

    error: str | None = None
    schema: Any = None  # pyspark StructType
    rows: Counter[str] | None = None

    @property
    def failed(self) -> bool:
        return self.error is not None


@dataclass(frozen=True)
class Difference:
    """A deliberate difference: ``documented`` is the phrase of docs/spark.md that documents it,
    ``check(builtin, ours)`` asserts what each reader does."""

    documented: str
    check: Callable[[Outcome, Outcome], None]


@dataclass(frozen=True)
class Case:
    name: str
    files: Mapping[str, bytes]
    path: str | Sequence[str] = "{root}/"
    options: Mapping[str, str] = field(default_factory=dict)
    schema: str | None = None
    query: Callable[[Any], Any] | None = None
    conf: Mapping[str, str] = field(default_factory=dict)
    scheme: str = "s3"
    difference: Difference | None = None


# Cases where a reader is expected to fail while reading rows: they run in Spark jobs of their own, so the error
# does not fail the batch of all other cases (a batching hint only: every outcome is still measured).
EXPECTED_READ_ERRORS = frozenset(
    {
        "evolve_float_then_double",
        "evolve_int_then_long",
        "evolve_long_then_int",
        "types_brotli",
        "user_schema_decimal_scale_down",
        "user_schema_double_as_float",
        "user_schema_long_as_boolean",
        "user_schema_long_as_double",
        "user_schema_long_as_int_narrowing",
        "user_schema_long_as_string",
        "user_schema_long_as_timestamp",
        "user_schema_string_as_int",
        "user_schema_date_as_int",
        "user_schema_decimal_as_binary",
        "user_schema_int_as_date",
        "user_schema_int_as_tinyint",
        "user_schema_long_time_units_of_timestamp",
        "user_schema_not_null_with_nulls_fails",
        "legacy_exception_mode_option_fails",
        "legacy_time_zone_key_ancient_timestamps",
    }
)


def parquet(table: pa.Table, **options: Any) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink, **options)
    return sink.getvalue()


def one(column: str, values: list, arrow_type: pa.DataType | None = None, **options: Any) -> bytes:
    return parquet(pa.table({column: pa.array(values, arrow_type)}), **options)


def ids(start: int, n: int, **columns: Callable[[int], object]) -> pa.Table:
    data: dict[str, Any] = {"id": pa.array(range(start, start + n), pa.int64())}
    for name, make in columns.items():
        data[name] = [make(i) for i in range(start, start + n)]
    return pa.table(data)


# ------------------------------------------------------------------------------------------- difference checks


def _reads(builtin: Outcome, ours: Outcome) -> None:
    """The built-in reader fails and s3parquet reads the file."""
    assert builtin.failed, f"the built-in reader now reads this: {builtin}"
    assert not ours.failed, ours.error


def _refuses(*phrases: str) -> Callable[[Outcome, Outcome], None]:
    def check(builtin: Outcome, ours: Outcome) -> None:
        assert not builtin.failed, builtin.error
        assert ours.failed, f"s3parquet read {ours.rows} where it should refuse"
        for phrase in phrases:
            assert phrase in ours.error, ours.error

    return check


def _ns_timestamps(builtin: Outcome, ours: Outcome) -> None:
    _reads(builtin, ours)
    assert ours.schema.simpleString() == "struct<t:timestamp>"
    assert ours.rows == Counter(['{"t":"2024-01-02T03:04:05.123456Z"}'])


def _float16(builtin: Outcome, ours: Outcome) -> None:
    _reads(builtin, ours)
    assert ours.schema.simpleString() == "struct<h:float>"
    assert ours.rows == Counter(['{"h":1.5}', '{"h":-2.0}'])


def _brotli(builtin: Outcome, ours: Outcome) -> None:
    _reads(builtin, ours)
    assert ours.rows == Counter(['{"id":1}', '{"id":2}'])


def _not_null_kept(builtin: Outcome, ours: Outcome) -> None:
    assert not builtin.failed and not ours.failed, (builtin.error, ours.error)
    assert [f.nullable for f in builtin.schema.fields] == [True, True]
    assert [f.nullable for f in ours.schema.fields] == [False, True]
    assert builtin.rows == ours.rows


def _user_schema_order_kept(builtin: Outcome, ours: Outcome) -> None:
    assert not builtin.failed and not ours.failed, (builtin.error, ours.error)
    assert builtin.schema.names == ["id", "v", "k"]  # Spark moves the partition column to the end
    assert ours.schema.names == ["id", "k", "v"]  # the schema as given
    assert builtin.rows is not None and ours.rows is not None

    def by_name(rows: Counter[str]) -> Counter[str]:
        return Counter(json.dumps(json.loads(row), sort_keys=True) for row in rows.elements())

    assert by_name(builtin.rows) == by_name(ours.rows)


def _not_null_enforced(builtin: Outcome, ours: Outcome) -> None:
    assert not builtin.failed, builtin.error
    assert ours.failed and "has nulls but the schema says not null" in ours.error, ours.error


# ------------------------------------------------------------------------------------------------- the cases

TS = datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)
FAR = [datetime(1, 1, 1), datetime(1600, 1, 1, 12), datetime(9999, 12, 31, 23, 59, 59, 999999)]


def _partitions() -> list[Case]:
    small = parquet(ids(0, 3, v=lambda i: f"v{i}"))
    return [
        Case("part_int", {"k=1/a.parquet": small, "k=2/b.parquet": small}),
        Case("part_long_double_decimal", {"a=3000000000/b=1.5/c=12345678901234567890/f.parquet": small}),
        Case("part_mixed_widens_to_string", {"k=1/a.parquet": small, "k=x/b.parquet": small}),
        Case("part_escaped", {"k=a%2Fb/a.parquet": small, "k=x%3Dy/b.parquet": small, "k=x y/c.parquet": small}),
        Case("part_unicode", {"k=café/a.parquet": small, "k=日本/b.parquet": small}),
        Case("part_null", {"k=__HIVE_DEFAULT_PARTITION__/a.parquet": small, "k=7/b.parquet": small}),
        Case("part_date", {"d=2024-01-02/a.parquet": small, "d=1999-12-31/b.parquet": small}),
        Case(
            "part_timestamp",
            {"t=2024-01-02 03%3A04%3A05/a.parquet": small, "t=2024-01-03 00%3A00%3A00.5/b.parquet": small},
        ),
        Case("part_bool_is_string", {"b=true/a.parquet": small, "b=false/b.parquet": small}),
        Case(
            "part_two_levels",
            {f"year={y}/month={m}/f.parquet": parquet(ids(y * 100 + m, 2)) for y in (2023, 2024) for m in (1, 12)},
        ),
        Case(
            "part_column_also_in_files",
            {"k=5/a.parquet": parquet(pa.table({"a": [1], "k": [7], "b": ["x"]}))},
        ),
        Case(
            "part_base_path",
            {"k=1/a.parquet": small, "k=2/b.parquet": small},
            path="{root}/k=2/",
            options={"basePath": "{root}/"},
        ),
        Case("part_glob_without_base_path", {"k=1/a.parquet": small, "k=2/b.parquet": small}, path="{root}/k=*/"),
        Case("part_user_schema_types_it", {"k=1/a.parquet": small}, schema="id bigint, v string, k string"),
        Case(
            "part_user_schema_places_it_mid_schema",
            {"k=1/a.parquet": small},
            schema="id bigint, k string, v string",
            difference=Difference("partition column in the middle", _user_schema_order_kept),
        ),
        Case("part_subdirectory_below_partition", {"k=1/x/a.parquet": small, "k=2/b.parquet": small}),
        Case(
            "part_backup_directory_next_to_partitions_conflicts",
            {"k=1/a.parquet": small, "backup/b.parquet": small},
        ),
        Case(
            "part_stray_file_next_to_partitions",
            {"k=1/a.parquet": small, "stray.parquet": small},
            difference=Difference(
                "a file next to `key=value` directories",
                _refuses("Conflicting directory structures", "stray.parquet"),
            ),
        ),
    ]


def _evolution() -> list[Case]:
    a = parquet(pa.table({"id": pa.array([1], pa.int64()), "a": ["x"]}))
    b = parquet(pa.table({"id": pa.array([2], pa.int64()), "b": [2.5]}))
    i32 = one("c", [1], pa.int32())
    i64 = one("c", [2], pa.int64())
    f32 = one("c", [1.5], pa.float32())
    f64 = one("c", [2.5], pa.float64())
    d52 = one("c", [Decimal("1.25")], pa.decimal128(5, 2))
    d102 = one("c", [Decimal("2.50")], pa.decimal128(10, 2))
    d53 = one("c", [Decimal("2.500")], pa.decimal128(5, 3))
    upper = parquet(pa.table({"ID": [1], "v": ["a"]}))
    lower = parquet(pa.table({"id": [2], "V": ["b"]}))
    s1 = parquet(pa.table({"s": pa.array([{"x": 1}], pa.struct([("x", pa.int64())]))}))
    s2 = parquet(pa.table({"s": pa.array([{"x": 2, "y": "q"}], pa.struct([("x", pa.int64()), ("y", pa.string())]))}))
    merge = {"mergeSchema": "true"}
    return [
        Case("evolve_added_column_first_schema_wins", {"a.parquet": a, "b.parquet": b}),
        Case("evolve_added_column_merged", {"a.parquet": a, "b.parquet": b}, options=merge),
        Case("evolve_dropped_column", {"a.parquet": a, "b.parquet": one("id", [3], pa.int64())}),
        Case("evolve_dropped_column_merged", {"a.parquet": a, "b.parquet": one("id", [3], pa.int64())}, options=merge),
        Case("evolve_int_then_long", {"a.parquet": i32, "b.parquet": i64}),
        Case("evolve_int_then_long_merged", {"a.parquet": i32, "b.parquet": i64}, options=merge),
        Case("evolve_long_then_int", {"a.parquet": i64, "b.parquet": i32}),
        Case("evolve_float_then_double", {"a.parquet": f32, "b.parquet": f64}),
        Case("evolve_float_then_double_merged", {"a.parquet": f32, "b.parquet": f64}, options=merge),
        Case("evolve_decimal_precision_merged", {"a.parquet": d52, "b.parquet": d102}, options=merge),
        Case("evolve_decimal_scale_merged", {"a.parquet": d52, "b.parquet": d53}, options=merge),
        Case("evolve_case_differs_across_files", {"a.parquet": upper, "b.parquet": lower}),
        Case("evolve_case_differs_merged", {"a.parquet": upper, "b.parquet": lower}, options=merge),
        Case("evolve_case_duplicate_in_one_file", {"a.parquet": parquet(pa.table({"ID": [1], "id": [2]}))}),
        Case("evolve_struct_field_added_merged", {"a.parquet": s1, "b.parquet": s2}, options=merge),
        Case("evolve_struct_field_added", {"a.parquet": s1, "b.parquet": s2}),
        Case(
            "evolve_timestamp_then_ntz", {"a.parquet": one("t", [TS]), "b.parquet": one("t", [TS.replace(tzinfo=None)])}
        ),
    ]


def _types() -> list[Case]:
    nested = pa.table(
        {
            "l": pa.array([[1, None, 3], None, []], pa.list_(pa.int32())),
            "ls": pa.array(
                [[{"a": 1, "b": "x"}], [None], None], pa.list_(pa.struct([("a", pa.int64()), ("b", pa.string())]))
            ),
            "s": pa.array(
                [{"p": 1.5, "q": [b"x"]}, None, {"p": None, "q": None}],
                pa.struct([("p", pa.float64()), ("q", pa.list_(pa.binary()))]),
            ),
            "m": pa.array([[("a", 1), ("b", None)], None, []], pa.map_(pa.string(), pa.int64())),
        }
    )
    scalars = pa.table(
        {
            "b": pa.array([True, None, False]),
            "s": pa.array(["héllo", None, ""]),
            "bin": pa.array([b"\x00\xff", None, b""]),
            "i8": pa.array([-128, None, 127], pa.int8()),
            "i16": pa.array([-32768, None, 32767], pa.int16()),
            "i32": pa.array([-(2**31), None, 2**31 - 1], pa.int32()),
            "i64": pa.array([-(2**63), None, 2**63 - 1], pa.int64()),
            "f": pa.array([float("nan"), float("inf"), -0.0], pa.float32()),
            "d": pa.array([float("-inf"), None, 1e300], pa.float64()),
            "dict": pa.array(["x", "y", "x"]).dictionary_encode(),
        }
    )
    unsigned = pa.table(
        {
            "u8": pa.array([0, 255], pa.uint8()),
            "u16": pa.array([0, 65535], pa.uint16()),
            "u32": pa.array([0, 2**32 - 1], pa.uint32()),
            "u64": pa.array([0, 2**64 - 1], pa.uint64()),
        }
    )
    decimals = pa.table(
        {
            "d52": pa.array([Decimal("-999.99"), None], pa.decimal128(5, 2)),
            "d183": pa.array([Decimal("123456789012345.678"), Decimal("0.001")], pa.decimal128(18, 3)),
            "d3810": pa.array([Decimal("1234567890123456789012345678.0123456789"), None], pa.decimal128(38, 10)),
        }
    )
    times = pa.table(
        {
            "day": pa.array([date(2024, 2, 29), date(1, 1, 1), date(9999, 12, 31)]),
            "at": pa.array([TS, TS.replace(microsecond=0), None], pa.timestamp("us", "UTC")),
            "local": pa.array([TS.replace(tzinfo=None), None, datetime(1970, 1, 1)], pa.timestamp("us")),
            "at_ms": pa.array([TS.replace(microsecond=123000), None, None], pa.timestamp("ms", "UTC")),
        }
    )
    far = pa.table({"at": pa.array(FAR, pa.timestamp("us", "UTC")), "local": pa.array(FAR, pa.timestamp("us"))})
    int96 = parquet(
        pa.table({"t": pa.array([TS.replace(tzinfo=None), *FAR], pa.timestamp("us"))}),
        use_deprecated_int96_timestamps=True,
    )
    return [
        Case("types_scalars", {"f.parquet": parquet(scalars)}),
        Case("types_unsigned_widen", {"f.parquet": parquet(unsigned)}),
        Case("types_decimals", {"f.parquet": parquet(decimals)}),
        Case("types_dates_and_timestamps", {"f.parquet": parquet(times)}),
        Case("types_timestamps_outside_nanosecond_range", {"f.parquet": parquet(far)}),
        Case("types_int96", {"f.parquet": int96}),
        Case("types_nested", {"f.parquet": parquet(nested)}),
        Case("types_all_null_column", {"f.parquet": parquet(pa.table({"n": pa.nulls(2), "a": [1, 2]}))}),
        Case("types_several_row_groups", {"f.parquet": parquet(ids(0, 1000, v=str), row_group_size=128)}),
        Case(
            "types_nanosecond_timestamps",
            {"f.parquet": one("t", [1704164645123456789], pa.timestamp("ns", "UTC"))},
            difference=Difference("nanosecond timestamps", _ns_timestamps),
        ),
        Case(
            "types_float16",
            {"f.parquet": one("h", [1.5, -2.0], pa.float16())},
            difference=Difference("float16", _float16),
        ),
        Case(
            "types_brotli",
            {"f.parquet": parquet(pa.table({"id": [1, 2]}), compression="brotli")},
            difference=Difference("brotli", _brotli),
        ),
    ]


def _layouts() -> list[Case]:
    a = parquet(ids(0, 2))
    b = parquet(ids(10, 2))
    return [
        Case(
            "layout_hidden_files",
            {
                "part-0.parquet": a,
                "_SUCCESS": b"",
                ".part-9.parquet.crc": b"crc",  # (a .crc of a real local file is checked by Hadoop)
                "_temporary/0/part-9.parquet": b,
                ".hidden/part-1.parquet": b,
                "part-2.parquet._COPYING_": b"partial",
            },
        ),
        Case("layout_empty_file_first", {"a.parquet": b"", "b.parquet": a}),
        Case("layout_subdirectory_of_unpartitioned_table", {"part-0.parquet": a, "backup/part-0.parquet": b}),
        Case(
            "layout_recursive_file_lookup",
            {"part-0.parquet": a, "backup/k=1/part-0.parquet": b},
            options={"recursiveFileLookup": "true"},
        ),
        Case(
            "layout_glob_of_directories", {"x/a.parquet": a, "y/b.parquet": b, "z/c.txt": b"text"}, path="{root}/[xy]/"
        ),
        Case(
            "layout_glob_of_files",
            {"part-0.parquet": a, "part-1.parquet": b, "other.json": b"{}"},
            path="{root}/part-*.parquet",
        ),
        Case(
            "layout_path_glob_filter",
            {"a.parquet": a, "b.json": b"{}", "c.parquet": b},
            options={"pathGlobFilter": "*.parquet"},
        ),
        Case(
            "layout_path_glob_filter_with_partitions",
            {"k=1/a.parquet": a, "k=1/b.json": b"{}", "k=2/c.parquet": b},
            options={"pathGlobFilter": "*.parquet"},
        ),
        Case("layout_s3a_url", {"a.parquet": a}, scheme="s3a"),
        Case(
            "layout_several_paths",
            {"x/a.parquet": a, "y/b.parquet": b, "z/c.parquet": b},
            path=["{root}/x/", "{root}/y/"],
        ),
        Case("layout_single_file", {"a.parquet": a, "b.parquet": b}, path="{root}/b.parquet"),
        Case(
            "layout_common_metadata_gives_the_schema",
            {
                "f.parquet": parquet(pa.table({"a": [1], "b": ["x"]})),
                "_common_metadata": _summary([("b", pa.string()), ("a", pa.int64()), ("c", pa.float64())]),
            },
        ),
        Case(
            "layout_metadata_summary_gives_the_schema",
            {
                "f.parquet": parquet(pa.table({"a": [1], "b": ["x"]})),
                "_metadata": _summary([("a", pa.int64()), ("z", pa.bool_())]),
            },
        ),
        Case(
            "layout_common_metadata_merged",
            {"f.parquet": parquet(pa.table({"a": [1]})), "_common_metadata": _summary([("c", pa.float64())])},
            options={"mergeSchema": "true"},
        ),
    ]


def _summary(fields: list[tuple[str, pa.DataType]]) -> bytes:
    sink = io.BytesIO()
    pq.write_metadata(pa.schema(fields), sink)
    return sink.getvalue()


def _user_schemas() -> list[Case]:
    f = {
        "f.parquet": parquet(
            pa.table(
                {
                    "i": pa.array([1, None], pa.int32()),
                    "l": pa.array([2**40, 3], pa.int64()),
                    "fl": pa.array([1.5, None], pa.float32()),
                    "db": pa.array([1e300, 2.0], pa.float64()),
                    "dec": pa.array([Decimal("1.25"), None], pa.decimal128(5, 2)),
                    "day": pa.array([date(2024, 1, 2), None]),
                    "s": pa.array(["x", None]),
                    "bin": pa.array([b"y", None]),
                    "st": pa.array([{"a": 1, "b": "x"}, None], pa.struct([("a", pa.int64()), ("b", pa.string())])),
                }
            )
        )
    }
    differ = Difference("reinterpretations", _refuses("cannot be read as"))
    struct_a = pa.struct([("b", pa.int64())])
    dotted = {  # a top-level column named "a.b" beside a struct "a" whose field "b" has the same dotted path
        "x.parquet": parquet(
            pa.table({"a.b": [1, None, 3], "a": pa.array([{"b": 10}, {"b": 20}, None], struct_a), "c": [5, 6, 7]})
        ),
        "y.parquet": parquet(pa.table({"a": pa.array([{"b": 40}, {"b": None}], struct_a), "c": [8, 9]})),
    }
    pushdown = {"spark.sql.python.filterPushdown.enabled": "true", "spark.sql.parquet.filterPushdown": "true"}
    cases = [
        Case("user_schema_dotted_name_beside_a_struct", dotted, schema="`a.b` bigint, c bigint"),
        Case(
            "user_schema_dotted_name_filtered_is_null",
            dotted,
            schema="`a.b` bigint, c bigint",
            query=lambda df: df.filter("`a.b` IS NULL"),
            conf=pushdown,
        ),
        Case(
            "user_schema_dotted_name_filtered_by_value",
            dotted,
            schema="c bigint, `a.b` bigint, a struct<b:bigint>",
            query=lambda df: df.filter("`a.b` > 2 OR a.b = 40"),
            conf=pushdown,
        ),
        Case(
            "user_schema_matches",
            f,
            schema="i int, l bigint, fl float, db double, dec decimal(5,2), day date, s string, bin binary",
        ),
        Case("user_schema_subset_reordered_and_missing", f, schema="s string, missing int, i int"),
        Case("user_schema_names_ignore_case", f, schema="I int, S string"),
        Case("user_schema_widens", f, schema="i bigint, fl double, dec decimal(10,3), day timestamp_ntz"),
        Case("user_schema_int_as_double_and_decimal", f, schema="i double, l decimal(20,0)"),
        Case("user_schema_string_binary_swap", f, schema="s binary, bin string"),
        Case("user_schema_nested_subset", f, schema="st struct<b:string, z:int>"),
        Case("user_schema_long_as_int_narrowing", f, schema="l int"),
        Case("user_schema_long_as_timestamp", f, schema="l timestamp"),
        Case("user_schema_long_as_boolean", f, schema="l boolean"),
        Case("user_schema_long_as_string", f, schema="l string"),
        Case("user_schema_double_as_float", f, schema="db float"),
        Case("user_schema_long_as_double", f, schema="l double"),
        Case("user_schema_decimal_scale_down", f, schema="dec decimal(10,1)"),
        Case("user_schema_string_as_int", f, schema="s int"),
        Case("user_schema_int_as_tinyint", f, schema="i tinyint", difference=differ),
        Case("user_schema_date_as_int", f, schema="day int", difference=differ),
        Case("user_schema_int_as_date", f, schema="i date", difference=differ),
        Case(
            "user_schema_long_time_units_of_timestamp",
            {"f.parquet": one("t", [TS])},
            schema="t bigint",
            difference=differ,
        ),
        Case("user_schema_decimal_as_binary", f, schema="dec binary", difference=differ),
        Case(
            "user_schema_not_null_is_kept",
            f,
            schema="l bigint not null, s string",
            difference=Difference("NOT NULL", _not_null_kept),
        ),
        Case(
            "user_schema_not_null_with_nulls_fails",
            f,
            schema="i int not null",
            difference=Difference("NOT NULL", _not_null_enforced),
        ),
    ]
    return cases


def _filters() -> list[Case]:
    files = {
        f"year={y}/part-{i}.parquet": parquet(ids(y * 10_000 + i * 100, 100)) for y in (2023, 2024) for i in range(3)
    }
    files.update({"year=2023/part-9.parquet": parquet(ids(2023 * 10_000 + 900, 300))})
    shapes: dict[str, Callable[[Any], Any]] = {
        "filtered_union_whole": lambda df: df.filter("year = 2024").union(df),
        "self_join_filtered_and_whole": lambda df: (
            df.filter("year = 2024").alias("a").join(df.alias("b"), "id").select("a.id", "b.year")
        ),
        "partition_and_data_filter": lambda df: df.filter("year = 2023 AND id % 7 = 0"),
        "or_filter": lambda df: df.filter("year = 2024 OR id < 20230010"),
        "in_and_not": lambda df: df.filter("year IN (2024) AND NOT id = 20240101"),
    }
    cases = []
    for pushdown in ("true", "false"):
        conf = {"spark.sql.python.filterPushdown.enabled": pushdown, "spark.sql.parquet.filterPushdown": pushdown}
        for name, query in shapes.items():
            cases.append(Case(f"filter_{name}_pushdown_{pushdown}", files, query=query, conf=conf))
    return cases


def _pruning() -> list[Case]:
    """Queries whose columns and filters the JVM scan hands to the reader (spark_ext.jvm): each side reads only
    what the optimized plan needs; nulls in every pushed column, several row groups, a partition column."""
    struct = pa.struct([("a", pa.int64()), ("b", pa.string())])

    def table(start: int) -> pa.Table:
        n = range(start, start + 200)
        return pa.table(
            {
                "id": pa.array(n, pa.int64()),
                "v": pa.array([None if i % 7 == 0 else i for i in n], pa.int64()),
                "s": pa.array([None if i % 5 == 0 else f"x{i}" for i in n]),
                "st": pa.array([None if i % 11 == 0 else {"a": i, "b": f"b{i % 4}"} for i in n], struct),
            }
        )

    files = {
        "g=1/a.parquet": parquet(table(0), row_group_size=50),
        "g=2/b.parquet": parquet(table(200), row_group_size=50),
    }
    queries: dict[str, Callable[[Any], Any]] = {
        "one_column": lambda df: df.select("v"),
        "partition_column_only": lambda df: df.select("g"),
        "count_only": lambda df: df.selectExpr("count(*) AS n"),
        "nested_field_filtered": lambda df: df.where("st.b = 'b1'").select("st.a"),
        "case_insensitive_names": lambda df: df.select("V", "S").where("V > 390 OR S = 'x3'"),
        "not_equal_with_nulls": lambda df: df.where("NOT (v = 5)").select("id"),
        "null_safe_equal_null": lambda df: df.where("v <=> NULL").select("id", "s"),
        "is_null_and_in": lambda df: df.where("s IS NULL AND v IN (10, 20, NULL)").select("id"),
        "not_in_with_nulls": lambda df: df.where("NOT v IN (1, 2, 3)").selectExpr("count(*) AS n"),
        "string_prefix_suffix_contains": lambda df: df.where("s LIKE 'x1%' AND s LIKE '%9' AND s LIKE '%3%'"),
        "range_and_partition": lambda df: df.where("v >= 120 AND v < 130 AND g = 1").select("id", "g"),
        "selective_filter_group": lambda df: df.where("v < 10").groupBy("s").count(),
        "self_union_different_filters": lambda df: df.where("v < 10").union(df.where("v > 390")).select("id"),
        "self_union_filtered_and_whole": lambda df: df.where("g = 1").union(df).selectExpr("count(*) AS n"),
        "self_join_pruned_sides": lambda df: df.where("v < 50").select("id").join(df.select("id", "s"), "id"),
    }
    cases = [Case(f"pruned_{name}", files, query=query) for name, query in queries.items()]
    cases.append(
        Case(
            "pruned_user_schema",
            files,
            schema="v bigint, g int, id bigint",
            query=lambda df: df.where("v IS NOT NULL AND v > 395").select("v"),
        )
    )
    return cases


def _row_filters() -> list[Case]:
    """Pushed filters the Python reader also applies to rows (spark_ext.source.pushed_rows): only where Arrow and
    Spark agree, so NaN and nulls in every column, non-ASCII strings, zoned and zoneless timestamps, decimals."""
    words = ["a", "é", "éa", "ü", "z", "日本", "", "ê"]

    def table(start: int) -> pa.Table:
        n = range(start, start + 96)
        return pa.table(
            {
                "id": pa.array(n, pa.int64()),
                "v": pa.array([None if i % 7 == 0 else i % 40 for i in n], pa.int32()),
                "x": pa.array([None if i % 9 == 0 else float("nan") if i % 5 == 0 else i / 8 for i in n]),
                "s": pa.array([None if i % 6 == 0 else words[i % len(words)] for i in n]),
                "d": pa.array([None if i % 8 == 0 else date(2024, 1, 1 + i % 20) for i in n], pa.date32()),
                "ts": pa.array(
                    [None if i % 10 == 0 else datetime(2024, 1, 1, i % 24, i % 60, tzinfo=UTC) for i in n],
                    pa.timestamp("us", tz="UTC"),
                ),
                "ntz": pa.array([datetime(2024, 1, 1, i % 24) for i in n], pa.timestamp("us")),
                "dec": pa.array([None if i % 11 == 0 else Decimal(i) / 4 for i in n], pa.decimal128(10, 2)),
            }
        )

    files = {"a.parquet": parquet(table(0), row_group_size=32), "b.parquet": parquet(table(96), row_group_size=32)}
    queries: dict[str, Callable[[Any], Any]] = {
        "double_greater_with_nan": lambda df: df.where("x > 1").select("id", "x"),
        "double_equal_nan": lambda df: df.where("x = double('NaN')").select("id"),
        "double_not_less": lambda df: df.where("NOT x < 5").select("id"),
        "double_in_with_nan": lambda df: df.where("x IN (1.0, double('NaN'))").select("id"),
        "int_is_null": lambda df: df.where("v IS NULL").select("id"),
        "int_is_not_null_and_range": lambda df: df.where("v IS NOT NULL AND v >= 30").select("id", "v"),
        "int_null_safe_equal": lambda df: df.where("v <=> 5").select("id"),
        "int_not_null_safe_equal": lambda df: df.where("NOT (v <=> 5)").select("id"),
        "int_in_with_null": lambda df: df.where("v IN (1, 2, NULL)").select("id"),
        "int_not_in": lambda df: df.where("NOT v IN (1, 2)").select("id"),
        "string_non_ascii": lambda df: df.where("s = 'é' OR s > 'ê'").select("id", "s"),
        "string_range_non_ascii": lambda df: df.where("s > 'é'").select("id", "s"),
        "string_prefix_non_ascii": lambda df: df.where("s LIKE 'é%'").select("id"),
        "string_not_prefix": lambda df: df.where("NOT s LIKE 'é%'").select("id"),
        "string_null_safe_null": lambda df: df.where("s <=> NULL").select("id"),
        "date_range": lambda df: df.where("d >= DATE'2024-01-05' AND d < '2024-01-09'").select("id"),
        "timestamp_zoned": lambda df: df.where("ts > TIMESTAMP'2024-01-01 12:30:00'").select("id"),
        "timestamp_zoneless": lambda df: df.where("ntz <= TIMESTAMP_NTZ'2024-01-01 05:00:00'").select("id"),
        "decimal_equal_other_scale": lambda df: df.where("dec = 1.5").select("id"),
        "decimal_range": lambda df: df.where("dec > 10.125 AND dec <= CAST(20 AS DECIMAL(4, 0))").select("id"),
        "filter_on_unselected_column": lambda df: df.where("v < 10").select("id"),
        "filter_on_unselected_column_grouped": lambda df: df.where("v < 10").groupBy("s").count(),
        "self_union_different_filters": lambda df: df.where("v < 3").union(df.where("s = 'ü'")).select("id"),
        "case_insensitive_column": lambda df: df.where("V < 3 AND S = 'é'").select("ID"),
    }
    # The built-in reader prunes row groups by statistics that leave NaN out, so with its own pushdown on it loses
    # the NaN rows `x = NaN` or `x >= 5` keep in Spark: the double cases compare with its pushdown off.
    exact_oracle = {"spark.sql.parquet.filterPushdown": "false"}
    return [
        Case(f"rows_{name}", files, query=query, conf=exact_oracle if name.startswith("double_") else {})
        for name, query in queries.items()
    ]


def _julian_day(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 of a Julian calendar date: what Spark 2.4 stored for it."""
    a = (14 - month) // 12
    y, m = year + 4800 - a, month + 12 * a - 3
    return day + (153 * m + 2) // 5 + 365 * y + y // 4 - 32083 - 2440588


def _legacy_table(int96: bool = False) -> pa.Table:
    """Dates and timestamps as a legacy Spark writer stores them: Julian century leap days, the switch days of
    1582, BCE, 1850 and modern values, nulls, and dates nested in a struct and a list."""
    julian = [_julian_day(c, m, d) for c in (100, 400, 1000, 1500) for m, d in ((2, 28), (2, 29), (3, 1))]
    days = [*julian, _julian_day(1582, 10, 4), -141427, -141426, -800000, _julian_day(1850, 1, 1), 18262, None]
    day_us = 86_400_000_000
    times = [None if d is None else d * day_us + 36_000_123_456 for d in days]
    kind = pa.timestamp("us") if int96 else pa.timestamp("us", "UTC")
    columns: dict[str, Any] = {
        "id": pa.array(range(len(days)), pa.int64()),
        "d": pa.array(days, pa.date32()),
        "ts": pa.array(times, kind),
    }
    if not int96:
        columns["ts_ms"] = pa.array([None if t is None else t // 1000 for t in times], pa.timestamp("ms", "UTC"))
        columns["ntz"] = pa.array(times, pa.timestamp("us"))
        columns["s"] = pa.array([{"d": d} for d in days], pa.struct([("d", pa.date32())]))
        columns["l"] = pa.array([[d, d] for d in days], pa.list_(pa.date32()))
    return pa.table(columns)


def _legacy_file(
    meta: Mapping[str, str], *, int96: bool = False, table: pa.Table | None = None, **options: Any
) -> bytes:
    data = table if table is not None else _legacy_table(int96)
    data = data.replace_schema_metadata({k.encode(): v.encode() for k, v in meta.items()})
    return parquet(data, use_deprecated_int96_timestamps=int96, **options)


def _legacy() -> list[Case]:
    v24 = {"org.apache.spark.version": "2.4.8"}
    v35 = {"org.apache.spark.version": "3.5.0"}
    legacy_datetime = {**v35, "org.apache.spark.legacyDateTime": ""}
    legacy_int96 = {**v35, "org.apache.spark.legacyINT96": ""}
    modern_times = pa.table(
        {
            "d": pa.array([_julian_day(1000, 1, 1), 18262], pa.date32()),
            "ts": pa.array([datetime(1900, 1, 1, tzinfo=UTC), datetime(2020, 1, 1, 10, tzinfo=UTC)]),
        }
    )
    ancient_times = pa.table({"ts": pa.array([datetime(1850, 1, 1, 10, tzinfo=UTC)])})
    two_groups = pa.table(
        {
            "d": pa.array([_julian_day(1000, 1, 1), _julian_day(1000, 1, 2), 18262, 18263], pa.date32()),
            "ts": pa.array([d * 86_400_000_000 for d in (-354280, -354279, 18262, 18263)], pa.timestamp("us", "UTC")),
        }
    )
    pushdown = {"spark.sql.python.filterPushdown.enabled": "true", "spark.sql.parquet.filterPushdown": "true"}
    return [
        Case("legacy_spark24_dates_and_micros", {"f.parquet": _legacy_file(v24)}),
        Case("legacy_spark24_int96", {"f.parquet": _legacy_file(v24, int96=True)}),
        Case("legacy_spark35_legacy_datetime_key", {"f.parquet": _legacy_file(legacy_datetime)}),
        Case("legacy_spark35_legacy_datetime_key_int96", {"f.parquet": _legacy_file(legacy_datetime, int96=True)}),
        Case("legacy_spark35_legacy_int96_key", {"f.parquet": _legacy_file(legacy_int96, int96=True)}),
        Case("legacy_spark30_int96", {"f.parquet": _legacy_file({"org.apache.spark.version": "3.0.1"}, int96=True)}),
        Case("legacy_spark35_corrected", {"f.parquet": _legacy_file(v35)}),
        Case("legacy_version_compared_as_text", {"f.parquet": _legacy_file({"org.apache.spark.version": "10.0.0"})}),
        Case(
            "legacy_and_corrected_files_together",
            {"a.parquet": _legacy_file(v24), "b.parquet": _legacy_file(v35), "c.parquet": _legacy_file({})},
        ),
        Case(
            "legacy_mode_option_without_version",
            {"f.parquet": _legacy_file({})},
            options={"datetimeRebaseMode": "LEGACY"},
        ),
        Case(
            "legacy_int96_mode_option_without_version",
            {"f.parquet": _legacy_file({}, int96=True)},
            options={"int96RebaseMode": "LEGACY"},
        ),
        Case(
            "legacy_exception_mode_option_fails",
            {"f.parquet": _legacy_file({})},
            options={"datetimeRebaseMode": "EXCEPTION"},
        ),
        Case(
            "legacy_time_zone_key_timestamps_from_1900",
            {"f.parquet": _legacy_file({**v24, "org.apache.spark.timeZone": "Asia/Kolkata"}, table=modern_times)},
        ),
        Case(
            "legacy_time_zone_key_ancient_timestamps",
            {
                "f.parquet": _legacy_file(
                    {**v24, "org.apache.spark.timeZone": "America/Los_Angeles"}, table=ancient_times
                )
            },
            difference=Difference(
                "legacy hybrid calendar", _refuses("LegacyCalendarError", "America/Los_Angeles", "spark.read.parquet")
            ),
        ),
        Case(
            "legacy_filter_on_rebased_values_pushdown_true",
            {"f.parquet": _legacy_file(v24, table=two_groups, row_group_size=2)},
            query=lambda df: df.filter("d = DATE'1000-01-01' OR ts = TIMESTAMP'1000-01-02 00:00:00Z'"),
            conf=pushdown,
        ),
    ]


def all_cases() -> list[Case]:
    cases = [
        *_partitions(),
        *_evolution(),
        *_types(),
        *_layouts(),
        *_user_schemas(),
        *_filters(),
        *_legacy(),
        *_pruning(),
        *_row_filters(),
    ]
    names = [c.name for c in cases]
    assert len(set(names)) == len(names), "case names must be unique"
    assert set(names) >= EXPECTED_READ_ERRORS, EXPECTED_READ_ERRORS - set(names)
    return cases
