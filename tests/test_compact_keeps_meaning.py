"""An output means to its readers what its inputs meant: INT96 timestamps stay instants (in microseconds, whatever
their year), schema metadata every input shares stays (pandas' too), Spark's footer keys stay with their files,
and names Spark would confuse never meet.

Files written by Spark itself, read back through ``spark.read.parquet``, are in test_spark_compaction_types.py.
"""

from __future__ import annotations

import datetime
import io
import json
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_compact_support import TEST_OPTIONS, data_keys, make_client, parquet_bytes

from s3io.compaction import CompactionOptions, compact_prefix
from s3io.compaction.grouping import UNREADABLE

pytestmark = pytest.mark.timeout(120)

PREFIX = "meaning/"
OPTIONS = TEST_OPTIONS.replace(min_input_files=2, grace_period=0.0)
UTC = datetime.UTC


def put(s3: Any, bucket: str, name: str, body: bytes) -> None:
    s3.put_object(Bucket=bucket, Key=f"{PREFIX}{name}", Body=body)


def read_files(s3: Any, bucket: str) -> dict[str, pq.ParquetFile]:
    """Every data file under the prefix, by name."""
    return {
        key[len(PREFIX) :]: pq.ParquetFile(io.BytesIO(s3.get_object(Bucket=bucket, Key=key)["Body"].read()))
        for key in data_keys(s3, bucket, PREFIX)
    }


def only_output(s3: Any, bucket: str) -> pq.ParquetFile:
    """The one compacted output under the prefix (every input was compacted into it)."""
    files = read_files(s3, bucket)
    assert len(files) == 1 and next(iter(files)).startswith("part-c-"), sorted(files)
    return next(iter(files.values()))


async def compact(endpoint: str, bucket: str, options: CompactionOptions = OPTIONS) -> Any:
    async with make_client(endpoint) as client:
        return await compact_prefix(client, f"s3://{bucket}/{PREFIX}", options)


# ------------------------------------------------------------------------------------------------ INT96


INSTANTS = [
    datetime.datetime(1, 1, 1, 10, tzinfo=UTC),  # outside the nanosecond range (1677-2262)
    datetime.datetime(2020, 1, 1, 10, tzinfo=UTC),
    datetime.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
    None,
]


def int96_file(first_id: int) -> bytes:
    """A file whose ``ts`` is stored as INT96 (as Spark, Hive and Impala write timestamps), values of every era."""
    table = pa.table(
        {
            "id": pa.array(range(first_id, first_id + len(INSTANTS)), pa.int64()),
            "ts": pa.array(INSTANTS, pa.timestamp("us", "UTC")),
            "s": pa.array([{"inner": v} for v in INSTANTS], pa.struct([("inner", pa.timestamp("us", "UTC"))])),
        }
    )
    return parquet_bytes(table, use_deprecated_int96_timestamps=True, store_schema=False)


@pytest.mark.parametrize("coerce", ["us", None])
async def test_int96_timestamps_become_utc_instants_in_microseconds_whatever_their_year(
    coerce: str | None, s3_endpoint: Any, s3_client: Any, bucket: str
) -> None:
    """An INT96 value is an instant: the output holds it as TIMESTAMP(MICROS, isAdjustedToUTC=true), which Spark
    reads as ``timestamp`` (not ``timestamp_ntz``), with the same instant even for year 1 or 9999, whichever
    ``coerce_timestamps`` (decoded in nanoseconds, year 1 wrapped round to 1754 and failed or was written so)."""
    for i in range(3):
        put(s3_client, bucket, f"part-{i}.parquet", int96_file(10 * i))
    report = await compact(s3_endpoint.url, bucket, OPTIONS.replace(coerce_timestamps=coerce))
    assert report.status == "ok", report.to_text()
    output = only_output(s3_client, bucket)
    leaves = {output.metadata.schema.column(i).path: output.metadata.schema.column(i) for i in range(3)}
    for path in ("ts", "s.inner"):
        logical = leaves[path].logical_type.to_json()
        assert leaves[path].physical_type == "INT64" and json.loads(logical) == {
            "Type": "Timestamp",
            "isAdjustedToUTC": True,
            "timeUnit": "microseconds",
            "is_from_converted_type": False,
            "force_set_converted_type": False,
        }, logical
    table = output.read().sort_by("id")
    assert table.schema.field("ts").type == pa.timestamp("us", "UTC")
    assert table.column("ts").to_pylist() == INSTANTS * 3
    assert [row["inner"] if row else None for row in table.column("s").to_pylist()] == INSTANTS * 3


async def test_the_timestamp_hint_advises_only_what_keeps_every_value(
    s3_endpoint: Any, s3_client: Any, bucket: str
) -> None:
    """Sub-microsecond values fail a group with a hint; following the hint keeps them exactly."""
    values = [1_000_000_001, -5, None]
    for i in range(3):
        table = pa.table({"id": [i] * 3, "ts": pa.array(values, pa.timestamp("ns"))})
        put(s3_client, bucket, f"part-{i}.parquet", parquet_bytes(table))
    failed = await compact(s3_endpoint.url, bucket)
    assert failed.status != "ok" and "coerce_timestamps=None" in failed.to_text(), failed.to_text()
    report = await compact(s3_endpoint.url, bucket, OPTIONS.replace(coerce_timestamps=None))
    assert report.status == "ok", report.to_text()
    table = only_output(s3_client, bucket).read()
    assert table.schema.field("ts").type == pa.timestamp("ns")
    assert sorted(table.column("ts").cast(pa.int64()).to_pylist(), key=str) == sorted(values * 3, key=str)


# ------------------------------------------------------------------------------------------------ metadata


def with_metadata(table: pa.Table, metadata: dict[str, str]) -> bytes:
    return parquet_bytes(table.replace_schema_metadata(metadata))


async def test_schema_metadata_every_input_shares_is_kept_and_the_rest_dropped(
    s3_endpoint: Any, s3_client: Any, bucket: str
) -> None:
    """A key every input carries with one value describes the output too; a key whose value differs between the
    inputs (or that some lack) describes some of its rows only, and is dropped; pyarrow and the raw footer agree."""
    for i in range(3):
        metadata = {"owner": "team-a", "version": "3", "batch": str(i)}
        if i:
            metadata["only-some"] = "x"
        put(s3_client, bucket, f"part-{i}.parquet", with_metadata(pa.table({"id": [i]}), metadata))
    report = await compact(s3_endpoint.url, bucket)
    assert report.status == "ok", report.to_text()
    output = only_output(s3_client, bucket)
    assert output.schema_arrow.metadata == {b"owner": b"team-a", b"version": b"3"}
    raw = output.metadata.metadata
    assert raw[b"owner"] == b"team-a" and raw[b"version"] == b"3" and b"batch" not in raw


async def test_pandas_metadata_is_kept_and_a_range_index_spans_the_output(
    s3_endpoint: Any, s3_client: Any, bucket: str
) -> None:
    """pandas writes each file's RangeIndex bounds into its metadata, so the files of one writer differ only
    there: the output keeps the rest (a named index stays the index, a tz stays) and its RangeIndex counts its own
    rows, as pandas' concat with ignore_index and pyarrow.dataset give."""
    import pandas as pd

    for i in range(3):
        frame = pd.DataFrame(
            {"a": [i, i + 1], "when": pd.to_datetime(["2020-01-01", "2020-01-02"]).tz_localize("Europe/Paris")},
            index=pd.Index([10 * i, 10 * i + 1], name="myidx"),
        )
        put(s3_client, bucket, f"named-{i}.parquet", parquet_bytes(pa.Table.from_pandas(frame)))
    report = await compact(s3_endpoint.url, bucket)
    assert report.status == "ok", report.to_text()
    frame = only_output(s3_client, bucket).read().to_pandas()
    assert frame.index.name == "myidx" and sorted(frame.index) == [0, 1, 10, 11, 20, 21]
    assert list(frame.columns) == ["a", "when"] and str(frame["when"].dt.tz) == "Europe/Paris"

    for key in data_keys(s3_client, bucket, PREFIX):
        s3_client.delete_object(Bucket=bucket, Key=key)
    for i in range(3):
        frame = pd.DataFrame({"a": [i, i], "b": ["x", "y"]}, index=pd.RangeIndex(0, 2, name="row"))
        put(s3_client, bucket, f"range-{i}.parquet", parquet_bytes(pa.Table.from_pandas(frame)))
    report = await compact(s3_endpoint.url, bucket)
    assert report.status == "ok", report.to_text()
    output = only_output(s3_client, bucket)
    pandas = json.loads(output.schema_arrow.metadata[b"pandas"])
    assert pandas["index_columns"] == [{"kind": "range", "name": "row", "start": 0, "stop": 6, "step": 1}]
    frame = output.read().to_pandas()
    assert isinstance(frame.index, pd.RangeIndex) and frame.index.name == "row" and len(frame.index) == 6


# ------------------------------------------------------------------------------------------------ names and case


async def test_columns_whose_names_differ_only_in_case_are_never_mixed(
    s3_endpoint: Any, s3_client: Any, bucket: str
) -> None:
    """Spark matches names ignoring case (by default): an output holding ``ID`` and ``id`` is one it refuses
    (COLUMN_ALREADY_EXISTS), so such files are a schema conflict: each spelling is compacted apart, and a file
    left alone for it is reported with the clash."""
    for i in range(3):
        put(s3_client, bucket, f"top/b-{i}.parquet", parquet_bytes(pa.table({"id": [10 + i]})))
        put(s3_client, bucket, f"nested/a-{i}.parquet", parquet_bytes(pa.table({"s": [{"A": i}]})))
        put(s3_client, bucket, f"nested/b-{i}.parquet", parquet_bytes(pa.table({"s": [{"a": 10 + i}]})))
    put(s3_client, bucket, "top/a-0.parquet", parquet_bytes(pa.table({"ID": [0]})))
    report = await compact(s3_endpoint.url, bucket)
    assert report.status == "ok", report.to_text()
    files = read_files(s3_client, bucket)
    assert sorted(name for name in files if "/part-c-" not in name) == ["top/a-0.parquet"], sorted(files)
    schemas = sorted(f.schema_arrow.remove_metadata().to_string() for f in files.values())
    nested = ["s: struct<A: int64>\n  child 0, A: int64", "s: struct<a: int64>\n  child 0, a: int64"]
    assert schemas == ["ID: int64", "id: int64", *nested]
    (skipped,) = report.skipped_groups
    assert "columns 'ID' and 'id' differ only in case" in skipped.reason, skipped.reason


async def test_a_file_holding_two_columns_differing_only_in_case_is_left_alone_with_its_reason(
    s3_endpoint: Any, s3_client: Any, bucket: str
) -> None:
    twins = pa.table({"ID": [1], "id": [2]})
    put(s3_client, bucket, "a-twins.parquet", parquet_bytes(twins))
    for i in range(3):
        put(s3_client, bucket, f"part-{i}.parquet", parquet_bytes(pa.table({"id": [10 + i]})))
    report = await compact(s3_endpoint.url, bucket)
    assert report.status == "ok", report.to_text()
    assert f"{PREFIX}a-twins.parquet" in data_keys(s3_client, bucket, PREFIX)
    (skipped,) = [f for f in report.skipped_files if f.key.endswith("a-twins.parquet")]
    assert skipped.kind == UNREADABLE and "'ID' and 'id'" in skipped.reason, skipped.reason
    assert len(data_keys(s3_client, bucket, PREFIX)) == 2


# ------------------------------------------------------------------------------------------------ Spark's keys


def spark_keyed(value: int, keys: dict[str, str]) -> bytes:
    return with_metadata(pa.table({"d": pa.array([value], pa.date32())}), keys)


async def test_files_whose_spark_keys_differ_are_never_mixed_and_an_output_keeps_them(
    s3_endpoint: Any, s3_client: Any, bucket: str
) -> None:
    """``org.apache.spark.*`` keys change what Spark reads (a LEGACY-rebased date is shifted back by them): an
    output holds only files whose keys are equal, and carries them unchanged."""
    legacy = {
        "org.apache.spark.version": "4.3.0",
        "org.apache.spark.legacyDateTime": "",
        "org.apache.spark.timeZone": "UTC",
    }
    corrected = {"org.apache.spark.version": "4.3.0"}
    for i in range(3):
        put(s3_client, bucket, f"a-{i}.parquet", spark_keyed(i, legacy))
        put(s3_client, bucket, f"b-{i}.parquet", spark_keyed(i, corrected))
    put(s3_client, bucket, "c-0.parquet", spark_keyed(9, {**corrected, "org.apache.spark.legacyINT96": ""}))
    report = await compact(s3_endpoint.url, bucket)
    assert report.status == "ok", report.to_text()
    files = read_files(s3_client, bucket)
    assert len(files) == 3 and "c-0.parquet" in files, sorted(files)
    files.pop("c-0.parquet")
    kept = [
        {k: v for k, v in f.metadata.metadata.items() if k.startswith(b"org.apache.spark.")} for f in files.values()
    ]
    expected = [{k.encode(): v.encode() for k, v in keys.items()} for keys in (legacy, corrected)]
    assert sorted(kept, key=repr) == sorted(expected, key=repr)
    (skipped,) = report.skipped_groups
    assert "'org.apache.spark.legacyINT96' is absent in" in skipped.reason, skipped.reason
