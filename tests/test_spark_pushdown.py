"""Queries that scan one DataFrame more than once, and why filter pushdown is refused on PySpark 4.3.

The table of issue 14: year=2023 (600 rows) and year=2024 (400 rows), in moto for s3parquet and in a local
directory for Spark's built-in reader. Every shape gives the built-in reader's answer, with Python filter
pushdown enabled and disabled for the session. ``register(filter_pushdown=True)`` is refused on this Spark; a
canary registers the pushdown reader anyway (bypassing the check) and shows the wrong answer the refusal
prevents, so the test fails the day Spark stops sharing pushed read plans between scans.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support.spark_fixtures import put_parquet, spark_session  # noqa: F401

import spark_ext
from spark_ext.datasource import bound_to_session
from spark_ext.source.pushdown_safety import UnsafeFilterPushdown, shares_read_plan_across_scans
from spark_ext.spark_settings import SessionDefaults

pytestmark = pytest.mark.timeout(300)

ROWS = {2023: 600, 2024: 400}
PUSHDOWN_CONF = spark_ext.FILTER_PUSHDOWN_CONF


@pytest.fixture
def years(spark, s3_endpoint, bucket, s3_client, tmp_path) -> tuple[Callable[[], Any], Callable[[], Any]]:
    """(load with s3parquet, load with the built-in reader): each call is a fresh DataFrame of the same files."""
    for year, n in ROWS.items():
        for part in range(2):
            base = year * 10_000
            table = pa.table({"id": pa.array(range(base + part * n // 2, base + (part + 1) * n // 2))})
            put_parquet(s3_client, bucket, f"t/year={year}/part-{part}.parquet", table)
            local = tmp_path / f"year={year}" / f"part-{part}.parquet"
            local.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(table, local)

    def ours() -> Any:
        return spark.read.format("s3parquet").option("endpoint", s3_endpoint.url).load(f"s3://{bucket}/t/")

    def builtin() -> Any:
        return spark.read.parquet(str(tmp_path))

    return ours, builtin


@pytest.fixture
def python_pushdown(spark, request) -> Iterator[None]:
    """spark.sql.python.filterPushdown.enabled set to the test's parameter, restored afterwards."""
    saved = spark.conf.get(PUSHDOWN_CONF, None)
    spark.conf.set(PUSHDOWN_CONF, request.param)
    try:
        yield
    finally:
        spark.conf.set(PUSHDOWN_CONF, saved) if saved is not None else spark.conf.unset(PUSHDOWN_CONF)


def _union(df: Any) -> int:
    return df.filter("year = 2024").union(df).count()


def _self_join(df: Any) -> int:
    return df.filter("year = 2024").alias("a").join(df.alias("b"), "id").count()


def _filtered_then_whole(df: Any) -> tuple[int, int]:
    return df.filter("year = 2024").count(), df.count()


def _temp_view_twice(df: Any) -> tuple[int, int]:
    df.createOrReplaceTempView("issue14_years")
    spark = df.sparkSession
    try:
        filtered = spark.sql("SELECT count(*) FROM issue14_years WHERE year = 2024").collect()[0][0]
        return filtered, spark.sql("SELECT count(*) FROM issue14_years").collect()[0][0]
    finally:
        spark.catalog.dropTempView("issue14_years")


def _cache_after_filtered_count(df: Any) -> tuple[int, int]:
    filtered = df.filter("year = 2024").count()
    df.cache()
    try:
        return filtered, df.count()
    finally:
        df.unpersist()


SHAPES = {
    "union": (_union, 1400),
    "self_join": (_self_join, 400),
    "filtered_then_whole": (_filtered_then_whole, (400, 1000)),
    "temp_view_twice": (_temp_view_twice, (400, 1000)),
    "cache_after_filtered_count": (_cache_after_filtered_count, (400, 1000)),
}


@pytest.mark.parametrize("python_pushdown", ["true", "false"], indirect=True)
@pytest.mark.parametrize("filter_pushdown", [None, True], ids=["register", "register_filter_pushdown"])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_every_shape_over_one_dataframe_gives_the_builtin_readers_answer(
    spark, years, python_pushdown, filter_pushdown, shape
) -> None:
    """Whatever registration the docs offer: filter_pushdown=True is either refused or exact."""
    ours, builtin = years
    query, expected = SHAPES[shape]
    try:
        spark_ext.register(spark, filter_pushdown=filter_pushdown)
    except UnsafeFilterPushdown:
        assert filter_pushdown
    try:
        assert query(builtin()) == expected
        assert query(ours()) == expected
    finally:
        spark_ext.register(spark)


def test_register_refuses_filter_pushdown_naming_the_risk(spark) -> None:
    with pytest.raises(UnsafeFilterPushdown) as caught:
        spark_ext.register(spark, filter_pushdown=True)
    message = str(caught.value)
    for risk in ("union or self-join", "temp view", "cache()", "basePath", ".option('filter'"):
        assert risk in message, message
    assert spark.read.format("s3parquet") is not None  # the default source stays registered
    assert spark_ext.register(spark).filter_pushdown is False  # automatic: off where Spark mixes scans


def test_pushdown_is_allowed_only_where_each_scan_keeps_its_own_read_plan() -> None:
    assert shares_read_plan_across_scans(["getOrCreateReadInfo", "setReadInfo", "inferSchema"])
    assert not shares_read_plan_across_scans(["getOrCreateDataSourceInPython", "inferSchema", "getTable"])


def test_canary_this_spark_mixes_scans_with_a_pushdown_reader_which_is_why_it_is_refused(spark, years) -> None:
    ours, _ = years
    saved = spark.conf.get(PUSHDOWN_CONF, None)
    spark.conf.set(PUSHDOWN_CONF, "true")
    spark.dataSource.register(bound_to_session(SessionDefaults(time_zone="UTC"), filter_pushdown=True))
    try:
        assert _union(ours()) == 800  # the wrong answer: both scans read only 2024
    finally:
        spark_ext.register(spark)
        spark.conf.set(PUSHDOWN_CONF, saved) if saved is not None else spark.conf.unset(PUSHDOWN_CONF)
    assert _union(ours()) == 1400
