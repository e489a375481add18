"""Files Spark itself writes, compacted, read by Spark's built-in ``spark.read.parquet`` before and after: the same
schema and the same rows (shown in a session time zone that is not UTC, so an instant read as a local time shows).

What Spark reads depends on more than the columns: INT96 is an instant, the footer keys ``org.apache.spark.*``
say how dates were rebased (LEGACY mode) and which Spark types (intervals, variant, comments) the columns hold.
"""

from __future__ import annotations

import glob
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.spark_fixtures import download_prefix, spark_session  # noqa: F401  (the `spark` fixture)
from test_compact_support import TEST_OPTIONS, data_keys, make_client

from s3io.compaction import CompactionOptions, compact_prefix
from s3io.compaction.grouping import UNREADABLE

pytestmark = pytest.mark.timeout(300)

PREFIX = "sparkw/"
OPTIONS = TEST_OPTIONS.replace(min_input_files=2, grace_period=0.0)
SESSION_TZ = "America/Los_Angeles"


@pytest.fixture(name="spark_la")
def spark_in_los_angeles(spark: Any) -> Iterator[Any]:
    """The shared session with its time zone set away from UTC for the test."""
    spark.conf.set("spark.sql.session.timeZone", SESSION_TZ)
    try:
        yield spark
    finally:
        spark.conf.unset("spark.sql.session.timeZone")


def spark_files(spark: Any, sql: str, n: int, conf: dict[str, str] | None = None) -> list[bytes]:
    """``n`` parquet files Spark writes for ``sql`` (one each), with ``conf`` set meanwhile."""
    directory = Path(tempfile.mkdtemp(prefix="sparkw-"))
    for key, value in (conf or {}).items():
        spark.conf.set(key, value)
    try:
        for i in range(n):
            spark.sql(sql).coalesce(1).write.parquet(str(directory / str(i)))
    finally:
        for key in conf or {}:
            spark.conf.unset(key)
    return [Path(p).read_bytes() for p in sorted(glob.glob(f"{directory}/*/*.parquet"))]


def spark_view(spark: Any, root: Path, merge: bool = False) -> tuple[str, Counter[str]]:
    """Spark's schema of a local directory and its rows as JSON (timestamps shown in the session zone)."""
    df = spark.read.option("mergeSchema", str(merge).lower()).parquet(str(root))
    rows = Counter(r[0] for r in df.selectExpr("to_json(struct(*)) AS j").collect())
    return df.schema.simpleString(), rows


async def compacted_view(
    spark: Any,
    s3_endpoint: Any,
    s3_client: Any,
    bucket: str,
    files: list[bytes],
    options: CompactionOptions = OPTIONS,
    merge: bool = False,
) -> tuple[tuple[str, Counter[str]], tuple[str, Counter[str]], Any]:
    """Upload ``files``, read them with Spark, compact, read again: (before, after, report)."""
    for i, body in enumerate(files):
        s3_client.put_object(Bucket=bucket, Key=f"{PREFIX}part-{i:03d}.parquet", Body=body)
    work = Path(tempfile.mkdtemp(prefix="sparkw-view-"))
    before = spark_view(spark, download_prefix(s3_client, bucket, PREFIX, work / "before"), merge)
    async with make_client(s3_endpoint.url) as client:
        report = await compact_prefix(client, f"s3://{bucket}/{PREFIX}", options)
    after = spark_view(spark, download_prefix(s3_client, bucket, PREFIX, work / "after"), merge)
    return before, after, report


def compacted_all(s3_client: Any, bucket: str, report: Any) -> None:
    assert report.status == "ok", report.to_text()
    keys = data_keys(s3_client, bucket, PREFIX)
    assert len(keys) == 1 and "/part-c-" in keys[0], keys


# ------------------------------------------------------------------------------------------------ INT96


@pytest.mark.parametrize("coerce", ["us", None])
@pytest.mark.parametrize("when", ["2020-01-01 10:00:00", "0001-01-01 10:00:00", "9999-12-31 23:59:59.999999"])
async def test_spark_int96_timestamps_read_as_the_same_instants_after_compaction(
    when: str, coerce: str | None, spark_la: Any, s3_endpoint: Any, s3_client: Any, bucket: str
) -> None:
    """INT96 (Spark's default timestamp) stays ``timestamp`` with the same instants, for every year and either
    ``coerce_timestamps``: it became timestamp_ntz shifted by the zone, and year 1 failed the group (or, with
    coerce_timestamps=None as the hint said, became 1754-08-31 in a TIMESTAMP(NANOS) Spark cannot read)."""
    files = spark_files(spark_la, f"select timestamp'{when}' as ts, id from range(2)", 3)
    options = OPTIONS.replace(coerce_timestamps=coerce)
    before, after, report = await compacted_view(spark_la, s3_endpoint, s3_client, bucket, files, options)
    compacted_all(s3_client, bucket, report)
    assert before[0] == "struct<ts:timestamp,id:bigint>"
    assert after == before


async def test_spark_reads_outputs_next_to_int96_files_left_alone_with_merge_schema(
    spark_la: Any, s3_endpoint: Any, s3_client: Any, bucket: str
) -> None:
    """Small INT96 files are compacted, a big one stays: mergeSchema merges TIMESTAMP with INT96 (both
    ``timestamp``); it refused TIMESTAMP_NTZ next to TIMESTAMP."""
    small = spark_files(spark_la, "select timestamp'2020-01-01 10:00:00' as ts, id from range(3)", 3)
    (big,) = spark_files(spark_la, "select timestamp'2020-01-01 10:00:00' as ts, id from range(3000)", 1)
    threshold = max(len(b) for b in small) + 1
    assert len(big) >= threshold
    options = OPTIONS.replace(candidate_threshold=threshold, target_file_size=threshold * 10)
    before, after, report = await compacted_view(
        spark_la, s3_endpoint, s3_client, bucket, [*small, big], options, merge=True
    )
    assert report.status == "ok" and report.files_after == 2, report.to_text()
    assert after == before


# ------------------------------------------------------------------------------------------------ rebase modes


LEGACY_DATES = {"spark.sql.parquet.datetimeRebaseModeInWrite": "LEGACY"}
MICROS = {"spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS"}


@pytest.mark.parametrize(
    ("sql", "conf"),
    [
        ("select date'1000-01-01' as d, id from range(2)", LEGACY_DATES),
        ("select timestamp'1000-01-01 10:00:00' as ts, id from range(2)", {**MICROS, **LEGACY_DATES}),
        (
            "select timestamp'1000-01-01 10:00:00' as ts, date'1000-01-01' as d",
            {**LEGACY_DATES, "spark.sql.parquet.int96RebaseModeInWrite": "LEGACY"},
        ),
        ("select date'0001-01-01' as d, timestamp'1000-01-01 10:00:00' as ts", {}),
    ],
    ids=["legacy_dates", "legacy_micros", "legacy_int96_and_dates", "corrected_ancient"],
)
async def test_spark_dates_keep_their_calendar_after_compaction(
    sql: str, conf: dict[str, str], spark_la: Any, s3_endpoint: Any, s3_client: Any, bucket: str
) -> None:
    """A date or timestamp Spark wrote in LEGACY rebase mode is read back through the footer keys that say so
    (``org.apache.spark.legacyDateTime``, ``legacyINT96``, ``timeZone``, ``version``): an output keeps them, so
    1000-01-01 stays 1000-01-01 (it became 1000-01-06)."""
    files = spark_files(spark_la, sql, 3, conf)
    before, after, report = await compacted_view(spark_la, s3_endpoint, s3_client, bucket, files)
    compacted_all(s3_client, bucket, report)
    assert after == before


async def test_spark_int96_rebased_unlike_the_files_dates_is_left_alone_with_its_reason(
    spark_la: Any, s3_endpoint: Any, s3_client: Any, bucket: str
) -> None:
    """INT96 written LEGACY, dates CORRECTED: as microseconds, the INT96 values would be read by the dates' rule
    (shifted by days); such a file is left as it is, with the reason."""
    conf = {"spark.sql.parquet.int96RebaseModeInWrite": "LEGACY"}
    files = spark_files(spark_la, "select timestamp'1000-01-01 10:00:00' as ts", 3, conf)
    before, after, report = await compacted_view(spark_la, s3_endpoint, s3_client, bucket, files)
    assert report.status in ("ok", "nothing_to_do") and report.files_after == 3, report.to_text()
    assert {f.kind for f in report.skipped_files} == {UNREADABLE}
    assert all("org.apache.spark.legacyINT96" in f.reason for f in report.skipped_files), report.to_text()
    assert after == before


async def test_spark_files_of_two_rebase_modes_are_compacted_apart(
    spark_la: Any, s3_endpoint: Any, s3_client: Any, bucket: str
) -> None:
    sql = "select date'1000-01-01' as d, id from range(2)"
    files = spark_files(spark_la, sql, 3, LEGACY_DATES) + spark_files(spark_la, sql, 3)
    before, after, report = await compacted_view(spark_la, s3_endpoint, s3_client, bucket, files)
    assert report.status == "ok" and report.files_after == 2, report.to_text()
    assert after == before


# ------------------------------------------------------------------------------------------------ Spark's types


@pytest.mark.parametrize(
    "sql",
    [
        "select interval '1-2' year to month as ym, interval '1 02:03:04.5' day to second as dt",
        'select parse_json(\'{"a":1,"b":[true,null]}\') as v',
        "select cast('ab' as char(5)) as c, cast('x' as varchar(3)) as v",
        "select 1 as id",
    ],
    ids=["intervals", "variant", "char_varchar", "comment"],
)
async def test_spark_only_types_stay_after_compaction(
    sql: str, spark_la: Any, s3_endpoint: Any, s3_client: Any, bucket: str
) -> None:
    """Types only Spark's schema (``org.apache.spark.sql.parquet.row.metadata``) holds stay: intervals were read
    as int/bigint, variant as a struct; a field comment vanished."""
    if sql == "select 1 as id":
        df = spark_la.sql(sql).withMetadata("id", {"comment": "the key"})
        directory = Path(tempfile.mkdtemp(prefix="sparkw-comment-"))
        for i in range(3):
            df.coalesce(1).write.parquet(str(directory / str(i)))
        files = [Path(p).read_bytes() for p in sorted(glob.glob(f"{directory}/*/*.parquet"))]
    else:
        files = spark_files(spark_la, sql, 3)
    before, after, report = await compacted_view(spark_la, s3_endpoint, s3_client, bucket, files)
    compacted_all(s3_client, bucket, report)
    assert after == before
    if sql == "select 1 as id":
        work = Path(tempfile.mkdtemp(prefix="sparkw-comment-after-"))
        df = spark_la.read.parquet(str(download_prefix(s3_client, bucket, PREFIX, work)))
        assert df.schema["id"].metadata == {"comment": "the key"}


async def test_spark_reads_a_directory_whose_files_differed_only_in_case_after_compaction(
    spark_la: Any, s3_endpoint: Any, s3_client: Any, bucket: str
) -> None:
    """``ID`` in some files, ``id`` in others: Spark reads them as one column; an output holding both it refused."""
    files = spark_files(spark_la, "select id as ID from range(2)", 3) + spark_files(
        spark_la, "select id from range(2)", 3
    )
    before, after, report = await compacted_view(spark_la, s3_endpoint, s3_client, bucket, files)
    assert report.status == "ok" and report.files_after == 2, report.to_text()
    assert sum(after[1].values()) == sum(before[1].values()) == 12
