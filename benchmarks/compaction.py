"""compaction: rewrite 5,000 small parquet files (10-20 KB, five Hive partitions) into a few large ones.

Why: landing zones fill with tiny files and the compaction job (``spark_ext.compact``) must get through them at a
useful rate: files/s and MB/s of input, and few requests per input file (each input costs one whole GET, read by the
task that rewrites it, and its share of a DELETE batch; plans are made from the listing). Rows: the job in-process
(``spark=None``: groups run on the driver's event loop), in worker processes (``processes=2``) and on Spark
(``local[2]``, one Spark task per group), each against every server of the run (benchmarks/servers.py): moto, where
moto's ~3 ms of CPU per request bounds the job, and the in-memory endpoint, where the job's own costs show. Each run
compacts freshly uploaded data (compaction deletes its inputs), generated once and uploaded straight to the server
before the clock starts; the job talks to moto through the keep-alive proxy, or to the endpoint directly, with no
added latency, and that counts its requests. After each run the data is read back with ``s3io.read_parquet`` and its
checksum compared with the generated data's.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from benchmarks.api import Options, Report
from benchmarks.infra import (
    ACCESS_KEY,
    REGION,
    SECRET_KEY,
    Clock,
    Measurement,
    Stack,
    environment,
    reaped_children_cpu_seconds,
)
from benchmarks.parquet_data import (
    add_sums,
    checksum,
    delete_prefix,
    digest,
    make_table,
    parquet_bytes,
    s3_client,
    table_sums,
    upload_objects,
)
from benchmarks.results import markdown_table, median
from benchmarks.servers import Server, servers

MiB = 1024 * 1024
BUCKET = "bench-compaction"
PARTITIONS = tuple(f"day=2026-11-{d:02d}" for d in range(1, 6))
FILES = 5000
FILES_QUICK = 500
MIN_ROWS, MAX_ROWS = 400, 800  # ~10-20 KB per file
TARGET_FILE_SIZE = 4 * MiB  # ~4 groups per partition: enough groups to keep 4 concurrent groups busy
MIN_INPUT_FILES = 5  # the job's default
MASTER = "local[2]"
SPARK_RUNS = 2  # the Spark row runs at most this often per server: each run uploads 5,000 files (~15 s on moto)
COLUMNS = ["id", "x", "category"]  # what the checksum covers


@dataclass(frozen=True)
class Landing:
    """The generated files (bytes kept in memory, uploaded afresh for every run) and what a reader must see."""

    objects: tuple[tuple[str, bytes], ...]  # (key relative to the run's prefix, body)
    rows: int
    checksum: str
    seconds_to_generate: float

    @property
    def total_bytes(self) -> int:
        return sum(len(body) for _, body in self.objects)


def generate(files: int) -> Landing:
    """File i: 400-800 rows (deterministic), ids from i x 1000, in partition i mod 5."""
    started = time.perf_counter()
    objects = []
    sums = []
    width = len(str(files - 1))
    for index in range(files):
        rows = MIN_ROWS + (index * 7919) % (MAX_ROWS - MIN_ROWS + 1)
        table = make_table(index, rows, first_id=index * 1000)
        sums.append(table_sums(table))
        partition = PARTITIONS[index % len(PARTITIONS)]
        objects.append((f"{partition}/part-{index:0{width}d}.parquet", parquet_bytes(table, 1 << 20)))
    totals = add_sums(sums)
    return Landing(tuple(objects), totals[0], digest(totals), time.perf_counter() - started)


@dataclass
class Phases:
    """When each phase of the job was first reported (seconds since the job started), from its progress events."""

    first_seen: dict[str, float] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, progress: Any) -> None:  # called on s3io's background loop thread
        with self._lock:
            self.first_seen.setdefault(progress.phase, progress.elapsed)

    def split(self, duration: float) -> dict[str, float]:
        """Seconds in: lock+list+recovery, plan, rewrite+verify+commit, publish+delete+final listing."""
        marks = [0.0] + [self.first_seen.get(p, float("nan")) for p in ("planning", "rewriting", "publishing")]
        marks.append(self.first_seen.get("done", duration))
        names = ("setup", "plan", "rewrite", "publish")
        return {name: marks[i + 1] - marks[i] for i, name in enumerate(names)}


@dataclass(frozen=True)
class RunResult:
    measurement: Measurement
    report: Any  # s3io.compaction.CompactionReport
    phases: dict[str, float]
    rows_after: int
    checksum_after: str
    files_listed_after: int
    hidden_left: int  # lock, journal or staging objects left under the prefix
    server_cpu: dict[str, float]  # CPU seconds moto, the proxies and the endpoint used during the call
    before: tuple[int, str, float] | None = None  # rows, checksum, seconds of a read before compacting
    worker_cpu: float | None = None  # processes=N: CPU seconds of the worker processes


@dataclass(frozen=True)
class Row:
    name: str
    kind: str  # "in-process" | "processes" | "spark"
    spark: Callable[[], Any]  # the session to pass (None for in-process)
    max_runs: int | None = None  # fewer runs than the others (time budget)
    processes: int = 0  # the job's `processes` option: groups in that many worker processes


@dataclass
class Outcome:
    results: list[RunResult] = field(default_factory=list)
    failure: str | None = None


def _compact_once(
    server: Server, landing: Landing, spark: Any, prefix: str, *, read_before: bool = False, processes: int = 0
) -> RunResult:
    """Upload fresh data under `prefix` (and, with `read_before`, read it back first), compact it (timed), then
    verify what is left and delete it."""
    import s3io
    import spark_ext

    upload_objects(server.setup_url, BUCKET, [(prefix + key, body) for key, body in landing.objects])
    url = f"s3://{BUCKET}/{prefix}"
    credentials = s3io.Credentials(ACCESS_KEY, SECRET_KEY)
    target = server.target(0.0)
    try:
        before = None
        if read_before:
            started = time.perf_counter()
            table = s3io.read_parquet(url, COLUMNS, endpoint_url=target.url, region=REGION, credentials=credentials)
            before = (table.num_rows, checksum(table), time.perf_counter() - started)
            del table
        phases = Phases()
        clock = Clock(target.counter)
        cpu = server.stack.server_cpu()
        workers = _forkserver_cpu()
        with clock:
            report = spark_ext.compact(
                spark,
                url,
                endpoint_url=target.url,
                region=REGION,
                credentials=credentials,
                target_file_size=TARGET_FILE_SIZE,
                min_input_files=MIN_INPUT_FILES,
                grace_period=0.0,
                processes=processes,
                progress=phases,
            )
        cpu_after = server.stack.server_cpu()
        workers_after = _forkserver_cpu()
        assert clock.result is not None
        after = s3io.read_parquet(url, COLUMNS, endpoint_url=target.url, region=REGION, credentials=credentials)
        listed = _list_keys(server, prefix)
        hidden = sum(1 for key in listed if "/_" in "/" + key[len(prefix) :])
        return RunResult(
            clock.result,
            report,
            phases.split(report.duration_s),
            after.num_rows,
            checksum(after),
            len(listed) - hidden,
            hidden,
            {name: cpu_after[name] - cpu[name] for name in cpu},
            before,
            (workers_after[1] - (workers[1] if workers[0] == workers_after[0] else 0.0)) if processes else None,
        )
    finally:
        delete_prefix(server.setup_url, BUCKET, prefix)


def _forkserver_cpu() -> tuple[int | None, float]:
    """(pid, CPU seconds of the worker processes it has reaped) of the forkserver that starts the job's workers
    (``processes=N``); the pool joins its workers before the job returns, so a run's are all counted once it has.
    The forkserver's own start (importing the workers' code, once per driver) is not counted. (None, 0.0) before
    it has started."""
    from multiprocessing import forkserver

    pid = getattr(forkserver._forkserver, "_forkserver_pid", None)  # no public handle
    return pid, reaped_children_cpu_seconds(pid)


FLOOR_CONCURRENCY = 64


@dataclass(frozen=True)
class Floor:
    """One run of the server's floor: wall seconds, requests, and the CPU seconds it took on each side."""

    wall: float
    requests: int
    client_cpu: float  # user+sys of this process (s3io's client and its event loop)
    server_cpu: float  # user+sys of the server side (moto and its proxy, or the endpoint)


def _floor_once(server: Server, landing: Landing, prefix: str) -> Floor:
    """The server's floor for the job's I/O: every input fetched once and outputs of the same total size written
    (one PUT per target-size output), 64 requests in flight, through s3io's client; no parquet work."""
    import asyncio

    import s3io

    upload_objects(server.setup_url, BUCKET, [(prefix + key, body) for key, body in landing.objects])
    target = server.target(0.0)
    total = sum(len(body) for _, body in landing.objects)
    outputs = max(1, -(-total // TARGET_FILE_SIZE))
    blob = b"\0" * min(TARGET_FILE_SIZE, total)

    async def io() -> int:
        limit = asyncio.Semaphore(FLOOR_CONCURRENCY)
        async with s3io.S3Client(
            endpoint_url=target.url, region=REGION, credentials=s3io.Credentials(ACCESS_KEY, SECRET_KEY)
        ) as s3:

            async def get(key: str) -> None:
                async with limit:
                    await s3.get_object(BUCKET, prefix + key)

            async def put(n: int) -> None:
                async with limit:
                    await s3.put_object(BUCKET, f"{prefix}floor-out-{n}.bin", blob)

            await asyncio.gather(*(get(key) for key, _ in landing.objects), *(put(n) for n in range(outputs)))
            return s3.stats().request_count

    try:
        served, cpu, started = server.cpu(), time.process_time(), time.perf_counter()
        requests = asyncio.run(io())
        wall = time.perf_counter() - started
        return Floor(wall, requests, time.process_time() - cpu, server.cpu() - served)
    finally:
        delete_prefix(server.setup_url, BUCKET, prefix)


@dataclass(frozen=True)
class Costs:
    """CPU seconds of the job's parquet work alone (one thread, no I/O) and the cost of one Spark job here."""

    decode: float  # every input's footer parsed and its rows decoded
    parquet: float  # the task's whole parquet work: decode, conform, checksum, encode, read back and checksum
    spark_job: float  # wall seconds of a trivial one-task Spark job (median of SPARK_JOB_PROBES)


SPARK_JOB_PROBES = 20
PARQUET_COST_RUNS = 3  # CPU seconds on this shared VM drift by tens of percent from one measurement to the next
PROCESSES = 2  # the machine's cores


def _parquet_costs(landing: Landing, groups: int) -> tuple[float, float]:
    """(decode, whole parquet work) CPU seconds for every input, in groups of the job's size, on this thread."""
    from s3io.compaction.checksum import TableChecksum
    from s3io.compaction.rewrite import RewriteSettings, _checksum_whole, _Encoder  # the task's own steps
    from s3io.parquet.decode import open_whole, read_batches
    from s3io.s3.types import ObjectInfo

    started = time.process_time()
    for key, body in landing.objects:
        reader = open_whole(body, key)
        for _ in read_batches(reader, range(reader.metadata.num_row_groups), None, url=key):
            pass
    decoded = time.process_time() - started
    by_partition: dict[str, list[tuple[str, bytes]]] = {}
    for key, body in landing.objects:
        by_partition.setdefault(key.partition("/")[0], []).append((key, body))
    per_group = max(1, -(-len(landing.objects) // groups))
    started = time.process_time()
    for members in by_partition.values():
        for first in range(0, len(members), per_group):
            encoder = _Encoder(None, RewriteSettings())
            chunk = members[first : first + per_group]
            encoded = [encoder.add_file(ObjectInfo(BUCKET, k, len(b), f'"{k}"'), b) for k, b in chunk]
            output = b"".join([*encoded, encoder.finish()])
            assert encoder.schema is not None
            _checksum_whole(TableChecksum.for_schema(encoder.schema), output, encoder.schema, "output")
    return decoded, time.process_time() - started


def _spark_job_seconds(spark: Any) -> float:
    """Median wall of a trivial one-task Spark job in this session: what each group's job costs before any work."""
    walls = []
    for n in range(SPARK_JOB_PROBES):
        started = time.perf_counter()
        spark.sparkContext.parallelize([n], 1).map(lambda x: x).collect()
        walls.append(time.perf_counter() - started)
    return median(walls)


def _list_keys(server: Server, prefix: str) -> list[str]:
    pages = s3_client(server.setup_url).get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
    return [obj["Key"] for page in pages for obj in page.get("Contents", [])]


Key = tuple[str, str]  # (server label, row name)


def measure(server_list: tuple[Server, ...], landing: Landing, rows: tuple[Row, ...], runs: int) -> dict[Key, Outcome]:
    """Every row on every server `runs` times, interleaved with the order rotated each run; fresh data for every
    run; the first run on each server also reads the data back before compacting it."""
    cases = [(server, row) for server in server_list for row in rows]
    outcomes = {(server.label, row.name): Outcome() for server, row in cases}
    serial = 0
    for repetition in range(runs):
        shift = repetition % len(cases)
        for server, row in cases[shift:] + cases[:shift]:
            outcome = outcomes[server.label, row.name]
            if outcome.failure or (row.max_runs is not None and len(outcome.results) >= row.max_runs):
                continue
            serial += 1
            started = time.perf_counter()
            first_on_server = not any(o.results for (label, _), o in outcomes.items() if label == server.label)
            try:
                prefix = f"landing-{serial:02d}/"
                result = _compact_once(
                    server, landing, row.spark(), prefix, read_before=first_on_server, processes=row.processes
                )
            except Exception as exc:  # one broken row must not hide the other's figures
                outcome.failure = f"failed: {type(exc).__name__}: {exc}"[:300]
                print(f"  run {repetition + 1}: {server.label}: {row.name}: {outcome.failure}", flush=True)
                continue
            outcome.results.append(result)
            r = result.report
            print(
                f"  run {repetition + 1}: {server.label}: {row.name}: {result.measurement.wall:.2f} s ({r.status}, "
                f"{r.files_before} -> {r.files_after} files, {result.measurement.requests.total} requests; "
                f"with upload and checks {time.perf_counter() - started:.0f} s)",
                flush=True,
            )
    return outcomes


def _med(values: list[float], fmt: str = "{:.2f}") -> str:
    return fmt.format(median(values)) if values else "n/a"


def _joined(values: set[Any]) -> str:
    return ", ".join(str(v) for v in sorted(values))


def _server_cpu(name: str, results: list[RunResult]) -> str:
    """The server side's CPU seconds during the call: moto + its proxy, or the endpoint."""
    if name == "moto":
        moto = _med([r.server_cpu["moto"] for r in results])
        return f"{moto} (moto) + {_med([r.server_cpu['proxy'] for r in results])} (proxy)"
    return _med([r.server_cpu["endpoint"] for r in results])


def _worker_cpu(row: Row, results: list[RunResult]) -> str:
    """The worker processes' CPU seconds (processes=N rows); Spark's Python workers are not counted."""
    if row.kind == "processes":
        return _med([r.worker_cpu or 0.0 for r in results])
    return "not counted" if row.kind == "spark" else "(in driver)"


def render(
    landing: Landing, server_list: tuple[Server, ...], rows: tuple[Row, ...], outcomes: dict[Key, Outcome]
) -> tuple[str, str]:
    """The main table (rates, requests, checks) and where the time and CPU went."""
    files = len(landing.objects)
    main_rows = []
    cost_rows = []
    for server, row in [(server, row) for server in server_list for row in rows]:
        outcome = outcomes[server.label, row.name]
        if not outcome.results:
            main_rows.append([server.label, row.name, outcome.failure or "not run", *[""] * 7])
            continue
        results = outcome.results
        walls = [r.measurement.wall for r in results]
        w = median(walls)
        reports = [r.report for r in results]
        proxy_requests = median([r.measurement.requests.total for r in results])
        report_requests = median([rep.requests for rep in reports])
        kinds = ("get", "put", "head", "delete", "post", "list")
        breakdown = ", ".join(
            f"{median([r.measurement.requests.kind(k) for r in results]):.0f} {k.upper()}" for k in kinds
        )
        good = (
            {r.checksum_after for r in results} == {landing.checksum}
            and {r.rows_after for r in results} == {landing.rows}
            and {rep.rows_rewritten for rep in reports} == {landing.rows}
            and {r.hidden_left for r in results} == {0}
        )
        check = (
            f"rows {_joined({r.rows_after for r in results})}, {_joined({r.checksum_after for r in results})}, "
            f"hidden left {_joined({r.hidden_left for r in results})}" + (" ✓" if good else " ✗ MISMATCH")
        )
        main_rows.append(
            [
                server.label,
                row.name,
                f"{len(results)}",
                f"{w:.2f} ({min(walls):.2f}-{max(walls):.2f})",
                f"{files / w:.0f}",
                f"{landing.total_bytes / w / 1e6:.2f}",
                f"{_joined({rep.status for rep in reports})}: {files} -> "
                f"{_joined({rep.files_after for rep in reports})} files, "
                f"{_joined({len(rep.groups) for rep in reports})} groups, "
                f"{_joined({rep.retries for rep in reports})} retries",
                f"{proxy_requests:.0f} ({breakdown})",
                f"{proxy_requests / files:.2f} / {report_requests / files:.2f}",
                check,
            ]
        )
        splits = [r.phases for r in results]
        sent = median([r.measurement.requests.kind("body_bytes_sent") for r in results])
        cost_rows.append(
            [
                server.label,
                row.name,
                *(_med([s[name] for s in splits]) for name in ("setup", "plan", "rewrite", "publish")),
                _med([r.measurement.wall - rep.duration_s for r, rep in zip(results, reports, strict=True)]),
                _med([r.measurement.cpu for r in results]),
                _worker_cpu(row, results),
                _server_cpu(server.name, results),
                f"{sent / landing.total_bytes:.2f}",
            ]
        )
    main = markdown_table(
        [
            "server",
            "job",
            "runs",
            "wall s, median (min-max)",
            "input files/s",
            "input MB/s",
            "outcome (report)",
            "requests (proxy or endpoint)",
            "requests per input file: server / report",
            "after: rows, checksum, hidden objects",
        ],
        main_rows,
        text_columns=2,
    )
    cost = markdown_table(
        [
            "server",
            "job",
            "lock + list + recovery s",
            "plan s",
            "rewrite + verify + commit s",
            "publish + delete + cleanup s",
            "outside report's `duration_s` s",
            "driver CPU s",
            "worker CPU s",
            "server CPU s",
            "bytes served ÷ input bytes",
        ],
        cost_rows,
        text_columns=2,
    )
    return main, cost


def _describe(
    landing: Landing, server_list: tuple[Server, ...], runs: int, outcomes: dict[Key, Outcome], session_seconds: float
) -> str:
    sizes = [len(body) for _, body in landing.objects]
    reads = []
    for (label, _), outcome in outcomes.items():
        for result in outcome.results:
            if result.before is not None:
                rows_before, checksum_before, read_seconds = result.before
                ok = "✓" if (rows_before, checksum_before) == (landing.rows, landing.checksum) else "✗ MISMATCH"
                reads.append(f"{label}: {rows_before:,} rows, checksum `{checksum_before}` {ok} ({read_seconds:.1f} s)")
    if reads:
        before = (
            "The first run's data on each server was also read back with `s3io.read_parquet` before it was "
            f"compacted (not timed): {'; '.join(reads)}."
        )
    else:
        before = "The read-back before compaction did not run."
    return (
        f"{len(sizes):,} parquet files (one row group each) across {len(PARTITIONS)} Hive partitions "
        f"(`{PARTITIONS[0]}` ... `{PARTITIONS[-1]}`) under `s3://{BUCKET}/landing-NN/`, "
        f"{min(sizes) / 1e3:.1f}-{max(sizes) / 1e3:.1f} KB each ({landing.total_bytes / 1e6:.1f} MB in all), "
        f"{landing.rows:,} rows, checksum `{landing.checksum}`; generated once in "
        f"{landing.seconds_to_generate:.1f} s (seeded, `benchmarks/parquet_data.py`) and uploaded afresh under a "
        f"new prefix, straight to the server, before every run (not timed). Servers: "
        f"{', '.join(server.label for server in server_list)}. {before} Job: "
        f"`spark_ext.compact(spark_or_None, url, target_file_size={TARGET_FILE_SIZE // MiB} MiB, "
        f"min_input_files={MIN_INPUT_FILES}, grace_period=0.0, endpoint_url=<proxy or endpoint>, credentials=...)`, "
        "other options at their defaults (max_concurrent_groups 4, part_size 8 MiB, snappy); no latency is added "
        "(the job's own costs, not network waits, are the subject here). The Spark row uses one "
        f"`{MASTER}` session (`spark_ext.session.local_session`, started in {session_seconds:.1f} s, not timed; "
        "both Python workers started and `spark_ext.compact` imported there by a warm-up job). Median of the runs "
        f"stated per row ({runs} in-process; Spark and worker processes {min(runs, SPARK_RUNS)} to keep the "
        "benchmark short), "
        "rows of all servers interleaved with the order rotated each run."
    )


NOTES = """
- Wall: the `spark_ext.compact(...)` call (lock, list, plan, rewrite and verify every group, commit,
  publish, delete inputs, staging and journal, release), with grace_period 0 so no wait is included. Input
  files/s and MB/s divide the input (files and bytes before) by it.
- Requests: everything the keep-alive proxy (moto) or the endpoint saw during the call, from the driver and
  (Spark row) the Python workers, by method (a multipart upload's create and complete are POSTs, a copy is a
  PUT). Requests per input file: the server's count, and the report's `requests` (the s3io clients' own count),
  over the input files.
- Duration split, from the job's progress events (`planning`, `rewriting`, `publishing`, `done`): lock + list +
  recovery before planning; the plan (from the listing: no footer is read); rewrite + verify + commit of every
  group; publish (copy), delete inputs, delete staging and journal, and the final listing. "Outside the
  report's `duration_s`": the call's wall minus the report's own duration (lock release, the client's close).
- CPU: driver CPU is user+sys of the benchmark process (in-process: the whole job; Spark and worker processes:
  the driver side only); worker CPU is user+sys of the worker processes (`processes=N`: what the forkserver that
  starts them counts for the children it reaped, from /proc); Spark's Python workers and executor are not
  counted; server CPU is the user+sys of moto and the proxy, or of the endpoint, during the call (from /proc).
  All share the same 2 cores. moto is a Python server: about one core's worth of its CPU per second of wall means
  the run was waiting on moto.
- Bytes served ÷ input bytes: response bodies the proxy or endpoint sent during the call (inputs, the read-back
  of every output) over the input's size.
- Targets' "why": the parquet work alone is measured after the runs, on the benchmark's thread with no I/O
  (CPU seconds, `time.process_time`): every input's footer parsed and decoded, then the task's own steps
  (`rewrite._Encoder`: decode, conform, checksum, encode; the output decoded and checksummed again) over groups of
  the job's size; median of 3 measurements. The Spark job cost is the median wall of 20 trivial one-task jobs
  in the benchmark's session.
- After: the prefix read back with `s3io.read_parquet` (rows and checksum equal to the generated data's, and the
  report's `rows_rewritten` equal to all rows), and hidden objects left under the prefix (lock, journal,
  staging): 0 expected. ✓ = all of these hold.
"""


def _floor_verdict(
    landing: Landing,
    server_list: tuple[Server, ...],
    rows: tuple[Row, ...],
    outcomes: dict[Key, Outcome],
    floors: dict[str, list[Floor]],
    costs: Costs,
) -> str:
    """The issue-13 targets: requests per input file (<= 2.2) and the in-process job within 1.5x of the floor."""
    files = len(landing.objects)
    lines = ["Targets (issue 13): at most 2.2 requests per input file; the job within 1.5x of the server's floor."]
    for server in server_list:
        walls = [f.wall for f in floors[server.label]]
        floor = median(walls)
        floor_cpu = median([f.client_cpu + f.server_cpu for f in floors[server.label]])
        bound = (costs.parquet + floor_cpu) / PROCESSES
        reach = (
            f" No schedule can go below {bound:.2f} s ({bound / floor:.1f}x the floor) on these {PROCESSES} cores: "
            f"the parquet work ({costs.parquet:.2f} CPU-s) plus the floor's own CPU ({floor_cpu:.2f} s: "
            f"{median([f.client_cpu for f in floors[server.label]]):.2f} client, "
            f"{median([f.server_cpu for f in floors[server.label]]):.2f} server), spread perfectly over "
            f"{PROCESSES} cores."
        )
        for row in rows:
            results = outcomes[server.label, row.name].results
            if not results:
                continue
            wall = median([r.measurement.wall for r in results])
            per_file = median([r.measurement.requests.total for r in results]) / files
            why = ""
            if wall > 1.5 * floor and row.kind == "in-process":
                cpu = median([r.measurement.cpu for r in results])
                served = median([sum(r.server_cpu.values()) for r in results])
                why = (
                    f" Why: CPU, {cpu:.1f} s of the job's own and {served:.1f} s of the server's in a {wall:.1f} s "
                    "run on 2 cores; the floor does no parquet work, the job decodes, conforms, checksums and "
                    "encodes every input, then reads the output back and checksums it again: that parquet work "
                    f"alone, on one thread with no I/O, takes {costs.parquet:.2f} CPU-s ({costs.parquet / floor:.1f}x "
                    f"the floor; decoding the inputs {costs.decode:.2f} of it)."
                )
            elif wall > 1.5 * floor and row.kind == "processes":
                served = median([sum(r.server_cpu.values()) for r in results])
                workers = median([r.worker_cpu or 0.0 for r in results])
                driver = median([r.measurement.cpu for r in results])
                client = median([f.client_cpu for f in floors[server.label]])
                why = (
                    f" Why: CPU, as in process: the parquet work alone takes {costs.parquet:.2f} CPU-s "
                    f"({costs.parquet / floor:.1f}x the floor), here split over {PROCESSES} worker processes (forked "
                    f"from a forkserver at the start; each group has its own event loop and client) on the same 2 "
                    f"cores as the server's {served:.1f} CPU-s. The workers used {workers:.1f} CPU-s and the driver "
                    f"{driver:.1f}, against {costs.parquet + client:.1f} for the parquet work and the floor's client "
                    f"side together: {workers + driver + served:.1f} CPU-s in a {wall:.1f} s run on 2 cores."
                )
            elif wall > 1.5 * floor and row.kind == "spark":
                groups = median([len(r.report.groups) for r in results])
                why = (
                    f" Besides the parquet work: each of the {groups:.0f} groups is a one-task Spark job, and a "
                    f"trivial one-task job takes {costs.spark_job * 1000:.0f} ms in this session (median of "
                    f"{SPARK_JOB_PROBES}) on the same 2 cores."
                )
            lines.append(
                f"- {server.label}, {row.name}: {per_file:.2f} requests per input file "
                f"({'meets' if per_file <= 2.2 else 'misses'} 2.2); {wall:.2f} s against a floor of {floor:.2f} s "
                f"({min(walls):.2f}-{max(walls):.2f}; every input GET once plus the outputs' PUTs, 64 in flight, no "
                f"parquet work) = {wall / floor:.2f}x ({'meets' if wall <= 1.5 * floor else 'misses'} 1.5x).{why}"
                f"{reach if wall > 1.5 * floor and bound > 1.5 * floor else ''}"
            )
    return "\n".join(lines)


def run(stack: Stack, options: Options) -> Report:
    """Generate the files once; per run upload them afresh, compact (timed), verify, delete; in-process and Spark."""
    files = FILES_QUICK if options.quick else FILES
    landing = generate(files)
    server_list = servers(stack, options.servers)
    print(f"  compaction: {files} files, {landing.total_bytes / 1e6:.1f} MB generated", flush=True)
    session: dict[str, Any] = {}
    rows = (
        Row("in-process (`spark=None`, groups on the driver's event loop)", "in-process", lambda: None),
        Row(
            f"{PROCESSES} worker processes (`spark=None, processes={PROCESSES}`)",
            "processes",
            lambda: None,
            max_runs=SPARK_RUNS,
            processes=PROCESSES,
        ),
        Row(f"Spark `{MASTER}` (one Spark task per group)", "spark", lambda: session["spark"], max_runs=SPARK_RUNS),
    )
    with environment(PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable):
        from spark_ext.session import local_session

        started = time.perf_counter()
        spark = session["spark"] = local_session(MASTER, "bench-compaction")
        session_seconds = time.perf_counter() - started
        try:
            # Start both Python workers and import the compaction code there (a lambda travels by value).
            spark.sparkContext.parallelize(range(2), 2).map(
                lambda _: __import__("spark_ext.compact").__name__
            ).collect()
            outcomes = measure(server_list, landing, rows, options.runs)
            spark_job = _spark_job_seconds(spark)
        finally:
            spark.stop()
    counts = [len(r.report.groups) for outcome in outcomes.values() for r in outcome.results]
    groups = round(median(counts)) if counts else 1
    measured = [_parquet_costs(landing, groups) for _ in range(PARQUET_COST_RUNS)]
    costs = Costs(median([m[0] for m in measured]), median([m[1] for m in measured]), spark_job=spark_job)
    floors = {
        server.label: [_floor_once(server, landing, f"floor-{n}/") for n in range(options.runs)]
        for server in server_list
    }
    main, cost = render(landing, server_list, rows, outcomes)
    verdict = _floor_verdict(landing, server_list, rows, outcomes, floors, costs)
    body = (
        f"{_describe(landing, server_list, options.runs, outcomes, session_seconds)}\n\n{main}\n\n"
        f"Where the time and CPU go (medians):\n\n{cost}\n\n{verdict}\n{NOTES}"
    )
    return Report(f"Compaction: {files:,} small parquet files (`compaction`)", body)
