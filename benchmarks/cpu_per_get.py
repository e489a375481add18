"""cpu_per_get: client CPU per small GET (1 KiB object, sequential, after warm-up), s3io vs its peers.

Why: with many small reads the client's own CPU per request, not the network, sets the ceiling. Rows span
from the platform (hand-written HTTP on asyncio streams; aiohttp's connector and C parser under a signed
hand-built request, which is s3io's transport; aiohttp's ClientSession) through the cost of SigV4 alone to
full clients (s3io, s3fs), all against the same server, so what is left above the transport floor is the
client's own doing. Every row runs against three servers: an in-memory endpoint that answers at once (the
client's own cost), the same endpoint waiting 4 ms before each answer (what waiting costs on this machine),
and moto behind the keep-alive proxy.

``python -m benchmarks.cpu_per_get --profile`` prints cProfile's top costs of s3io's GET;
``--breakdown`` times s3io's per-request pieces (signing, attempt runner, timers) without any I/O.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import io
import pstats
import random
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import aiohttp

from benchmarks.api import Options, Report
from benchmarks.infra import ACCESS_KEY, REGION, SECRET_KEY, ChildServer, Clock, Measurement, Stack
from benchmarks.results import markdown_table, median

if TYPE_CHECKING:
    from s3io.resilience.deadline import Watchdog

OBJECT_SIZE = 1024
BUCKET = "bench-cpu-per-get"
KEY = "small/object-1k.bin"
FULL = (1000, 100)  # (measured GETs, warm-up GETs) per run
QUICK = (100, 20)
TARGET_CPU_MS = 0.25
WAIT_SECONDS = 0.004  # about moto's answer time through the proxy (wall ms/GET of the moto table)


@dataclass(frozen=True)
class Target:
    """Where the GETs go (the proxy), what they fetch, and the bytes they must return."""

    endpoint: str
    bucket: str
    key: str
    expected: bytes

    @property
    def url(self) -> str:
        return f"{self.endpoint}/{self.bucket}/{self.key}"

    def check(self, body: bytes) -> None:
        if body != self.expected:
            raise AssertionError(f"{self.url}: got {len(body)} bytes that differ from the object")


Runner = Callable[[Target, ChildServer, int, int], Measurement]


@dataclass(frozen=True)
class Case:
    """One row: a client and how it is called (`how` says sync/async, so readers know what was measured)."""

    name: str
    how: str
    run: Runner


async def _timed_loop(
    get: Callable[[], Awaitable[bytes]], target: Target, proxy: ChildServer, n: int, warmup: int
) -> Measurement:
    """Warm up, then time `n` sequential GETs, checking every body."""
    for _ in range(warmup):
        target.check(await get())
    clock = Clock(proxy)
    with clock:
        for _ in range(n):
            target.check(await get())
    assert clock.result is not None
    return clock.result


def _timed_sync_loop(get: Callable[[], bytes], target: Target, proxy: ChildServer, n: int, warmup: int) -> Measurement:
    """The synchronous twin of `_timed_loop`."""
    for _ in range(warmup):
        target.check(get())
    clock = Clock(proxy)
    with clock:
        for _ in range(n):
            target.check(get())
    assert clock.result is not None
    return clock.result


def run_s3io_client(target: Target, proxy: ChildServer, n: int, warmup: int) -> Measurement:
    """s3io.S3Client.get_object, awaited in the caller's event loop."""
    from s3io import Credentials, S3Client

    async def main() -> Measurement:
        credentials = Credentials(ACCESS_KEY, SECRET_KEY)
        async with S3Client(endpoint_url=target.endpoint, region=REGION, credentials=credentials) as s3:

            async def get() -> bytes:
                return (await s3.get_object(target.bucket, target.key)).data

            return await _timed_loop(get, target, proxy, n, warmup)

    return asyncio.run(main())


def _fs_options(target: Target) -> dict[str, object]:
    """s3fs storage options for the proxy endpoint; a fresh instance every run (no fsspec instance cache)."""
    return {
        "key": ACCESS_KEY,
        "secret": SECRET_KEY,
        "endpoint_url": target.endpoint,
        "client_kwargs": {"region_name": REGION},
        "skip_instance_cache": True,
    }


def run_s3fs_sync(target: Target, proxy: ChildServer, n: int, warmup: int) -> Measurement:
    """s3fs.S3FileSystem.cat_file as a user calls it: sync, hopping to fsspec's I/O thread and back."""
    import s3fs

    fs = s3fs.S3FileSystem(**_fs_options(target))
    path = f"{target.bucket}/{target.key}"
    return _timed_sync_loop(lambda: fs.cat_file(path), target, proxy, n, warmup)


def run_s3fs_async(target: Target, proxy: ChildServer, n: int, warmup: int) -> Measurement:
    """s3fs's coroutine `_cat_file` awaited in our own loop (asynchronous=True): no thread hop."""
    import s3fs

    async def main() -> Measurement:
        fs = s3fs.S3FileSystem(asynchronous=True, **_fs_options(target))
        await fs.set_session()
        path = f"{target.bucket}/{target.key}"
        try:
            return await _timed_loop(lambda: fs._cat_file(path), target, proxy, n, warmup)
        finally:
            await fs._s3creator.__aexit__(None, None, None)

    return asyncio.run(main())


def _obstore_store(target: Target) -> object:
    from obstore.store import S3Store

    return S3Store(
        target.bucket,
        endpoint=target.endpoint,
        access_key_id=ACCESS_KEY,
        secret_access_key=SECRET_KEY,
        region=REGION,
        virtual_hosted_style_request=False,
        client_options={"allow_http": True},
    )


def run_obstore_async(target: Target, proxy: ChildServer, n: int, warmup: int) -> Measurement:
    """obstore (Rust object_store) ``get_async``, awaited in our own loop (its Rust runtime does the I/O)."""
    import obstore

    async def main() -> Measurement:
        store = _obstore_store(target)

        async def get() -> bytes:
            return bytes(await (await obstore.get_async(store, target.key)).bytes_async())

        return await _timed_loop(get, target, proxy, n, warmup)

    return asyncio.run(main())


def run_obstore_sync(target: Target, proxy: ChildServer, n: int, warmup: int) -> Measurement:
    """obstore ``get`` (blocking: the call waits on its Rust runtime)."""
    import obstore

    store = _obstore_store(target)
    return _timed_sync_loop(lambda: bytes(obstore.get(store, target.key).bytes()), target, proxy, n, warmup)


def run_s3io_fs_sync(target: Target, proxy: ChildServer, n: int, warmup: int) -> Measurement:
    """s3io.fs.S3FileSystem (the s3fs drop-in) cat_file, sync like the s3fs row."""
    from s3io.fs import S3FileSystem

    fs = S3FileSystem(**_fs_options(target))
    path = f"{target.bucket}/{target.key}"
    try:
        return _timed_sync_loop(lambda: fs.cat_file(path), target, proxy, n, warmup)
    finally:
        fs.close()


def run_aiohttp_botocore_sigv4(target: Target, proxy: ChildServer, n: int, warmup: int) -> Measurement:
    """Raw aiohttp GET, each request signed by botocore's S3SigV4Auth on a fresh AWSRequest."""
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    signer = S3SigV4Auth(Credentials(ACCESS_KEY, SECRET_KEY), "s3", REGION)

    async def main() -> Measurement:
        async with aiohttp.ClientSession() as session:

            async def get() -> bytes:
                request = AWSRequest(method="GET", url=target.url)
                signer.add_auth(request)
                async with session.get(target.url, headers=dict(request.headers.items())) as response:
                    response.raise_for_status()
                    return await response.read()

            return await _timed_loop(get, target, proxy, n, warmup)

    return asyncio.run(main())


def run_aiohttp_s3io_signer(target: Target, proxy: ChildServer, n: int, warmup: int) -> Measurement:
    """Raw aiohttp GET signed by s3io's own SigV4 signer: splits s3io's cost into signing and the rest."""
    from urllib.parse import urlsplit

    from s3io.transport.sigv4 import EMPTY_SHA256, Signer

    signer = Signer(ACCESS_KEY, SECRET_KEY, None, REGION)
    host = urlsplit(target.endpoint).netloc
    path = f"/{target.bucket}/{target.key}"

    async def main() -> Measurement:
        async with aiohttp.ClientSession() as session:

            async def get() -> bytes:
                headers = {"host": host}
                signer.sign("GET", path, "", headers, EMPTY_SHA256)
                async with session.get(target.url, headers=headers) as response:
                    response.raise_for_status()
                    return await response.read()

            return await _timed_loop(get, target, proxy, n, warmup)

    return asyncio.run(main())


class TransportFloor:
    """aiohttp's lower layer as s3io uses it (pooled ``TCPConnector``, C response parser, ``StreamReader``,
    64 KiB receives) with a hand-built request head signed by s3io's Signer: the floor of s3io's transport,
    no deadlines, retries, validation or metrics. Create inside the loop that will use it."""

    def __init__(self, endpoint: str, bucket: str, key: str) -> None:
        from urllib.parse import urlsplit

        from aiohttp.client_reqrep import ClientRequest
        from yarl import URL

        from s3io.transport.sigv4 import Signer

        self._signer = Signer(ACCESS_KEY, SECRET_KEY, None, REGION)
        self._host = urlsplit(endpoint).netloc
        self._path = f"/{bucket}/{key}"
        self._connector = aiohttp.TCPConnector(limit=64, limit_per_host=0)
        self._origin = ClientRequest("GET", URL(endpoint), loop=asyncio.get_running_loop())
        self._timeout = aiohttp.ClientTimeout(total=None, connect=None, sock_connect=3, sock_read=None)

    async def get(self) -> bytes:
        """One signed GET of the object on a pooled connection; the body, or AssertionError if not 200."""
        from s3io.transport.exchange import RECV_BYTES
        from s3io.transport.sigv4 import EMPTY_SHA256

        headers = {"host": self._host}
        self._signer.sign("GET", self._path, "", headers, EMPTY_SHA256)
        head = f"GET {self._path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
        connection = await self._connector.connect(self._origin, [], self._timeout)
        try:
            protocol, transport = connection.protocol, connection.transport
            assert protocol is not None and transport is not None
            protocol.set_response_params(auto_decompress=False, read_bufsize=256 * 1024)
            if getattr(transport, "max_size", 0) > RECV_BYTES:  # as s3io's exchange does for a small answer
                transport.max_size = RECV_BYTES
            transport.write(head.encode())
            message, payload = await protocol.read()
            body = await payload.read()
        except BaseException:
            connection.close()
            raise
        connection.release()
        if message.code != 200:
            raise AssertionError(f"status {message.code}")
        return body

    async def close(self) -> None:
        await self._connector.close()


def run_aiohttp_connector_s3io_signer(target: Target, proxy: ChildServer, n: int, warmup: int) -> Measurement:
    """s3io's transport floor (``TransportFloor``) in a timed loop."""

    async def main() -> Measurement:
        floor = TransportFloor(target.endpoint, target.bucket, target.key)
        try:
            return await _timed_loop(floor.get, target, proxy, n, warmup)
        finally:
            await floor.close()

    return asyncio.run(main())


def run_aiohttp_unsigned(target: Target, proxy: ChildServer, n: int, warmup: int) -> Measurement:
    """Raw aiohttp GET, unsigned (the object is public-read): the floor for any aiohttp-based client."""

    async def main() -> Measurement:
        async with aiohttp.ClientSession() as session:

            async def get() -> bytes:
                async with session.get(target.url) as response:
                    response.raise_for_status()
                    return await response.read()

            return await _timed_loop(get, target, proxy, n, warmup)

    return asyncio.run(main())


def run_asyncio_streams(target: Target, proxy: ChildServer, n: int, warmup: int) -> Measurement:
    """Hand-written HTTP/1.1 over asyncio streams on one kept-alive connection: the syscall floor, no aiohttp."""
    from urllib.parse import urlsplit

    parts = urlsplit(target.endpoint)
    request = f"GET /{target.bucket}/{target.key} HTTP/1.1\r\nHost: {parts.netloc}\r\n\r\n".encode()
    length_header = re.compile(rb"(?im)^content-length:\s*(\d+)")

    async def main() -> Measurement:
        reader, writer = await asyncio.open_connection(parts.hostname, parts.port)

        async def get() -> bytes:
            writer.write(request)
            await writer.drain()
            head = await reader.readuntil(b"\r\n\r\n")
            match = length_header.search(head)
            if not head.startswith(b"HTTP/1.1 200") or match is None:
                raise AssertionError(f"unexpected response head {head[:200]!r}")
            return await reader.readexactly(int(match.group(1)))

        try:
            return await _timed_loop(get, target, proxy, n, warmup)
        finally:
            writer.close()
            await writer.wait_closed()

    return asyncio.run(main())


CASES = (
    Case("s3io `S3Client.get_object`", "async, own loop", run_s3io_client),
    Case("s3io `S3FileSystem.cat_file` (s3fs drop-in)", "sync", run_s3io_fs_sync),
    Case("obstore `get_async` (Rust object_store)", "async, own loop", run_obstore_async),
    Case("obstore `get` (Rust object_store)", "sync", run_obstore_sync),
    Case("s3fs `S3FileSystem.cat_file`", "sync (fsspec I/O thread)", run_s3fs_sync),
    Case("s3fs `S3FileSystem._cat_file`", "async, own loop", run_s3fs_async),
    Case("aiohttp + botocore `S3SigV4Auth`", "async, own loop", run_aiohttp_botocore_sigv4),
    Case("aiohttp + s3io's SigV4 `Signer`", "async, own loop", run_aiohttp_s3io_signer),
    Case(
        "aiohttp `TCPConnector` + C parser, s3io's `Signer` (s3io's transport floor)",
        "async, own loop",
        run_aiohttp_connector_s3io_signer,
    ),
    Case("aiohttp `ClientSession`, unsigned", "async, own loop", run_aiohttp_unsigned),
    Case("asyncio streams, hand-written HTTP/1.1 (no aiohttp)", "async, own loop", run_asyncio_streams),
)
REFERENCE = CASES[0].name
FLOOR = CASES[-3].name  # s3io's transport floor: aiohttp's connector and parser, a signed hand-built request


@dataclass(frozen=True)
class Server:
    """One table: the server every row runs against, and what its figures mean."""

    name: str
    title: str
    about: str
    start: Callable[[Stack, bytes], ChildServer]


SERVERS = (
    Server(
        "memory",
        "an in-memory S3 endpoint, answering at once",
        "`benchmarks/object_server.py` answers from memory in tens of microseconds, in its own process, on "
        "kept-alive connections: the client waits a fraction of a millisecond for each answer, so this is "
        "each client's own CPU per request. The target is judged here.",
        lambda stack, data: stack.object_server(data, BUCKET, KEY),
    ),
    Server(
        "memory-wait",
        f"the same endpoint, waiting {WAIT_SECONDS * 1000:g} ms before each answer",
        f"The same server, whose only change is a {WAIT_SECONDS * 1000:g} ms timer before each answer (no "
        "server CPU), about moto's answer time. Every client's CPU per GET grows, and grows with how much "
        "code a request runs: the price this VM charges for a core that idles between requests (by all "
        "appearances cold caches and predictors when it wakes), not work the client does.",
        lambda stack, data: stack.object_server(data, BUCKET, KEY, WAIT_SECONDS),
    ),
    Server(
        "moto",
        "moto, behind the keep-alive proxy",
        "moto (about 3 ms of server CPU per request) behind the keep-alive proxy, on the same two cores: "
        "the waiting of the table above, plus the server's own use of the caches.",
        lambda stack, data: stack.proxy(0.0),
    ),
)


def prepare(stack: Stack) -> bytes:
    """Upload the 1 KiB object (seeded bytes) straight to moto; the in-memory servers serve the same bytes."""
    import boto3

    expected = random.Random(0).randbytes(OBJECT_SIZE)
    s3 = boto3.client(
        "s3",
        endpoint_url=stack.moto_url,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
        region_name=REGION,
    )
    s3.create_bucket(Bucket=BUCKET)
    s3.put_object(Bucket=BUCKET, Key=KEY, Body=expected, ACL="public-read")  # readable by the unsigned row
    return expected


def _spread(values: list[float]) -> str:
    """Median with min-max, in ms, so run-to-run noise is visible."""
    return f"{median(values):.3f} ({min(values):.3f}-{max(values):.3f})"


Results = dict[str, dict[str, list[Measurement]]]  # server name -> case name -> one measurement per run


def run(stack: Stack, options: Options) -> Report:
    """Every case against every server `options.runs` times, interleaved (server and case order rotate each
    run) so drift in the machine's load hits all rows alike."""
    n, warmup = QUICK if options.quick else FULL
    expected = prepare(stack)
    servers = {server.name: server.start(stack, expected) for server in SERVERS}
    results: Results = {server.name: {case.name: [] for case in CASES} for server in SERVERS}
    failures: dict[tuple[str, str], str] = {}
    for repetition in range(options.runs):
        for server in SERVERS[repetition % len(SERVERS) :] + SERVERS[: repetition % len(SERVERS)]:
            child = servers[server.name]
            target = Target(child.url, BUCKET, KEY, expected)
            for case in CASES[repetition % len(CASES) :] + CASES[: repetition % len(CASES)]:
                if (server.name, case.name) in failures:
                    continue
                try:
                    results[server.name][case.name].append(case.run(target, child, n, warmup))
                except Exception as exc:  # one broken client must not hide the others' figures
                    failures[(server.name, case.name)] = f"{type(exc).__name__}: {exc}"[:200]
                # Collect the client now, outside any event loop: s3fs's finalizer, run by a later collection
                # inside the next row's loop, would schedule its session close on the wrong loop.
                gc.collect()
                print(f"  cpu_per_get run {repetition + 1}, {server.name}: {case.name} done", flush=True)
    return Report("CPU per small GET (`cpu_per_get`)", _render(results, failures, n, warmup, options.runs))


def _cpu_ms(measurements: list[Measurement], n: int) -> list[float]:
    return [m.cpu / n * 1000 for m in measurements]


def _table(runs: dict[str, list[Measurement]], failures: dict[str, str], n: int) -> str:
    """One server's rows: per-GET medians, ratios to s3io, CPU above the transport floor."""

    def wall_ms(name: str) -> float:
        return median([m.wall / n * 1000 for m in runs[name]])

    ref_cpu = median(_cpu_ms(runs[REFERENCE], n)) if runs[REFERENCE] else None
    ref_wall = wall_ms(REFERENCE) if runs[REFERENCE] else None
    floor_cpu = median(_cpu_ms(runs[FLOOR], n)) if runs[FLOOR] else None
    rows = []
    for case in CASES:
        if not runs[case.name]:
            rows.append([case.name, case.how, f"failed: {failures.get(case.name, 'not run')}", *[""] * 6])
            continue
        cpu, wall = _cpu_ms(runs[case.name], n), wall_ms(case.name)
        requests = median([m.requests.total / n for m in runs[case.name]])
        rows.append(
            [
                case.name,
                case.how,
                _spread(cpu),
                f"{median(cpu) - floor_cpu:+.3f}" if floor_cpu is not None else "n/a",
                f"{wall:.3f}",
                f"{median(cpu) / ref_cpu:.2f}" if ref_cpu else "n/a",
                f"{wall / ref_wall:.2f}" if ref_wall else "n/a",
                f"{requests:.2f}",
                f"{median(cpu) / requests:.3f}" if requests else "n/a",
            ]
        )
    return markdown_table(
        [
            "client",
            "called",
            "client CPU ms/GET, median (min-max)",
            "CPU above transport floor, ms",
            "wall ms/GET",
            "CPU ÷ s3io",
            "wall ÷ s3io",
            "requests/GET",
            "CPU ms/request",
        ],
        rows,
        text_columns=2,
    )


def _verdict(runs: dict[str, list[Measurement]], n: int) -> str:
    """s3io's median against the target, and against the transport floor of the same table."""
    if not runs[REFERENCE]:
        return "s3io `S3Client.get_object`: no figure (the row failed)."
    cpu = _cpu_ms(runs[REFERENCE], n)
    met = "meets" if median(cpu) <= TARGET_CPU_MS else "misses"
    verdict = (
        f"s3io `S3Client.get_object`: {median(cpu):.3f} ms CPU per GET (slowest run {max(cpu):.3f}) — {met} "
        f"the target of ≤ {TARGET_CPU_MS} ms"
    )
    if runs[FLOOR]:
        floor = median(_cpu_ms(runs[FLOOR], n))
        verdict += f" ({median(cpu) - floor:+.3f} ms against the {floor:.3f} ms transport floor)"
    return verdict + "."


def _render(results: Results, failures: dict[tuple[str, str], str], n: int, warmup: int, runs: int) -> str:
    """A table per server, each with its verdict, then the notes that explain them."""
    sections = []
    for server in SERVERS:
        server_failures = {case: why for (name, case), why in failures.items() if name == server.name}
        table = _table(results[server.name], server_failures, n)
        verdict = _verdict(results[server.name], n)
        sections.append(f"### Against {server.title}\n\n{server.about}\n\n{table}\n\n{verdict}\n")
    tables = "\n".join(sections)
    return f"""{n} sequential GETs of a {OBJECT_SIZE}-byte object per run after {warmup} warm-up GETs, median of
{runs} runs (servers and rows interleaved, order rotated each run); a fresh client per run; every body is
checked against the object. Connections are kept alive as with real S3; "requests/GET" is what the server
(or the proxy) saw during the timed loop. CPU is the client process only (user+sys, all threads: for the
sync rows that includes fsspec's I/O thread).

{tables}
- The transport-floor row is what s3io's transport does per GET with nothing of s3io around it: a
  request head built and signed by hand, written to a pooled aiohttp `TCPConnector` connection, the answer
  read through aiohttp's C parser. "CPU above transport floor" is what each client adds to it: for s3io,
  the deadlines, the attempt runner, range validation and metrics. The `ClientSession` rows show what
  aiohttp's high-level request path costs on top of the same connector; the asyncio-streams row
  (hand-written HTTP/1.1, no aiohttp) shows how much is aiohttp and how much the event loop and syscalls.
- Waiting is not free on this VM: the same client code, with the same instruction count, costs several
  times more CPU per GET when the core idles a few milliseconds between requests than when it does not,
  and the increase grows with the code a request runs. The first table is therefore the client's own
  cost; the later two add the machine's.
- `benchmarks.run --only cpu_per_get_instructions` counts instructions per GET for the same async rows
  under callgrind: figures the machine's load does not move.
- s3fs's `cat_file` of a whole object sends a HEAD (`_size`) before the GET unless `max_concurrency=1`,
  hence 2 requests per GET with default settings; "CPU ms/request" divides that out.
- Other jobs on the same cores inflate every row's CPU (cache misses, and on a VM stolen time can be charged
  to the running process); compare rows from the same run, and read the minimum as the better estimate of
  a client's intrinsic cost when the load average is high.
"""


def profile(n: int = 2000, warmup: int = 100, top: int = 30) -> str:
    """cProfile (CPU-time clock) of s3io's GET loop: the top functions by own time and by cumulative time.

    The profiler's own clock reads are syscalls too, so absolute figures are inflated; compare shares.
    """
    with Stack() as stack:
        expected = prepare(stack)
        server = SERVERS[0].start(stack, expected)
        target = Target(server.url, BUCKET, KEY, expected)
        profiler = cProfile.Profile(time.process_time)  # CPU, not wall: waiting in epoll is not a cost
        profiler.enable()
        measurement = run_s3io_client(target, server, n, warmup)
        profiler.disable()
    out = io.StringIO()
    out.write(f"{n} GETs: {measurement.cpu / n * 1000:.3f} ms CPU per GET under the profiler\n")
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)
    return out.getvalue()


def breakdown(n: int = 20000) -> str:
    """CPU per call of s3io's per-request pieces, with no I/O: what s3io adds to aiohttp's own cost."""
    from s3io.metrics import Metrics
    from s3io.policy import Policy
    from s3io.resilience.attempt import AttemptRunner
    from s3io.transport.sigv4 import EMPTY_SHA256, Signer

    lines: list[str] = []

    def report(name: str, seconds: float) -> None:
        lines.append(f"{name:55s} {seconds / n * 1e6:8.1f} µs")

    signer = Signer(ACCESS_KEY, SECRET_KEY, None, REGION)
    started = time.process_time()
    for _ in range(n):
        signer.sign("GET", f"/{BUCKET}/{KEY}", "", {"host": "127.0.0.1:8080"}, EMPTY_SHA256)
    report("Signer.sign (s3io SigV4)", time.process_time() - started)

    async def timed_async() -> None:
        loop = asyncio.get_running_loop()
        runner = AttemptRunner(Policy(), Metrics())

        async def nothing(watchdog: object) -> None:
            return None

        async def two_phases(watchdog: Watchdog) -> None:
            watchdog.start_phase("first_byte", 13.0)
            watchdog.start_stall_watch(5.0)
            watchdog.progress()

        for name, attempt in (
            ("AttemptRunner.run, no-op attempt (slot, state, watchdog)", nothing),
            ("AttemptRunner.run + first-byte and stall phases", two_phases),
        ):
            await runner.run("get", BUCKET, KEY, attempt)
            started = time.process_time()
            for _ in range(n):
                await runner.run("get", BUCKET, KEY, attempt)
            report(name, time.process_time() - started)
        started = time.process_time()
        for _ in range(n):
            loop.call_at(loop.time() + 10.0, int).cancel()
        report("asyncio baseline: loop.call_at + cancel", time.process_time() - started)

    asyncio.run(timed_async())
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(prog="benchmarks.cpu_per_get", description=__doc__.splitlines()[0])
    parser.add_argument("--profile", action="store_true", help="print cProfile's top costs of s3io's GET")
    parser.add_argument("--breakdown", action="store_true", help="time s3io's per-request pieces, no I/O")
    parser.add_argument("-n", type=int, default=2000, help="GETs to profile")
    args = parser.parse_args()
    if not (args.profile or args.breakdown):
        parser.error("the benchmark runs as `python -m benchmarks.run --only cpu_per_get`; here --profile/--breakdown")
    from benchmarks.infra import use_fake_aws_environment

    use_fake_aws_environment()
    if args.breakdown:
        print(breakdown())
    if args.profile:
        print(profile(args.n))


if __name__ == "__main__":
    main()
