"""Session settings that change what a read returns: captured by ``register()``, checked by every task.

A Python data source cannot read the session's configuration at ``load()``. A setting changed after
``register()`` used to be ignored silently (a partition ``t=...`` came back in the old time zone); now the read
fails naming the setting, and registering again reads exactly what ``spark.read.parquet`` reads.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import date
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql.types import StringType, TimestampType
from support.spark_fixtures import put_parquet, spark_session  # noqa: F401

import spark_ext
from spark_ext.planning.hive import PartitionColumn, PartitionSpec
from spark_ext.source.batch_read import relevant_settings
from spark_ext.source.session_check import SessionSetting, SessionSettingChanged, check_session

pytestmark = pytest.mark.timeout(300)

JSON = {"timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX"}


@pytest.fixture
def files(spark, s3_endpoint, bucket, s3_client, tmp_path) -> dict[str, tuple[str, str]]:
    """Name -> (s3 URL, local path) of small tables: timestamp partitions, ``ID``/``id`` columns, an old date."""
    tables = {
        "ts/t=2024-01-02 03%3A04%3A05/a.parquet": pa.table({"v": [1]}),
        "ts/t=2024-07-01 00%3A00%3A00/b.parquet": pa.table({"v": [2]}),
        "case/a.parquet": pa.table({"ID": [1]}),
        "case/b.parquet": pa.table({"id": [2]}),
        "legacy/a.parquet": pa.table({"d": [date(1000, 1, 1)]}),  # no Spark version: the read mode decides
    }
    for key, table in tables.items():
        put_parquet(s3_client, bucket, key, table)
        local = tmp_path / key
        local.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, local)
    return {name: (f"s3://{bucket}/{name}/", str(tmp_path / name)) for name in ("ts", "case", "legacy")}


@pytest.fixture
def session_setting(spark) -> Iterator[Any]:
    """``set(key, value)`` for the test; every setting restored and the source registered again afterwards."""
    saved: dict[str, str | None] = {}

    def set_setting(key: str, value: str) -> None:
        saved.setdefault(key, spark.conf.get(key, None))
        spark.conf.set(key, value)

    try:
        yield set_setting
    finally:
        for key, value in saved.items():
            spark.conf.set(key, value) if value is not None else spark.conf.unset(key)
        spark_ext.register(spark)


def _ours(spark, endpoint: str, url: str, **options: str) -> Any:
    reader = spark.read.format("s3parquet").option("endpoint", endpoint)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load(url)


def _rows(df: Any) -> list[str]:
    from pyspark.sql import functions as F

    return sorted(r[0] for r in df.select(F.to_json(F.struct("*"), JSON)).collect())


def test_a_time_zone_set_after_register_fails_the_read_naming_the_setting(spark, s3_endpoint, files, session_setting):
    session_setting("spark.sql.session.timeZone", "America/New_York")
    with pytest.raises(Exception, match=r"spark\.sql\.session\.timeZone is 'America/New_York'.*spark_ext\.register"):
        _ours(spark, s3_endpoint.url, files["ts"][0]).collect()


def test_registering_again_reads_partition_timestamps_in_the_new_zone_as_spark_does(
    spark, s3_endpoint, files, session_setting
):
    session_setting("spark.sql.session.timeZone", "America/New_York")
    spark_ext.register(spark)
    url, local = files["ts"]
    ours, builtin = _ours(spark, s3_endpoint.url, url), spark.read.parquet(local)
    assert ours.schema == builtin.schema
    assert (
        _rows(ours)
        == _rows(builtin)
        == [
            '{"v":1,"t":"2024-01-02T03:04:05.000000-05:00"}',
            '{"v":2,"t":"2024-07-01T00:00:00.000000-04:00"}',
        ]
    )


def test_a_time_zone_option_is_what_the_read_uses_whatever_the_session_says(spark, s3_endpoint, files, session_setting):
    session_setting("spark.sql.session.timeZone", "America/New_York")
    df = _ours(spark, s3_endpoint.url, files["ts"][0], timeZone="UTC")
    assert _rows(df) == [
        '{"v":1,"t":"2024-01-01T22:04:05.000000-05:00"}',
        '{"v":2,"t":"2024-06-30T20:00:00.000000-04:00"}',
    ]


@pytest.mark.parametrize(
    ("setting", "value", "fileset", "as_spark_reads_it"),
    [
        (  # inference off: the partition column t stays a string
            "spark.sql.sources.partitionColumnTypeInference.enabled",
            "false",
            "ts",
            lambda df: df.schema["t"].dataType == StringType(),
        ),
        ("spark.sql.caseSensitive", "true", "case", lambda df: _rows(df) == ['{"ID":1}', "{}"]),  # b has no ID
        (  # read as written, in the Julian calendar
            "spark.sql.parquet.datetimeRebaseModeInRead",
            "LEGACY",
            "legacy",
            lambda df: _rows(df) == ['{"d":"0999-12-27"}'],
        ),
    ],
)
def test_a_setting_changed_after_register_fails_naming_it_then_matches_spark_once_registered(
    spark, s3_endpoint, files, session_setting, setting, value, fileset, as_spark_reads_it
):
    session_setting(setting, value)
    url, local = files[fileset]
    with pytest.raises(Exception, match=re.escape(f"{setting} is '{value}'")):
        _ours(spark, s3_endpoint.url, url).collect()
    spark_ext.register(spark)
    ours, builtin = _ours(spark, s3_endpoint.url, url), spark.read.parquet(local)
    assert ours.schema == builtin.schema
    assert _rows(ours) == _rows(builtin)
    assert as_spark_reads_it(ours)


def test_only_settings_that_change_the_result_are_checked():
    settings = (
        SessionSetting("spark.sql.session.timeZone", "timeZone", "UTC"),
        SessionSetting(
            "spark.sql.sources.partitionColumnTypeInference.enabled", "partitionColumnTypeInference", "true"
        ),
        SessionSetting("spark.sql.caseSensitive", "caseSensitive", "false"),
    )
    unpartitioned = PartitionSpec((), ())
    assert [s.option for s in relevant_settings(settings, unpartitioned)] == ["caseSensitive"]
    timestamps = PartitionSpec((PartitionColumn("t", TimestampType()),), ())
    assert [s.option for s in relevant_settings(settings, timestamps)] == [s.option for s in settings]
    properties = {"spark.sql.session.timeZone": "Etc/UTC", "spark.sql.caseSensitive": "FALSE"}
    check_session(settings, properties.get)  # the same values, spelled differently
    with pytest.raises(SessionSettingChanged, match=r"caseSensitive.*\.option\('caseSensitive'"):
        check_session(settings, {"spark.sql.caseSensitive": "true"}.get)
