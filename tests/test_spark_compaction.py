"""Compaction and the s3parquet read together: Spark runs the groups, and a Spark read at any protocol state
sees every row exactly once (the source applies the compaction journal to its listing)."""

from __future__ import annotations

import os
import subprocess
import sys

import pyarrow as pa
import pytest
from support.spark_fixtures import put_parquet, spark_session  # noqa: F401  (the `spark` fixture)

import spark_ext
from s3io.compaction import CompactionOptions

pytestmark = pytest.mark.timeout(300)

DAYS = ("2026-01-01", "2026-01-02")


def _landing(s3_client, bucket: str, files_per_day: int = 6) -> int:
    rows = 0
    for d, day in enumerate(DAYS):
        for n in range(files_per_day):
            first = (d * files_per_day + n) * 100
            table = pa.table({"id": pa.array(range(first, first + 100), pa.int64()), "v": [float(n)] * 100})
            put_parquet(s3_client, bucket, f"t/day={day}/part-{n:03d}.parquet", table)
            rows += 100
    return rows


def _spark_view(spark, bucket: str, endpoint: str) -> tuple[int, int, int, list[str]]:
    df = spark.read.format("s3parquet").option("endpoint", endpoint).load(f"s3://{bucket}/t/")
    row = df.selectExpr("count(*) AS n", "count(DISTINCT id) AS distinct_ids", "sum(id) AS id_sum").collect()[0]
    days = sorted(str(r.day) for r in df.select("day").distinct().collect())
    return row.n, row.distinct_ids, row.id_sum, days


def _data_keys(s3_client, bucket: str) -> list[str]:
    listed = s3_client.list_objects_v2(Bucket=bucket, Prefix="t/").get("Contents", [])
    return [o["Key"] for o in listed if "/_" not in o["Key"]]


def test_spark_read_is_exact_while_outputs_are_committed_but_unpublished(spark, s3_endpoint, s3_client, bucket) -> None:
    rows = _landing(s3_client, bucket)
    expected = (rows, rows, sum(range(rows)), list(DAYS))
    assert _spark_view(spark, bucket, s3_endpoint.url) == expected

    options = CompactionOptions(min_input_files=2, grace_period=0.0, finish=False)
    report = spark_ext.compact(spark, f"s3://{bucket}/t/", options=options, endpoint_url=s3_endpoint.url)
    assert report.status == "ok", report.to_text()
    assert len(_data_keys(s3_client, bucket)) == 12  # outputs still in staging: plain readers see only the inputs
    assert _spark_view(spark, bucket, s3_endpoint.url) == expected  # the source reads the staged outputs instead

    recovered = spark_ext.compact(
        spark, f"s3://{bucket}/t/", recover=True, endpoint_url=s3_endpoint.url, grace_period=0.0
    )  # the default grace period (waited twice) is not what this test is about
    assert recovered.status in ("ok", "nothing_to_do"), recovered.to_text()
    assert len(_data_keys(s3_client, bucket)) == 2
    assert _spark_view(spark, bucket, s3_endpoint.url) == expected


def test_spark_distributes_groups_and_a_second_run_does_nothing(spark, s3_endpoint, s3_client, bucket) -> None:
    rows = _landing(s3_client, bucket)
    url = f"s3://{bucket}/t/"
    first = spark_ext.compact(spark, url, endpoint_url=s3_endpoint.url, min_input_files=2, grace_period=0.0)
    assert first.status == "ok" and first.rows_rewritten == rows, first.to_text()
    assert (first.files_before, first.files_after) == (12, 2)
    assert _spark_view(spark, bucket, s3_endpoint.url) == (rows, rows, sum(range(rows)), list(DAYS))
    second = spark_ext.compact(spark, url, endpoint_url=s3_endpoint.url, min_input_files=2, grace_period=0.0)
    assert second.status == "nothing_to_do", second.to_text()


def test_spark_tasks_send_back_the_inputs_they_left_out_and_a_second_round_compacts_them(
    spark, s3_endpoint, s3_client, bucket
) -> None:
    """The plan is made from the listing; a Spark task meets inputs of another schema first in key order, writes
    nothing and sends every input's footer facts back; the second round compacts each schema apart."""
    rows = _landing(s3_client, bucket)
    for n in range(2):  # ``v`` a string: does not unify with the others' double
        table = pa.table({"id": pa.array([9000 + n], pa.int64()), "v": ["x"]})
        put_parquet(s3_client, bucket, f"t/day={DAYS[0]}/a-{n}.parquet", table)
    url = f"s3://{bucket}/t/"
    report = spark_ext.compact(spark, url, endpoint_url=s3_endpoint.url, min_input_files=2, grace_period=0.0)
    assert report.status == "ok", report.to_text()
    assert sorted((g.partition_dir, g.input_files) for g in report.groups) == [
        (f"t/day={DAYS[0]}/", 2),
        (f"t/day={DAYS[0]}/", 6),
        (f"t/day={DAYS[1]}/", 6),
    ]
    assert report.rows_rewritten == rows + 2 and report.files_after == 3
    assert not report.skipped_groups and not report.skipped_files


def test_command_line_dry_run_changes_nothing_and_bad_flags_are_named(s3_endpoint, s3_client, bucket) -> None:
    _landing(s3_client, bucket, files_per_day=3)
    before = _data_keys(s3_client, bucket)
    env = dict(os.environ, AWS_ENDPOINT_URL=s3_endpoint.url)
    command = [sys.executable, "-m", "spark_ext.compact", f"s3://{bucket}/t/", "--min-input-files", "2"]
    dry = subprocess.run([*command, "--dry-run"], capture_output=True, text=True, env=env, timeout=120, check=False)
    assert dry.returncode == 0, dry.stderr
    assert "dry_run" in dry.stdout and "day=2026-01-01" in dry.stdout
    s3_client.put_object(Bucket=bucket, Key=f"t/day={DAYS[0]}/notes.parquet", Body=b"not a parquet file at all")
    footers = subprocess.run(
        [*command, "--dry-run", "--read-footers"], capture_output=True, text=True, env=env, timeout=120, check=False
    )
    assert footers.returncode == 0, footers.stderr
    assert "notes.parquet: not compacted: not a parquet file" in footers.stdout, footers.stdout
    s3_client.delete_object(Bucket=bucket, Key=f"t/day={DAYS[0]}/notes.parquet")
    assert _data_keys(s3_client, bucket) == before
    bad = subprocess.run(
        [*command, "--target-file-size", "huge"], capture_output=True, text=True, env=env, timeout=120, check=False
    )
    assert bad.returncode == 2 and "--target-file-size" in bad.stderr


def test_command_line_compacts_without_spark(s3_endpoint, s3_client, bucket) -> None:
    rows = _landing(s3_client, bucket, files_per_day=3)
    env = dict(os.environ, AWS_ENDPOINT_URL=s3_endpoint.url)
    args = ["--min-input-files", "2", "--grace-period", "0s", "--master", "none", "--no-progress"]
    result = subprocess.run(
        [sys.executable, "-m", "spark_ext.compact", f"s3://{bucket}/t/", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "6 -> 2" in result.stdout and str(rows) in result.stdout
