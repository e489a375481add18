"""spark_ext.source.pushed_rows: which pushed filters drop rows in the Python reader, and that the rows they drop are
exactly those Spark's SQL semantics reject (the Spark side is the differential suite's rows_* cases)."""

from __future__ import annotations

from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    EqualNullSafe,
    EqualTo,
    GreaterThan,
    In,
    IsNotNull,
    IsNull,
    LessThan,
    Not,
    StringContains,
    StringStartsWith,
)
from pyspark.sql.types import (
    DateType,
    DecimalType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from spark_ext.source.pushed_rows import batch_filter, exact_conjuncts

SCHEMA = StructType(
    [
        StructField("K", LongType()),
        StructField("x", DoubleType()),
        StructField("s", StringType()),
        StructField("c", StringType("UTF8_LCASE")),
        StructField("dec", DecimalType(10, 2)),
        StructField("d", DateType()),
        StructField("ts", TimestampType()),
        StructField("ntz", TimestampNTZType()),
        StructField("st", StructType([StructField("a", LongType())])),
    ]
)
BATCH = pa.table(
    {
        "K": pa.array([1, 5, None, 20], pa.int64()),
        "x": [1.0, float("nan"), None, 3.0],
        "s": ["é", "éa", None, "z"],
        "c": ["a", "A", "b", None],
        "dec": pa.array([Decimal("1.5"), None, Decimal("2"), Decimal("1.49")], pa.decimal128(10, 2)),
        "d": pa.array([date(2024, 1, i) for i in (1, 2, 3, 4)], pa.date32()),
        "ts": pa.array([datetime(2024, 1, 1, h, tzinfo=UTC) for h in (1, 2, 3, 4)], pa.timestamp("ms", tz="UTC")),
        "ntz": pa.array([datetime(2024, 1, 1, h) for h in (1, 2, 3, 4)], pa.timestamp("us")),
        "st": pa.array([{"a": 1}, None, {"a": 3}, {"a": 4}]),
    }
)


def _kept(*filters) -> list[int]:
    """Indexes of BATCH's rows the filters keep (all of them when none applies)."""
    expression = batch_filter(None, exact_conjuncts(filters, SCHEMA, case_sensitive=False), BATCH.schema)
    indexed = BATCH.append_column("i", pa.array(range(BATCH.num_rows)))
    return indexed.column("i").to_pylist() if expression is None else indexed.filter(expression).column("i").to_pylist()


def test_comparisons_drop_what_sql_rejects_with_nulls_dropped() -> None:
    assert _kept(LessThan(("k",), 10)) == [0, 1]  # a null k is dropped (null is not true); names ignore case
    assert _kept(Not(LessThan(("K",), 5))) == [1, 3]
    assert _kept(In(("K",), (1, 20))) == [0, 3]
    assert _kept(In(("K",), (1, None))) == [0]  # k IN (1, NULL) is null, not false, elsewhere: dropped either way


def test_null_checks_and_null_safe_equality_follow_spark() -> None:
    assert _kept(IsNull(("K",))) == [2]
    assert _kept(IsNotNull(("x",))) == [0, 1, 3]  # NaN is not null in both
    assert _kept(EqualNullSafe(("K",), 5)) == [1]
    assert _kept(Not(EqualNullSafe(("K",), 5))) == [0, 2, 3]  # NOT (null <=> 5) is true
    assert _kept(EqualNullSafe(("K",), None)) == [2]
    assert _kept(Not(In(("K",), (1,)))) == [1, 2, 3]  # NOT (null IN (1)): Spark drops it, Arrow keeps it (safe)


def test_floats_are_left_to_spark_but_for_null_checks() -> None:
    assert _kept(GreaterThan(("x",), 1.0)) == [0, 1, 2, 3]  # Spark keeps the NaN row; Arrow would drop it
    assert _kept(EqualTo(("x",), float("nan"))) == [0, 1, 2, 3]


def test_strings_compare_as_utf8_bytes_and_other_collations_are_left_to_spark() -> None:
    assert _kept(GreaterThan(("s",), "é")) == [1]  # 'z' < 'é' in code points and in UTF-8 bytes
    assert _kept(StringStartsWith(("s",), "é")) == [0, 1]
    assert _kept(Not(StringStartsWith(("s",), "é"))) == [0, 1, 2, 3]
    assert _kept(StringContains(("s",), "a")) == [0, 1, 2, 3]
    assert _kept(EqualTo(("c",), "a")) == [0, 1, 2, 3]  # UTF8_LCASE: 'A' = 'a' in Spark


def test_decimals_dates_and_timestamps_compare_by_value() -> None:
    assert _kept(EqualTo(("dec",), Decimal("1.500"))) == [0]
    assert _kept(GreaterThan(("d",), date(2024, 1, 2))) == [2, 3]
    assert _kept(GreaterThan(("ts",), datetime(2024, 1, 1, 2, 30, tzinfo=UTC))) == [2, 3]  # a millisecond column
    assert _kept(LessThan(("ntz",), datetime(2024, 1, 1, 3))) == [0, 1]


def test_a_batch_type_other_than_the_literals_leaves_the_filter_to_spark() -> None:
    naive = BATCH.set_column(6, "ts", pa.array([datetime(2024, 1, 1, h) for h in (1, 2, 3, 4)], pa.timestamp("us")))
    conjuncts = exact_conjuncts(
        [GreaterThan(("ts",), datetime(2024, 1, 1, 2, 30, tzinfo=UTC))], SCHEMA, case_sensitive=False
    )
    assert conjuncts and batch_filter(None, conjuncts, naive.schema) is None
    assert batch_filter(None, conjuncts, BATCH.drop_columns(["ts"]).schema) is None  # a column the batch lacks


def test_nested_and_unknown_columns_are_left_to_spark() -> None:
    assert (
        exact_conjuncts([IsNull(("st",)), EqualTo(("st", "a"), 1), EqualTo(("part",), 1)], SCHEMA, case_sensitive=False)
        == ()
    )
    assert exact_conjuncts([EqualTo(("k",), 1)], SCHEMA, case_sensitive=True) == ()


def test_strings_a_filter_does_not_name_are_read_as_dictionaries_only_when_rows_are_filtered() -> None:
    """spark_ext.source.partition_read: with a row filter, the text columns it does not name are decoded after it
    (read as dictionaries, decoded by the task's ``conform_to_spark``); a filter's own columns, other types and
    unfiltered reads decode as before."""
    from types import SimpleNamespace

    from spark_ext.planning.spark_arrow_types import conform_to_spark
    from spark_ext.planning.sql_filter import Leaf
    from spark_ext.source.partition_read import filtered_strings

    read_schema = pa.schema([("K", pa.int64()), ("s", pa.string()), ("b", pa.binary()), ("t", pa.string())])

    def spec(row_filter: Any = None, pushed: tuple = ()) -> Any:
        return SimpleNamespace(
            read_schema=read_schema, output_names=("k", "S", "b", "t"), row_filter=row_filter, pushed_rows=pushed
        )

    assert filtered_strings(spec()) == []
    assert filtered_strings(spec(pushed=(Leaf("k", "<", 10),))) == ["s", "b", "t"]
    assert filtered_strings(spec(Leaf("t", "=", "x"), (Leaf("k", "<", 10),))) == ["s", "b"]
    assert filtered_strings(spec(pushed=(Leaf("S", "is null"),))) == ["b", "t"]  # by output name, any case

    words = pa.array(["a", None, "b", "a"]).dictionary_encode()
    batch = pa.RecordBatch.from_arrays([pa.array([1, 2, 3, 4]), words], names=["k", "s"])
    target = pa.schema([("k", pa.int64()), ("s", pa.string())])
    decoded = conform_to_spark(batch.filter(pa.array([True, True, False, True])), target)  # what the task does
    assert decoded.schema == target
    assert decoded.column(1).to_pylist() == ["a", None, "a"]
