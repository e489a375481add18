"""request_rate: how many small requests per second each S3 server answers on this machine, side by side.

Why: every many-object benchmark is bounded by its server's request rate. moto spends milliseconds of CPU per
request, so those benchmarks measured moto; the in-memory endpoint (benchmarks/object_server.py) is meant to
answer at least 10x as many, so that what they measure is the client. This checks that claim: the same
client process sends the same signed requests (a GET of a 1 KiB object; a ListObjectsV2 page of 100 keys),
CONCURRENCY at a time on kept-alive connections, to moto (directly, and through the keep-alive proxy the
benchmarks use) and to the endpoint, for a fixed time each, interleaved. The client is hand-written HTTP/1.1
on asyncio (one request re-sent as bytes, signed once: neither server checks signatures' age), the cheapest
client this machine has, so the rate is the server's as far as two shared cores allow; each server's CPU per
request (from /proc) is a figure the client does not move.
"""

from __future__ import annotations

import asyncio
import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from benchmarks.api import Options, Report
from benchmarks.infra import ACCESS_KEY, REGION, SECRET_KEY, Stack
from benchmarks.results import markdown_table, median
from benchmarks.servers import servers

BUCKET = "bench-request-rate"
OBJECT_KEY = "small/object-1k.bin"
OBJECT_SIZE = 1024
LIST_PREFIX = "listing/"
LIST_KEYS = 100
CONCURRENCY = 16  # requests in flight, one connection each
SECONDS = 3.0  # per row and run (QUICK_SECONDS with --quick), after WARM_UP_SECONDS of the same requests
QUICK_SECONDS = 0.5
WARM_UP_SECONDS = 0.5
GOAL = 10.0  # issue 13: the endpoint serves at least 10x moto's request rate
_CONTENT_LENGTH = re.compile(rb"(?im)^content-length:\s*(\d+)\r?$")
_CONNECTION_CLOSE = re.compile(rb"(?im)^connection:\s*close\r?$")


@dataclass(frozen=True)
class Operation:
    """A request (path and query under the bucket) and how to check each answer's body."""

    name: str
    path: str
    check: Callable[[bytes], bool]


@dataclass(frozen=True)
class Variant:
    """One way to reach a server: its URL, and which processes' CPU serves it (keys of Stack.server_cpu)."""

    name: str
    url: str
    cpu_keys: tuple[str, ...]


@dataclass
class Tally:
    """Answers of one timed window: how many were right, and the first wrong one."""

    ok: int = 0
    wrong: int = 0
    first_wrong: str = ""
    reconnects: int = 0


@dataclass
class Outcome:
    rates: list[float] = field(default_factory=list)
    server_cpu_us: list[float] = field(default_factory=list)  # server CPU per request, microseconds
    client_cpu_us: list[float] = field(default_factory=list)
    requests: list[int] = field(default_factory=list)
    reconnects: list[int] = field(default_factory=list)
    wrong: int = 0
    first_wrong: str = ""


def signed_request(url: str, path: str) -> bytes:
    """The GET of `path` at `url` as HTTP/1.1 bytes, SigV4-signed by botocore (once; re-sent unchanged)."""
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    request = AWSRequest("GET", url + path)
    S3SigV4Auth(Credentials(ACCESS_KEY, SECRET_KEY), "s3", REGION).add_auth(request)
    prepared = request.prepare()
    parts = urlsplit(prepared.url)
    target = parts.path + (f"?{parts.query}" if parts.query else "")
    lines = [f"GET {target} HTTP/1.1", f"Host: {parts.netloc}"]
    lines += [f"{name}: {value}" for name, value in prepared.headers.items() if name.lower() != "host"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


class _Requester(asyncio.Protocol):
    """One connection sending `request` back to back until `stop_at`, checking every answer; `closed` resolves
    when the connection ends (the server closed it, or time is up)."""

    def __init__(self, request: bytes, check: Callable[[bytes], bool], tally: Tally, stop_at: float) -> None:
        self._request = request
        self._check = check
        self._tally = tally
        self._stop_at = stop_at
        self._buffer = bytearray()
        self._need: int | None = None
        self._status = b""
        self._close = False
        self._transport: asyncio.Transport | None = None
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        transport.write(self._request)

    def data_received(self, data: bytes) -> None:
        buf = self._buffer
        buf += data
        while True:
            if self._need is None:
                end = buf.find(b"\r\n\r\n")
                if end < 0:
                    return
                head = bytes(buf[: end + 2])
                del buf[: end + 4]
                match = _CONTENT_LENGTH.search(head)
                self._need = int(match.group(1)) if match else 0
                self._status = head[9:12]
                self._close = _CONNECTION_CLOSE.search(head) is not None
            if len(buf) < self._need:
                return
            body = bytes(buf[: self._need])
            del buf[: self._need]
            self._need = None
            if self._status == b"200" and self._check(body):
                self._tally.ok += 1
            else:
                self._tally.wrong += 1
                self._tally.first_wrong = self._tally.first_wrong or f"{self._status.decode()} {body[:200]!r}"
            assert self._transport is not None
            if self._close or time.perf_counter() >= self._stop_at:
                self._transport.close()
                return
            self._transport.write(self._request)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)


async def _drive(host: str, port: int, request: bytes, check: Callable[[bytes], bool], seconds: float) -> Tally:
    """CONCURRENCY connections each re-sending `request` for `seconds` (reconnecting if the server closes)."""
    loop = asyncio.get_running_loop()
    tally = Tally()
    stop_at = time.perf_counter() + seconds

    async def slot() -> None:
        while time.perf_counter() < stop_at:
            _, protocol = await loop.create_connection(lambda: _Requester(request, check, tally, stop_at), host, port)
            await protocol.closed
            tally.reconnects += 1

    await asyncio.wait_for(asyncio.gather(*(slot() for _ in range(CONCURRENCY))), seconds + 60)
    tally.reconnects -= CONCURRENCY
    return tally


def measure_once(
    stack: Stack, variant: Variant, operation: Operation, seconds: float
) -> tuple[float, Tally, float, float]:
    """(requests/s, tally, server CPU µs/request, client CPU µs/request) of one timed window after a warm-up."""
    parts = urlsplit(variant.url)
    assert parts.hostname is not None and parts.port is not None
    request = signed_request(variant.url, operation.path)
    asyncio.run(_drive(parts.hostname, parts.port, request, operation.check, WARM_UP_SECONDS))
    before = stack.server_cpu()
    cpu = time.process_time()
    started = time.perf_counter()
    tally = asyncio.run(_drive(parts.hostname, parts.port, request, operation.check, seconds))
    wall = time.perf_counter() - started
    client_cpu = time.process_time() - cpu
    after = stack.server_cpu()
    server_cpu = sum(after[key] - before[key] for key in variant.cpu_keys)
    answered = max(1, tally.ok + tally.wrong)
    return (tally.ok + tally.wrong) / wall, tally, server_cpu / answered * 1e6, client_cpu / answered * 1e6


def prepare(stack: Stack, names: tuple[str, ...]) -> tuple[list[Variant], list[Operation]]:
    """Upload the object and the listing's keys to each server; the variants to measure and the operations."""
    body = random.Random(0).randbytes(OBJECT_SIZE)
    variants = []
    for server in servers(stack, names):
        s3 = server.client()
        s3.create_bucket(Bucket=BUCKET)
        s3.put_object(Bucket=BUCKET, Key=OBJECT_KEY, Body=body)
        for i in range(LIST_KEYS):
            s3.put_object(Bucket=BUCKET, Key=f"{LIST_PREFIX}{i:04d}.bin", Body=body[:100])
        if server.name == "moto":
            variants.append(Variant("moto, direct (closes every connection)", stack.moto_url, ("moto",)))
            proxy = stack.proxy(0.0)
            variants.append(Variant("moto via the keep-alive proxy", proxy.url, ("moto", "proxy")))
        else:
            variants.append(Variant("in-memory endpoint", stack.endpoint.url, ("endpoint",)))
    contents = f"<KeyCount>{LIST_KEYS}</KeyCount>".encode()
    operations = [
        Operation(f"GET {OBJECT_SIZE} B object", f"/{BUCKET}/{OBJECT_KEY}", lambda answer: answer == body),
        Operation(
            f"LIST {LIST_KEYS} keys (ListObjectsV2)",
            f"/{BUCKET}?list-type=2&prefix={LIST_PREFIX}",
            lambda answer: contents in answer and answer.count(b"<Contents>") == LIST_KEYS,
        ),
    ]
    return variants, operations


def _spread(values: list[float], fmt: str = "{:,.0f}") -> str:
    return f"{fmt.format(median(values))} ({fmt.format(min(values))}-{fmt.format(max(values))})"


def run(stack: Stack, options: Options) -> Report:
    """Every (server, operation) for `seconds` per run, `options.runs` runs, interleaved and rotated."""
    seconds = QUICK_SECONDS if options.quick else SECONDS
    variants, operations = prepare(stack, options.servers)
    cases = [(variant, operation) for operation in operations for variant in variants]
    outcomes = {(v.name, o.name): Outcome() for v, o in cases}
    for repetition in range(options.runs):
        shift = repetition % len(cases)
        for variant, operation in cases[shift:] + cases[:shift]:
            rate, tally, server_us, client_us = measure_once(stack, variant, operation, seconds)
            outcome = outcomes[variant.name, operation.name]
            outcome.rates.append(rate)
            outcome.server_cpu_us.append(server_us)
            outcome.client_cpu_us.append(client_us)
            outcome.requests.append(tally.ok + tally.wrong)
            outcome.reconnects.append(tally.reconnects)
            outcome.wrong += tally.wrong
            outcome.first_wrong = outcome.first_wrong or tally.first_wrong
            print(f"  run {repetition + 1}: {variant.name}: {operation.name}: {rate:,.0f}/s", flush=True)
    rows = []
    for variant, operation in cases:
        outcome = outcomes[variant.name, operation.name]
        rows.append(
            [
                operation.name,
                variant.name,
                _spread(outcome.rates),
                f"{median([float(n) for n in outcome.requests]):,.0f}",
                f"{median([float(n) for n in outcome.reconnects]):,.0f}",
                _spread(outcome.server_cpu_us),
                _spread(outcome.client_cpu_us),
                "0" if not outcome.wrong else f"{outcome.wrong}: {outcome.first_wrong}",
            ]
        )
    table = markdown_table(
        [
            "operation",
            "server",
            "requests/s, median (min-max)",
            "requests per run",
            "reconnects per run",
            "server CPU µs/request",
            "client CPU µs/request",
            "wrong answers",
        ],
        rows,
        text_columns=2,
    )
    body = f"{_describe(seconds, options.runs)}\n\n{table}\n\n{_verdict(variants, operations, outcomes)}\n{NOTES}"
    return Report("Request rate: the in-memory S3 endpoint vs moto (`request_rate`)", body)


def _verdict(variants: list[Variant], operations: list[Operation], outcomes: dict[tuple[str, str], Outcome]) -> str:
    endpoint = next((v for v in variants if v.cpu_keys == ("endpoint",)), None)
    motos = [v for v in variants if "moto" in v.cpu_keys]
    if endpoint is None or not motos:
        return f"Goal (issue 13): the endpoint serves ≥ {GOAL:g}x moto's request rate — not measured (one server)."
    lines = [f"Goal (issue 13): the endpoint serves ≥ {GOAL:g}x moto's request rate (against moto's best variant):"]
    for operation in operations:
        ours = median(outcomes[endpoint.name, operation.name].rates)
        best = max(motos, key=lambda v: median(outcomes[v.name, operation.name].rates))
        theirs = median(outcomes[best.name, operation.name].rates)
        ratio = ours / theirs
        cpu_ratio = median(outcomes[best.name, operation.name].server_cpu_us) / median(
            outcomes[endpoint.name, operation.name].server_cpu_us
        )
        lines.append(
            f"- {operation.name}: {ours:,.0f}/s vs {theirs:,.0f}/s ({best.name}): {ratio:.1f}x — "
            f"{'meets' if ratio >= GOAL else 'misses'} it; server CPU per request {cpu_ratio:.0f}x lower."
        )
    return "\n".join(lines)


def _describe(seconds: float, runs: int) -> str:
    return (
        f"One client process, {CONCURRENCY} requests in flight (one connection each, kept alive unless the "
        f"server closes it), the same signed request re-sent for {seconds:g} s per row and run after a "
        f"{WARM_UP_SECONDS:g} s warm-up; median of {runs} runs (min-max), rows interleaved with the order rotated "
        f"each run. GET: a {OBJECT_SIZE}-byte object, every body compared with it. LIST: `list-type=2` over a "
        f"prefix of {LIST_KEYS} keys (one page), every answer checked for {LIST_KEYS} `<Contents>`."
    )


NOTES = """
- requests/s: answers received over the window's wall time (requests stop being sent when the window ends; the
  ones in flight are waited for and counted). Client and servers share the machine's two cores, so the rate is
  also bounded by the client's CPU; the server CPU per request (user+sys of the serving processes over the
  window, from /proc, divided by the answers) is not.
- moto's own server closes the connection after every answer (the client reconnects: "reconnects per run");
  through the keep-alive proxy the client keeps its connections, and the proxy opens one to moto per request.
  Its CPU is counted with moto's in that row.
"""
