"""ParquetReader against moto: results equal pyarrow's, requests and bytes counted, pruning, errors, memory."""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from support.consumers import cancel_after_one_item

import s3io
from s3io import CorruptFile, InvalidConfig, NotFound, ObjectInfo, Policy, S3Client, SchemaMismatch
from s3io.dataset import FilePiece, ParquetReader
from s3io.engine import EngineConfig, RangeEngine
from s3io.parquet.chunks import chunk_ranges
from s3io.parquet.footer import TAIL_BYTES
from testbed.faultproxy import FaultProxy, FaultRule, Latency

KiB = 1024
MiB = 1024 * KiB
POLICY = Policy(max_attempts=4, backoff_base=0.01, backoff_cap=0.2)
# Large-file path for files above 64 KiB, so "large" test files stay small enough for moto.
LARGE = EngineConfig(whole_object_threshold=64 * KiB, part_size=256 * KiB, coalesce_gap=0)


def make_table(rows: int, start: int = 0, seed: int = 0) -> pa.Table:
    """Several column types, nulls and a list column; ``id`` ascends from ``start`` (row groups sort by it)."""
    ids = pa.array(range(start, start + rows), pa.int64())
    return pa.table(
        {
            "id": ids,
            "x": pc.multiply(pc.cast(ids, pa.float64()), 0.5 + seed),
            "s": pa.array([f"row-{i}-{seed}" * (1 + i % 3) for i in range(start, start + rows)]),
            "flag": pa.array([i % 3 == 0 if i % 7 else None for i in range(start, start + rows)]),
            "tags": pa.array([[i % 5, i % 11] for i in range(start, start + rows)], pa.list_(pa.int32())),
        }
    )


def parquet_bytes(table: pa.Table, **kwargs: Any) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink, **kwargs)
    return sink.getvalue()


def put(s3_client: Any, bucket: str, key: str, data: bytes) -> ObjectInfo:
    response = s3_client.put_object(Bucket=bucket, Key=key, Body=data)
    return ObjectInfo(bucket, key, len(data), response["ETag"])


def checksum(table: pa.Table) -> int:
    """Order-sensitive fingerprint of a table's values."""
    return hash(tuple(tuple(column.to_pylist()) for column in table.columns).__repr__())


def local_read(blobs: Sequence[bytes], columns: Sequence[str] | None = None) -> pa.Table:
    return pa.concat_tables(pq.read_table(io.BytesIO(blob), columns=columns) for blob in blobs)


@contextlib.asynccontextmanager
async def open_reader(
    url: str, config: EngineConfig | None = None, policy: Policy = POLICY, **kwargs: Any
) -> AsyncIterator[ParquetReader]:
    async with S3Client(policy, endpoint_url=url) as client:
        yield ParquetReader(RangeEngine(client, config), **kwargs)


async def collect(reader: ParquetReader, pieces: Sequence[FilePiece], **kwargs: Any) -> pa.Table:
    schema = kwargs.pop("schema")
    out_schema = pa.schema(list(schema) + list(kwargs.get("partition_schema") or []))
    batches = [batch async for batch in reader.iter_batches(pieces, schema=schema, **kwargs)]
    for batch in batches:
        assert batch.schema.equals(out_schema), (batch.schema, out_schema)
    return pa.Table.from_batches(batches, schema=out_schema)


def gets(reader: ParquetReader) -> int:
    return reader.engine.client.stats().requests_for("get")


# ---------------------------------------------------------------------------------------------- correctness


@pytest.mark.timeout(60)
async def test_small_files_equal_pyarrow_with_one_get_per_file(s3_endpoint: Any, bucket: str, s3_client: Any) -> None:
    blobs = [parquet_bytes(make_table(200 + 37 * i, start=1000 * i, seed=i % 3)) for i in range(40)]
    objs = [put(s3_client, bucket, f"small/part-{i:03d}.parquet", blob) for i, blob in enumerate(blobs)]
    expected = local_read(blobs)
    async with open_reader(s3_endpoint.url) as reader:
        schema = await reader.schema(objs, merge=True)
        table = await collect(reader, [FilePiece(obj) for obj in objs], schema=schema)
        stats = reader.stats()
        assert gets(reader) == len(objs)  # footer and data from the same GET, for every file
    assert table.schema.equals(expected.schema)
    assert table.num_rows == expected.num_rows and table.equals(expected)
    assert checksum(table) == checksum(expected)
    assert stats.files == 40 and stats.footers_fetched == 40 and stats.kept_object_hits == 40
    assert stats.requests == 40 and stats.bytes_fetched == sum(len(b) for b in blobs)

    async with open_reader(s3_endpoint.url) as reader:  # no footer read first: still one GET per file
        table = await collect(reader, [FilePiece(obj) for obj in objs], schema=schema)
        assert gets(reader) == len(objs) and reader.stats().requests == len(objs)
    assert table.equals(expected)


@pytest.mark.timeout(60)
async def test_large_multi_row_group_files_equal_pyarrow(s3_endpoint: Any, bucket: str, s3_client: Any) -> None:
    blobs = [parquet_bytes(make_table(60_000, start=100_000 * i, seed=i), row_group_size=7_000) for i in range(3)]
    assert all(len(blob) > 4 * LARGE.whole_object_threshold for blob in blobs)
    objs = [put(s3_client, bucket, f"large/{i}.parquet", blob) for i, blob in enumerate(blobs)]
    expected = local_read(blobs)
    async with open_reader(s3_endpoint.url, LARGE) as reader:
        schema = await reader.schema(objs, merge=True)
        table = await collect(reader, [FilePiece(obj) for obj in objs], schema=schema, batch_size=4096)
        stats = reader.stats()
    assert table.equals(expected) and checksum(table) == checksum(expected)
    assert stats.footers_fetched == 3 and stats.footer_rereads == 0 and stats.row_groups_read == 3 * 9
    assert stats.bytes_fetched <= sum(len(b) for b in blobs) + 3 * TAIL_BYTES


@pytest.mark.timeout(60)
async def test_batches_come_in_piece_order_whatever_the_completion_order(
    s3_endpoint: Any, bucket: str, s3_client: Any, fault_proxy: FaultProxy
) -> None:
    blobs = [parquet_bytes(make_table(50, start=100 * i)) for i in range(12)]
    objs = [put(s3_client, bucket, f"order/{i:02d}.parquet", blob) for i, blob in enumerate(blobs)]
    # Early files answer last: completion order is the reverse of piece order.
    for i in range(6):
        fault_proxy.add_rule(FaultRule(fault=Latency(0.3 - 0.05 * i), method="GET", path=rf"order/{i:02d}\."))
    async with open_reader(fault_proxy.url) as reader:
        schema = await reader.schema(objs[:1])
        reader.clear_cache()
        table = await collect(reader, [FilePiece(obj) for obj in objs], schema=schema)
    assert table.column("id").to_pylist() == [100 * i + j for i in range(12) for j in range(50)]


# ---------------------------------------------------------------------------------------------- pruning


@pytest.mark.timeout(60)
async def test_column_pruning_fetches_only_the_chunks_of_selected_columns(
    s3_endpoint: Any, bucket: str, s3_client: Any
) -> None:
    blob = parquet_bytes(make_table(60_000), row_group_size=10_000)
    obj = put(s3_client, bucket, "cols/data.parquet", blob)
    md = pq.read_metadata(io.BytesIO(blob))
    id_bytes = sum(end - start for start, end in chunk_ranges(md, range(md.num_row_groups), ["id"], len(blob)))

    async def measure(columns: list[str]) -> tuple[pa.Table, int, int]:
        async with open_reader(s3_endpoint.url, LARGE) as reader:
            full = await reader.schema([obj])
            await reader.metadata(obj)  # footer first, so the counts below are the data reads alone
            before, requests = reader.stats().bytes_fetched, gets(reader)
            schema = pa.schema([full.field(c) for c in columns])
            table = await collect(reader, [FilePiece(obj)], schema=schema)
            return table, reader.stats().bytes_fetched - before, gets(reader) - requests

    one, one_bytes, one_gets = await measure(["id"])
    everything, all_bytes, all_gets = await measure(["id", "x", "s", "flag", "tags"])
    assert one.equals(pq.read_table(io.BytesIO(blob), columns=["id"]))
    assert everything.equals(pq.read_table(io.BytesIO(blob)))
    assert one_bytes == id_bytes  # exactly the column chunks of "id", nothing else
    assert all_bytes == sum(end - start for start, end in chunk_ranges(md, range(md.num_row_groups), None, len(blob)))
    assert all_bytes > 3 * one_bytes
    assert one_gets == md.num_row_groups  # one chunk per row group; coalesce_gap 0 keeps them apart
    assert all_gets == -(-all_bytes // LARGE.part_size)  # adjacent chunks coalesced, then split into parts
    print(f"column pruning: id only {one_bytes} B in {one_gets} GETs; all columns {all_bytes} B in {all_gets} GETs")


@pytest.mark.timeout(60)
async def test_row_group_pruning_by_statistics_skips_their_bytes(s3_endpoint: Any, bucket: str, s3_client: Any) -> None:
    blob = parquet_bytes(make_table(60_000), row_group_size=10_000)  # row group k holds ids [10000k, 10000k+10000)
    obj = put(s3_client, bucket, "rg/data.parquet", blob)
    md = pq.read_metadata(io.BytesIO(blob))
    async with open_reader(s3_endpoint.url, LARGE) as reader:
        schema = await reader.schema([obj])
        await reader.metadata(obj)
        before, requests = reader.stats().bytes_fetched, gets(reader)
        predicates = [("id", ">=", 45_000), ("id", "<", 52_000)]
        table = await collect(reader, [FilePiece(obj)], schema=schema, predicates=predicates)
        pruned_bytes, pruned_gets = reader.stats().bytes_fetched - before, gets(reader) - requests
        stats = reader.stats()
        unfiltered = await collect(reader, [FilePiece(obj)], schema=schema, predicates=predicates, exact_filter=False)
    assert table.column("id").to_pylist() == list(range(45_000, 52_000))
    assert stats.row_groups_pruned == 4 and stats.row_groups_read == 2
    surviving = sum(end - start for start, end in chunk_ranges(md, [4, 5], None, len(blob)))
    assert pruned_bytes == surviving and surviving < len(blob) / 2
    assert unfiltered.column("id").to_pylist() == list(range(40_000, 60_000))  # row groups 4 and 5, unfiltered
    print(f"row-group pruning: {pruned_bytes} of {len(blob)} B in {pruned_gets} GETs")


@pytest.mark.timeout(60)
async def test_pruned_small_file_with_cached_footer_costs_no_get(s3_endpoint: Any, bucket: str, s3_client: Any) -> None:
    objs = [put(s3_client, bucket, f"p/{i}.parquet", parquet_bytes(make_table(100, start=1000 * i))) for i in range(4)]
    async with open_reader(s3_endpoint.url, object_cache_bytes=0) as reader:
        schema = await reader.schema(objs, merge=True)
        requests = gets(reader)
        table = await collect(reader, [FilePiece(obj) for obj in objs], schema=schema, predicates=[("id", "<", 50)])
        assert gets(reader) - requests == 1  # files 1-3 are ruled out by their cached footers
    assert table.column("id").to_pylist() == list(range(50))


@pytest.mark.timeout(60)
async def test_explicit_row_groups_and_partition_values(s3_endpoint: Any, bucket: str, s3_client: Any) -> None:
    blob = parquet_bytes(make_table(6_000), row_group_size=1_000)
    obj = put(s3_client, bucket, "part/date=2024-01-02/data.parquet", blob)
    other = put(s3_client, bucket, "part/date=2024-01-03/data.parquet", blob)
    partition_schema = pa.schema([("date", pa.date32()), ("region", pa.string())])
    pieces = [
        FilePiece(obj, row_groups=(4, 1), partition_values=("2024-01-02", "eu")),
        FilePiece(other, partition_values=("2024-01-03", None)),
    ]
    async with open_reader(s3_endpoint.url, LARGE) as reader:
        schema = pa.schema([("id", pa.int64()), ("s", pa.string())])
        table = await collect(reader, pieces[:1], schema=schema, partition_schema=partition_schema)
        assert table.column("id").to_pylist() == list(range(4_000, 5_000)) + list(range(1_000, 2_000))
        assert set(table.column("date").to_pylist()) == {pa.scalar("2024-01-02").cast(pa.date32()).as_py()}
        assert table.column("region").to_pylist() == ["eu"] * 2_000

    async with open_reader(s3_endpoint.url, LARGE) as reader:
        predicates = [("region", "is null"), ("id", "<", 10)]
        table = await collect(reader, pieces, schema=schema, partition_schema=partition_schema, predicates=predicates)
        assert table.column("id").to_pylist() == list(range(10))
        assert table.column("region").null_count == 10
        assert reader.stats().files_pruned == 1  # the "eu" piece: not even its footer was needed
        assert gets(reader) == 3  # footer of the other file + the "id" and "s" chunks of its first row group


@pytest.mark.timeout(60)
async def test_zero_data_columns_count_rows_without_data_gets(s3_endpoint: Any, bucket: str, s3_client: Any) -> None:
    blob = parquet_bytes(make_table(5_000), row_group_size=1_000)
    obj = put(s3_client, bucket, "count/data.parquet", blob)
    async with open_reader(s3_endpoint.url, LARGE) as reader:
        table = await collect(reader, [FilePiece(obj)], schema=pa.schema([]))
        assert table.num_rows == 5_000 and gets(reader) == 1  # the footer alone


# ---------------------------------------------------------------------------------------------- footers


@pytest.mark.timeout(60)
async def test_footer_larger_than_the_tail_costs_exactly_one_more_get(
    s3_endpoint: Any, bucket: str, s3_client: Any
) -> None:
    wide = pa.table({f"column_with_a_long_name_{i:04d}": pa.array(range(20), pa.int64()) for i in range(600)})
    blob = parquet_bytes(wide, row_group_size=5)
    md = pq.read_metadata(io.BytesIO(blob))
    assert md.serialized_size > TAIL_BYTES
    obj = put(s3_client, bucket, "wide.parquet", blob)
    config = EngineConfig(whole_object_threshold=0)
    async with open_reader(s3_endpoint.url, config) as reader:
        results = await asyncio.gather(*(reader.metadata(obj) for _ in range(5)))  # single-flight
        assert all(r.equals(md) for r in results)
        assert gets(reader) == 2 and reader.stats().footer_rereads == 1
        assert (await reader.metadata(obj)).equals(md) and gets(reader) == 2  # cached
        schema = pa.schema([wide.schema.field(3)])
        table = await collect(reader, [FilePiece(obj)], schema=schema)
    assert table.equals(wide.select([3]))


# ---------------------------------------------------------------------------------------------- schemas


@pytest.mark.timeout(60)
async def test_schema_unification_reads_missing_columns_as_nulls(s3_endpoint: Any, bucket: str, s3_client: Any) -> None:
    first = pa.table({"id": pa.array([1, 2], pa.int32()), "a": ["x", "y"]})
    second = pa.table({"id": pa.array([3], pa.int64()), "b": [1.5]})
    objs = [
        put(s3_client, bucket, "u/1.parquet", parquet_bytes(first)),
        put(s3_client, bucket, "u/2.parquet", parquet_bytes(second)),
    ]
    async with open_reader(s3_endpoint.url) as reader:
        schema = await reader.schema(objs, merge=True)
        assert schema == pa.schema([("id", pa.int64()), ("a", pa.string()), ("b", pa.float64())])
        table = await collect(reader, [FilePiece(obj) for obj in objs], schema=schema)
        assert (await reader.schema(objs)).names == ["id", "a"]
    assert table.to_pydict() == {"id": [1, 2, 3], "a": ["x", "y", None], "b": [None, None, 1.5]}


@pytest.mark.timeout(60)
async def test_incompatible_types_raise_schema_mismatch_naming_both_files_and_column(
    s3_endpoint: Any, bucket: str, s3_client: Any
) -> None:
    objs = [
        put(s3_client, bucket, "m/1.parquet", parquet_bytes(pa.table({"id": [1], "v": [1]}))),
        put(s3_client, bucket, "m/2.parquet", parquet_bytes(pa.table({"id": [2], "v": ["two"]}))),
    ]
    async with open_reader(s3_endpoint.url) as reader:
        with pytest.raises(SchemaMismatch) as raised:
            await reader.schema(objs, merge=True)
    message = str(raised.value)
    assert f"s3://{bucket}/m/1.parquet" in message and f"s3://{bucket}/m/2.parquet" in message and "'v'" in message


# ---------------------------------------------------------------------------------------------- errors


@pytest.mark.timeout(60)
async def test_non_parquet_file_raises_corrupt_file_naming_it_or_is_skipped(
    s3_endpoint: Any, bucket: str, s3_client: Any, caplog: pytest.LogCaptureFixture
) -> None:
    good = [put(s3_client, bucket, f"c/{i}.parquet", parquet_bytes(make_table(10, start=10 * i))) for i in range(3)]
    bad = put(s3_client, bucket, "c/notes.txt", b"this is not a parquet file, just text" * 10)
    pieces = [FilePiece(good[0]), FilePiece(bad), FilePiece(good[1]), FilePiece(good[2])]
    schema = pa.schema([("id", pa.int64())])
    async with open_reader(s3_endpoint.url) as reader:
        seen = []
        with pytest.raises(CorruptFile) as raised:
            async for batch in reader.iter_batches(pieces, schema=schema):
                seen.extend(batch.column("id").to_pylist())
        assert seen == list(range(10))  # batches before the bad file came first
        assert f"s3://{bucket}/c/notes.txt" in str(raised.value) and "not a parquet file" in str(raised.value)
        with caplog.at_level(logging.WARNING, logger="s3io.dataset"):
            table = await collect(reader, pieces, schema=schema, ignore_corrupt=True)
        assert table.column("id").to_pylist() == list(range(30))
        assert reader.stats().files_skipped == 1
        objs = [bad, *good]
        with pytest.raises(CorruptFile):
            await reader.schema(objs, merge=True)
        merged = await reader.schema(objs, merge=True, ignore_corrupt=True)
        assert merged.names == ["id", "x", "s", "flag", "tags"]
        assert (await reader.schema(objs, ignore_corrupt=True)).names[0] == "id"  # the first readable file's
    assert any("c/notes.txt" in record.getMessage() for record in caplog.records)


@pytest.mark.timeout(60)
async def test_corrupt_page_in_a_large_file_is_never_partly_yielded(
    s3_endpoint: Any, bucket: str, s3_client: Any
) -> None:
    blob = bytearray(parquet_bytes(make_table(8_000), row_group_size=1_000, compression="snappy"))
    md = pq.read_metadata(io.BytesIO(bytes(blob)))
    start, end = chunk_ranges(md, [6], ["s"], len(blob))[0]
    blob[start + 20 : end - 4] = b"\xff" * (end - 24 - start)  # row group 6's "s" chunk: garbage pages
    obj = put(s3_client, bucket, "bad/data.parquet", bytes(blob))
    fine = put(s3_client, bucket, "bad/fine.parquet", parquet_bytes(make_table(5, start=-5)))
    schema = pa.schema([("id", pa.int64()), ("s", pa.string())])
    small_units = LARGE.replace(memory_budget=256 * KiB, part_size=64 * KiB)  # the file spans several read units
    async with open_reader(s3_endpoint.url, small_units) as reader:
        with pytest.raises(CorruptFile) as raised:
            await collect(reader, [FilePiece(obj)], schema=schema)
        assert f"s3://{bucket}/bad/data.parquet" in str(raised.value) and "row group 6" in str(raised.value)
        table = await collect(reader, [FilePiece(fine), FilePiece(obj), FilePiece(fine)], schema=schema,
                              ignore_corrupt=True)  # fmt: skip
    assert table.column("id").to_pylist() == list(range(-5, 0)) * 2


@pytest.mark.timeout(60)
async def test_missing_object_raises_not_found_or_is_skipped(s3_endpoint: Any, bucket: str, s3_client: Any) -> None:
    objs = [put(s3_client, bucket, f"gone/{i}.parquet", parquet_bytes(make_table(10, start=10 * i))) for i in range(3)]
    large = put(s3_client, bucket, "gone/large.parquet", parquet_bytes(make_table(20_000), row_group_size=5_000))
    s3_client.delete_object(Bucket=bucket, Key="gone/1.parquet")
    s3_client.delete_object(Bucket=bucket, Key="gone/large.parquet")
    schema = pa.schema([("id", pa.int64())])
    pieces = [FilePiece(objs[0]), FilePiece(objs[1]), FilePiece(large), FilePiece(objs[2])]
    async with open_reader(s3_endpoint.url, LARGE) as reader:
        with pytest.raises(NotFound) as raised:
            await collect(reader, pieces, schema=schema)
        assert f"s3://{bucket}/gone/1.parquet" in str(raised.value)
        table = await collect(reader, pieces, schema=schema, ignore_missing=True)
        assert table.column("id").to_pylist() == list(range(10)) + list(range(20, 30))
        assert reader.stats().files_skipped == 2


@pytest.mark.timeout(30)
async def test_bad_arguments_raise_invalid_config_at_once(s3_endpoint: Any) -> None:
    async with open_reader(s3_endpoint.url) as reader:
        obj = ObjectInfo("b", "k", 10)
        schema = pa.schema([("id", pa.int64())])
        with pytest.raises(InvalidConfig, match="not in the schema; columns: id"):
            reader.iter_batches([FilePiece(obj)], schema=schema, predicates=[("nope", "=", 1)])
        with pytest.raises(InvalidConfig, match="unknown predicate op"):
            reader.iter_batches([FilePiece(obj)], schema=schema, predicates=[("id", "~", 1)])
        with pytest.raises(InvalidConfig, match="repeated: id"):
            reader.iter_batches([FilePiece(obj)], schema=schema, partition_schema=schema)
        with pytest.raises(InvalidConfig, match="batch_size"):
            reader.iter_batches([FilePiece(obj)], schema=schema, batch_size=0)


# ---------------------------------------------------------------------------------------------- memory, cancel


@pytest.mark.timeout(60)
async def test_memory_budget_holds_with_a_slow_consumer(
    s3_endpoint: Any, bucket: str, s3_client: Any, fault_proxy: FaultProxy
) -> None:
    blobs = [parquet_bytes(make_table(2_000, start=10_000 * i)) for i in range(30)]
    objs = [put(s3_client, bucket, f"mem/{i:02d}.parquet", blob) for i, blob in enumerate(blobs)]
    size = max(len(b) for b in blobs)
    budget = 4 * size + size // 2  # room for four files at a time
    config = EngineConfig(memory_budget=budget)
    async with open_reader(fault_proxy.url, config) as reader:
        schema = pa.schema([("id", pa.int64())])
        ids = []
        batches = reader.iter_batches([FilePiece(obj) for obj in objs], schema=schema)
        async with contextlib.aclosing(batches):
            async for batch in batches:
                ids.extend(batch.column("id").to_pylist())
                if len(ids) == 2_000:  # stall after the first file: the reader must stop within its budget
                    await asyncio.sleep(0.5)
                    assert fault_proxy.count(method="GET") <= 1 + 4
                await asyncio.sleep(0.01)
        stats = reader.stats()
    assert ids == [10_000 * i + j for i in range(30) for j in range(2_000)]
    assert stats.peak_held <= budget and reader.engine.stats().peak_reserved <= budget
    assert fault_proxy.count(method="GET") == 30


@pytest.mark.timeout(60)
async def test_closing_the_iterator_early_cancels_the_reads_in_flight(
    s3_endpoint: Any, bucket: str, s3_client: Any, fault_proxy: FaultProxy
) -> None:
    objs = [put(s3_client, bucket, f"close/{i:02d}.parquet", parquet_bytes(make_table(20))) for i in range(40)]
    fault_proxy.add_rule(FaultRule(fault=Latency(0.3), method="GET", path=r"close/(0[1-9]|[1-3]\d)\."))
    async with open_reader(fault_proxy.url) as reader:
        batches = reader.iter_batches([FilePiece(obj) for obj in objs], schema=pa.schema([("id", pa.int64())]))
        first = await anext(batches)
        assert first.num_rows == 20
        await batches.aclose()
        sent = gets(reader)  # every GET the client started, the cancelled ones included
        assert reader._held.reserved == 0 and reader.engine.stats().reserved == 0
        assert reader.engine.client.stats().requests.get(("get", "cancelled"), 0) >= 1
        await asyncio.sleep(0.6)
        assert gets(reader) == sent and fault_proxy.count(method="GET") <= sent  # nothing new after the close
        leftover = [t for t in asyncio.all_tasks() if t is not asyncio.current_task() and not t.done()]
        assert not [t for t in leftover if "ParquetReader" in repr(t.get_coro())]


@pytest.mark.timeout(60)
async def test_objects_of_unknown_size_and_etag_are_read_with_a_suffix_get(
    s3_endpoint: Any, bucket: str, s3_client: Any
) -> None:
    blob = parquet_bytes(make_table(20_000), row_group_size=5_000)
    put(s3_client, bucket, "unknown/data.parquet", blob)
    obj = ObjectInfo(bucket, "unknown/data.parquet", -1)  # e.g. built from a path alone
    async with open_reader(s3_endpoint.url, LARGE) as reader:
        schema = await reader.schema([obj])
        table = await collect(reader, [FilePiece(obj)], schema=schema)
        assert gets(reader) == 1 + -(-len(blob) // LARGE.part_size)  # suffix GET for the footer, then the parts
    assert table.equals(pq.read_table(io.BytesIO(blob)))


@pytest.mark.timeout(60)
async def test_row_groups_decoded_ahead_in_threads_keep_order_and_stop_with_the_consumer(
    s3_endpoint: Any, bucket: str, s3_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import s3io.dataset.parquet_reader as reader_module

    monkeypatch.setattr(reader_module, "DECODE_IN_THREAD_BYTES", 0)  # every unit takes the threaded path
    blobs = [parquet_bytes(make_table(30_000, start=50_000 * i, seed=i), row_group_size=3_000) for i in range(2)]
    objs = [put(s3_client, bucket, f"ahead/{i}.parquet", blob) for i, blob in enumerate(blobs)]
    expected = local_read(blobs)
    async with open_reader(s3_endpoint.url, LARGE) as reader:
        schema = await reader.schema(objs, merge=True)
        table = await collect(reader, [FilePiece(obj) for obj in objs], schema=schema, batch_size=1_000)
        assert table.equals(expected) and reader.stats().row_groups_read == 2 * 10  # in order, each once

        before = asyncio.all_tasks()
        batches = reader.iter_batches([FilePiece(obj) for obj in objs], schema=schema, batch_size=1_000)
        first = await anext(batches)  # the next row group is decoding in a thread now
        await batches.aclose()  # closing waits for that thread and drops its batches
        assert first.equals(expected.slice(0, 1_000).to_batches()[0])
        await asyncio.sleep(0)
        assert asyncio.all_tasks() - before == set()  # nothing left running


@pytest.mark.timeout(60)
async def test_decode_ahead_crosses_units_within_the_budget_and_closing_waits_for_its_threads(
    s3_endpoint: Any, bucket: str, s3_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading
    import time

    import s3io.dataset.parquet_reader as reader_module

    monkeypatch.setattr(reader_module, "DECODE_IN_THREAD_BYTES", 0)  # every unit takes the threaded path
    real_decode = reader_module.decode
    started: list[tuple[str, int]] = []
    running = [0]
    lock = threading.Lock()

    def slow_decode(source: Any, metadata: Any, row_groups: Any, columns: Any, **kwargs: Any) -> Any:
        with lock:
            started.append((kwargs["url"], row_groups[0]))
            running[0] += 1
        try:
            time.sleep(0.3 if (kwargs["url"], row_groups[0]) == (urls[1], 0) else 0.01)  # the 2nd file's first: slow
            yield from real_decode(source, metadata, row_groups, columns, **kwargs)
        finally:
            with lock:
                running[0] -= 1

    monkeypatch.setattr(reader_module, "decode", slow_decode)
    blobs = [parquet_bytes(make_table(16_000, start=50_000 * i, seed=i), row_group_size=4_000) for i in range(2)]
    objs = [put(s3_client, bucket, f"across/{i}.parquet", blob) for i, blob in enumerate(blobs)]
    urls = [f"s3://{bucket}/across/{i}.parquet" for i in range(2)]
    expected = local_read(blobs).to_batches(max_chunksize=4_000)
    budget = 4 * 96 * KiB  # units of at most budget / 4: one row group (~80 KiB) each, four in the budget
    config = LARGE.replace(memory_budget=budget, part_size=16 * KiB)

    async def until(condition: Any) -> None:
        for _ in range(500):
            if condition():
                return
            await asyncio.sleep(0.01)
        raise AssertionError("timed out")

    async with open_reader(s3_endpoint.url, config) as reader:
        schema = await reader.schema(objs, merge=True)
        before = asyncio.all_tasks()
        batches = reader.iter_batches([FilePiece(obj) for obj in objs], schema=schema, batch_size=4_000)
        for handed in range(1, 5):  # the first file's four row groups, four units
            assert (await anext(batches)).equals(expected[handed - 1])
            assert len(started) <= handed + reader_module.DECODE_AHEAD  # never more ahead than that
        # This unit's (and file's) last row group is handed over: the next unit's first one decodes meanwhile.
        await until(lambda: (urls[1], 0) in started)
        assert running[0] >= 1
        await batches.aclose()  # closing waits for that thread (no cancelling a thread) and drops its batches
        assert running[0] == 0
        await asyncio.sleep(0)
        assert asyncio.all_tasks() - before == set()  # nothing left running
        assert 0 < reader.stats().peak_held <= budget

        table = await collect(reader, [FilePiece(obj) for obj in objs], schema=schema, batch_size=4_000)
        assert table.to_batches() == expected and reader.stats().peak_held <= budget


@pytest.mark.timeout(60)
async def test_a_read_resumed_from_a_fresh_task_per_batch_reads_every_row_and_a_lost_consumer_is_loud(
    s3_endpoint: Any, bucket: str, s3_client: Any
) -> None:
    """A per-batch timeout (``asyncio.wait_for(it.__anext__(), t)``) resumes the read from a new task each batch:
    every row arrives (it used to stop after the first task ended, silently). A consumer cancelled between two
    batches stops the read; resumed after that, it raises instead of ending early."""
    objs = [
        put(s3_client, bucket, f"handover/{i:02d}.parquet", parquet_bytes(make_table(100, start=100 * i)))
        for i in range(20)
    ]
    schema = pa.schema([("id", pa.int64())])
    async with open_reader(s3_endpoint.url, EngineConfig(max_concurrency=2)) as reader:
        batches = reader.iter_batches([FilePiece(obj) for obj in objs], schema=schema)
        ids: list[int] = []
        with contextlib.suppress(StopAsyncIteration):
            while True:
                ids.extend((await asyncio.wait_for(batches.__anext__(), 20)).column("id").to_pylist())
        assert ids == list(range(2_000))

        lost = reader.iter_batches([FilePiece(obj) for obj in objs], schema=schema)

        await cancel_after_one_item(lost)
        with pytest.raises(s3io.S3IOError, match="the parquet read was stopped"):
            await asyncio.wait_for(lost.__anext__(), 20)
        await lost.aclose()
        assert reader._held.reserved == 0 and reader.engine.stats().reserved == 0


@pytest.mark.timeout(60)
async def test_dictionary_columns_come_as_dictionaries_where_the_pages_are_and_decode_to_the_same_values(
    s3_endpoint: Any, bucket: str, s3_client: Any
) -> None:
    """A dictionary-encoded string column comes as a dictionary array (indices only: a caller decodes what it keeps);
    the same column written without dictionary pages comes as strings; either way the values are pyarrow's."""
    words = pa.array([f"word-{i % 37}" if i % 11 else None for i in range(30_000)])
    table = pa.table({"id": pa.array(range(30_000), pa.int64()), "s": words})
    blobs = {
        "dict": parquet_bytes(table, row_group_size=7_000),
        "plain": parquet_bytes(table, row_group_size=7_000, use_dictionary=False),
    }
    objs = {name: put(s3_client, bucket, f"dictionary/{name}.parquet", blob) for name, blob in blobs.items()}
    schema = pa.schema([("id", pa.int64()), ("s", pa.string())])
    partition_schema = pa.schema([("day", pa.string())])
    async with open_reader(s3_endpoint.url, LARGE) as reader:
        for name, obj in objs.items():
            piece = FilePiece(obj, partition_values=("2026-01-02",))
            batches = [
                b
                async for b in reader.iter_batches(
                    [piece], schema=schema, partition_schema=partition_schema, dictionary_columns=["s"]
                )
            ]
            kinds = {b.schema.field("s").type for b in batches}
            assert kinds == ({pa.dictionary(pa.int32(), pa.string())} if name == "dict" else {pa.string()}), kinds
            assert all(b.schema.field("day").type == pa.string() for b in batches)
            decoded = pa.concat_arrays(
                [b.column(1).dictionary_decode() if name == "dict" else b.column(1) for b in batches]
            )
            assert decoded.equals(words)
        with pytest.raises(InvalidConfig, match="dictionary_columns"):
            reader.iter_batches([FilePiece(objs["dict"])], schema=schema, dictionary_columns=["t"])
