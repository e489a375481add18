"""The data tools through s3io.fs, counted at the server (moto behind the fault proxy's request log): open() sends no
HEAD, and DuckDB reads through S3FileSystemAsS3 with the requests it makes through s3fs."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import duckdb
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import s3fs

from s3io.fs import S3FileSystem, S3FileSystemAsS3
from testbed.moto_server import boto3_client

pytestmark = pytest.mark.timeout(240)

GLOB_FILES = 500


def parquet(rows: int, start: int = 0, row_group_size: int | None = None) -> bytes:
    sink = io.BytesIO()
    table = pa.table({"id": pa.array(range(start, start + rows), pa.int64()), "x": pa.array([0.5] * rows)})
    pq.write_table(table, sink, row_group_size=row_group_size)
    return sink.getvalue()


def object_requests(proxy: Any, method: str, bucket: str) -> int:
    """Requests of ``method`` for an object (not the bucket: listings are GETs of the bucket)."""
    return sum(1 for r in proxy.requests if r.method == method and r.path.split("?")[0].strip("/") != bucket)


@pytest.fixture
def through_proxy(fault_proxy: Any) -> Iterator[Callable[[type], s3fs.S3FileSystem]]:
    made: list[s3fs.S3FileSystem] = []

    def make(cls: type) -> s3fs.S3FileSystem:
        made.append(cls(endpoint_url=fault_proxy.url, skip_instance_cache=True))
        return made[-1]

    yield make
    for fs in made:
        if isinstance(fs, S3FileSystem):
            fs.close()


def test_pandas_reading_one_file_sends_no_head_through_open(
    bucket: str, s3_endpoint: Any, fault_proxy: Any, through_proxy: Callable[[type], s3fs.S3FileSystem]
) -> None:
    data = parquet(300_000, row_group_size=50_000)  # 1.8 MB: more than open()'s GET holds
    boto3_client(s3_endpoint.url).put_object(Bucket=bucket, Key="one.parquet", Body=data)
    heads = {}
    for cls in (s3fs.S3FileSystem, S3FileSystem):
        fs = through_proxy(cls)
        fault_proxy.reset_log()
        with fs.open(f"{bucket}/one.parquet", "rb") as f:
            assert f.size == len(data)
        opened = object_requests(fault_proxy, "HEAD", bucket)
        fault_proxy.reset_log()
        frame = pd.read_parquet(f"{bucket}/one.parquet", filesystem=fs)
        assert len(frame) == 300_000 and frame["id"].iloc[-1] == 299_999
        heads[cls.__module__] = (opened, object_requests(fault_proxy, "HEAD", bucket), len(fault_proxy.requests))
    print(f"\n(HEADs by open(), HEADs by read_parquet, its requests): {heads}")
    assert heads["s3fs.core"][0] == 1 and heads["s3io.fs"][0] == 0, heads  # open(): s3fs's HEAD, none here
    # what HEADs pandas still sends are its own info() calls, fewer than with s3fs's open(); no more requests
    assert heads["s3io.fs"][1] < heads["s3fs.core"][1], heads
    assert heads["s3io.fs"][2] <= heads["s3fs.core"][2], heads


def test_duckdb_over_a_500_file_glob_gets_each_file_as_through_s3fs(
    bucket: str, s3_endpoint: Any, fault_proxy: Any, through_proxy: Callable[[type], s3fs.S3FileSystem]
) -> None:
    client = boto3_client(s3_endpoint.url, max_pool_connections=8)
    with ThreadPoolExecutor(8) as pool:
        list(
            pool.map(
                lambda i: client.put_object(Bucket=bucket, Key=f"t/part-{i:04}.parquet", Body=parquet(10, i * 10)),
                range(GLOB_FILES),
            )
        )
    gets = {}
    for cls in (S3FileSystemAsS3, s3fs.S3FileSystem, S3FileSystem):
        # DuckDB re-reads a cached file modified moments ago (these were): trusting its cache keeps the count exact
        con = duckdb.connect(config={"validate_external_file_cache": "NO_VALIDATION"})
        fs = through_proxy(cls)
        name = fs.protocol[0] if isinstance(fs.protocol, tuple) else fs.protocol
        con.register_filesystem(fs)
        fault_proxy.reset_log()
        assert con.sql(f"SELECT count(*), sum(id) FROM read_parquet('{name}://{bucket}/t/*.parquet')").fetchall() == [
            (GLOB_FILES * 10, sum(range(GLOB_FILES * 10)))
        ]
        gets[f"{cls.__name__}:{name}"] = (
            object_requests(fault_proxy, "GET", bucket),
            object_requests(fault_proxy, "HEAD", bucket),
        )
        con.close()
    print(f"\nDuckDB over {GLOB_FILES} files, (GETs, HEADs) of objects: {gets}")
    # one GET per file (DuckDB reads the first file's footer again when it binds the query), no HEAD
    assert gets["S3FileSystemAsS3:s3"] == gets["S3FileSystem:s3"], gets
    assert GLOB_FILES <= gets["S3FileSystemAsS3:s3"][0] <= GLOB_FILES + 1 and gets["S3FileSystemAsS3:s3"][1] == 0, gets
    # under the name "s3io" DuckDB takes the files for local ones and does not keep them: each is read twice
    assert gets["S3FileSystem:s3io"][0] > gets["S3FileSystemAsS3:s3"][0], gets


def test_duckdb_reads_a_large_file_through_the_s3_name_in_no_more_requests_than_through_s3fs(
    bucket: str, s3_endpoint: Any, fault_proxy: Any, through_proxy: Callable[[type], s3fs.S3FileSystem]
) -> None:
    """Under the name ``s3io`` DuckDB reads row group by row group; under ``s3`` in one pass, as through s3fs."""
    boto3_client(s3_endpoint.url).put_object(Bucket=bucket, Key="big.parquet", Body=parquet(300_000, 0, 50_000))
    seen = {}
    for cls in (s3fs.S3FileSystem, S3FileSystemAsS3, S3FileSystem):
        fs = through_proxy(cls)
        name = fs.protocol[0] if isinstance(fs.protocol, tuple) else fs.protocol
        con = duckdb.connect()
        con.register_filesystem(fs)
        fault_proxy.reset_log()
        rows = con.sql(f"SELECT count(*), sum(x) FROM read_parquet('{name}://{bucket}/big.parquet')").fetchall()
        assert rows == [(300_000, 150_000.0)]
        seen[cls.__name__ + ":" + name] = (object_requests(fault_proxy, "GET", bucket), len(fault_proxy.requests))
        con.close()
    print(f"\nDuckDB on a 1.8 MB file, (object GETs, all requests): {seen}")
    assert seen["S3FileSystemAsS3:s3"][1] <= seen["S3FileSystem:s3"][1], seen
    # Under the name s3io the count depends on timing (6 to 9 GETs seen: DuckDB's row-group reads merge or not in
    # the file's block cache), so it is printed, not compared: "fewer GETs under s3" failed one CI run in ~15.
