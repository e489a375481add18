"""What a Spark user reads when something fails, and whether it is true (issue 38).

The cause first: a wrong bucket at ``load()``, a write to a missing bucket or a closed port, a truncated file in a
stream each put the s3io error's own line, naming the object, on the first line of the exception Spark raises
(``spark.sql.execution.pyspark.udf.hideTraceback.enabled``, which ``register()`` sets where the session does not,
and the wrappers of spark_ext.writer.save_calls: a failed save, and a task's PythonException whose worker error is
ours); the full traceback is one setting away. A write's outcome is the truth: the commit's Python worker SIGKILLed
right after the commit point, ``save()`` says the rows ARE committed (with the job id) and they are there once
(nothing said so before, and a retry doubled them). ``spark_ext.session()`` leaves a running session as it is."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.errors import PythonException, StreamingQueryException
from support.spark_fixtures import parquet_bytes, put_parquet, spark_session  # noqa: F401  (`spark`)
from test_write_support import plain_ids, uploads_left

import spark_ext
from s3io.table.crash import TEST_SWITCH
from s3io.table.crash import WRITE_ENV_VAR as WRITE_CRASH_AT
from spark_ext import HIDE_TRACEBACK_CONF
from spark_ext.session import SessionKept
from spark_ext.writer.save_calls import SparkWriteFailed, cause_line, worker_error_first

pytestmark = pytest.mark.timeout(600)


def _first_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0]


def test_a_wrong_bucket_at_load_is_the_first_line_and_the_traceback_one_setting_away(
    spark: Any, s3_endpoint: Any
) -> None:
    def load(bucket: str) -> BaseException:
        with pytest.raises(Exception) as caught:
            spark.read.format("s3parquet").option("endpoint", s3_endpoint.url).load(f"s3://{bucket}/t/")
        return caught.value

    first = _first_line(load("no-such-bucket-38"))
    assert "s3io.errors.NotFound: bucket 'no-such-bucket-38' does not exist (reading s3://no-such-bucket-38/t/)" in (
        first
    ), first
    spark.conf.set(HIDE_TRACEBACK_CONF, "false")
    try:
        assert "Traceback (most recent call last)" in str(load("no-such-bucket-39"))
    finally:
        spark.conf.set(HIDE_TRACEBACK_CONF, "true")


def test_a_write_to_a_missing_bucket_or_a_closed_port_says_the_s3io_error_first(
    spark: Any, s3_endpoint: Any, bucket: str, refusing_port: str
) -> None:
    df = spark.range(0, 10, numPartitions=1)
    with pytest.raises(SparkWriteFailed) as caught:
        df.write.format("s3parquet").mode("append").option("endpoint", s3_endpoint.url).save("s3://no-such-38/t/")
    first = _first_line(caught.value)
    assert first.startswith("s3io.errors.NotFound: ") and "bucket 'no-such-38' does not exist" in first, first
    assert "object=s3://no-such-38/t/" in first, first
    # refused on the driver by the schema check's listing, before any task: Spark's own exception underneath
    assert "Failed to initialize Python data source writer" in str(caught.value.__cause__)
    writer = df.write.format("s3parquet").mode("append").option("endpoint", refusing_port)
    with pytest.raises(SparkWriteFailed) as caught:
        writer.option("maxAttempts", "1").save(f"s3://{bucket}/closed/")
    first = _first_line(caught.value)
    assert first.startswith("s3io.errors.") and f"object=s3://{bucket}/closed/" in first, first


def test_a_task_error_is_the_first_line_and_the_traceback_one_setting_away(
    spark: Any, s3_endpoint: Any, s3_client: Any, bucket: str
) -> None:
    body = parquet_bytes(pa.table({"id": list(range(1000))}))
    put_parquet(s3_client, bucket, "t/a.parquet", pa.table({"id": [1]}))
    s3_client.put_object(Bucket=bucket, Key="t/truncated.parquet", Body=body[: len(body) // 2] + body[-8:])

    def collect() -> BaseException:
        with pytest.raises(PythonException) as caught:
            spark.read.format("s3parquet").option("endpoint", s3_endpoint.url).schema("id long").load(
                f"s3://{bucket}/t/"
            ).collect()
        return caught.value

    message = str(collect()).splitlines()
    first = message[0]
    assert first.startswith("s3io.errors.CorruptFile: ") and f"s3://{bucket}/t/truncated.parquet" in first, first
    assert f"(An exception was thrown from the Python worker; set {HIDE_TRACEBACK_CONF}=false for its traceback)" in (
        message
    ), message
    spark.conf.set(HIDE_TRACEBACK_CONF, "false")
    try:
        full = str(collect())
    finally:
        spark.conf.set(HIDE_TRACEBACK_CONF, "true")
    first, header, start = full.splitlines()[:3]
    assert first.startswith("s3io.errors.CorruptFile: ") and "truncated.parquet" in first, first
    assert (header, start) == ("An exception was thrown from the Python worker:", "Traceback (most recent call last):")


def test_a_file_deleted_after_planning_is_named_on_the_first_line(
    spark: Any, s3_endpoint: Any, s3_client: Any, bucket: str
) -> None:
    put_parquet(s3_client, bucket, "gone/a.parquet", pa.table({"id": [1]}))
    put_parquet(s3_client, bucket, "gone/b.parquet", pa.table({"id": [2]}))
    df = spark.read.format("s3parquet").option("endpoint", s3_endpoint.url).load(f"s3://{bucket}/gone/")
    assert sorted(r.id for r in df.collect()) == [1, 2]  # planned: the DataFrame keeps its files
    s3_client.delete_object(Bucket=bucket, Key="gone/b.parquet")
    with pytest.raises(PythonException) as caught:
        df.collect()
    first = str(caught.value).splitlines()[0]
    assert first.startswith("s3io.errors.NotFound: ") and f"object=s3://{bucket}/gone/b.parquet" in first, first
    assert "deleted after the read was planned" in first, first


def test_a_python_worker_error_of_another_kind_reads_as_pyspark_writes_it(spark: Any) -> None:
    from pyspark.sql.functions import udf

    with pytest.raises(PythonException) as caught:
        spark.range(1).select(udf(lambda n: 1 // (n - n), "long")("id")).collect()
    header, cause = str(caught.value).splitlines()[:2]
    assert header == "An exception was thrown from the Python worker:"
    assert cause == "ZeroDivisionError: integer division or modulo by zero", cause


def test_a_worker_error_is_put_first_only_when_it_is_ours() -> None:
    header = "An exception was thrown from the Python worker"
    shown = worker_error_first(header, "s3io.errors.NotFound: gone; object=s3://b/k\n\ns3parquet: while reading p\n")
    assert shown == (
        "s3io.errors.NotFound: gone; object=s3://b/k\n\ns3parquet: while reading p\n"
        f"({header}; set {HIDE_TRACEBACK_CONF}=false for its traceback)"
    )
    traceback = (
        'Traceback (most recent call last):\n  File "x.py", line 1, in f\ns3io.errors.RequestError: inner\n\n'
        "The above exception was the direct cause of the following exception:\n\n"
        'Traceback (most recent call last):\n  File "y.py", line 2, in g\ns3io.errors.CorruptFile: outer\n'
    )
    assert worker_error_first(header, traceback) == f"s3io.errors.CorruptFile: outer\n{header}:\n{traceback.strip()}"
    assert worker_error_first(header, "ValueError: not ours\n") is None
    assert worker_error_first(header, "Traceback (most recent call last):\n  File x\nKeyError: 'k'\n") is None


def test_a_truncated_file_in_a_stream_is_named_on_the_first_line(
    spark: Any, s3_endpoint: Any, s3_client: Any, bucket: str, tmp_path: Path
) -> None:
    body = parquet_bytes(pa.table({"id": list(range(1000))}))
    put_parquet(s3_client, bucket, "land/a.parquet", pa.table({"id": [1]}))
    s3_client.put_object(Bucket=bucket, Key="land/truncated.parquet", Body=body[: len(body) // 2] + body[-8:])
    query = (
        spark.readStream.format("s3parquet")
        .option("endpoint", s3_endpoint.url)
        .option("streamName", "truncated")
        .schema("id long")
        .load(f"s3://{bucket}/land/")
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    with pytest.raises(StreamingQueryException) as caught:
        query.awaitTermination(300)
    first = _first_line(caught.value)
    assert "s3io.errors.CorruptFile: " in first and f"s3://{bucket}/land/truncated.parquet" in first, first


def test_the_cause_line_of_a_message_prefers_a_committed_write() -> None:
    quoted = "Caused by: PythonException: An exception was thrown from the Python worker: s3io.errors.X: first"
    committed = "Suppressed: Failed to commit or abort Python data source write: spark_ext.w.WriteIsCommitted: rows"
    assert cause_line(f"Writing job failed\n{quoted}\n{committed}") == "spark_ext.w.WriteIsCommitted: rows"
    assert cause_line(f"Writing job failed\n{quoted}") == "s3io.errors.X: first"
    assert cause_line("Traceback (most recent call last):\n  File x\ns3io.errors.Y: at the bottom\n") == (
        "s3io.errors.Y: at the bottom"
    )
    assert cause_line("Python worker exited unexpectedly (crashed)") is None


def test_session_leaves_a_running_session_as_it_is_and_says_so(spark: Any) -> None:
    saved = {k: spark.conf.get(k) for k in ("spark.sql.session.timeZone", "spark.sql.shuffle.partitions")}
    spark.conf.set("spark.sql.session.timeZone", "America/New_York")
    spark.conf.set("spark.sql.shuffle.partitions", "200")
    try:
        with pytest.warns(SessionKept, match=r"spark\.sql\.session\.timeZone=America/New_York \(not UTC\)"):
            assert spark_ext.session() is spark
        assert spark.conf.get("spark.sql.session.timeZone") == "America/New_York"
        assert spark.conf.get("spark.sql.shuffle.partitions") == "200"
    finally:
        for key, value in saved.items():
            spark.conf.set(key, value)
        spark_ext.register(spark)  # the fixture's time zone, captured again


CRASHING_SAVE = """
import json, sys
import spark_ext

endpoint, url = sys.argv[1:3]
spark = spark_ext.session("local[2]")
df = spark.range(2000).repartition(2)
try:
    df.write.format("s3parquet").mode("append").option("endpoint", endpoint).option("gracePeriod", "0.2s").save(url)
    print(json.dumps({"raised": None}))
except Exception as exc:
    print(json.dumps({"raised": type(exc).__name__, "first": str(exc).splitlines()[0]}))
finally:
    spark.stop()
"""


def test_a_commit_worker_killed_after_its_commit_point_makes_save_say_the_rows_are_committed(
    spark: Any, s3_endpoint: Any, s3_client: Any, bucket: str, tmp_path: Path
) -> None:
    """The commit's Python worker SIGKILLs itself right after the commit point (a driver of its own, whose workers
    carry the crash point). Spark's abort() used to finish the write silently and save() raised "Python worker
    exited unexpectedly": nothing said the rows were there, and a retry doubled them. Now save() says they ARE
    committed, with the job id, and every reader sees them once. (A write that fails before its commit point
    leaves nothing, so its retry writes once: test_spark_write.py's failed job.)"""
    url = f"s3://{bucket}/crashed/"
    (tmp_path / "driver.py").write_text(textwrap.dedent(CRASHING_SAVE))
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    env.update({TEST_SWITCH: "1", WRITE_CRASH_AT: "after_commit"})
    result = subprocess.run(
        [sys.executable, str(tmp_path / "driver.py"), s3_endpoint.url, url],
        env=env,
        capture_output=True,
        text=True,
        timeout=500,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    outcome = json.loads(result.stdout.strip().splitlines()[-1])
    assert outcome["raised"] == "SparkWriteFailed", outcome  # the commit was killed: save() cannot succeed
    first = outcome["first"]
    assert first.startswith("spark_ext.writer.batch.WriteIsCommitted: s3parquet write job 2"), first
    assert f"to {url} IS committed: its rows are visible" in first and "do not retry an append" in first, first
    read = spark.read.format("s3parquet").option("endpoint", s3_endpoint.url).load(url)
    assert sorted(r.id for r in read.collect()) == list(range(2000))  # there, once, as soon as save() raised
    assert plain_ids(s3_client, bucket, "crashed/") == list(range(2000))
    assert uploads_left(s3_client, bucket) == []
