"""tools: each Python data tool of docs/tools/ through s3io.fs against the same tool through s3fs, same server.

Why: users meet s3io through the tools they already use; each row is one tool's ordinary read (or write) with the
filesystem swapped and nothing else. The data: 200 small parquet files in two Hive ``day`` directories, one 16 MB
file of 8 row groups, and a zarr array of 100 chunks. After one untimed run of each, each run times the s3io case
and the s3fs case back to back, alternating which goes first, on one server of the run (benchmarks/servers.py);
every filesystem is new (no listing cache carried between runs) and every result is checked against the data.
DuckDB registers ``S3FileSystemAsS3`` (the ``s3`` name DuckDB keys its reads on) against s3fs; writes go to a
fresh prefix per run.
"""

from __future__ import annotations

import io
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks.api import Options, Report
from benchmarks.infra import Clock, Measurement
from benchmarks.parquet_data import delete_prefix, upload_objects
from benchmarks.results import markdown_table, median
from benchmarks.servers import Server, servers

BUCKET = "bench-tools"
FILES, FILES_QUICK = 200, 20
ROWS_PER_FILE = 2_000
LARGE_ROWS, LARGE_ROWS_QUICK = 1_000_000, 100_000
ZARR_CHUNKS = 100
WRITE_ROWS = 400_000
DAYS = ("2026-11-01", "2026-11-02")
IMPLEMENTATIONS = ("s3io", "s3fs")


@dataclass(frozen=True)
class Data:
    files: int
    large_rows: int

    @property
    def small_rows(self) -> int:
        return self.files * ROWS_PER_FILE


def _table(start: int, rows: int) -> pa.Table:
    ids = np.arange(start, start + rows, dtype=np.int64)
    return pa.table({"id": ids, "x": ids.astype(np.float64) * 0.5, "name": pa.array([f"n{i % 997}" for i in ids])})


def _parquet(table: pa.Table, row_group_size: int | None = None) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink, row_group_size=row_group_size)
    return sink.getvalue()


def _seed(server: Server, data: Data) -> None:
    """Upload the small files, the large file and the zarr array (straight to the server, uncounted)."""
    client = server.client()
    try:
        client.create_bucket(Bucket=BUCKET)
    except client.exceptions.BucketAlreadyOwnedByYou:
        pass
    objects = [
        (f"small/day={DAYS[i % 2]}/part-{i:04}.parquet", _parquet(_table(i * ROWS_PER_FILE, ROWS_PER_FILE)))
        for i in range(data.files)
    ]
    objects.append(("large.parquet", _parquet(_table(0, data.large_rows), data.large_rows // 8)))
    upload_objects(server.setup_url, BUCKET, objects)
    import zarr

    from s3io.fs import S3FileSystem

    fs = S3FileSystem(endpoint_url=server.setup_url, asynchronous=True, skip_instance_cache=True)
    store = zarr.storage.FsspecStore(fs, path=f"{BUCKET}/grid.zarr")
    array = zarr.create_array(store, shape=(1000, 1000), chunks=(100, 100), dtype="f8", overwrite=True)
    array[:] = np.ones((1000, 1000))


def _filesystem(implementation: str, url: str, *, as_s3: bool = False, asynchronous: bool = False) -> Any:
    options = {"endpoint_url": url, "skip_instance_cache": True, "asynchronous": asynchronous}
    if implementation == "s3fs":
        import s3fs

        return s3fs.S3FileSystem(**options)
    from s3io.fs import S3FileSystem, S3FileSystemAsS3

    return (S3FileSystemAsS3 if as_s3 else S3FileSystem)(**options)


def _expect(got: object, want: object, case: str) -> None:
    if got != want:
        raise AssertionError(f"{case}: got {got!r}, expected {want!r}")


# Each case: (label, run(implementation, url, data, run_number) -> None), checked inside.
def _pandas_small(impl: str, url: str, data: Data, run: int) -> None:
    import pandas as pd

    frame = pd.read_parquet(f"{BUCKET}/small/", filesystem=_filesystem(impl, url))
    _expect(len(frame), data.small_rows, "pandas")


def _pandas_large(impl: str, url: str, data: Data, run: int) -> None:
    import pandas as pd

    frame = pd.read_parquet(f"{BUCKET}/large.parquet", filesystem=_filesystem(impl, url), columns=["id"])
    _expect(int(frame["id"].iloc[-1]), data.large_rows - 1, "pandas large")


def _pyarrow_dataset(impl: str, url: str, data: Data, run: int) -> None:
    import pyarrow.dataset as ds

    dataset = ds.dataset(f"{BUCKET}/small/", filesystem=_filesystem(impl, url), format="parquet", partitioning="hive")
    _expect(dataset.to_table(columns=["id", "day"]).num_rows, data.small_rows, "pyarrow.dataset")


def _polars_files(impl: str, url: str, data: Data, run: int) -> None:
    import polars as pl

    fs = _filesystem(impl, url)
    with fs.open(f"{BUCKET}/large.parquet", "rb") as f:
        _expect(pl.read_parquet(f, columns=["id", "x"]).height, data.large_rows, "polars")


def _duckdb_glob(impl: str, url: str, data: Data, run: int) -> None:
    import duckdb

    con = duckdb.connect()
    try:
        con.register_filesystem(_filesystem(impl, url, as_s3=True))
        got = con.sql(f"SELECT count(*) FROM read_parquet('s3://{BUCKET}/small/*/*.parquet')").fetchall()
        _expect(got, [(data.small_rows,)], "duckdb")
    finally:
        con.close()


def _duckdb_large(impl: str, url: str, data: Data, run: int) -> None:
    import duckdb

    con = duckdb.connect()
    try:
        con.register_filesystem(_filesystem(impl, url, as_s3=True))
        got = con.sql(f"SELECT count(*), max(id) FROM read_parquet('s3://{BUCKET}/large.parquet')").fetchall()
        _expect(got, [(data.large_rows, data.large_rows - 1)], "duckdb large")
    finally:
        con.close()


def _dask(impl: str, url: str, data: Data, run: int) -> None:
    import dask.dataframe as dd

    protocol = "s3io" if impl == "s3io" else "s3"
    frame = dd.read_parquet(f"{protocol}://{BUCKET}/small/", storage_options={"endpoint_url": url})
    _expect(int(frame["id"].sum().compute(scheduler="threads")), sum(range(data.small_rows)), "dask")


def _zarr(impl: str, url: str, data: Data, run: int) -> None:
    import zarr

    store = zarr.storage.FsspecStore(
        _filesystem(impl, url, asynchronous=True), path=f"{BUCKET}/grid.zarr", read_only=True
    )
    _expect(float(zarr.open_array(store, mode="r")[:].sum()), 1_000_000.0, "zarr")


def _fastparquet(impl: str, url: str, data: Data, run: int) -> None:
    import fastparquet

    frame = fastparquet.ParquetFile(f"{BUCKET}/large.parquet", fs=_filesystem(impl, url)).to_pandas(columns=["id"])
    _expect(len(frame), data.large_rows, "fastparquet")


def _datasets(impl: str, url: str, data: Data, run: int) -> None:
    import datasets

    protocol = "s3io" if impl == "s3io" else "s3"
    datasets.disable_progress_bars()
    with tempfile.TemporaryDirectory(prefix="s3io-bench-hf-") as cache:
        loaded = datasets.load_dataset(
            "parquet",
            data_files=f"{protocol}://{BUCKET}/small/day={DAYS[0]}/*.parquet",
            storage_options={"endpoint_url": url},
            split="train",
            cache_dir=cache,
        )
        _expect(loaded.num_rows, data.small_rows // 2, "datasets")


def _write_table() -> pa.Table:
    table = _table(0, WRITE_ROWS)
    return table.append_column("day", pa.array([DAYS[i % 2] for i in range(WRITE_ROWS)]))


def _write_dataset(impl: str, url: str, data: Data, run: int) -> None:
    import pyarrow.dataset as ds

    fs = _filesystem(impl, url)
    prefix = f"{BUCKET}/out/write_dataset/{impl}-{run}"
    ds.write_dataset(_write_table(), prefix, filesystem=fs, format="parquet", partitioning=["day"])
    _expect(len(fs.find(prefix)), 2, "write_dataset")


def _pandas_partition_cols(impl: str, url: str, data: Data, run: int) -> None:
    fs = _filesystem(impl, url)
    prefix = f"{BUCKET}/out/partition_cols/{impl}-{run}"
    _write_table().to_pandas().to_parquet(prefix, filesystem=fs, partition_cols=["day"])
    _expect(len(fs.find(prefix)), 2, "partition_cols")


CASES: tuple[tuple[str, Callable[[str, str, Data, int], None]], ...] = (
    ("pandas `read_parquet`, 200 files", _pandas_small),
    ("pandas `read_parquet`, 16 MB file, 1 column", _pandas_large),
    ("`pyarrow.dataset`, 200 Hive files", _pyarrow_dataset),
    ("polars `read_parquet(fs.open(...))`, 16 MB file", _polars_files),
    ("DuckDB glob, 200 files", _duckdb_glob),
    ("DuckDB, 16 MB file", _duckdb_large),
    ("dask `read_parquet` + sum, 200 files", _dask),
    ("zarr array, 100 chunks", _zarr),
    ("fastparquet, 16 MB file, 1 column", _fastparquet),
    ("`datasets.load_dataset`, 100 files", _datasets),
    ("`pyarrow.dataset.write_dataset`, 400k rows, 2 days", _write_dataset),
    ("pandas `to_parquet(partition_cols=...)`, 400k rows", _pandas_partition_cols),
)


def _time(server: Server, case: Callable[[str, str, Data, int], None], impl: str, data: Data, run: int) -> Measurement:
    target = server.target()
    with Clock(target.counter) as clock:
        case(impl, target.url, data, run)
    assert clock.result is not None
    return clock.result


def run(stack: Any, options: Options) -> Report:
    data = Data(FILES_QUICK if options.quick else FILES, LARGE_ROWS_QUICK if options.quick else LARGE_ROWS)
    body = []
    for server in servers(stack, options.servers):
        _seed(server, data)
        rows = []
        for label, case in CASES:
            results: dict[str, list[Measurement]] = {impl: [] for impl in IMPLEMENTATIONS}
            for impl in IMPLEMENTATIONS:  # untimed: imports and first-use set-up are paid by neither row
                _time(server, case, impl, data, -1)
            for number in range(options.runs):
                order = IMPLEMENTATIONS if number % 2 == 0 else IMPLEMENTATIONS[::-1]
                for impl in order:
                    results[impl].append(_time(server, case, impl, data, number))
            ours, theirs = (median([m.wall for m in results[impl]]) for impl in IMPLEMENTATIONS)
            cpu_ours, cpu_theirs = (median([m.cpu for m in results[impl]]) for impl in IMPLEMENTATIONS)
            counts = [results[impl][-1].requests for impl in IMPLEMENTATIONS]
            rows.append(
                [
                    label,
                    f"{ours:.2f} s",
                    f"{theirs:.2f} s",
                    f"{theirs / ours:.2f}x",
                    f"{cpu_ours:.2f} / {cpu_theirs:.2f}",
                    *(f"{c.kind('get')} / {c.kind('head')} / {c.kind('list')} / {c.kind('put')}" for c in counts),
                ]
            )
            print(f"   {server.name}: {label}: s3io {ours:.2f} s, s3fs {theirs:.2f} s", flush=True)
        delete_prefix(server.setup_url, BUCKET, "out/")
        body.append(
            f"**{server.label}** (medians of {options.runs} interleaved runs; requests of the last run, "
            "GET / HEAD / LIST / PUT):\n\n"
            + markdown_table(
                ["case", "s3io", "s3fs", "s3fs ÷ s3io", "client CPU-s, s3io / s3fs", "s3io requests", "s3fs requests"],
                rows,
                text_columns=1,
            )
        )
    return Report("Python data tools: s3io.fs against s3fs", "\n\n".join(body))


def main(argv: list[str] | None = None) -> None:
    """Chosen cases only, more runs, no RESULTS.md section: wall and client CPU of each run, medians and the best."""
    import argparse
    import statistics
    import sys

    from benchmarks.infra import Stack, use_fake_aws_environment
    from benchmarks.results import load_average

    names = {case.__name__.lstrip("_"): case for _, case in CASES}
    parser = argparse.ArgumentParser(prog="benchmarks.tools", description=main.__doc__)
    parser.add_argument("case", nargs="+", choices=sorted(names))
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--server", choices=("moto", "memory"), default="memory")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    use_fake_aws_environment()
    with Stack() as stack:
        (server,) = servers(stack, (args.server,))
        data = Data(FILES, LARGE_ROWS)
        _seed(server, data)
        print(f"load average at start: {load_average()}")
        for name in args.case:
            case = names[name]
            for impl in IMPLEMENTATIONS:
                _time(server, case, impl, data, -1)
            runs: dict[str, list[Measurement]] = {impl: [] for impl in IMPLEMENTATIONS}
            for number in range(args.runs):
                for impl in IMPLEMENTATIONS if number % 2 == 0 else IMPLEMENTATIONS[::-1]:
                    runs[impl].append(_time(server, case, impl, data, 1000 + number))
            for impl, measured in runs.items():
                walls = [m.wall for m in measured]
                print(
                    f"{name} {impl}: wall median {statistics.median(walls):.2f} s, best {min(walls):.2f} s, client CPU "
                    f"median {statistics.median(m.cpu for m in measured):.2f} s; walls {[round(w, 2) for w in walls]}"
                )
        delete_prefix(server.setup_url, BUCKET, "out/")
    print(f"load average at end: {load_average()}")


if __name__ == "__main__":
    main()

__all__ = ["CASES", "main", "run"]
