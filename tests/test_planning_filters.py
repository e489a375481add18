"""Pushed filters: translation, which ones go back to Spark, and exact partition evaluation with SQL nulls."""

from __future__ import annotations

from datetime import UTC, date, datetime
from decimal import Decimal

import pytest
from pyspark.sql.datasource import (
    EqualNullSafe,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    IsNull,
    LessThan,
    LessThanOrEqual,
    Not,
    StringContains,
    StringEndsWith,
    StringStartsWith,
)
from pyspark.sql.types import (
    DateType,
    DoubleType,
    IntegerType,
    NullType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from spark_ext.planning.filters import partition_matches, split_filters, to_predicates

PARTITIONS = StructType(
    [
        StructField("year", IntegerType()),
        StructField("region", StringType()),
        StructField("day", DateType()),
        StructField("ts", TimestampType()),
        StructField("score", DoubleType()),
    ]
)
DATA = ["id", "name", "amount"]


@pytest.mark.parametrize(
    ("flt", "expected"),
    [
        (EqualTo(("a",), 1), [("a", "=", 1)]),
        (GreaterThan(("a",), 1), [("a", ">", 1)]),
        (GreaterThanOrEqual(("a",), 1), [("a", ">=", 1)]),
        (LessThan(("a",), 1), [("a", "<", 1)]),
        (LessThanOrEqual(("a",), 1), [("a", "<=", 1)]),
        (In(("a",), [1, 2]), [("a", "in", (1, 2))]),  # In values arrive as a list
        (IsNull(("a",)), [("a", "is null", None)]),
        (IsNotNull(("a",)), [("a", "is not null", None)]),
        (EqualNullSafe(("a",), 1), [("a", "=", 1)]),
        (EqualNullSafe(("a",), None), [("a", "is null", None)]),
        (Not(EqualTo(("a",), 1)), [("a", "!=", 1)]),
        (Not(GreaterThan(("a",), 1)), [("a", "<=", 1)]),
        (Not(LessThanOrEqual(("a",), 1)), [("a", ">", 1)]),
        (Not(In(("a",), (1, 2))), [("a", "not in", (1, 2))]),
        (Not(IsNull(("a",))), [("a", "is not null", None)]),
        (Not(IsNotNull(("a",))), [("a", "is null", None)]),
        (Not(EqualNullSafe(("a",), None)), [("a", "is not null", None)]),
        (Not(Not(EqualTo(("a",), 1))), [("a", "=", 1)]),
        (StringStartsWith(("a",), "ab"), [("a", ">=", "ab"), ("a", "<", "ac")]),
        (StringStartsWith(("a",), ""), [("a", "is not null", None)]),
        (StringStartsWith(("a",), "a\U0010ffff"), [("a", ">=", "a\U0010ffff"), ("a", "<", "b")]),
        (Not(EqualNullSafe(("a",), 1)), None),  # "a != 1 OR a IS NULL": not an AND of predicates
        (StringEndsWith(("a",), "x"), None),
        (StringContains(("a",), "x"), None),
        (Not(StringStartsWith(("a",), "x")), None),
        (EqualTo(("a", "b"), 1), None),  # nested field
    ],
)
def test_to_predicates(flt: Filter, expected: list[tuple[str, str, object]] | None) -> None:
    assert to_predicates(flt) == expected


def test_partition_filters_are_kept_and_data_filters_returned() -> None:
    year = EqualTo(("year",), 2020)
    region = In(("region",), ["eu", "us"])
    amount = GreaterThan(("amount",), 10)
    name_like = StringContains(("name",), "x")
    day = Not(IsNull(("day",)))
    plan = split_filters([year, amount, region, name_like, day], PARTITIONS, DATA)
    assert plan.partition_predicates == [
        ("year", "=", 2020),
        ("region", "in", ("eu", "us")),
        ("day", "is not null", None),
    ]
    assert plan.data_predicates == [("amount", ">", 10)]
    assert plan.unsupported_filters == [name_like]
    assert plan.returned_to_spark == [amount, name_like]
    assert all(any(r is f for f in [amount, name_like]) for r in plan.returned_to_spark)  # by reference


def test_untranslatable_partition_filters_are_returned() -> None:
    ends = StringEndsWith(("region",), "u")
    distinct = Not(EqualNullSafe(("year",), 2020))
    plan = split_filters([ends, distinct], PARTITIONS, DATA)
    assert plan.partition_predicates == []
    assert plan.unsupported_filters == [ends, distinct] and plan.returned_to_spark == [ends, distinct]


@pytest.mark.parametrize(
    "flt",
    [
        EqualTo(("year",), "2020"),  # string literal on an int column
        EqualTo(("year",), True),
        EqualTo(("day",), datetime(2020, 1, 1, tzinfo=UTC)),  # datetime is not a date
        EqualTo(("ts",), datetime(2020, 1, 1)),  # naive literal on an instant column
        In(("region",), ["eu", 1]),
        EqualTo(("region",), [1, 2]),
    ],
)
def test_partition_filters_with_literals_of_another_type_are_returned(flt: Filter) -> None:
    plan = split_filters([flt], PARTITIONS, DATA)
    assert plan.partition_predicates == [] and plan.returned_to_spark == [flt]


def test_names_match_case_insensitively_and_use_the_schema_spelling() -> None:
    plan = split_filters([EqualTo(("YEAR",), 2020), LessThan(("Amount",), 5)], {"Year": IntegerType()}, ["amount"])
    assert plan.partition_predicates == [("Year", "=", 2020)]
    assert plan.data_predicates == [("amount", "<", 5)]


def test_unknown_and_nested_columns_are_returned() -> None:
    unknown = EqualTo(("nope",), 1)
    nested = EqualTo(("id", "x"), 1)
    plan = split_filters([unknown, nested], PARTITIONS, DATA)
    assert plan.unsupported_filters == [unknown, nested] == plan.returned_to_spark


def test_string_prefix_on_data_column_is_a_pruning_range_and_returned() -> None:
    flt = StringStartsWith(("name",), "ab")
    plan = split_filters([flt], PARTITIONS, DATA)
    assert plan.data_predicates == [("name", ">=", "ab"), ("name", "<", "ac")]
    assert plan.returned_to_spark == [flt]


VALUES = {
    "year": 2020,
    "region": "eu",
    "day": date(2020, 1, 5),
    "ts": datetime(2020, 1, 5, 12, tzinfo=UTC),
    "score": 1.5,
    "nothing": None,
}


@pytest.mark.parametrize(
    ("predicates", "matches"),
    [
        ([("year", "=", 2020)], True),
        ([("year", "!=", 2020)], False),
        ([("year", ">", 2019), ("year", "<=", 2020)], True),
        ([("year", ">=", 2021)], False),
        ([("year", "<", 2020.5)], True),
        ([("year", "=", Decimal(2020))], True),
        ([("region", "in", ("eu", "us"))], True),
        ([("region", "not in", ("eu", "us"))], False),
        ([("region", "not in", ("us",))], True),
        ([("region", ">=", "e"), ("region", "<", "f")], True),
        ([("day", "=", date(2020, 1, 5))], True),
        ([("ts", ">", datetime(2020, 1, 5, 11, tzinfo=UTC))], True),
        ([("score", "<", 2)], True),
        ([], True),
    ],
)
def test_partition_matches(predicates: list[tuple[str, str, object]], matches: bool) -> None:
    assert partition_matches(VALUES, predicates) is matches


@pytest.mark.parametrize(
    ("predicates", "matches"),
    [
        ([("nothing", "=", 1)], False),
        ([("nothing", "!=", 1)], False),  # null != 1 is null, not true
        ([("nothing", "<", 1)], False),
        ([("nothing", "in", (1, None))], False),
        ([("nothing", "not in", (1,))], False),
        ([("nothing", "is null", None)], True),
        ([("nothing", "is not null", None)], False),
        ([("year", "=", None)], False),  # comparing with a null literal is never true
        ([("year", "!=", None)], False),
        ([("year", "in", (2020, None))], True),  # 2020 IN (2020, NULL) is true
        ([("year", "in", (2019, None))], False),  # ... and 2020 IN (2019, NULL) is null
        ([("year", "not in", (2019, None))], False),  # NOT IN with a null is never true
        ([("year", "is null", None)], False),
    ],
)
def test_partition_matches_follows_sql_null_semantics(predicates: list[tuple[str, str, object]], matches: bool) -> None:
    assert partition_matches(VALUES, predicates) is matches


def test_equal_null_safe_end_to_end() -> None:
    schema = {"region": StringType()}
    null_safe_null = split_filters([EqualNullSafe(("region",), None)], schema, [])
    null_safe_eu = split_filters([EqualNullSafe(("region",), "eu")], schema, [])
    assert null_safe_null.returned_to_spark == [] and null_safe_eu.returned_to_spark == []
    assert partition_matches({"region": None}, null_safe_null.partition_predicates)
    assert not partition_matches({"region": "eu"}, null_safe_null.partition_predicates)
    assert partition_matches({"region": "eu"}, null_safe_eu.partition_predicates)
    assert not partition_matches({"region": None}, null_safe_eu.partition_predicates)  # false, not null
    assert not partition_matches({"region": "us"}, null_safe_eu.partition_predicates)


def test_nan_follows_spark_ordering() -> None:
    nan = {"score": float("nan")}
    assert partition_matches(nan, [("score", "=", float("nan"))])
    assert partition_matches(nan, [("score", ">", 1e308)])
    assert not partition_matches(nan, [("score", "<", float("inf"))])
    assert partition_matches({"score": 1.0}, [("score", "<", float("nan"))])
    assert partition_matches(nan, [("score", "in", (float("nan"),))])


def test_all_null_column_accepts_any_literal_and_matches_only_is_null() -> None:
    plan = split_filters([EqualTo(("v",), 1), IsNull(("v",))], {"v": NullType()}, [])
    assert plan.returned_to_spark == []
    assert not partition_matches({"v": None}, plan.partition_predicates)
    assert partition_matches({"v": None}, plan.partition_predicates[1:])


def test_timestamp_ntz_columns_take_naive_literals() -> None:
    naive = EqualTo(("t",), datetime(2020, 1, 1))
    aware = EqualTo(("t",), datetime(2020, 1, 1, tzinfo=UTC))
    plan = split_filters([naive, aware], {"t": TimestampNTZType()}, [])
    assert plan.partition_predicates == [("t", "=", datetime(2020, 1, 1))] and plan.returned_to_spark == [aware]


def test_float_data_columns_drop_predicates_a_nan_could_satisfy() -> None:
    # Spark: NaN > 1e308 is true, but min/max statistics never include NaN, so pruning on x > v could drop rows.
    data = StructType([StructField("x", DoubleType()), StructField("n", IntegerType())])
    filters = [
        GreaterThan(("x",), 1.0),
        GreaterThanOrEqual(("x",), 1.0),
        LessThan(("x",), 5.0),
        EqualTo(("x",), float("nan")),
        In(("x",), [1.0, 2.0]),
        Not(EqualTo(("x",), 1.0)),
        IsNotNull(("x",)),
        GreaterThan(("n",), 1),
    ]
    plan = split_filters(filters, {}, data)
    assert plan.data_predicates == [
        ("x", "<", 5.0),
        ("x", "in", (1.0, 2.0)),
        ("x", "is not null", None),
        ("n", ">", 1),
    ]
    assert plan.returned_to_spark == filters
