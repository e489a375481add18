"""writing: the write path against each server: throughput, files made, requests per file.

Why: writing is where small files are born (one file per task per partition directory) and where this project can
stop them. The rows, on each server of the run (benchmarks/servers.py), write one seeded table of 2,000,000 rows
(~80 MB of Arrow data, five Hive partitions by ``day``) with a target file size of 8 MiB:
- ``s3io.write_parquet``: one task, partitioned, rolled at the target; the commit included;
- the server's floor for the same PUTs: the files of that write (their sizes), uploaded as multipart uploads with
  the same part size and completed, 16 files in flight, no parquet work and no commit: what the store costs alone;
- ``df.write.format("s3parquet")`` of the same rows as a 40-task DataFrame (round-robin: every task holds every
  day), without and with ``spark_ext.write`` (its rebalance by ``day``);
- Spark's built-in parquet writer to local disk (``df.write.partitionBy("day").parquet``), the same 40 tasks.
The DataFrame is cached before the clock starts, so each Spark row times the write alone. Each run writes to a fresh
prefix; afterwards the data is read back with ``s3io.read_parquet`` and its rows and checksum compared with the
table's. Requests are counted where the timed client talks (the keep-alive proxy in front of moto, or the
endpoint itself); "requests per file" divides a write's requests (tasks and commit) by the files it made.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from benchmarks.api import Options, Report
from benchmarks.infra import ACCESS_KEY, REGION, SECRET_KEY, Clock, Measurement, environment
from benchmarks.parquet_data import checksum, delete_prefix, make_table, s3_client
from benchmarks.results import markdown_table, median
from benchmarks.servers import Server, servers

MiB = 1024 * 1024
BUCKET = "bench-writing"
ROWS, ROWS_QUICK = 2_000_000, 200_000
DAYS = 5
TARGET = 8 * MiB
TASKS = 40
PART_SIZE = 8 * MiB
FLOOR_FILES_IN_FLIGHT = 16
MASTER = "local[2]"
SPARK_RUNS = 2  # Spark rows run at most this often per server (each writes ~40 MB through moto's ~3 ms/request)
COLUMNS = ["id", "x", "category"]  # what the checksum covers (benchmarks.parquet_data.checksum)


def make_data(rows: int) -> pa.Table:
    """The seeded table: parquet_data's columns plus ``day`` (five values, row i in day i mod 5)."""
    table = make_table(0, rows)
    days = pa.array([f"2026-11-{1 + i % DAYS:02d}" for i in range(rows)])
    return table.append_column("day", days)


@dataclass
class RunResult:
    measurement: Measurement
    files: list[int]  # sizes of the data files made
    rows_back: int
    checksum_back: str
    server_cpu: float


@dataclass
class Outcome:
    results: list[RunResult] = field(default_factory=list)
    failure: str | None = None


def _credentials() -> Any:
    import s3io

    return s3io.Credentials(ACCESS_KEY, SECRET_KEY)


def _data_sizes(server: Server, prefix: str) -> list[int]:
    pages = s3_client(server.setup_url).get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
    return sorted(
        o["Size"] for page in pages for o in page.get("Contents", []) if "/_" not in "/" + o["Key"][len(prefix) :]
    )


def _read_back(server: Server, prefix: str) -> tuple[int, str]:
    import s3io

    url = f"s3://{BUCKET}/{prefix}"
    table = s3io.read_parquet(url, COLUMNS, endpoint_url=server.setup_url, region=REGION, credentials=_credentials())
    return table.num_rows, checksum(table)


def _timed(server: Server, prefix: str, write: Any, *, parquet: bool = True) -> RunResult:
    """Run ``write(url, endpoint)`` on the clock; the files it made; read them back (``parquet``); delete them."""
    target = server.target(0.0)
    url = f"s3://{BUCKET}/{prefix}"
    clock = Clock(target.counter)
    served = server.cpu()
    try:
        with clock:
            write(url, target.url)
        cpu = server.cpu() - served
        assert clock.result is not None
        rows, digest = _read_back(server, prefix) if parquet else (0, "")
        return RunResult(clock.result, _data_sizes(server, prefix), rows, digest, cpu)
    finally:
        delete_prefix(server.setup_url, BUCKET, prefix)


def _write_parquet(table: pa.Table) -> Any:
    def write(url: str, endpoint: str) -> None:
        import s3io

        s3io.write_parquet(
            table,
            url,
            partition_by="day",
            target_file_size=TARGET,
            part_size=PART_SIZE,
            grace_period=0,
            endpoint_url=endpoint,
            region=REGION,
            credentials=_credentials(),
        )

    return write


def _floor(sizes: list[int]) -> Any:
    """The same files' bytes as multipart uploads of the same part size, completed; no parquet, no commit."""

    def write(url: str, endpoint: str) -> None:
        import s3io

        bucket, _, prefix = url.removeprefix("s3://").partition("/")

        async def main() -> None:
            slots = asyncio.Semaphore(FLOOR_FILES_IN_FLIGHT)
            async with s3io.S3Client(endpoint_url=endpoint, region=REGION, credentials=_credentials()) as s3:

                async def one(n: int, size: int) -> None:
                    async with slots:
                        key = f"{prefix}floor-{n:04d}.parquet"
                        upload = await s3.create_multipart_upload(bucket, key)
                        parts = []
                        for number, start in enumerate(range(0, max(size, 1), PART_SIZE), start=1):
                            body = b"\0" * min(PART_SIZE, size - start)
                            parts.append((number, await s3.upload_part(bucket, key, upload, number, body)))
                        await s3.complete_multipart_upload(bucket, key, upload, parts)

                await asyncio.gather(*(one(n, size) for n, size in enumerate(sizes)))

        asyncio.run(main())

    return write


def _spark_write(df: Any, *, helper: bool) -> Any:
    def write(url: str, endpoint: str) -> None:
        options = {"endpoint": endpoint, "region": REGION, "accessKeyId": ACCESS_KEY, "secretAccessKey": SECRET_KEY}
        options |= {"gracePeriod": "0s", "partSize": str(PART_SIZE)}
        if helper:
            import spark_ext

            spark_ext.write(df, url, partition_by=["day"], target_file_size=TARGET, **options)
            return
        writer = df.write.format("s3parquet").mode("append").option("partitionBy", "day")
        writer = writer.option("targetFileSize", str(TARGET))
        for key, value in options.items():
            writer = writer.option(key, value)
        writer.save(url)

    return write


def _spark_local(df: Any, directory: Path) -> tuple[float, float, list[int]]:
    """(wall, client CPU, file sizes) of Spark's built-in parquet writer to a local directory."""
    shutil.rmtree(directory, ignore_errors=True)
    cpu, started = time.process_time(), time.perf_counter()
    df.write.partitionBy("day").parquet(str(directory))
    wall = time.perf_counter() - started
    sizes = sorted(p.stat().st_size for p in directory.rglob("*.parquet"))
    return wall, time.process_time() - cpu, sizes


ROW_NAMES = (
    "s3io.write_parquet (1 task)",
    "the server's floor: the same files as multipart uploads",
    'df.write.format("s3parquet"), 40 tasks',
    "spark_ext.write (rebalance by day), 40 tasks",
)
LOCAL_ROW = "Spark built-in parquet to local disk, 40 tasks"


def measure(server_list: tuple[Server, ...], table: pa.Table, df: Any, runs: int, local_dir: Path) -> Any:
    outcomes: dict[tuple[str, str], Outcome] = {(s.label, name): Outcome() for s in server_list for name in ROW_NAMES}
    local: list[tuple[float, float, list[int]]] = []
    serial = 0
    for server in server_list:
        s3_client(server.setup_url).create_bucket(Bucket=BUCKET)
    for repetition in range(runs):
        for server in server_list:
            for name in ROW_NAMES:
                outcome = outcomes[server.label, name]
                spark_row = name.startswith(("df.", "spark_ext"))
                if outcome.failure or (spark_row and len(outcome.results) >= SPARK_RUNS):
                    continue
                if name.startswith("the server's floor"):
                    written = outcomes[server.label, ROW_NAMES[0]].results
                    if not written:
                        continue
                    write = _floor(written[-1].files)
                elif name.startswith("s3io"):
                    write = _write_parquet(table)
                else:
                    write = _spark_write(df, helper=name.startswith("spark_ext"))
                serial += 1
                try:
                    floor = name.startswith("the server's floor")
                    result = _timed(server, f"run-{serial:03d}/", write, parquet=not floor)
                except Exception as exc:  # one broken row must not hide the others' figures
                    outcome.failure = f"failed: {type(exc).__name__}: {exc}"[:300]
                    print(f"  run {repetition + 1}: {server.label}: {name}: {outcome.failure}", flush=True)
                    continue
                outcome.results.append(result)
                print(
                    f"  run {repetition + 1}: {server.label}: {name}: {result.measurement.wall:.2f} s, "
                    f"{len(result.files)} files, {result.measurement.requests.total} requests",
                    flush=True,
                )
        local.append(_spark_local(df, local_dir))
        print(f"  run {repetition + 1}: {LOCAL_ROW}: {local[-1][0]:.2f} s, {len(local[-1][2])} files", flush=True)
    return outcomes, local


def _sizes(files: list[int]) -> str:
    if not files:
        return "0 files"
    mib = [size / MiB for size in files]
    small = sum(1 for size in files if size < TARGET / 4)
    return (
        f"{len(files)} files: {min(mib):.2f} / {median(mib):.2f} / {max(mib):.2f} MiB "
        f"(min / median / max); {small} under a quarter of the target"
    )


def render(
    server_list: tuple[Server, ...], table: pa.Table, outcomes: Any, local: list[tuple[float, float, list[int]]]
) -> str:
    expected = (table.num_rows, checksum(table.select(COLUMNS)))
    arrow_mb = table.nbytes / 1e6
    rows = []
    for server in server_list:
        floor = outcomes[server.label, ROW_NAMES[1]].results
        floor_wall = median([r.measurement.wall for r in floor]) if floor else None
        for name in ROW_NAMES:
            outcome = outcomes[server.label, name]
            if not outcome.results:
                rows.append([server.label, name, outcome.failure or "not run", *[""] * 7])
                continue
            results = outcome.results
            walls = [r.measurement.wall for r in results]
            w = median(walls)
            files = results[-1].files
            written = sum(files) / 1e6
            requests = median([r.measurement.requests.total for r in results])
            kinds = ", ".join(
                f"{median([r.measurement.requests.kind(k) for r in results]):.0f} {k.upper()}"
                for k in ("put", "post", "get", "head", "list", "delete")
            )
            floor_row = name.startswith("the server's floor")
            good = floor_row or {(r.rows_back, r.checksum_back) for r in results} == {expected}
            rows.append(
                [
                    server.label,
                    name,
                    str(len(results)),
                    f"{w:.2f} ({min(walls):.2f}-{max(walls):.2f})",
                    "—" if floor_row else f"{arrow_mb / w:.1f} in, {written / w:.1f} out",
                    _sizes(files),
                    f"{requests:.0f} ({kinds}); {requests / max(1, len(files)):.1f} per file",
                    f"{median([r.measurement.cpu for r in results]):.2f} / "
                    f"{median([r.server_cpu for r in results]):.2f}",
                    "—" if floor_wall is None or floor_row else f"{w / floor_wall:.2f}",
                    "—" if floor_row else ("✓" if good else "✗ MISMATCH"),
                ]
            )
    walls = [wall for wall, _, _ in local]
    rows.append(
        [
            "— (local disk)",
            LOCAL_ROW,
            str(len(local)),
            f"{median(walls):.2f} ({min(walls):.2f}-{max(walls):.2f})",
            f"{arrow_mb / median(walls):.1f} in, {sum(local[-1][2]) / 1e6 / median(walls):.1f} out",
            _sizes(local[-1][2]),
            "— (local disk)",
            f"{median([cpu for _, cpu, _ in local]):.2f} / —",
            "—",
            "—",
        ]
    )
    headers = [
        "server",
        "write",
        "runs",
        "wall s, median (min-max)",
        "MB/s (Arrow in, parquet out)",
        "files (sizes)",
        "requests",
        "client / server CPU s",
        "wall ÷ floor",
        "read back",
    ]
    return markdown_table(headers, rows, text_columns=2)


def run(stack: Any, options: Options) -> Report:
    """Generate the table, start one local[2] session (its DataFrame cached), measure, stop."""
    rows = ROWS_QUICK if options.quick else ROWS
    table = make_data(rows)
    server_list = servers(stack, options.servers)
    with (
        tempfile.TemporaryDirectory(prefix="s3io-bench-writing-") as tmp,
        environment(PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable),
    ):
        from spark_ext.session import local_session

        spark = local_session(MASTER, "bench-writing")
        try:
            df = spark.createDataFrame(table).repartition(TASKS).cache()
            df.count()
            outcomes, local = measure(server_list, table, df, options.runs, Path(tmp) / "local")
        finally:
            spark.stop()
    body = (
        f"{rows:,} rows ({table.nbytes / 1e6:.0f} MB of Arrow data), {DAYS} partition directories by `day`, "
        f"target file size {TARGET // MiB} MiB, part size {PART_SIZE // MiB} MiB; Spark rows: a cached "
        f"{TASKS}-partition DataFrame on {MASTER}, at most {SPARK_RUNS} runs per server.\n\n"
        f"{render(server_list, table, outcomes, local)}\n\n{NOTES}"
    )
    return Report("Writing: s3io.write_parquet, the s3parquet writer and spark_ext.write (`writing`)", body)


NOTES = """- "the server's floor" uploads the files `s3io.write_parquet` made (their sizes) as multipart uploads of the
  same part size, 16 files in flight: the store's cost for those bytes alone. "wall ÷ floor" compares each write
  with it (the Spark rows also pay Spark's scheduling and Arrow hand-off).
- A file count "under a quarter of the target" is the small-file count a later compaction would take as input.
- Requests of a write: per file one CreateMultipartUpload, its UploadParts and one CompleteMultipartUpload (a
  POST each); per commit the entry (claim, commit, publish: 3 PUTs), the listings of uploads and entries, and one
  GET per entry still in the journal. s3io's store probe (about twenty-five small requests, once per endpoint and
  process) is paid before the first write of a process, and is not in these counts."""
