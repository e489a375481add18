"""From spark.read.parquet("s3a://...") to s3parquet without surprises (issue 31), in the session-scoped Spark:
the session's S3A and spark.sql.files settings honoured (a read's option over the session over the environment),
modifiedBefore/After, the declared ``filter`` (pruning proven by the requests a proxy saw, rows checked against
Spark's own parquet reader), errors a person reads in a few lines, and the stream's "did you mean"."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, date, timedelta
from typing import Any
from urllib.parse import parse_qs, unquote

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support.spark_fixtures import parquet_bytes, put_parquet, spark_session  # noqa: F401

import s3io
import spark_ext
from s3io.s3a import S3ASettingIgnored
from testbed.faultproxy import FaultProxy
from testbed.moto_server import FAKE_ACCESS_KEY, FAKE_SECRET_KEY

pytestmark = pytest.mark.timeout(300)

DAYS = [date(2026, 1, 1) + timedelta(days=i) for i in range(30)]
NOT_PARQUET = b"these are notes, not parquet\n" * 4


@pytest.fixture
def session_conf(spark: Any) -> Iterator[Callable[[str, str], None]]:
    """``set(key, value)`` on the session for the test; every key unset again and the source registered afresh."""
    touched: dict[str, str | None] = {}

    def set_conf(key: str, value: str) -> None:
        touched.setdefault(key, spark.conf.get(key, None))
        spark.conf.set(key, value)

    try:
        yield set_conf
    finally:
        for key, value in touched.items():
            spark.conf.set(key, value) if value is not None else spark.conf.unset(key)
        spark_ext.register(spark)


def _ids(df: Any) -> list[int]:
    return sorted(r.id for r in df.collect())


# ----------------------------------------------------------------------------------------------- settings


def test_the_sessions_s3a_settings_read_s3a_paths_per_bucket_and_a_read_option_wins(
    spark: Any, s3_endpoint: Any, bucket: str, s3_client: Any, session_conf: Any, refusing_port: str
) -> None:
    put_parquet(s3_client, bucket, "u/a.parquet", pa.table({"id": [1, 2, 3]}))
    url = f"s3a://{bucket}/u/"
    hadoop = "spark.hadoop.fs.s3a."
    for key, value in {
        "endpoint": s3_endpoint.url,
        "path.style.access": "true",
        "access.key": FAKE_ACCESS_KEY,
        "secret.key": FAKE_SECRET_KEY,
        "fast.upload": "true",
    }.items():
        session_conf(hadoop + key, value)
    with pytest.warns(S3ASettingIgnored, match="fs.s3a.fast.upload is not honoured"):
        spark_ext.register(spark)
    assert _ids(spark.read.format("s3parquet").load(url)) == [1, 2, 3]  # no endpoint option: the session's

    session_conf(hadoop + "endpoint", refusing_port)  # the global endpoint is wrong; this bucket's own one is right
    session_conf(f"{hadoop}bucket.{bucket}.endpoint", s3_endpoint.url)
    spark_ext.register(spark)
    assert _ids(spark.read.format("s3parquet").load(url)) == [1, 2, 3]
    session_conf(f"{hadoop}bucket.{bucket}.endpoint", refusing_port)
    spark_ext.register(spark)
    for option in ("endpoint", "fs.s3a.endpoint"):  # a read's own option wins, in either spelling
        assert _ids(spark.read.format("s3parquet").option(option, s3_endpoint.url).load(url)) == [1, 2, 3]
    with pytest.raises(Exception, match=f"endpoint {re.escape(refusing_port)} was never reached"):
        spark.read.format("s3parquet").load(url)

    session_conf(f"{hadoop}bucket.{bucket}.endpoint", s3_endpoint.url)
    spark_ext.register(spark)
    df = spark.read.format("s3parquet").load(url)  # planned with this bucket's endpoint ...
    session_conf(f"{hadoop}bucket.{bucket}.endpoint", refusing_port)  # ... changed before the tasks run: never ignored
    with pytest.raises(
        Exception, match=rf"{re.escape(hadoop)}bucket\.{bucket}\.endpoint is '{re.escape(refusing_port)}'"
    ):
        df.collect()


def test_the_sessions_s3a_settings_are_a_writes_store_too_and_its_own_option_wins(
    spark: Any, s3_endpoint: Any, bucket: str, s3_client: Any, session_conf: Any, refusing_port: str
) -> None:
    hadoop = "spark.hadoop.fs.s3a."
    for key, value in {
        "endpoint": s3_endpoint.url,
        "path.style.access": "true",
        "access.key": FAKE_ACCESS_KEY,
        "secret.key": FAKE_SECRET_KEY,
    }.items():
        session_conf(hadoop + key, value)
    spark_ext.register(spark)
    df = spark.createDataFrame([(i, f"d{i % 2}") for i in range(10)], "id long, day string")
    df.write.format("s3parquet").mode("append").option("partitionBy", "day").save(f"s3a://{bucket}/w/")
    assert _ids(spark.read.format("s3parquet").load(f"s3a://{bucket}/w/")) == list(range(10))

    session_conf(hadoop + "endpoint", refusing_port)  # the session's endpoint is wrong; the write's own option is right
    spark_ext.register(spark)
    df.write.format("s3parquet").mode("append").option("endpoint", s3_endpoint.url).save(f"s3a://{bucket}/w2/")
    written = s3io.read_parquet(f"s3://{bucket}/w2/", endpoint_url=s3_endpoint.url)
    assert sorted(written.column("id").to_pylist()) == list(range(10))


def test_the_sessions_spark_sql_files_settings_are_the_reads_defaults(
    spark: Any, s3_endpoint: Any, bucket: str, s3_client: Any, session_conf: Any
) -> None:
    for i in range(4):
        put_parquet(s3_client, bucket, f"f/{i}.parquet", pa.table({"id": [i]}))
    s3_client.put_object(Bucket=bucket, Key="f/notes.parquet", Body=NOT_PARQUET)

    def load(**options: str) -> Any:
        reader = spark.read.format("s3parquet").option("endpoint", s3_endpoint.url).schema("id long")
        for key, value in options.items():
            reader = reader.option(key, value)
        return reader.load(f"s3://{bucket}/f/")

    session_conf("spark.sql.files.ignoreCorruptFiles", "true")
    session_conf("spark.sql.files.maxPartitionBytes", "1000")
    spark_ext.register(spark)
    skipping = load()
    assert _ids(skipping) == [0, 1, 2, 3]
    assert skipping.rdd.getNumPartitions() == 5  # each file over 1000 bytes with its open cost
    assert load(maxPartitionBytes="128m").rdd.getNumPartitions() < 5
    with pytest.raises(Exception, match=r"not a parquet file[^\n]*ignoreCorruptFiles"):
        load(ignoreCorruptFiles="false").collect()


def test_modified_before_and_after_keep_files_by_their_last_modified_time(
    spark: Any, s3_endpoint: Any, bucket: str, s3_client: Any
) -> None:
    put_parquet(s3_client, bucket, "m/a.parquet", pa.table({"id": [7]}))
    modified = s3_client.head_object(Bucket=bucket, Key="m/a.parquet")["LastModified"].astimezone(UTC)
    before, after = (modified + timedelta(seconds=s) for s in (-2, 2))

    def count(**options: str) -> int:
        reader = spark.read.format("s3parquet").option("endpoint", s3_endpoint.url).schema("id long")
        for key, value in options.items():
            reader = reader.option(key, value)
        return reader.load(f"s3://{bucket}/m/").count()

    fmt = "%Y-%m-%dT%H:%M:%S"
    assert count(modifiedAfter=before.strftime(fmt), timeZone="UTC") == 1
    assert count(modifiedAfter=after.strftime(fmt), timeZone="UTC") == 0
    assert count(modifiedBefore=after.strftime(fmt), timeZone="UTC") == 1
    assert count(modifiedBefore=before.strftime(fmt), timeZone="UTC") == 0
    local = (after + timedelta(hours=1)).astimezone(UTC).strftime(fmt)  # read in +01:00 it is `after` again
    assert count(modifiedBefore=local, timeZone="+01:00") == 1


# ----------------------------------------------------------------------------------------------- filter


@pytest.fixture
def daily(s3_endpoint: Any, bucket: str, s3_client: Any, tmp_path: Any) -> tuple[str, str]:
    """30 daily partitions, one file each, on moto and on local disk (Spark's own reader is the oracle)."""
    for n, day in enumerate(DAYS):
        table = pa.table(
            {
                "id": pa.array(range(n * 10, n * 10 + 10), pa.int64()),
                "amount": pa.array([None if i == 3 else float(i) for i in range(10)]),
                "name": pa.array([f"{'ab' if i % 2 else 'cd'}-{i}" for i in range(10)]),
            }
        )
        key = f"daily/day={day.isoformat()}/part-0.parquet"
        s3_client.put_object(Bucket=bucket, Key=key, Body=parquet_bytes(table))
        (tmp_path / key).parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, tmp_path / key)
    return f"s3://{bucket}/daily/", str(tmp_path / "daily")


@pytest.mark.parametrize(
    ("condition", "days"),
    [
        ("day = '2026-01-15' AND amount > 5", ["2026-01-15"]),
        ("day IN ('2026-01-03', '2026-01-04')", ["2026-01-03", "2026-01-04"]),
    ],
)
def test_a_declared_filter_lists_each_matching_partition_once_and_reads_only_them(
    spark: Any, s3_endpoint: Any, bucket: str, daily: tuple[str, str], condition: str, days: list[str]
) -> None:
    """One delimited LIST of the table finds the days; one of each matching day finds its files (and is their
    listing); the table's journals are read before and after, once for all days, as by a read without a filter."""
    url, local = daily
    with FaultProxy(s3_endpoint.url) as proxy:
        got = (
            spark.read.format("s3parquet")
            .option("endpoint", proxy.url)
            .option("filter", condition)
            .option("columns", "id,amount")
            .load(url)
        )
        rows = sorted(tuple(r) for r in got.collect())
        requests = list(proxy.requests)
    expected = sorted(tuple(r) for r in spark.read.parquet(local).filter(condition).select("id", "amount").collect())
    assert rows == expected and rows
    gets = [unquote(r.path) for r in requests if r.method == "GET" and "list-type" not in r.query]
    assert gets and all(any(f"/day={day}/" in path for day in days) for path in gets), gets
    lists = [parse_qs(r.query) for r in requests if "list-type" in r.query]
    listed = Counter((q.get("prefix", [""])[0], "delimiter" in q) for q in lists)
    assert listed == {
        ("daily/_s3io_table/", False): 2,
        ("_s3io_table/", False): 2,
        ("daily/", True): 1,
        **{(f"daily/day={day}/", True): 1 for day in days},
    }, listed


@pytest.mark.parametrize(
    "condition",
    [
        "day >= '2026-01-28' OR amount < 1",
        "NOT (day BETWEEN '2026-01-02' AND '2026-01-29') AND name LIKE 'ab%'",
        "amount IS NULL OR id IN (5, 250, 299)",
        "`day` IN (DATE'2026-01-03', DATE'2026-01-04') AND NOT amount > 4",
    ],
)
def test_a_declared_filter_keeps_exactly_the_rows_spark_keeps(
    spark: Any, s3_endpoint: Any, daily: tuple[str, str], condition: str
) -> None:
    url, local = daily
    got = spark.read.format("s3parquet").option("endpoint", s3_endpoint.url).option("filter", condition).load(url)
    expected = spark.read.parquet(local).filter(condition)
    assert got.schema == expected.schema
    assert sorted(tuple(r) for r in got.collect()) == sorted(tuple(r) for r in expected.collect())


def test_a_filter_that_names_no_column_or_is_not_sql_fails_at_load_naming_it(
    spark: Any, s3_endpoint: Any, daily: tuple[str, str]
) -> None:
    url, _ = daily
    reader = spark.read.format("s3parquet").option("endpoint", s3_endpoint.url)
    with pytest.raises(Exception, match=r"no column named 'region'.*the columns are: id, amount, name, day"):
        reader.option("filter", "region = 'eu'").load(url)
    with pytest.raises(Exception, match="column 'day' is date and cannot be compared with 5"):
        reader.option("filter", "day = 5").load(url)
    with pytest.raises(Exception, match="is not a SQL predicate"):
        reader.option("filter", "day = ").load(url)


# ----------------------------------------------------------------------------------------------- errors


def _python_part(message: str) -> list[str]:
    """The lines of a Spark error's message that came from the Python worker (the traceback and the error)."""
    return [line for line in message.splitlines() if line.strip() and "SQLSTATE" not in line]


def test_a_wrong_bucket_at_load_names_the_bucket_and_the_path_in_a_few_lines(spark: Any, s3_endpoint: Any) -> None:
    with pytest.raises(Exception) as caught:
        spark.read.format("s3parquet").option("endpoint", s3_endpoint.url).load("s3a://no-such-bucket-31/t/")
    lines = _python_part(str(caught.value))
    assert any("bucket 'no-such-bucket-31' does not exist (reading s3://no-such-bucket-31/t/)" in x for x in lines)
    assert "_s3io_table" not in str(caught.value)
    assert len(lines) <= 10, "\n".join(lines)  # was 73


def test_a_task_error_is_a_few_lines_naming_the_file_and_the_option_that_skips_it(
    spark: Any, s3_endpoint: Any, bucket: str, s3_client: Any
) -> None:
    put_parquet(s3_client, bucket, "c/a.parquet", pa.table({"id": [1]}))
    s3_client.put_object(Bucket=bucket, Key="c/b.parquet", Body=NOT_PARQUET)
    df = (
        spark.read.format("s3parquet")
        .option("endpoint", s3_endpoint.url)
        .option("columns", "id")
        .load(f"s3://{bucket}/c/")
    )
    with pytest.raises(Exception) as caught:
        df.collect()
    text = str(caught.value)
    error = next(line for line in text.splitlines() if line.startswith("s3io.errors.CorruptFile: "))
    assert f"object=s3://{bucket}/c/b.parquet" in error and "ignoreCorruptFiles" in error, error
    assert "loop.stop" not in text and "client.close" not in text
    assert len(_python_part(text)) <= 8, text  # was 40


def test_a_misspelt_stream_option_says_did_you_mean(spark: Any, s3_endpoint: Any, bucket: str, s3_client: Any) -> None:
    put_parquet(s3_client, bucket, "s/a.parquet", pa.table({"id": [1]}))
    stream = spark.readStream.format("s3parquet").option("endpoint", s3_endpoint.url).option("streamName", "t")
    with pytest.raises(Exception, match=r"unknown option 'maxfilespertriger' \(did you mean maxFilesPerTrigger\?\)"):
        stream.option("maxFilesPerTriger", "5").load(f"s3://{bucket}/s/")
