"""The JVM scan of s3parquet (spark_ext.jvm, jvm/src): Spark's optimizer prunes the columns and hands the filters of
a query to the Python reader, with no option declared; without the jar, reads are as before and one line says so.

Bytes are counted by the fault proxy between Spark's Python workers and moto: the ranges a read fetches from the
data file are compared with the byte ranges of the column chunks pyarrow's footer gives.
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support.spark_fixtures import spark_session  # noqa: F401

from spark_ext.jvm import LOST_WITHOUT_JAR, PROVIDER_CLASS, jar_path
from testbed.faultproxy import FaultProxy

pytestmark = pytest.mark.timeout(600)

ROWS = 400_000  # ~14 MB uncompressed: larger than the engine's whole-object threshold, so columns are ranged
ROW_GROUP = 100_000  # four row groups, k sorted: k < 10 touches only the first
PER_K = 1000
TAIL = 1 << 20  # at most this much of a file's end is read with its footer


def _table() -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(ROWS), pa.int64()),
            "x": pa.array([i * 0.5 for i in range(ROWS)], pa.float64()),
            "k": pa.array([i // PER_K for i in range(ROWS)], pa.int64()),
            "s": pa.array([f"w{i % 37}" for i in range(ROWS)], pa.string()),
            "st": pa.array([{"a": i, "b": str(i)} for i in range(ROWS)]),
        }
    )


@pytest.fixture
def table_url(bucket, s3_client) -> tuple[str, bytes]:
    sink = io.BytesIO()
    pq.write_table(_table(), sink, row_group_size=ROW_GROUP, compression="none")
    body = sink.getvalue()
    s3_client.put_object(Bucket=bucket, Key="t/part=a/f.parquet", Body=body)
    return f"s3://{bucket}/t/", body


def _chunk_ranges(body: bytes, columns: set[str], row_groups: range | None = None) -> list[tuple[int, int]]:
    """(start, end) of the column chunks of `columns` (leaf paths' first names) in `row_groups` (default all)."""
    meta = pq.ParquetFile(io.BytesIO(body)).metadata
    out = []
    for g in row_groups if row_groups is not None else range(meta.num_row_groups):
        group = meta.row_group(g)
        for c in range(group.num_columns):
            chunk = group.column(c)
            if chunk.path_in_schema.split(".")[0] in columns:
                start = chunk.dictionary_page_offset or chunk.data_page_offset
                out.append((start, start + chunk.total_compressed_size))
    return out


def _fetched(proxy: FaultProxy, key: str) -> list[tuple[int, int]]:
    """(start, end) of every ranged GET of `key` the proxy saw."""
    out = []
    for request in proxy.requests:
        if request.method == "GET" and request.path.endswith(key) and request.range:
            first, last = re.fullmatch(r"bytes=(\d+)-(\d+)", request.range).groups()
            out.append((int(first), int(last) + 1))
    return out


def _covered(ranges: list[tuple[int, int]]) -> set[int]:
    return {b for start, end in ranges for b in range(start, end)}


def _plan(df) -> str:
    return df._jdf.queryExecution().executedPlan().toString()


def test_the_session_resolves_s3parquet_to_the_jvm_scan(spark) -> None:
    assert jar_path() is not None, "run `python hatch_build.py` (or pip install) to build the jar"
    conf = spark._jsparkSession.sessionState().conf()
    found = spark.sparkContext._jvm.org.apache.spark.sql.execution.datasources.DataSource.lookupDataSource(
        "s3parquet", conf
    )
    assert found.getName() == PROVIDER_CLASS


def test_explain_shows_the_pruned_read_schema_and_the_pushed_filters(spark, table_url, s3_endpoint) -> None:
    url, _ = table_url
    df = spark.read.format("s3parquet").option("endpoint", s3_endpoint.url).load(url)
    assert "ReadSchema: struct<x:double>, PushedFilters: []" in _plan(df.selectExpr("sum(x)"))
    plan = _plan(df.where("k < 10").groupBy("s").count())
    assert "ReadSchema: struct<k:bigint,s:string>" in plan
    assert "PushedFilters: [IsNotNull(k), LessThan(k,10)]" in plan


def test_one_column_query_fetches_that_columns_chunks_only(spark, table_url, s3_endpoint) -> None:
    url, body = table_url
    with FaultProxy(s3_endpoint.url) as proxy:
        df = spark.read.format("s3parquet").option("endpoint", proxy.url).load(url)
        proxy.reset_log()
        total = df.selectExpr("sum(x)").collect()[0][0]
        fetched = _covered(_fetched(proxy, "f.parquet"))
    assert total == sum(i * 0.5 for i in range(ROWS))
    wanted = _covered(_chunk_ranges(body, {"x"}))
    assert wanted <= fetched
    extra = fetched - wanted
    assert extra == set(range(min(extra), len(body))), "only the footer's tail is fetched beside the chunks"
    assert len(extra) <= TAIL
    assert len(fetched) <= 1.1 * len(wanted), (len(fetched), len(wanted))


def test_a_selective_filter_fetches_only_the_row_groups_that_may_match(spark, table_url, s3_endpoint) -> None:
    url, body = table_url
    with FaultProxy(s3_endpoint.url) as proxy:
        df = spark.read.format("s3parquet").option("endpoint", proxy.url).load(url)
        proxy.reset_log()
        rows = {r["s"]: r["count"] for r in df.where("k < 10").groupBy("s").count().collect()}
        fetched = _covered(_fetched(proxy, "f.parquet"))
    assert sum(rows.values()) == 10 * PER_K
    assert _covered(_chunk_ranges(body, {"k", "s"}, range(0, 1))) <= fetched
    tail = set(range(len(body) - TAIL, len(body)))  # the footer read takes the file's last bytes whatever they are
    assert not (fetched - tail) & _covered(_chunk_ranges(body, {"id", "x", "k", "s", "st"}, range(1, 4)))


def _scan_metric(query, name: str) -> int:
    """One SQL metric of the scan in the query's last run (its BatchScan, the plan's only leaf: one stage, no AQE)."""
    query.collect()
    leaves = query._jdf.queryExecution().executedPlan().collectLeaves()
    scan = leaves.apply(0)
    assert leaves.size() == 1 and "BatchScan" in scan.nodeName(), scan.nodeName()
    return scan.metrics().apply(name).value()


def test_each_run_reports_the_bytes_its_own_tasks_received_from_python(spark, table_url, s3_endpoint) -> None:
    """Spark's Python metrics are one map per JVM: taken as they are, every query's pythonDataReceived also counted
    every earlier task's bytes on the executor. The JVM scan gives each task its own."""
    url, _ = table_url
    df = spark.read.format("s3parquet").option("endpoint", s3_endpoint.url).load(url)
    column_bytes = ROWS * 8  # x: one double a row
    runs = [_scan_metric(df.select("x"), "pythonDataReceived") for _ in range(3)]
    assert all(column_bytes <= received <= 1.5 * column_bytes for received in runs), (runs, column_bytes)
    assert max(runs) - min(runs) <= 0.01 * column_bytes, runs


def test_the_python_reader_hands_over_only_the_rows_a_pushed_filter_may_keep(spark, table_url, s3_endpoint) -> None:
    url, _ = table_url
    df = spark.read.format("s3parquet").option("endpoint", s3_endpoint.url).load(url)
    assert df.where("k < 10").select("id").count() == 10 * PER_K
    # of the 100,000 rows in the row group read, only the 10,000 with k < 10 are handed over
    assert _scan_metric(df.where("k < 10").select("id"), "numOutputRows") == 10 * PER_K
    assert _scan_metric(df.where("s = 'w3' AND k < 10").select("id"), "numOutputRows") == len(
        [i for i in range(10 * PER_K) if i % 37 == 3]
    )
    # a double column is left to Spark (NaN orders differently in Arrow): its whole row group is handed over
    assert _scan_metric(df.where("x < 5000").select("id"), "numOutputRows") == ROW_GROUP


def test_nested_partition_and_case_insensitive_columns_are_pruned_to_whole_top_level_columns(
    spark, table_url, s3_endpoint
) -> None:
    url, _ = table_url
    df = spark.read.format("s3parquet").option("endpoint", s3_endpoint.url).load(url)
    query = df.select("ST.a", "PART").where("St.b = '7'")
    plan = _plan(query)
    assert "ReadSchema: struct<st:struct<a:bigint,b:string>,part:string>" in plan
    assert [tuple(r) for r in query.collect()] == [(7, "a")]


def test_the_scan_hands_spark_the_python_readers_arrow_batches_as_columns(spark, table_url, s3_endpoint) -> None:
    url, _ = table_url
    df = spark.read.format("s3parquet").option("endpoint", s3_endpoint.url).load(url)
    query = df.selectExpr("sum(x)", "max(st.b)", "count(part)")
    assert tuple(query.collect()[0]) == (sum(i * 0.5 for i in range(ROWS)), str(max(range(ROWS), key=str)), ROWS)
    plan = _plan(query)  # after the run: adaptive execution adds the row/column transitions to its final plan
    assert re.search(r"ColumnarToRow\n.*BatchScan s3parquet", plan), plan  # no per-row copy into UnsafeRows
    assert df.where("k = 3").select("id", "st", "part").rdd.map(lambda r: (r.id, r.st.b, r.part)).take(1) == [
        (3 * PER_K, str(3 * PER_K), "a")
    ]


def test_a_self_union_with_different_filters_reads_each_sides_rows(spark, table_url, s3_endpoint) -> None:
    url, _ = table_url
    df = spark.read.format("s3parquet").option("endpoint", s3_endpoint.url).load(url)
    assert df.where("k < 10").union(df).count() == 10 * PER_K + ROWS
    assert df.where("k < 10").union(df.where("k >= 390")).count() == 20 * PER_K


def test_a_user_schema_is_pruned_like_an_inferred_one(spark, table_url, s3_endpoint) -> None:
    url, _ = table_url
    df = spark.read.format("s3parquet").option("endpoint", s3_endpoint.url).schema("k bigint, x double").load(url)
    query = df.where("k IS NULL OR k = 3").selectExpr("count(*)", "sum(x)")
    assert "ReadSchema: struct<k:bigint,x:double>" in _plan(query)
    assert tuple(query.collect()[0]) == (PER_K, sum(i * 0.5 for i in range(3 * PER_K, 4 * PER_K)))


WITHOUT_JAR = textwrap.dedent(
    """
    import logging, sys
    from pyspark.sql import SparkSession
    import spark_ext
    from spark_ext.session import LOCAL_CONF

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="LOG %(name)s %(message)s")
    builder = SparkSession.builder.master("local[1]")
    for key, value in LOCAL_CONF.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark_ext.register(spark)
    df = spark.read.format("s3parquet").option("endpoint", sys.argv[1]).load(sys.argv[2])
    plan = df._jdf.queryExecution().executedPlan().toString()
    print("SCAN", "S3ParquetScan" in plan, df.selectExpr("sum(x)").collect()[0][0], df.where("k < 10").count())

    from spark_ext.datasource import bound_to_session
    from spark_ext.spark_settings import TIME_ZONE, SessionDefaults
    from spark_ext.source.pushdown_safety import UnsafeFilterPushdown

    try:
        spark_ext.register(spark, filter_pushdown=True)
        print("REFUSED no")
    except UnsafeFilterPushdown as refusal:
        risks = ("union or self-join", "temp view", "cache()", "basePath", ".option('filter'")
        print("REFUSED", all(risk in str(refusal) for risk in risks))
    # the canary: Python's own pushdown, bypassing the refusal, shares the filtered scan's plan with the other scan
    spark.conf.set(spark_ext.FILTER_PUSHDOWN_CONF, "true")
    spark.dataSource.register(bound_to_session(SessionDefaults(settings=((TIME_ZONE, "UTC"),)), filter_pushdown=True))
    df = spark.read.format("s3parquet").option("endpoint", sys.argv[1]).load(sys.argv[2])
    print("CANARY", df.where("k < 10").union(df).count())
    spark.stop()
    """
)


def test_without_the_jar_reads_as_before_says_what_is_lost_and_python_pushdown_stays_refused(
    table_url, s3_endpoint, tmp_path
) -> None:
    url, _ = table_url
    script = tmp_path / "without_jar.py"
    script.write_text(WITHOUT_JAR)
    root = str(Path(__file__).resolve().parent.parent)
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable, PYTHONPATH=root)
    result = subprocess.run(
        [sys.executable, str(script), s3_endpoint.url, url],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert f"SCAN False {sum(i * 0.5 for i in range(ROWS))} {10 * PER_K}" in result.stdout
    assert "REFUSED True" in result.stdout  # PySpark 4.3's own pushdown stays refused, naming the risks
    # and the canary shows why: the unfiltered scan reads the filtered one's pruned plan (row group 0 only, and only
    # the rows its filter keeps: spark_ext.source.pushed_rows); the day this fails, Spark keeps each scan's plan and
    # the refusal can go
    assert f"CANARY {2 * 10 * PER_K}" in result.stdout, result.stdout
    lost = [line for line in result.stderr.splitlines() if line.startswith("LOG spark_ext ")]
    assert len(lost) == 1, result.stderr[-4000:]
    assert LOST_WITHOUT_JAR.split(",")[0] in lost[0] and "spark.jars=" in lost[0]
