"""The standalone API (s3io.read_parquet / iter_batches and their async twins) against moto."""

from __future__ import annotations

import asyncio
import contextlib
import io
import random
import threading
import time
from collections import Counter
from typing import Any
from urllib.parse import parse_qs

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import s3io
from s3io import InvalidConfig, NotFound, Policy, SchemaMismatch
from s3io.blocking import background_loop
from s3io.engine import RangeEngine
from testbed.faultproxy import ErrorResponse, FaultProxy, FaultRule, Latency, Reset, Stall

POLICY = Policy(max_attempts=6, backoff_base=0.01, backoff_cap=0.2)


def make_table(rows: int, start: int = 0) -> pa.Table:
    ids = pa.array(range(start, start + rows), pa.int64())
    return pa.table(
        {
            "id": ids,
            "x": pc.multiply(pc.cast(ids, pa.float64()), 0.25),
            "s": pa.array([f"value-{i}" if i % 5 else None for i in range(start, start + rows)]),
        }
    )


def parquet_bytes(table: pa.Table, **kwargs: Any) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink, **kwargs)
    return sink.getvalue()


def write_dataset(s3_client: Any, bucket: str, prefix: str, files: int, rows: int = 100) -> list[bytes]:
    """``files`` parquet files under ``prefix`` (key order = id order), plus hidden files the API must skip."""
    blobs = []
    for i in range(files):
        blob = parquet_bytes(make_table(rows, start=rows * i))
        s3_client.put_object(Bucket=bucket, Key=f"{prefix}part-{i:04d}.parquet", Body=blob)
        blobs.append(blob)
    s3_client.put_object(Bucket=bucket, Key=f"{prefix}_SUCCESS", Body=b"")
    s3_client.put_object(Bucket=bucket, Key=f"{prefix}.part-0000.parquet.crc", Body=b"crc")
    s3_client.put_object(Bucket=bucket, Key=f"{prefix}_temporary/0/part-9999.parquet", Body=b"partial")
    return blobs


def local_read(blobs: list[bytes]) -> pa.Table:
    return pa.concat_tables(pq.read_table(io.BytesIO(blob)) for blob in blobs)


# ---------------------------------------------------------------------------------------------- URLs


@pytest.mark.timeout(60)
def test_read_parquet_of_a_prefix_equals_pyarrow_and_skips_hidden_files(
    s3_endpoint: Any, bucket: str, s3_client: Any
) -> None:
    blobs = write_dataset(s3_client, bucket, "ds/", 25)
    table = s3io.read_parquet(f"s3://{bucket}/ds/", endpoint_url=s3_endpoint.url, policy=POLICY)
    expected = local_read(blobs)
    assert table.schema.equals(expected.schema) and table.equals(expected)
    without_slash = s3io.read_parquet(f"s3://{bucket}/ds", endpoint_url=s3_endpoint.url, policy=POLICY)
    assert without_slash.equals(expected)


@pytest.mark.timeout(60)
def test_globs_single_objects_and_lists_of_urls(s3_endpoint: Any, bucket: str, s3_client: Any) -> None:
    blobs = write_dataset(s3_client, bucket, "g/", 12)
    kwargs: dict[str, Any] = {"endpoint_url": s3_endpoint.url, "policy": POLICY}
    glob = s3io.read_parquet(f"s3://{bucket}/g/part-000[2-4].parquet", **kwargs)
    assert glob.equals(local_read(blobs[2:5]))
    one = s3io.read_parquet(f"s3://{bucket}/g/part-0007.parquet", **kwargs)
    assert one.equals(local_read(blobs[7:8]))
    urls = [f"s3://{bucket}/g/part-0011.parquet", f"s3://{bucket}/g/part-001{{0,1}}.parquet"]
    listed = s3io.read_parquet(urls, **kwargs)  # a file named twice is read once, at its first place
    assert listed.equals(local_read([blobs[11], blobs[10]]))


@pytest.mark.timeout(60)
def test_no_matching_file_raises_not_found_naming_the_url(s3_endpoint: Any, bucket: str, s3_client: Any) -> None:
    write_dataset(s3_client, bucket, "ds/", 2)
    with pytest.raises(NotFound, match=rf"no parquet files match s3://{bucket}/nothing/here"):
        s3io.read_parquet(f"s3://{bucket}/nothing/here/", endpoint_url=s3_endpoint.url, policy=POLICY)
    with pytest.raises(NotFound, match=rf"s3://{bucket}/ds/\*.csv"):
        s3io.read_parquet([f"s3://{bucket}/ds/", f"s3://{bucket}/ds/*.csv"], endpoint_url=s3_endpoint.url)
    with pytest.raises(InvalidConfig, match="expected s3://bucket/prefix"):
        s3io.read_parquet("/local/path.parquet")


# ---------------------------------------------------------------------------------------------- columns, filters


@pytest.mark.timeout(60)
def test_columns_in_the_order_given_and_filters_applied_exactly(s3_endpoint: Any, bucket: str, s3_client: Any) -> None:
    blobs = write_dataset(s3_client, bucket, "f/", 10, rows=1_000)
    url = f"s3://{bucket}/f/"
    filters = [("x", ">=", 1_000), ("s", "is not null"), ("id", "not in", [4_001, 4_002])]
    table = s3io.read_parquet(url, columns=["s", "id"], filters=filters, endpoint_url=s3_endpoint.url, policy=POLICY)
    expected = local_read(blobs)
    mask = pc.and_(pc.greater_equal(expected["x"], 1_000), pc.is_valid(expected["s"]))
    mask = pc.and_(mask, pc.invert(pc.is_in(expected["id"], pa.array([4_001, 4_002]))))
    assert table.column_names == ["s", "id"]
    assert table.equals(expected.filter(mask).select(["s", "id"]))
    single = s3io.read_parquet(url, filters=("id", "<", 3), endpoint_url=s3_endpoint.url, policy=POLICY)
    assert single.column("id").to_pylist() == [0, 1, 2]
    nothing = s3io.read_parquet(url, columns=["id"], filters=[("id", "<", 0)], endpoint_url=s3_endpoint.url)
    assert nothing.num_rows == 0 and nothing.schema == pa.schema([("id", pa.int64())])


@pytest.mark.timeout(60)
def test_a_pruned_read_of_a_large_file_holds_the_chosen_columns_not_the_ones_between(
    s3_endpoint: Any, bucket: str, s3_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Eight 200 KB columns of random bytes in each of two row groups, 3.2 MB: reading columns 1, 5 and 6 merges
    their chunks into one GET (every gap < 1 MiB), yet the segments kept for decoding are those chunks only; the
    rows equal pyarrow's, so every byte pyarrow read lay inside the planned chunk ranges."""
    rnd = random.Random(11)
    table = pa.table({f"c{i}": pa.array([rnd.randbytes(2_000) for _ in range(200)], pa.binary()) for i in range(8)})
    blob = parquet_bytes(table, compression="none", row_group_size=100, use_dictionary=False)
    s3_client.put_object(Bucket=bucket, Key="wide/part-0.parquet", Body=blob)
    real = RangeEngine.fetch_segments
    held: list[int] = []

    async def spy(self: RangeEngine, obj: Any, ranges: Any) -> Any:
        segments = await real(self, obj, ranges)
        held.append(sum(len(piece) for _, piece in segments))
        return segments

    monkeypatch.setattr(RangeEngine, "fetch_segments", spy)
    columns = ["c5", "c1", "c6"]
    got = s3io.read_parquet(f"s3://{bucket}/wide/", columns=columns, endpoint_url=s3_endpoint.url, policy=POLICY)
    assert got.equals(pq.read_table(io.BytesIO(blob), columns=columns))
    chosen = [pq.ParquetFile(io.BytesIO(blob)).metadata.row_group(g).column(c) for g in (0, 1) for c in (1, 5, 6)]
    assert held and sum(held) <= sum(c.total_compressed_size for c in chosen) + 64 * 1024  # about 1.2 MB
    assert sum(held) < len(blob) / 2  # the GET's span, c1 of the first row group to c6 of the second: 2.8 MB


@pytest.mark.timeout(60)
def test_bad_columns_and_filters_raise_invalid_config_listing_the_choices(
    s3_endpoint: Any, bucket: str, s3_client: Any
) -> None:
    write_dataset(s3_client, bucket, "b/", 2)
    url, endpoint = f"s3://{bucket}/b/", s3_endpoint.url
    with pytest.raises(InvalidConfig, match="'nope' not in the files' schema; columns: id, x, s"):
        s3io.read_parquet(url, columns=["id", "nope"], endpoint_url=endpoint)
    with pytest.raises(InvalidConfig, match="predicate column 'nope' is not in the schema; columns: id, x, s"):
        s3io.read_parquet(url, filters=[("nope", "=", 1)], endpoint_url=endpoint)
    with pytest.raises(InvalidConfig, match=r"unknown predicate op '~'.*ops: '='"):
        s3io.read_parquet(url, filters=[("id", "~", 1)], endpoint_url=endpoint)
    with pytest.raises(InvalidConfig, match="repeated: id"):
        s3io.read_parquet(url, columns=["id", "id"])
    with pytest.raises(InvalidConfig, match="unknown engine option 'bogus'"):
        s3io.read_parquet(url, engine={"bogus": 1})
    with pytest.raises(InvalidConfig, match="unknown policy option"):
        s3io.read_parquet(url, policy={"bogus": 1})
    table = s3io.read_parquet(url, engine={"maxConcurrency": "4", "memoryBudget": "1MiB"}, endpoint_url=endpoint,
                              policy={"max_attempts": "3"})  # fmt: skip
    assert table.num_rows == 200


@pytest.mark.timeout(60)
def test_schemas_are_unified_across_files(s3_endpoint: Any, bucket: str, s3_client: Any) -> None:
    s3_client.put_object(Bucket=bucket, Key="u/1.parquet", Body=parquet_bytes(pa.table({"id": [1], "a": ["x"]})))
    s3_client.put_object(Bucket=bucket, Key="u/2.parquet", Body=parquet_bytes(pa.table({"id": [2], "b": [2.5]})))
    table = s3io.read_parquet(f"s3://{bucket}/u/", endpoint_url=s3_endpoint.url)
    assert table.to_pydict() == {"id": [1, 2], "a": ["x", None], "b": [None, 2.5]}
    first_only = s3io.read_parquet(f"s3://{bucket}/u/", merge_schema=False, endpoint_url=s3_endpoint.url)
    assert first_only.to_pydict() == {"id": [1, 2], "a": ["x", None]}
    s3_client.put_object(Bucket=bucket, Key="u/3.parquet", Body=parquet_bytes(pa.table({"id": ["three"]})))
    with pytest.raises(SchemaMismatch) as raised:
        s3io.read_parquet(f"s3://{bucket}/u/", endpoint_url=s3_endpoint.url)
    assert all(name in str(raised.value) for name in (f"s3://{bucket}/u/1.parquet", f"s3://{bucket}/u/3.parquet"))
    assert "'id'" in str(raised.value)


# ---------------------------------------------------------------------------------------------- progress, async


@pytest.mark.timeout(60)
def test_progress_callback_reports_files_rows_and_a_final_call(s3_endpoint: Any, bucket: str, s3_client: Any) -> None:
    write_dataset(s3_client, bucket, "p/", 8)
    seen: list[s3io.Progress] = []
    table = s3io.read_parquet(f"s3://{bucket}/p/", endpoint_url=s3_endpoint.url, progress=seen.append)
    assert table.num_rows == 800
    assert len(seen) >= 2 and seen[-1].done and not any(p.done for p in seen[:-1])
    final = seen[-1]
    assert (final.files_done, final.files_total, final.rows, final.fraction) == (8, 8, 800, 1.0)
    assert final.requests >= 9 and final.bytes_read > 0  # one LIST + one GET per file
    assert [p.rows for p in seen] == sorted(p.rows for p in seen)


@pytest.mark.timeout(60)
async def test_async_twins_run_on_the_callers_loop(s3_endpoint: Any, bucket: str, s3_client: Any) -> None:
    blobs = write_dataset(s3_client, bucket, "a/", 6)
    url = f"s3://{bucket}/a/"
    table = await s3io.read_parquet_async(url, endpoint_url=s3_endpoint.url)
    assert table.equals(local_read(blobs))
    batches = s3io.iter_batches_async(url, columns=["id"], endpoint_url=s3_endpoint.url, batch_size=30)
    ids = []
    async with contextlib.aclosing(batches):
        async for batch in batches:
            assert batch.num_rows <= 30
            ids.extend(batch.column("id").to_pylist())
    assert ids == list(range(600))
    with pytest.raises(InvalidConfig):
        s3io.iter_batches_async(url, columns="id")  # checked at the call, before any await


@pytest.mark.timeout(60)
async def test_blocking_api_works_inside_a_running_event_loop(s3_endpoint: Any, bucket: str, s3_client: Any) -> None:
    blobs = write_dataset(s3_client, bucket, "j/", 5)
    asyncio.get_running_loop()  # as in Jupyter: a loop is running in this thread
    table = s3io.read_parquet(f"s3://{bucket}/j/", endpoint_url=s3_endpoint.url)
    assert table.equals(local_read(blobs))
    rows = sum(batch.num_rows for batch in s3io.iter_batches(f"s3://{bucket}/j/", endpoint_url=s3_endpoint.url))
    assert rows == 500


@pytest.mark.timeout(60)
def test_blocking_api_is_safe_from_many_threads(s3_endpoint: Any, bucket: str, s3_client: Any) -> None:
    blobs = write_dataset(s3_client, bucket, "t/", 4)
    expected = local_read(blobs)
    results: list[bool] = []

    def read() -> None:
        results.append(s3io.read_parquet(f"s3://{bucket}/t/", endpoint_url=s3_endpoint.url).equals(expected))

    threads = [threading.Thread(target=read) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert results == [True] * 4


# ---------------------------------------------------------------------------------------------- streaming, faults


def background_tasks() -> int:
    async def count() -> int:
        return len([t for t in asyncio.all_tasks() if t is not asyncio.current_task()])

    return background_loop().run(count())


@pytest.mark.timeout(60)
def test_iter_batches_streams_and_closing_early_cancels_the_reading(
    s3_endpoint: Any, bucket: str, s3_client: Any, fault_proxy: FaultProxy
) -> None:
    write_dataset(s3_client, bucket, "s/", 60)
    fault_proxy.add_rule(FaultRule(fault=Latency(0.2), method="GET", path=r"part-00(0[1-9]|[1-5]\d)\.parquet"))
    stream = s3io.iter_batches(
        f"s3://{bucket}/s/", endpoint_url=fault_proxy.url, merge_schema=False, engine={"maxConcurrency": 4}
    )
    started = time.monotonic()
    first = next(stream)
    assert first.column("id").to_pylist() == list(range(100))
    assert time.monotonic() - started < 5  # the first batch did not wait for the other 59 files
    stream.close()  # returns once the read's tasks are cancelled and cleaned up
    assert background_tasks() == 0
    time.sleep(0.3)  # the proxy logs a request when it has read it: let those sent before the close arrive
    after_close = fault_proxy.count(method="GET")
    time.sleep(1.0)  # an uncancelled read would add ~20 GETs/s here (4 at a time, 0.2 s each)
    late = fault_proxy.count(method="GET") - after_close
    assert after_close < 30 and late <= 4, (after_close, late)  # at most the 4 in flight at the close, logged late


@pytest.mark.timeout(120)
def test_faults_during_a_300_file_read_give_identical_results(
    s3_endpoint: Any, bucket: str, s3_client: Any, fault_proxy: FaultProxy
) -> None:
    blobs = write_dataset(s3_client, bucket, "faults/", 300, rows=50)
    url = f"s3://{bucket}/faults/"
    expected = local_read(blobs)
    clean = s3io.read_parquet(url, endpoint_url=s3_endpoint.url)
    assert clean.equals(expected)
    fault_proxy.add_rule(FaultRule(fault=Stall(after_bytes=200), method="GET", path=r"part-01", times=3))
    fault_proxy.add_rule(FaultRule(fault=Reset(after_bytes=100), method="GET", path=r"part-02", times=3))
    fault_proxy.add_rule(FaultRule(fault=ErrorResponse.slow_down(), method="GET", probability=0.2))
    policy = Policy(stall_timeout=0.5, first_byte_timeout=2.0, max_attempts=10, backoff_base=0.01,
                    backoff_cap=0.1, retry_budget=10_000)  # fmt: skip
    progress: list[s3io.Progress] = []
    table = s3io.read_parquet(url, endpoint_url=fault_proxy.url, policy=policy, progress=progress.append)
    assert table.equals(expected) and table.num_rows == 15_000
    faults = [r.fault for r in fault_proxy.requests if r.fault is not None]
    assert sum(isinstance(f, ErrorResponse) for f in faults) >= 30
    assert sum(isinstance(f, Stall) for f in faults) == 3 and sum(isinstance(f, Reset) for f in faults) == 3
    assert progress[-1].files_done == 300


@pytest.mark.timeout(60)
def test_a_corrupt_file_raises_naming_it_or_is_skipped(s3_endpoint: Any, bucket: str, s3_client: Any) -> None:
    blobs = write_dataset(s3_client, bucket, "c/", 4)
    s3_client.put_object(Bucket=bucket, Key="c/part-0002-broken.parquet", Body=b"PAR1 but not really a parquet file")
    url = f"s3://{bucket}/c/"
    for merge in (True, False):
        with pytest.raises(s3io.CorruptFile, match=rf"object=s3://{bucket}/c/part-0002-broken.parquet"):
            s3io.read_parquet(url, merge_schema=merge, endpoint_url=s3_endpoint.url)
        seen: list[s3io.Progress] = []
        table = s3io.read_parquet(
            url, merge_schema=merge, ignore_corrupt=True, endpoint_url=s3_endpoint.url, progress=seen.append
        )
        assert table.equals(local_read(blobs))
        assert (seen[-1].files_done, seen[-1].files_total) == (5, 5)


@pytest.mark.signature_errors_expected
def test_an_error_listing_the_tables_control_objects_names_the_path_the_user_gave(
    s3_endpoint: Any, bucket: str, s3_client: Any
) -> None:
    """The journal-aware listing reads ``_s3io_table/`` first; a refusal there is reported for the table."""
    s3_client.put_object(Bucket=bucket, Key="table/a.parquet", Body=parquet_bytes(make_table(3)))
    wrong = s3io.Credentials("AKIDWRONGWRONGWRONG0", "not-the-secret")
    with pytest.raises(s3io.errors.AccessDenied) as refused:
        s3io.read_parquet(f"s3://{bucket}/table/", endpoint_url=s3_endpoint.url, credentials=wrong)
    assert f"object=s3://{bucket}/table/;" in str(refused.value) and "_s3io_table" not in str(refused.value)


def test_the_journals_of_several_paths_are_read_once_before_their_listings_and_once_after(
    bucket: str, s3_client: Any, fault_proxy: FaultProxy
) -> None:
    """Two tables side by side share their ancestors' journals: each control folder is listed twice in all (before
    and after the listings, as for one table), not once per table."""
    for name in ("a", "b"):
        s3_client.put_object(Bucket=bucket, Key=f"lake/{name}/x.parquet", Body=parquet_bytes(make_table(3)))
    urls = [f"s3://{bucket}/lake/a/", f"s3://{bucket}/lake/b/"]
    assert s3io.read_parquet(urls, endpoint_url=fault_proxy.url).num_rows == 6
    lists = Counter(parse_qs(r.query).get("prefix", [""])[0] for r in fault_proxy.requests if "list-type" in r.query)
    control = ("lake/a/", "lake/b/", "lake/", "")
    assert lists == {"lake/a/": 1, "lake/b/": 1, **{f"{root}_s3io_table/": 2 for root in control}}, lists
