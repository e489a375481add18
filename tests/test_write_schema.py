"""The table's schema is part of the table: an append of another schema or another partitioning is refused before
any upload, naming both schemas and the fix; mergeSchema allows new nullable columns and missing ones; an overwrite
may replace the schema; and a random sequence of appends, overwrites and refused writes leaves a table every
reader reads after each step."""

from __future__ import annotations

import random
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_compact_support import FAST_POLICY, data_keys, make_client
from test_write_support import uploads_left

from s3io.api import read_parquet_async
from s3io.errors import SchemaMismatch
from s3io.table import layout
from s3io.write import WriteOptions, WriteSpec, check_append, write_parquet_async
from s3io.write.schema_check import read_table_shape

pytestmark = pytest.mark.timeout(180)
PREFIX = "schema/"


async def write(endpoint: str, bucket: str, table: pa.Table, **options: Any) -> Any:
    options = {"grace_period": 0.0, "lease_ttl": 3.0, "clock_skew": 0.0, **options}
    return await write_parquet_async(
        table, f"s3://{bucket}/{PREFIX}", endpoint_url=endpoint, policy=FAST_POLICY, **options
    )


async def read(endpoint: str, bucket: str) -> pa.Table:
    return await read_parquet_async(f"s3://{bucket}/{PREFIX}", endpoint_url=endpoint, policy=FAST_POLICY)


def events(start: int, count: int, **extra: pa.Array) -> pa.Table:
    ids = list(range(start, start + count))
    return pa.table({"id": ids, "day": [f"2024-06-0{1 + i % 2}" for i in ids], **extra})


async def test_an_append_of_another_schema_is_refused_before_any_upload(
    s3_endpoint: Any, s3_client: Any, bucket: str
) -> None:
    await write(s3_endpoint.url, bucket, events(0, 10))
    keys = data_keys(s3_client, bucket, PREFIX)
    other = pa.table({"id": [str(i) for i in range(5)], "day": ["2024-06-01"] * 5})
    with pytest.raises(SchemaMismatch) as refused:
        await write(s3_endpoint.url, bucket, other)
    message = str(refused.value)
    assert "column 'id' is string here, long in the table" in message
    assert "The table's columns (as in s3://" in message and "id long, day string" in message
    assert "this append's: id string, day string" in message and "mode='overwrite'" in message
    assert data_keys(s3_client, bucket, PREFIX) == keys and uploads_left(s3_client, bucket) == []
    assert (await read(s3_endpoint.url, bucket)).num_rows == 10  # the table still reads


async def test_an_unpartitioned_append_into_a_partitioned_table_is_refused_naming_the_partition_columns(
    s3_endpoint: Any, s3_client: Any, bucket: str
) -> None:
    await write(s3_endpoint.url, bucket, events(0, 10), partition_by="day")
    with pytest.raises(SchemaMismatch, match=r"is partitioned by day, this append by nothing.*partitionBy', 'day'"):
        await write(s3_endpoint.url, bucket, events(10, 10))
    with pytest.raises(SchemaMismatch, match=r"is partitioned by day, this append by id"):
        await write(s3_endpoint.url, bucket, events(10, 10), partition_by="id")
    assert uploads_left(s3_client, bucket) == []
    await write(s3_endpoint.url, bucket, events(10, 10), partition_by="DAY")  # names match as Spark's do
    assert sorted((await read(s3_endpoint.url, bucket)).column("id").to_pylist()) == list(range(20))


async def test_merge_schema_allows_a_new_nullable_column_and_a_missing_one(
    s3_endpoint: Any, s3_client: Any, bucket: str
) -> None:
    await write(s3_endpoint.url, bucket, events(0, 4))
    wider = events(4, 4, note=pa.array(["a", None, "c", "d"]))
    with pytest.raises(SchemaMismatch, match=r"column 'note' is new.*mergeSchema=true"):
        await write(s3_endpoint.url, bucket, wider)
    await write(s3_endpoint.url, bucket, wider, merge_schema=True)
    narrower = pa.table({"id": [8, 9], "note": ["x", "y"]})  # no "day"
    with pytest.raises(SchemaMismatch, match=r"column 'day' is missing"):
        await write(s3_endpoint.url, bucket, narrower)
    await write(s3_endpoint.url, bucket, narrower, mergeSchema="true")  # the Spark option's spelling too
    table = (await read(s3_endpoint.url, bucket)).sort_by("id")
    assert table.column("id").to_pylist() == list(range(10))
    assert table.column("note").to_pylist() == [None] * 4 + ["a", None, "c", "d", "x", "y"]
    assert table.column("day").to_pylist()[8:] == [None, None]
    required = pa.table({"id": pa.array([10], pa.int64()), "extra": pa.array([1], pa.int64())})
    required = required.cast(pa.schema([("id", pa.int64()), pa.field("extra", pa.int64(), nullable=False)]))
    with pytest.raises(SchemaMismatch, match=r"new column 'extra' is not nullable"):
        await write(s3_endpoint.url, bucket, required, merge_schema=True)
    with pytest.raises(SchemaMismatch, match=r"column 'id' is string here, long in the table"):
        await write(s3_endpoint.url, bucket, pa.table({"id": ["1"]}), merge_schema=True)  # never a type change
    assert uploads_left(s3_client, bucket) == []


async def test_an_overwrite_replaces_the_schema_and_a_dynamic_overwrite_is_checked(
    s3_endpoint: Any, s3_client: Any, bucket: str
) -> None:
    await write(s3_endpoint.url, bucket, events(0, 10), partition_by="day")
    other = pa.table({"id": ["a", "b"], "day": ["2024-06-01", "2024-06-01"]})
    with pytest.raises(SchemaMismatch, match="column 'id' is string here, long in the table"):
        await write(
            s3_endpoint.url, bucket, other, partition_by="day", mode="overwrite", partition_overwrite_mode="dynamic"
        )
    await write(s3_endpoint.url, bucket, other, mode="overwrite")  # a static overwrite: the new table's schema
    table = await read(s3_endpoint.url, bucket)
    assert sorted(table.column("id").to_pylist()) == ["a", "b"]
    await write(s3_endpoint.url, bucket, pa.table({"id": ["c"], "day": ["x"]}))  # and appends follow it
    assert uploads_left(s3_client, bucket) == []


async def test_a_table_written_by_another_writer_is_checked_from_its_footers_and_directories(
    s3_endpoint: Any, s3_client: Any, bucket: str
) -> None:
    for day in ("2024-06-01", "2024-06-02"):
        sink = pa.BufferOutputStream()
        pq.write_table(pa.table({"id": pa.array([1, 2], pa.int32()), "v": [0.5, 1.5]}), sink)
        s3_client.put_object(Bucket=bucket, Key=f"{PREFIX}day={day}/part-0.parquet", Body=sink.getvalue().to_pybytes())
    async with make_client(s3_endpoint.url) as client:
        shape = await read_table_shape(client, bucket, PREFIX)
        assert shape is not None and shape.partition_columns == ("day",)
        assert shape.data_schema.names == ["id", "v"]
        spec = WriteSpec(bucket, PREFIX, layout.new_job_id(), pa.schema([("id", pa.int32()), ("v", pa.string())]))
        with pytest.raises(SchemaMismatch, match=r"is partitioned by day, this append by nothing"):
            await check_append(client, spec)
        partitioned = WriteOptions(partition_by=("day",))
        with pytest.raises(SchemaMismatch, match=r"column 'v' is string here, double in the table"):
            await check_append(client, WriteSpec(bucket, PREFIX, spec.job_id, spec.schema, partitioned))
        fitting = pa.schema([("id", pa.int32()), ("v", pa.float64()), ("day", pa.string())])
        await check_append(client, WriteSpec(bucket, PREFIX, spec.job_id, fitting, partitioned))


async def test_random_appends_overwrites_and_refused_writes_leave_a_table_every_reader_reads(
    s3_endpoint: Any, s3_client: Any, bucket: str
) -> None:
    shapes = {
        "long": lambda start: events(start, 3),
        "text": lambda start: pa.table({"id": [str(i) for i in range(start, start + 3)], "day": ["2024-06-01"] * 3}),
        "wider": lambda start: events(start, 3, note=pa.array(["n"] * 3)),
    }
    rng = random.Random(38)
    expected: list[Any] = []
    current: str | None = None
    partitioned: bool | None = None
    start = 0
    for _ in range(14):
        shape, by_day = rng.choice(list(shapes)), rng.random() < 0.5
        mode = rng.choice(["append", "append", "overwrite"])
        table = shapes[shape](start)
        start += 3
        fits = mode == "overwrite" or current is None or (by_day == partitioned and shape == current)
        try:
            await write(s3_endpoint.url, bucket, table, mode=mode, partition_by="day" if by_day else ())
        except SchemaMismatch:
            assert not fits, (shape, current, by_day, partitioned, mode)
        else:
            assert fits, (shape, current, by_day, partitioned, mode)
            expected = table.column("id").to_pylist() + (expected if mode == "append" else [])
            current, partitioned = shape, by_day
        assert uploads_left(s3_client, bucket) == []
        got = await read(s3_endpoint.url, bucket)  # the journal-aware reader
        assert sorted(got.column("id").to_pylist(), key=str) == sorted(expected, key=str)
        keys = data_keys(s3_client, bucket, PREFIX)  # and a plain reader of every data file
        assert len({key.count("=") for key in keys}) <= 1, keys  # one partition layout, as Spark needs
        plain = [i for key in keys for i in _ids(s3_client.get_object(Bucket=bucket, Key=key)["Body"].read())]
        assert sorted(plain, key=str) == sorted(expected, key=str)


def _ids(body: bytes) -> list[Any]:
    return pq.read_table(pa.BufferReader(body), columns=["id"]).column("id").to_pylist()
