"""``spark.readStream.format("s3parquet")`` against moto and a real local Spark: every file read exactly once.

Triggers are driven deterministically: ``availableNow`` queries that drain what is there and stop (run again with
the same checkpoint for the next arrivals), or ``processAllAvailable()`` on a running query.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.errors import StreamingQueryException
from support.spark_fixtures import put_parquet, spark_driver, spark_session  # noqa: F401
from test_compact_support import wait_for

from testbed.faultproxy import CorruptBody, ErrorResponse, FaultRule, Latency, Stall

pytestmark = pytest.mark.timeout(600)

SCHEMA = "id long, v double"


def land(s3_client: Any, bucket: str, prefix: str, first: int, count: int, rows: int = 10) -> list[int]:
    """``count`` small files of ``rows`` rows each, ids from ``first * rows``; returns the ids written."""
    ids = []
    for n in range(first, first + count):
        block = list(range(n * rows, (n + 1) * rows))
        table = pa.table({"id": pa.array(block, pa.int64()), "v": pa.array([i / 2 for i in block], pa.float64())})
        put_parquet(s3_client, bucket, f"{prefix}f-{n:05d}.parquet", table)
        ids += block
    return ids


def stream_options(endpoint: str, name: str, **extra: Any) -> dict[str, str]:
    return {"endpoint": endpoint, "streamName": name, "stallTimeout": "5s", **{k: str(v) for k, v in extra.items()}}


def run_available_now(spark: Any, url: str, options: dict[str, str], sink: Path, checkpoint: Path) -> Any:
    """One availableNow query: reads what is new, writes it to the parquet sink, stops; returns the query."""
    reader = spark.readStream.format("s3parquet").schema(SCHEMA)
    for key, value in options.items():
        reader = reader.option(key, value)
    query = (
        reader.load(url)
        .writeStream.format("parquet")
        .option("path", str(sink))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    with contextlib.suppress(StreamingQueryException):  # a failed query: the caller reads query.exception()
        query.awaitTermination(300)
    assert not query.isActive, "the availableNow query did not finish within 300 s"
    return query


def sink_ids(spark: Any, sink: Path) -> list[int]:
    if not sink.exists():
        return []
    return sorted(r.id for r in spark.read.parquet(str(sink)).select("id").collect())


def manifests(s3_client: Any, bucket: str, prefix: str) -> list[dict[str, Any]]:
    keys = [
        o["Key"]
        for page in s3_client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        for o in page.get("Contents", [])
        if "/manifests/" in o["Key"]
    ]
    return [json.loads(s3_client.get_object(Bucket=bucket, Key=k)["Body"].read()) for k in sorted(keys)]


@pytest.mark.parametrize("sorted_keys", [False, True], ids=["full-listing", "keysSortByArrival"])
def test_files_landing_between_triggers_are_read_exactly_once(
    spark: Any, fault_proxy: Any, s3_client: Any, bucket: str, tmp_path: Path, sorted_keys: bool
) -> None:
    """Six availableNow runs over a prefix that keeps receiving files, three files per trigger (so a trigger
    leaves files for the next): every row once, every batch's files fixed in its manifest, one GET per file and
    no HEAD of a data file; with keysSortByArrival the listing resumes after the last key every batch covers."""
    url = f"s3://{bucket}/landing/"
    options = stream_options(fault_proxy.url, "events", maxFilesPerTrigger=3, keysSortByArrival=sorted_keys)
    sink, checkpoint = tmp_path / "sink", tmp_path / "checkpoint"
    written: list[int] = []
    for run in range(6):
        written += land(s3_client, bucket, "landing/", run * 4, 4)
        query = run_available_now(spark, url, options, sink, checkpoint)
        assert query.exception() is None
        assert sink_ids(spark, sink) == sorted(written), f"after run {run}"
    batches = manifests(s3_client, bucket, "landing/_s3io_streams/events/")
    assert [b["batch"] for b in batches] == list(range(len(batches)))
    assert all(len(b["files"]) <= 3 for b in batches)
    keys = [f[0] for b in batches for f in b["files"]]
    assert len(keys) == len(set(keys)) == 24
    data = [r for r in fault_proxy.requests if "/landing/f-" in r.path]
    assert sorted(r.path for r in data if r.method == "GET") == sorted(f"/{bucket}/{k}" for k in keys)
    assert [r for r in data if r.method == "HEAD"] == []


def test_available_now_reads_only_what_was_there_when_it_started(
    spark: Any, s3_endpoint: Any, s3_client: Any, bucket: str, tmp_path: Path
) -> None:
    written = land(s3_client, bucket, "in/", 0, 5)
    options = stream_options(s3_endpoint.url, "drain", maxFilesPerTrigger=2)
    query = run_available_now(spark, f"s3://{bucket}/in/", options, tmp_path / "sink", tmp_path / "cp")
    assert query.exception() is None
    assert sink_ids(spark, tmp_path / "sink") == written
    assert len(manifests(s3_client, bucket, "in/_s3io_streams/drain/")) == 3  # 2 + 2 + 1 files


@pytest.mark.parametrize(
    "fault",
    [
        ErrorResponse(403, "AccessDenied", "Access Denied"),
        Stall(after_bytes=100),
        CorruptBody(),
    ],
    ids=["403", "stall-past-the-policy", "corrupt"],
)
def test_a_file_that_cannot_be_read_fails_the_batch_and_is_read_after_the_fix(
    spark: Any, fault_proxy: Any, s3_client: Any, bucket: str, tmp_path: Path, fault: Any
) -> None:
    """The failing file's batch fails naming it; Spark's offset does not move; once the fault is gone, the
    restarted query replays that batch's manifest and every row arrives exactly once, none skipped."""
    written = land(s3_client, bucket, "bad/", 0, 6)
    rule = fault_proxy.add_rule(FaultRule(fault=fault, method="GET", path=r"/bad/f-00004\.parquet"))
    options = stream_options(
        fault_proxy.url, "fails", maxFilesPerTrigger=2, stallTimeout="1s", maxAttempts=2, backoffBase="10ms"
    )
    sink, checkpoint = tmp_path / "sink", tmp_path / "cp"
    query = run_available_now(spark, f"s3://{bucket}/bad/", options, sink, checkpoint)
    error = query.exception()
    assert error is not None and "f-00004.parquet" in str(error), error
    assert sink_ids(spark, sink) == written[:40]  # the two batches before the failing one
    fault_proxy.remove_rule(rule)
    query = run_available_now(spark, f"s3://{bucket}/bad/", options, sink, checkpoint)
    assert query.exception() is None
    assert sink_ids(spark, sink) == written
    assert len(manifests(s3_client, bucket, "bad/_s3io_streams/fails/")) == 3  # replayed, never re-planned


def test_a_file_deleted_after_its_batch_was_planned_fails_with_the_way_out_then_is_skipped_on_request(
    spark: Any, fault_proxy: Any, s3_client: Any, bucket: str, tmp_path: Path
) -> None:
    """A batch's files are fixed by its manifest, so a file deleted after planning fails every restart the same
    way: the error says so and names the way out (restore it, or ignoreMissingFiles=true), and that option then
    skips exactly that file's rows, none twice."""
    written = land(s3_client, bucket, "gone/", 0, 3)
    rule = fault_proxy.add_rule(FaultRule(fault=ErrorResponse.internal_error(), method="GET", path=r"f-00001\.parquet"))
    options = stream_options(fault_proxy.url, "gone", maxAttempts=2, backoffBase="10ms")
    sink, checkpoint = tmp_path / "sink", tmp_path / "cp"
    assert run_available_now(spark, f"s3://{bucket}/gone/", options, sink, checkpoint).exception() is not None
    fault_proxy.remove_rule(rule)
    s3_client.delete_object(Bucket=bucket, Key="gone/f-00001.parquet")
    error = run_available_now(spark, f"s3://{bucket}/gone/", options, sink, checkpoint).exception()
    assert error is not None and "NotFound" in str(error) and "gone/f-00001.parquet" in str(error)
    assert "fixed by its manifest" in str(error) and "ignoreMissingFiles=true" in str(error)
    options = {**options, "ignoreMissingFiles": "true"}
    assert run_available_now(spark, f"s3://{bucket}/gone/", options, sink, checkpoint).exception() is None
    assert sink_ids(spark, sink) == written[:10] + written[20:]


DRIVER = """
import sys
import threading
import time
from pyspark.sql import SparkSession
import spark_ext
from spark_ext.session import LOCAL_CONF

endpoint, url, sink, checkpoint = sys.argv[1:5]
builder = SparkSession.builder.master("local[2]").appName("stream-driver")
for key, value in LOCAL_CONF.items():
    builder = builder.config(key, value)
spark = builder.getOrCreate()
spark_ext.register(spark)
query = (
    spark.readStream.format("s3parquet").schema("id long, v double")
    .option("endpoint", endpoint).option("streamName", "killed").option("maxFilesPerTrigger", "3")
    .load(url)
    .writeStream.format("parquet").option("path", sink).option("checkpointLocation", checkpoint)
    .trigger(availableNow=True).start()
)
query.awaitTermination()
"""


def test_a_driver_killed_between_manifest_and_commit_replays_the_batch_exactly_once(
    spark: Any, fault_proxy: Any, s3_client: Any, s3_endpoint: Any, bucket: str, tmp_path: Path
) -> None:
    """The driver process (and its JVM and workers) is SIGKILLed while batch 1 is being read: its manifest is
    written, Spark's commit is not. The query restarted from the same checkpoint reads every row exactly once."""
    written = land(s3_client, bucket, "kill/", 0, 6)
    fault_proxy.add_rule(FaultRule(fault=Latency(120), method="GET", path=r"/kill/f-0000[3-5]\.parquet"))
    sink, checkpoint = tmp_path / "sink", tmp_path / "cp"
    (tmp_path / "driver.py").write_text(DRIVER)
    with spark_driver(tmp_path / "driver.py", fault_proxy.url, f"s3://{bucket}/kill/", str(sink), str(checkpoint)):
        fault_proxy.wait_for_requests(1, timeout=240, method="GET", path=r"/kill/f-00003\.parquet")
        assert [m["batch"] for m in manifests(s3_client, bucket, "kill/_s3io_streams/killed/")] == [0, 1]
    assert sink_ids(spark, sink) == written[:30]  # batch 0 committed, batch 1 not
    fault_proxy.clear_rules()
    options = stream_options(s3_endpoint.url, "killed", maxFilesPerTrigger=3)
    query = run_available_now(spark, f"s3://{bucket}/kill/", options, sink, checkpoint)
    assert query.exception() is None
    assert sink_ids(spark, sink) == written
    assert len(manifests(s3_client, bucket, "kill/_s3io_streams/killed/")) == 2


def _compact(endpoint: str, url: str, **options: Any) -> Any:
    import spark_ext

    return spark_ext.compact(
        None, url, endpoint_url=endpoint, grace_period=0, min_input_files=2, clock_skew=0.5, **options
    )


def test_compaction_never_takes_what_a_live_stream_has_not_read_and_breaks_an_expired_lease_loudly(
    spark: Any, s3_endpoint: Any, s3_client: Any, bucket: str, tmp_path: Path
) -> None:
    """Stream and compaction on one prefix while files keep landing: compaction rewrites only files the stream has
    consumed in committed batches, leaves the rest while the lease lives, and the stream skips the outputs of
    what it already read: every row exactly once. Once the stopped stream's lease expires, compaction takes the
    rest and marks the lease broken, and the stream, restarted, stops with an error that says so."""
    url = f"s3://{bucket}/cz/"
    options = stream_options(s3_endpoint.url, "leased", maxFilesPerTrigger=4, leaseTtl="15s")
    sink, checkpoint = tmp_path / "sink", tmp_path / "cp"
    written = land(s3_client, bucket, "cz/", 0, 8)
    assert run_available_now(spark, url, options, sink, checkpoint).exception() is None
    unread = land(s3_client, bucket, "cz/", 8, 5)  # landed after the stream's run: its lease still covers them
    report = _compact(s3_endpoint.url, url)
    assert report.status == "ok", report.to_text()
    assert report.leased_files == 5 and any("'leased'" in w for w in report.warnings)
    keys = _data_keys(s3_client, bucket, "cz/")
    assert [k for k in keys if "/f-" in k] == [f"cz/f-{n:05d}.parquet" for n in range(8, 13)]  # only the read ones went
    assert len([k for k in keys if "/part-c-" in k]) == 1
    assert run_available_now(spark, url, options, sink, checkpoint).exception() is None
    assert sink_ids(spark, sink) == sorted(written + unread)  # the output of read files skipped, new ones read
    later = land(s3_client, bucket, "cz/", 13, 3)
    assert _compact(s3_endpoint.url, url).leased_files == 3  # lease still live: the 3 unread files stay
    for _ in range(60):  # the stopped stream's lease runs out (ttl + skew + Last-Modified's whole seconds): ~17 s
        time.sleep(1)
        report = _compact(s3_endpoint.url, url)  # while the lease lives: leaves the 3 files, changes nothing
        if report.leased_files == 0:
            break
    assert report.leased_files == 0 and any("marked broken" in w for w in report.warnings), report.to_text()
    failed = run_available_now(spark, url, options, sink, checkpoint)
    assert failed.exception() is not None
    assert "LeaseBroken" in str(failed.exception()) and "took 3 file(s)" in str(failed.exception()), str(
        failed.exception()
    )[-3000:]
    assert sink_ids(spark, sink) == sorted(written + unread)  # nothing read twice; the gap is reported, not hidden
    assert len(later) == 30


def _data_keys(s3_client: Any, bucket: str, prefix: str) -> list[str]:
    pages = s3_client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return sorted(o["Key"] for page in pages for o in page.get("Contents", []) if "/_s3io_" not in o["Key"])


def test_an_inferred_schema_is_kept_and_a_file_that_does_not_fit_it_fails_naming_file_and_column(
    spark: Any, s3_endpoint: Any, s3_client: Any, bucket: str, tmp_path: Path
) -> None:
    written = land(s3_client, bucket, "inf/", 0, 2)
    options = stream_options(s3_endpoint.url, "inferred")
    sink, checkpoint = tmp_path / "sink", tmp_path / "cp"

    def run() -> Any:
        reader = spark.readStream.format("s3parquet")
        for key, value in options.items():
            reader = reader.option(key, value)
        frame = reader.load(f"s3://{bucket}/inf/")
        assert [(f.name, f.dataType.simpleString()) for f in frame.schema.fields] == [("id", "bigint"), ("v", "double")]
        query = (
            frame.writeStream.format("parquet")
            .option("path", str(sink))
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        with contextlib.suppress(StreamingQueryException):
            query.awaitTermination(300)
        return query

    assert run().exception() is None
    stored = json.loads(
        s3_client.get_object(Bucket=bucket, Key="inf/_s3io_streams/inferred/schema.json")["Body"].read()
    )
    assert [f["name"] for f in stored["schema"]["fields"]] == ["id", "v"]
    odd = pa.table({"id": pa.array([999], pa.int64()), "v": pa.array(["not a number"])})
    put_parquet(s3_client, bucket, "inf/f-99999.parquet", odd)
    error = run().exception()  # the schema is still the stored one, not the new file's
    assert error is not None and "f-99999.parquet" in str(error) and "'v'" in str(error).replace('"', "'"), str(error)
    assert sink_ids(spark, sink) == written


def test_stream_and_compaction_running_together_while_files_land_read_every_row_once(
    spark: Any, s3_endpoint: Any, s3_client: Any, bucket: str, tmp_path: Path
) -> None:
    """A running query (1 s triggers), files landing one by one, and compaction runs in between, all at once:
    whatever the interleaving, the sink ends with every row exactly once and compaction took only read files."""
    url = f"s3://{bucket}/live/"
    reader = spark.readStream.format("s3parquet").schema(SCHEMA)
    for key, value in stream_options(s3_endpoint.url, "live", maxFilesPerTrigger=5).items():
        reader = reader.option(key, value)
    query = (
        reader.load(url)
        .writeStream.format("parquet")
        .option("path", str(tmp_path / "sink"))
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(processingTime="1 second")
        .start()
    )
    written: list[int] = []
    reports: list[Any] = []

    def lease_written() -> bool:  # the stream writes it before its first listing
        keys = s3_client.list_objects_v2(Bucket=bucket, Prefix="live/_s3io_table/leases/").get("Contents", [])
        return [o["Key"] for o in keys] == ["live/_s3io_table/leases/live.json"]

    def landing() -> None:
        for n in range(30):
            written.extend(land(s3_client, bucket, "live/", n, 1))
            time.sleep(0.2)

    def compacting() -> None:
        for _ in range(4):
            time.sleep(1.5)
            reports.append(_compact(s3_endpoint.url, url))

    threads = [threading.Thread(target=landing), threading.Thread(target=compacting)]
    try:
        # a lease that lands after a run planned is the protocol's other case (that group is left, report partial;
        # test_compact_races tests it deterministically): here every compaction run knows the stream from its plan
        assert wait_for(lease_written, 120), "the stream never wrote its lease"
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(300)
        assert not any(thread.is_alive() for thread in threads)
        query.processAllAvailable()
        for _ in range(10):  # a slow first batch may leave the 4 runs above nothing read yet: now all is read
            if sum(r.groups_done for r in reports) >= 1:
                break
            reports.append(_compact(s3_endpoint.url, url))
    finally:
        query.stop()
    assert query.exception() is None
    assert sink_ids(spark, tmp_path / "sink") == sorted(written)
    assert all(r.status in ("ok", "nothing_to_do") for r in reports), [r.to_text() for r in reports]
    assert sum(r.groups_done for r in reports) >= 1  # compaction did run, on files the stream had read


def test_keys_sort_by_arrival_keeps_one_high_key_per_prefix_and_never_jumps_to_a_compaction_output(
    spark: Any, s3_endpoint: Any, s3_client: Any, bucket: str, tmp_path: Path
) -> None:
    """keysSortByArrival over two prefixes (``{a,b}``), with compaction between runs: keys grow with time within
    each prefix, so a new ``a/`` key sorts below the ``b/`` keys already read, and every new ``f-`` key sorts below
    the ``part-c-`` outputs. One high-water key per prefix, never an output's: every row exactly once. (A checkpoint
    at every batch: each run starts from the high keys the last one stored.)"""
    url = f"s3://{bucket}/sk/{{a,b}}/"
    options = stream_options(s3_endpoint.url, "sorted", keysSortByArrival="true", stateCheckpointInterval=1)
    sink, checkpoint = tmp_path / "sink", tmp_path / "cp"
    written = land(s3_client, bucket, "sk/a/", 0, 3) + land(s3_client, bucket, "sk/b/", 3, 3)
    assert run_available_now(spark, url, options, sink, checkpoint).exception() is None
    assert sink_ids(spark, sink) == sorted(written)
    report = _compact(s3_endpoint.url, f"s3://{bucket}/sk/")
    assert report.status == "ok" and report.groups_done == 2, report.to_text()
    assert run_available_now(spark, url, options, sink, checkpoint).exception() is None  # the outputs: skipped
    assert sink_ids(spark, sink) == sorted(written)
    written += land(s3_client, bucket, "sk/a/", 6, 2) + land(s3_client, bucket, "sk/b/", 8, 2)
    assert run_available_now(spark, url, options, sink, checkpoint).exception() is None
    assert sink_ids(spark, sink) == sorted(written)


def test_files_the_stream_forgot_by_max_file_age_are_not_read_again_from_a_compaction_output(
    spark: Any, s3_endpoint: Any, s3_client: Any, bucket: str, tmp_path: Path
) -> None:
    """The stream reads 5 files, then newer files move its maxFileAge horizon past them and its checkpoint forgets
    them. Compaction (the lease is live) may take them: the stream has no more use for them. The output's footer
    records their Last-Modified, so the stream knows them for read-or-ignored, not new: no row twice."""
    url = f"s3://{bucket}/age/"
    options = stream_options(s3_endpoint.url, "aging", maxFileAge="3s", stateCheckpointInterval=1)
    sink, checkpoint = tmp_path / "sink", tmp_path / "cp"
    written = land(s3_client, bucket, "age/", 0, 5)
    assert run_available_now(spark, url, options, sink, checkpoint).exception() is None
    time.sleep(5)  # Last-Modified has whole seconds: the next files are more than maxFileAge newer
    big = list(range(100_000, 120_000))  # too big to be compacted: only the forgotten files are
    table = pa.table({"id": pa.array(big, pa.int64()), "v": pa.array([i / 2 for i in big], pa.float64())})
    put_parquet(s3_client, bucket, "age/new-00000.parquet", table)
    assert run_available_now(spark, url, options, sink, checkpoint).exception() is None
    assert sink_ids(spark, sink) == sorted(written + big)
    report = _compact(s3_endpoint.url, url, target_file_size=64 << 10)
    assert report.status == "ok" and report.groups_done == 1 and report.leased_files == 0, report.to_text()
    assert run_available_now(spark, url, options, sink, checkpoint).exception() is None
    assert sink_ids(spark, sink) == sorted(written + big)
