"""Spark's rebase of files written in its legacy (hybrid Julian) calendar, as s3parquet reproduces it.

The tables hold Spark 4.3's answers (``spark.read.parquet`` of pyarrow files marked org.apache.spark.version=2.4.8,
JVM default zone Etc/UTC; ``unix_date`` / ``unix_micros`` of each value). The date rule was also compared with
Spark on every day from -1,100,000 to -141,000 (years -1042 to 1583): no difference.
"""

from __future__ import annotations

import io
from datetime import date, datetime
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from s3io import ObjectInfo, Policy, S3Client
from s3io.dataset import FilePiece, ParquetReader
from s3io.engine import RangeEngine
from s3io.parquet.chunks import select_row_groups
from s3io.parquet.conversions import DEFAULT_CONVERSIONS
from spark_ext.source.legacy_files import (
    CORRECTED,
    EXCEPTION,
    LEGACY,
    LegacyCalendar,
    LegacyCalendarError,
    file_mode,
)
from spark_ext.source.rebase import julian_to_gregorian_days, julian_to_gregorian_utc
from spark_ext.source.spark_conversions import spark_conversions

# (stored days, the days Spark reads), labelled with the Julian date stored and the date Spark shows.
SPARK_DAYS = [
    (-682947, -682945),  # Julian 0100-02-28 -> 0100-02-28
    (-682946, -682944),  # Julian 0100-02-29 -> 0100-03-01 (no Feb 29 in Gregorian 100)
    (-682945, -682944),  # Julian 0100-03-01 -> 0100-03-01
    (-646422, -646421),  # Julian 0200-02-28 -> 0200-02-28
    (-646421, -646420),  # Julian 0200-02-29 -> 0200-03-01
    (-646420, -646420),  # Julian 0200-03-01 -> 0200-03-01
    (-609897, -609897),  # Julian 0300-02-28 -> 0300-02-28
    (-609896, -609896),  # Julian 0300-02-29 -> 0300-03-01
    (-609895, -609896),  # Julian 0300-03-01 -> 0300-03-01
    (-573372, -573373),  # Julian 0400-02-28 -> 0400-02-28
    (-573371, -573372),  # Julian 0400-02-29 -> 0400-02-29
    (-573370, -573371),  # Julian 0400-03-01 -> 0400-03-01
    (-536847, -536848),  # Julian 0500-02-28 -> 0500-02-28
    (-536846, -536847),  # Julian 0500-02-29 -> 0500-03-01
    (-536845, -536847),  # Julian 0500-03-01 -> 0500-03-01
    (-500322, -500324),  # Julian 0600-02-28 -> 0600-02-28
    (-500321, -500323),  # Julian 0600-02-29 -> 0600-03-01
    (-500320, -500323),  # Julian 0600-03-01 -> 0600-03-01
    (-463797, -463800),  # Julian 0700-02-28 -> 0700-02-28
    (-463796, -463799),  # Julian 0700-02-29 -> 0700-03-01
    (-463795, -463799),  # Julian 0700-03-01 -> 0700-03-01
    (-427272, -427276),  # Julian 0800-02-28 -> 0800-02-28
    (-427271, -427275),  # Julian 0800-02-29 -> 0800-02-29
    (-427270, -427274),  # Julian 0800-03-01 -> 0800-03-01
    (-390747, -390751),  # Julian 0900-02-28 -> 0900-02-28
    (-390746, -390750),  # Julian 0900-02-29 -> 0900-03-01
    (-390745, -390750),  # Julian 0900-03-01 -> 0900-03-01
    (-354222, -354227),  # Julian 1000-02-28 -> 1000-02-28
    (-354221, -354226),  # Julian 1000-02-29 -> 1000-03-01
    (-354220, -354226),  # Julian 1000-03-01 -> 1000-03-01
    (-317697, -317703),  # Julian 1100-02-28 -> 1100-02-28
    (-317696, -317702),  # Julian 1100-02-29 -> 1100-03-01
    (-317695, -317702),  # Julian 1100-03-01 -> 1100-03-01
    (-281172, -281179),  # Julian 1200-02-28 -> 1200-02-28
    (-281171, -281178),  # Julian 1200-02-29 -> 1200-02-29
    (-281170, -281177),  # Julian 1200-03-01 -> 1200-03-01
    (-244647, -244654),  # Julian 1300-02-28 -> 1300-02-28
    (-244646, -244653),  # Julian 1300-02-29 -> 1300-03-01
    (-244645, -244653),  # Julian 1300-03-01 -> 1300-03-01
    (-208122, -208130),  # Julian 1400-02-28 -> 1400-02-28
    (-208121, -208129),  # Julian 1400-02-29 -> 1400-03-01
    (-208120, -208129),  # Julian 1400-03-01 -> 1400-03-01
    (-171597, -171606),  # Julian 1500-02-28 -> 1500-02-28
    (-171596, -171605),  # Julian 1500-02-29 -> 1500-03-01
    (-171595, -171605),  # Julian 1500-03-01 -> 1500-03-01
    (-719164, -719162),  # Julian 0001-01-01 -> 0001-01-01
    (-718010, -718008),  # Julian 0004-02-29 -> 0004-02-29
    (-354280, -354285),  # Julian 1000-01-01 -> 1000-01-01
    (-141704, -141714),  # Julian 1582-01-01 -> 1582-01-01
    (-141430, -141440),  # Julian 1582-10-02 -> 1582-10-02
    (-141429, -141439),  # Julian 1582-10-03 -> 1582-10-03
    (-141428, -141438),  # Julian 1582-10-04 -> 1582-10-04 (the hybrid calendar's last Julian day)
    (-141427, -141427),  # 1582-10-15 -> 1582-10-15 (Gregorian from here on: unchanged)
    (-141426, -141426),  # 1582-10-16
    (-141425, -141425),  # 1582-10-17
    (-719472, -719470),  # Julian 1 BC (year 0) Feb 28 -> year 0 Feb 28
    (-719471, -719469),  # Julian year 0 Feb 29 -> year 0 Feb 29
    (-719470, -719468),  # Julian year 0 Mar 1 -> year 0 Mar 1
    (-719837, -719835),  # Julian year -1 Feb 28
    (-719836, -719834),  # Julian year -1 Mar 1
    (-755997, -755994),  # Julian year -100 Feb 28
    (-755996, -755993),  # Julian year -100 Feb 29 -> Mar 1
    (-755995, -755993),  # Julian year -100 Mar 1
    (-756362, -756359),  # Julian year -101 Feb 28
    (-756361, -756358),  # Julian year -101 Mar 1
    (-865572, -865567),  # Julian year -400 Feb 28
    (-865571, -865566),  # Julian year -400 Feb 29 -> Feb 29
    (-865570, -865565),  # Julian year -400 Mar 1
    (-1084722, -1084712),  # Julian year -1000 Feb 28
    (-1084721, -1084711),  # Julian year -1000 Feb 29 -> Mar 1
    (-1084720, -1084711),  # Julian year -1000 Mar 1
]

# (stored micros, the micros Spark reads), JVM zone Etc/UTC: BCE, each Julian century, and after 1582.
SPARK_MICROS_UTC = [
    (-69120000000000000, -69119654400000000),
    (-64544070133333758, -64543897333333758),
    (-59959751688889739, -59959578888889739),
    (-55383821822223497, -55383821822223497),
    (-50799503377779478, -50799589777779478),
    (-46223573511113236, -46223746311113236),
    (-41639341466669217, -41639600666669217),
    (-37063411600002975, -37063757200002975),
    (-32479093155558956, -32479525155558956),
    (-27903163288892714, -27903681688892714),
    (-23318844844448695, -23319449644448695),
    (-18743001377782453, -18743692577782453),
    (-14158682933338434, -14159546933338434),
    (-2200000300000000, -2200000300000000),
]

V24 = {"org.apache.spark.version": "2.4.8"}
DAY_US = 86_400_000_000


def parquet_file(table: pa.Table, meta: dict[str, str], **options: Any) -> pq.FileMetaData:
    """The footer of ``table`` written with ``meta`` as key-value metadata, and the bytes (see ``written``)."""
    return pq.ParquetFile(io.BytesIO(written(table, meta, **options))).metadata


def written(table: pa.Table, meta: dict[str, str], **options: Any) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table.replace_schema_metadata(meta), sink, **options)
    return sink.getvalue()


def decoded(table: pa.Table, meta: dict[str, str], calendar: LegacyCalendar, **options: Any) -> pa.RecordBatch:
    """The first batch of ``table`` as written with ``meta``, decoded as the reader does, after ``calendar``."""
    data = written(table, meta, **options)
    batch = pq.read_table(io.BytesIO(data), coerce_int96_timestamp_unit="us").to_batches()[0]
    rebase = calendar(pq.ParquetFile(io.BytesIO(data)).metadata, "s3://b/legacy.parquet")
    return batch if rebase is None else rebase.apply(batch)


# ----------------------------------------------------------------------------------------------- the rules


def test_dates_rebase_as_spark_does_including_julian_only_leap_days_and_bce() -> None:
    stored, spark = zip(*SPARK_DAYS, strict=True)
    assert julian_to_gregorian_days(np.array(stored)).tolist() == list(spark)


def test_utc_timestamps_rebase_as_spark_does() -> None:
    stored, spark = zip(*SPARK_MICROS_UTC, strict=True)
    assert julian_to_gregorian_utc(np.array(stored), DAY_US).tolist() == list(spark)


@pytest.mark.parametrize(
    ("pairs", "by_config", "min_version", "expected"),
    [
        ({"org.apache.spark.version": "2.4.8"}, CORRECTED, "3.0.0", LEGACY),
        ({"org.apache.spark.version": "3.0.1"}, CORRECTED, "3.0.0", CORRECTED),
        ({"org.apache.spark.version": "3.0.1"}, CORRECTED, "3.1.0", LEGACY),  # INT96 before 3.1.0
        ({"org.apache.spark.version": "3.5.0", "org.apache.spark.legacyDateTime": ""}, CORRECTED, "3.0.0", LEGACY),
        ({"org.apache.spark.version": "3.5.0"}, LEGACY, "3.0.0", CORRECTED),  # a Spark file ignores the config
        ({"org.apache.spark.version": "10.0.0"}, CORRECTED, "3.0.0", LEGACY),  # Spark compares versions as strings
        ({}, EXCEPTION, "3.0.0", EXCEPTION),
        ({}, CORRECTED, "3.0.0", CORRECTED),
    ],
)
def test_file_mode_follows_spark_rebase_spec(pairs: dict, by_config: str, min_version: str, expected: str) -> None:
    key = b"org.apache.spark.legacyDateTime"
    encoded = {k.encode(): v.encode() for k, v in pairs.items()}
    assert file_mode(encoded, by_config, min_version, key) == expected


def test_files_without_spark_keys_are_not_adjusted() -> None:
    table = pa.table({"d": pa.array([date(1000, 1, 1)])})
    assert LegacyCalendar(jvm_time_zone="UTC")(parquet_file(table, {}), "s3://b/k") is None
    assert LegacyCalendar()(parquet_file(table, {"org.apache.spark.version": "3.5.0"}), "s3://b/k") is None


# ------------------------------------------------------------------------------------------- batches of a file


def test_legacy_dates_micros_and_int96_are_rebased_and_ntz_kept() -> None:
    ts = datetime(1000, 1, 1, 10)
    table = pa.table(
        {
            "d": pa.array([date(1000, 1, 1), None, date(2020, 1, 1)]),
            "ts": pa.array([ts, ts, None], pa.timestamp("us", "UTC")),
            "ntz": pa.array([ts, None, ts], pa.timestamp("us")),
            "nested": pa.array([{"d": date(1000, 1, 1)}, None, {"d": None}], pa.struct([("d", pa.date32())])),
            "dates": pa.array([[date(1000, 1, 1)], [], None], pa.list_(pa.date32())),
        }
    )
    batch = decoded(table, V24, LegacyCalendar(jvm_time_zone="Etc/UTC"))
    rebased = date(999, 12, 27)
    assert batch.column("d").to_pylist() == [rebased, None, date(2020, 1, 1)]
    assert batch.column("ts").to_pylist()[0].replace(tzinfo=None) == datetime(999, 12, 27, 10)
    assert batch.column("ntz").to_pylist() == [ts, None, ts]  # timestamp_ntz: never rebased
    assert batch.column("nested").to_pylist() == [{"d": rebased}, None, {"d": None}]
    assert batch.column("dates").to_pylist() == [[rebased], [], None]
    int96 = pa.table({"t": pa.array([ts], pa.timestamp("us"))})
    meta = {"org.apache.spark.version": "3.0.1"}
    batch = decoded(int96, meta, LegacyCalendar(jvm_time_zone="UTC"), use_deprecated_int96_timestamps=True)
    assert batch.column("t").to_pylist() == [datetime(999, 12, 27, 10)]


def test_ancient_timestamps_in_another_zone_are_refused_naming_file_column_and_way_out() -> None:
    table = pa.table({"ts": pa.array([datetime(1850, 1, 1, 10)], pa.timestamp("us", "UTC"))})
    meta = {**V24, "org.apache.spark.timeZone": "America/Los_Angeles"}
    with pytest.raises(LegacyCalendarError) as caught:
        decoded(table, meta, LegacyCalendar(jvm_time_zone="UTC"))
    message = str(caught.value)
    for phrase in ("s3://b/legacy.parquet", "'ts'", "America/Los_Angeles", "spark.read.parquet", "CORRECTED"):
        assert phrase in message
    with pytest.raises(LegacyCalendarError, match="JVM"):  # the zone Spark would use is not known
        decoded(table, V24, LegacyCalendar(jvm_time_zone=None))


def test_timestamps_from_1900_on_are_read_as_stored_in_any_zone() -> None:
    ts = datetime(1900, 1, 1)
    table = pa.table({"ts": pa.array([ts], pa.timestamp("us", "UTC")), "d": pa.array([date(1000, 1, 1)])})
    meta = {**V24, "org.apache.spark.timeZone": "Asia/Kolkata"}
    batch = decoded(table, meta, LegacyCalendar(jvm_time_zone=None))
    assert batch.column("ts").to_pylist()[0].replace(tzinfo=None) == ts
    assert batch.column("d").to_pylist() == [date(999, 12, 27)]  # dates do not depend on the zone


def test_exception_mode_refuses_ancient_values_of_files_without_a_spark_version() -> None:
    table = pa.table({"d": pa.array([date(1000, 1, 1)])})
    with pytest.raises(LegacyCalendarError, match="EXCEPTION"):
        decoded(table, {}, LegacyCalendar(datetime_mode=EXCEPTION))
    modern = pa.table({"d": pa.array([date(2000, 1, 1)])})
    assert decoded(modern, {}, LegacyCalendar(datetime_mode=EXCEPTION)).column("d").to_pylist() == [date(2000, 1, 1)]


# ------------------------------------------------------------------------------------------ statistics, reads


def two_row_groups() -> bytes:
    """Row group 0 stores Julian 1000-01-01 (read as 0999-12-27), row group 1 stores 2020-01-01."""
    table = pa.table({"d": pa.array([date(1000, 1, 1), date(2020, 1, 1)])})
    return written(table, V24, row_group_size=1)


def test_statistics_of_a_legacy_column_never_prune() -> None:
    metadata = pq.ParquetFile(io.BytesIO(two_row_groups())).metadata
    schema = pa.schema([("d", pa.date32())])
    predicate = [("d", "=", date(999, 12, 27))]  # the value Spark reads; the statistics hold 1000-01-01
    conversions = spark_conversions(case_sensitive=False)
    assert select_row_groups(metadata, predicate, schema, conversions, "s3://b/k") == [0, 1]
    assert select_row_groups(metadata, predicate, schema, DEFAULT_CONVERSIONS, "s3://b/k") == []  # pyarrow-like


@pytest.mark.timeout(60)
async def test_reader_rebases_and_keeps_filtered_rows_of_a_legacy_file(
    s3_endpoint: Any, bucket: str, s3_client: Any
) -> None:
    data = two_row_groups()
    response = s3_client.put_object(Bucket=bucket, Key="legacy/f.parquet", Body=data)
    obj = ObjectInfo(bucket, "legacy/f.parquet", len(data), response["ETag"])
    schema = pa.schema([("d", pa.date32())])
    conversions = spark_conversions(case_sensitive=False, calendar=LegacyCalendar(jvm_time_zone="UTC"))
    async with S3Client(Policy(max_attempts=2), endpoint_url=s3_endpoint.url) as client:
        reader = ParquetReader(RangeEngine(client))
        predicates = [("d", "=", date(999, 12, 27))]
        batches = reader.iter_batches([FilePiece(obj)], schema=schema, predicates=predicates, conversions=conversions)
        rows = [value async for batch in batches for value in batch.column("d").to_pylist()]
        plain = reader.iter_batches([FilePiece(obj)], schema=schema)
        stored = [value async for batch in plain for value in batch.column("d").to_pylist()]
    assert rows == [date(999, 12, 27)]
    assert stored == [date(1000, 1, 1), date(2020, 1, 1)]  # s3io alone reads what pyarrow reads
