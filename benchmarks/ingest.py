"""small_files and large_files: read a whole parquet data set from S3 into one Arrow table, s3io vs its peers.

Why: per-file round trips (~20 ms to the first byte on S3) dominate small-file ingest, and per-stream
throughput dominates large files. Every answer waits 20 ms before its first byte: moto behind the keep-alive
proxy, and (small_files) the in-memory endpoint, whose timer costs no CPU, so its rows show the readers' own
costs where moto's show moto's. Rows are s3io, the peers a user would reach for, and the limit: raw
concurrent aiohttp GETs of bytes whose keys and sizes are known in advance (no listing, unsigned, decoded only
after the clock stops), i.e. what the server can deliver on this machine.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable
from dataclasses import dataclass

import aiohttp
import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks.api import Options, Report
from benchmarks.infra import ACCESS_KEY, REGION, SECRET_KEY, Clock, Measurement, Stack, release_free_memory
from benchmarks.parquet_data import Dataset, Spec, build, checksum
from benchmarks.results import markdown_table, median
from benchmarks.servers import Target, servers

FIRST_BYTE_LATENCY = 0.020  # seconds the proxy adds before every response (S3's typical time to first byte)
LIMIT_CONCURRENCY = 64
PART_SIZE = 8 * 1024 * 1024  # ranged-GET part size of the large-file limit (as AWS CRT uses)

SMALL = Spec("bench-small-files", "small", files=500, rows_per_file=4300, row_group_rows=1 << 20)  # ~100 KB each
SMALL_QUICK = Spec("bench-small-files-quick", "small", files=50, rows_per_file=4300, row_group_rows=1 << 20)
LARGE = Spec("bench-large-files", "large", files=2, rows_per_file=3_440_000, row_group_rows=1 << 20)  # ~64 MiB
LARGE_QUICK = Spec("bench-large-files-quick", "large", files=2, rows_per_file=430_000, row_group_rows=1 << 17)


@dataclass(frozen=True)
class Setup:
    """A data set on one server, and the endpoint every reader is pointed at (which counts the requests)."""

    dataset: Dataset
    target: Target
    server: str = "moto (keep-alive proxy)"  # the server's label in tables

    @property
    def endpoint(self) -> str:
        return self.target.url

    @property
    def path(self) -> str:
        """``bucket/prefix``, as fsspec and pyarrow filesystems take it."""
        return f"{self.dataset.bucket}/{self.dataset.prefix}"


@dataclass(frozen=True)
class Row:
    """One reader. `kind` is "ours", "peer", "limit" or "reference"; `read` times itself with the clock."""

    name: str
    kind: str
    read: Callable[[Setup, Clock], pa.Table]


# ------------------------------------------------------------------------------------------------ ours


def read_s3io(setup: Setup, clock: Clock) -> pa.Table:
    """s3io.read_parquet over the prefix (blocking API: a fresh client on s3io's background loop per call)."""
    import s3io

    with clock:
        return s3io.read_parquet(
            f"s3://{setup.path}/",
            endpoint_url=setup.endpoint,
            region=REGION,
            credentials=s3io.Credentials(ACCESS_KEY, SECRET_KEY),
        )


def read_dataset_s3io_fs(setup: Setup, clock: Clock) -> pa.Table:
    """pyarrow.dataset over s3io.S3FileSystem, the s3fs drop-in."""
    import pyarrow.dataset as ds

    from s3io.fs import S3FileSystem

    with clock:
        fs = S3FileSystem(**_fs_options(setup))
        try:
            return ds.dataset(setup.path, filesystem=fs, format="parquet").to_table()
        finally:
            fs.close()


# ----------------------------------------------------------------------------------------------- peers


def _fs_options(setup: Setup) -> dict[str, object]:
    """s3fs storage options; a fresh instance per run, so no listing cache carries over between runs."""
    return {
        "key": ACCESS_KEY,
        "secret": SECRET_KEY,
        "endpoint_url": setup.endpoint,
        "client_kwargs": {"region_name": REGION},
        "skip_instance_cache": True,
    }


def read_s3fs_loop(setup: Setup, clock: Clock) -> pa.Table:
    """The loop people write first: list with s3fs, then `pq.read_table(path, filesystem=fs)` file by file."""
    import s3fs

    with clock:
        fs = s3fs.S3FileSystem(**_fs_options(setup))
        paths = sorted(fs.find(setup.path))
        return pa.concat_tables([pq.read_table(path, filesystem=fs) for path in paths])


def read_dataset_s3fs(setup: Setup, clock: Clock) -> pa.Table:
    """pyarrow.dataset over s3fs (pyarrow wraps it in its fsspec handler); pyarrow's threads read files."""
    import pyarrow.dataset as ds
    import s3fs

    with clock:
        fs = s3fs.S3FileSystem(**_fs_options(setup))
        return ds.dataset(setup.path, filesystem=fs, format="parquet").to_table()


def read_dataset_pyarrow_s3(setup: Setup, clock: Clock) -> pa.Table:
    """pyarrow.dataset over pyarrow's own C++ S3 filesystem (AWS SDK)."""
    import pyarrow.dataset as ds
    import pyarrow.fs as pafs

    with clock:
        fs = pafs.S3FileSystem(
            access_key=ACCESS_KEY,
            secret_key=SECRET_KEY,
            region=REGION,
            endpoint_override=setup.endpoint.removeprefix("http://"),
            scheme="http",
        )
        return ds.dataset(setup.path, filesystem=fs, format="parquet").to_table()


# ----------------------------------------------------------------------------------------------- limits


async def _get_all(setup: Setup, parts: list[tuple[str, int | None, int | None]]) -> list[bytes]:
    """Unsigned GETs of (key, start, end-inclusive) parts, at most LIMIT_CONCURRENCY in flight, in order."""
    limit = asyncio.Semaphore(LIMIT_CONCURRENCY)
    connector = aiohttp.TCPConnector(limit=LIMIT_CONCURRENCY)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def get(key: str, start: int | None, end: int | None) -> bytes:
            headers = {"Range": f"bytes={start}-{end}"} if start is not None else {}
            async with limit, session.get(f"{setup.endpoint}/{setup.dataset.bucket}/{key}", headers=headers) as r:
                r.raise_for_status()
                return await r.read()

        return await asyncio.gather(*(get(*part) for part in parts))


def _decode(blobs: list[bytes]) -> pa.Table:
    return pa.concat_tables([pq.read_table(pa.BufferReader(blob)) for blob in blobs])


def read_raw_whole(setup: Setup, clock: Clock) -> pa.Table:
    """The small-file limit: every object in one GET, 64 in flight; parquet decoded after the clock stops."""
    with clock:
        blobs = asyncio.run(_get_all(setup, [(key, None, None) for key in setup.dataset.keys]))
    return _decode(blobs)


def read_raw_ranged(setup: Setup, clock: Clock) -> pa.Table:
    """The large-file limit: 8 MiB ranged GETs of every object, 64 in flight; decoded after the clock stops."""
    parts: list[tuple[str, int | None, int | None]] = []
    for key, size in zip(setup.dataset.keys, setup.dataset.sizes, strict=True):
        parts += [(key, start, min(start + PART_SIZE, size) - 1) for start in range(0, size, PART_SIZE)]
    with clock:
        chunks = asyncio.run(_get_all(setup, parts))
    blobs, index = [], 0
    for size in setup.dataset.sizes:
        count = -(-size // PART_SIZE)
        blobs.append(b"".join(chunks[index : index + count]))
        index += count
    return _decode(blobs)


OURS = (
    Row("s3io `read_parquet`", "ours", read_s3io),
    Row("`pyarrow.dataset` over s3io `S3FileSystem` (s3fs drop-in)", "ours", read_dataset_s3io_fs),
)
PEERS = (
    Row("s3fs + `pq.read_table`, sequential loop", "peer", read_s3fs_loop),
    Row("`pyarrow.dataset` over s3fs", "peer", read_dataset_s3fs),
    Row("`pyarrow.dataset` over `pyarrow.fs.S3FileSystem`", "peer", read_dataset_pyarrow_s3),
)
SMALL_ROWS = (*OURS, *PEERS, Row("aiohttp, 64 concurrent whole-object GETs (limit)", "limit", read_raw_whole))
LARGE_ROWS = (
    *OURS,
    *PEERS,
    Row("aiohttp, 64 concurrent 8 MiB ranged GETs (limit)", "limit", read_raw_ranged),
    Row("aiohttp, concurrent whole-object GETs (one per file)", "reference", read_raw_whole),
)


# ------------------------------------------------------------------------------------------------ harness


@dataclass
class Outcome:
    """A row's runs: measurements, and what its tables gave (rows, checksum) or why it failed."""

    measurements: list[Measurement]
    rows_read: set[int]
    checksums: set[str]
    failure: str | None = None


def measure(setups: list[Setup], rows: tuple[Row, ...], runs: int, label: str) -> dict[tuple[str, str], Outcome]:
    """Every row on every server `runs` times, interleaved with the order rotated each run (load drift hits all
    alike); outcomes by (server label, row name)."""
    cases = [(setup, row) for setup in setups for row in rows]
    outcomes = {(setup.server, row.name): Outcome([], set(), set()) for setup, row in cases}
    for repetition in range(runs):
        shift = repetition % len(cases)
        for setup, row in cases[shift:] + cases[:shift]:
            outcome = outcomes[setup.server, row.name]
            if outcome.failure:
                continue
            release_free_memory()
            clock = Clock(setup.target.counter, sample_rss=True)
            try:
                table = row.read(setup, clock)
            except Exception as exc:  # one broken reader must not hide the others' figures
                outcome.failure = f"failed: {type(exc).__name__}: {exc}"[:300]
                continue
            finally:
                gc.collect()  # finalizers (s3fs sessions) run here, outside any event loop
            assert clock.result is not None
            outcome.measurements.append(clock.result)
            outcome.rows_read.add(table.num_rows)
            outcome.checksums.add(checksum(table))
            del table
            print(f"  {label} run {repetition + 1}: {setup.server}: {row.name}: {clock.result.wall:.2f} s", flush=True)
    return outcomes


def _fmt_ratio(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def render(
    dataset: Dataset,
    server_labels: list[str],
    rows: tuple[Row, ...],
    outcomes: dict[tuple[str, str], Outcome],
    throughput: bool,
) -> str:
    """The table: per server and row, medians, ratios to the best peer and to the limit on the same server,
    rows read and checksum check."""
    table_rows = []
    for server in server_labels:

        def wall(name: str, server: str = server) -> float | None:
            runs = outcomes[server, name].measurements
            return median([m.wall for m in runs]) if runs else None

        peer_walls = [w for row in rows if row.kind == "peer" and (w := wall(row.name)) is not None]
        best_peer = min(peer_walls) if peer_walls else None
        limit_walls = [w for row in rows if row.kind == "limit" and (w := wall(row.name)) is not None]
        limit = limit_walls[0] if limit_walls else None
        files = len(dataset.keys)
        for row in rows:
            outcome = outcomes[server, row.name]
            if not outcome.measurements:
                blank = [""] * (10 if throughput else 9)
                table_rows.append([server, row.name, row.kind, outcome.failure or "not run", *blank])
                continue
            runs = outcome.measurements
            w = median([m.wall for m in runs])
            requests = median([m.requests.total for m in runs])
            gets = median([m.requests.kind("get") for m in runs])
            lists = median([m.requests.kind("list") for m in runs])
            heads = median([m.requests.kind("head") for m in runs])
            good = outcome.checksums == {dataset.checksum} and outcome.rows_read == {dataset.rows}
            cells = [
                server,
                row.name,
                row.kind,
                f"{w:.2f} ({min(m.wall for m in runs):.2f}-{max(m.wall for m in runs):.2f})",
            ]
            if throughput:
                cells.append(f"{dataset.total_bytes / w / 1e6:.0f}")
            cells += [
                f"{requests:.0f} ({gets:.0f} GET, {heads:.0f} HEAD, {lists:.0f} LIST)",
                f"{requests / files:.2f}",
                f"{median([m.cpu for m in runs]):.2f}",
                f"{median([m.rss_growth or 0 for m in runs]) / 1e6:.0f}",
                _fmt_ratio(w / best_peer if best_peer else None),
                _fmt_ratio(w / limit if limit else None),
                ", ".join(str(n) for n in sorted(outcome.rows_read)),
                ", ".join(sorted(outcome.checksums)) + (" ✓" if good else " ✗ MISMATCH"),
            ]
            table_rows.append(cells)
    headers = ["server", "reader", "kind", "wall s, median (min-max)"]
    if throughput:
        headers.append("MB/s")
    headers += [
        "requests",
        "requests/file",
        "client CPU s",
        "peak RSS growth MB",
        "wall ÷ best peer",
        "wall ÷ limit",
        "rows read",
        "checksum",
    ]
    return markdown_table(headers, table_rows, text_columns=3)


def _describe(dataset: Dataset, runs: int, server_labels: list[str]) -> str:
    sizes = dataset.sizes
    return (
        f"{len(sizes)} parquet files under `s3://{dataset.bucket}/{dataset.prefix}/`, "
        f"{min(sizes) / 1e3:,.1f}-{max(sizes) / 1e3:,.1f} KB each ({dataset.total_bytes / 1e6:,.1f} MB in all), "
        f"{dataset.rows:,} rows, expected checksum `{dataset.checksum}`; generated (seed in "
        f"`benchmarks/parquet_data.py`) and uploaded to each server in {dataset.seconds_to_build:.1f} s (the "
        f"last upload). Servers: {', '.join(server_labels)}. Median of {runs} runs per row, rows of all servers "
        f"interleaved with the order rotated each run. Every answer waits {FIRST_BYTE_LATENCY * 1000:.0f} ms "
        "before its first byte (the proxy in front of moto, or the endpoint's own timer) on kept-alive "
        "connections; request counts are what the proxy or the endpoint saw."
    )


NOTES = """
- Wall and CPU include creating the filesystem/client and listing (except the limit rows, which are given
  keys and sizes, send unsigned GETs and decode parquet after the clock stops). Client CPU is user+sys of
  the benchmark process over all its threads; the servers and the proxy run in other processes on the same
  cores.
- "wall ÷ best peer" below 1 means faster than the best peer; "wall ÷ limit" near 1 means at the limit; both
  compare rows on the same server.
- peak RSS growth: the client process's resident set sampled every 10 ms, peak minus the size at the start
  (freed memory is handed back to the OS before each run); it includes the result table itself.
- checksum: order-independent digest of row count and the sums of `id`, `x` and string lengths; ✓ = equals the
  generated data's.
"""


def _run(
    stack: Stack,
    options: Options,
    spec: Spec,
    rows: tuple[Row, ...],
    label: str,
    throughput: bool,
    names: tuple[str, ...],
) -> str:
    setups: list[Setup] = []
    dataset: Dataset | None = None
    for server in servers(stack, names):
        dataset = build(server.setup_url, spec)
        setups.append(Setup(dataset, server.target(FIRST_BYTE_LATENCY), server.label))
        print(f"  {label}: {len(dataset.keys)} files, {dataset.total_bytes / 1e6:.1f} MB on {server.label}", flush=True)
    assert dataset is not None, "no server to run against"
    labels = [setup.server for setup in setups]
    outcomes = measure(setups, rows, options.runs, label)
    table = render(dataset, labels, rows, outcomes, throughput)
    return f"{_describe(dataset, options.runs, labels)}\n\n{table}\n{NOTES}"


def run_small_files(stack: Stack, options: Options) -> Report:
    """500 x ~100 KB parquet files (50 with --quick), on each server of `options.servers`: round trips per file
    decide."""
    spec = SMALL_QUICK if options.quick else SMALL
    body = _run(stack, options, spec, SMALL_ROWS, "small_files", False, options.servers)
    targets = (
        "Targets (issue 3): s3io ≥ 3x faster than the best peer (wall ÷ best peer ≤ 0.33), ≤ 1.2x the limit, "
        "1 request per file."
    )
    return Report("Small files: many ~100 KB parquet files (`small_files`)", f"{body}\n{targets}\n")


def run_large_files(stack: Stack, options: Options) -> Report:
    """2 x ~64 MiB parquet files (~8 MiB with --quick) on each server: throughput per stream and decoding decide
    (moto's Python server bounds the bytes per second; the in-memory endpoint shows the readers' own cost)."""
    body = _run(
        stack, options, LARGE_QUICK if options.quick else LARGE, LARGE_ROWS, "large_files", True, options.servers
    )
    targets = (
        "Targets: issue 3, s3io ≥ 0.9x the throughput of the raw parallel ranged GETs (wall ÷ limit ≤ 1.11); "
        "issue 13, s3io at or below `pyarrow.dataset` over pyarrow's own S3 filesystem in the same run (wall ÷ "
        "best peer ≤ 1.00). The whole-object reference row shows what one stream per file gives."
    )
    return Report("Large files: two ~64 MiB parquet files (`large_files`)", f"{body}\n{targets}\n")
