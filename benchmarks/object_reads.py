"""object_reads: bytes at the speed of the wire. s3io against obstore (Python bindings of Rust's object_store), s3fs
and pyarrow's S3 filesystem on the jobs they share: one large object, scattered ranges of it, many small objects, a
large listing.

Why: on small GETs s3io is the cheapest Python client measured here; large objects and many ranges are where a
client that copies or joins bytes, or starts tasks per range, falls behind one written in Rust (issue 30). Every
client runs in this process, one workload at a time, rows and servers interleaved with the order rotated each run;
a fresh client per run. Servers: the in-memory endpoint (the clients' own costs) and moto behind the keep-alive
proxy (a Python server: smaller sizes, so a run stays short); no latency is added but in `listing_latency`
(20 ms before every first byte, where listing page after page pays a round trip per 1,000 keys).

Two protocols, one after the other in each run: a fresh client (and ``asyncio.run``) per run, free memory handed back
before each; then long-lived clients (issue 39): one client per library for every round, on one event loop, rounds
interleaving the libraries, as an executor reading object after object (the large object, the ranges, the small
objects).
"""

from __future__ import annotations

import asyncio
import gc
import hashlib
import random
import tempfile
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.api import Options, Report
from benchmarks.infra import ACCESS_KEY, REGION, SECRET_KEY, Clock, Measurement, Stack, release_free_memory
from benchmarks.results import markdown_table, median
from benchmarks.servers import Server, Target, servers

MiB = 1024 * 1024
BUCKET = "bench-object-reads"
RANGE_COUNT = 200
RANGE_BYTES = 64 * 1024
SMALL_BYTES = 100 * 1024
IN_FLIGHT = 64  # small objects in flight, for every client that lets the caller choose
OBSTORE_PARTS = 16  # the large object as this many gathered get_range_async calls (obstore has no parallel get)
FIRST_BYTE_LATENCY = 0.020  # the listing_latency workload: S3's typical time to first byte
TREE = "s3io `list_tree` (directories concurrently: what every reader lists with)"


@dataclass(frozen=True)
class Sizes:
    """What one server holds for the run."""

    large: int  # bytes of the large object
    small: int  # number of small objects
    listed: int  # keys under the listing prefix
    directories: int  # Hive directories they are spread over


FULL = {"memory": Sizes(256 * MiB, 2000, 200_000, 100), "moto": Sizes(64 * MiB, 500, 5_000, 10)}
QUICK = {"memory": Sizes(32 * MiB, 200, 5_000, 10), "moto": Sizes(16 * MiB, 50, 500, 5)}


@dataclass(frozen=True)
class Env:
    """A seeded server: where to point a client and what every answer must be."""

    server: str
    target: Target
    slow: Target  # the same server, every answer waiting FIRST_BYTE_LATENCY before its first byte
    sizes: Sizes
    large_digest: str
    ranges: list[tuple[int, int]]
    ranges_digest: str
    small_keys: list[str]

    @property
    def url(self) -> str:
        return self.target.url


@dataclass(frozen=True)
class Row:
    """One client doing one job: ``run(env)`` returns what the check compares (a digest, a count)."""

    workload: str
    client: str
    run: Callable[[Env], Any]
    expected: Callable[[Env], Any]
    judged: bool = False  # the s3io row the targets are judged on, against the workload's obstore row
    most: int | None = None  # objects or keys past which the row is not run (minutes a run); None: always


def _digest(blobs: Any) -> str:
    h = hashlib.sha256()
    for blob in blobs:
        h.update(blob)
    return h.hexdigest()[:12]


# ------------------------------------------------------------------------------------------------ clients


def _s3io_client(env: Env, url: str | None = None) -> Any:
    from s3io import Credentials, S3Client

    return S3Client(endpoint_url=url or env.url, region=REGION, credentials=Credentials(ACCESS_KEY, SECRET_KEY))


def _obstore(env: Env, url: str | None = None) -> Any:
    from obstore.store import S3Store

    return S3Store(
        BUCKET,
        endpoint=url or env.url,
        access_key_id=ACCESS_KEY,
        secret_access_key=SECRET_KEY,
        region=REGION,
        virtual_hosted_style_request=False,
        client_options={"allow_http": True},
    )


def _s3fs(env: Env) -> Any:
    import s3fs

    return s3fs.S3FileSystem(
        key=ACCESS_KEY,
        secret=SECRET_KEY,
        endpoint_url=env.url,
        client_kwargs={"region_name": REGION},
        skip_instance_cache=True,
    )


def _pyarrow(env: Env) -> Any:
    import pyarrow.fs as pafs

    return pafs.S3FileSystem(
        access_key=ACCESS_KEY,
        secret_key=SECRET_KEY,
        region=REGION,
        endpoint_override=env.url.removeprefix("http://"),
        scheme="http",
    )


def _info(key: str, size: int) -> Any:
    from s3io import ObjectInfo

    return ObjectInfo(BUCKET, key, size)


# ------------------------------------------------------------------------------------------------ large object


def large_s3io(env: Env) -> str:
    from s3io.engine import RangeEngine

    async def main() -> str:
        async with _s3io_client(env) as s3:
            return _digest([await RangeEngine(s3).fetch_object(_info("large.bin", env.sizes.large))])

    return asyncio.run(main())


def large_obstore(env: Env) -> str:
    import obstore

    store, size = _obstore(env), env.sizes.large
    step = -(-size // OBSTORE_PARTS)

    async def main() -> str:
        parts = await asyncio.gather(
            *(
                obstore.get_range_async(store, "large.bin", start=start, end=min(start + step, size))
                for start in range(0, size, step)
            )
        )
        return _digest(parts)

    return asyncio.run(main())


def large_s3fs(env: Env) -> str:
    return _digest([_s3fs(env).cat_file(f"{BUCKET}/large.bin")])


def large_pyarrow(env: Env) -> str:
    with _pyarrow(env).open_input_file(f"{BUCKET}/large.bin") as f:
        return _digest([f.read()])


# ------------------------------------------------------------------------------------------------ ranges


def ranges_s3io(env: Env) -> str:
    from s3io.engine import RangeEngine

    async def main() -> str:
        async with _s3io_client(env) as s3:
            return _digest(await RangeEngine(s3).fetch_ranges(_info("large.bin", env.sizes.large), env.ranges))

    return asyncio.run(main())


def ranges_s3io_fs(env: Env) -> str:
    from s3io.fs import S3FileSystem

    fs = S3FileSystem(key=ACCESS_KEY, secret=SECRET_KEY, endpoint_url=env.url, client_kwargs={"region_name": REGION})
    try:
        n = len(env.ranges)
        path = f"{BUCKET}/large.bin"
        return _digest(fs.cat_ranges([path] * n, [a for a, _ in env.ranges], [b for _, b in env.ranges]))
    finally:
        fs.close()


def ranges_obstore(env: Env) -> str:
    import obstore

    async def main() -> str:
        starts = [a for a, _ in env.ranges]
        ranges = await obstore.get_ranges_async(
            _obstore(env), "large.bin", starts=starts, ends=[b for _, b in env.ranges]
        )
        return _digest(ranges)

    return asyncio.run(main())


def ranges_s3fs(env: Env) -> str:
    n = len(env.ranges)
    fs = _s3fs(env)
    return _digest(fs.cat_ranges([f"{BUCKET}/large.bin"] * n, [a for a, _ in env.ranges], [b for _, b in env.ranges]))


# ------------------------------------------------------------------------------------------------ many objects


def many_s3io(env: Env) -> int:
    from s3io.engine import RangeEngine, Request

    async def main() -> int:
        async with _s3io_client(env) as s3:
            engine = RangeEngine(s3)
            requests = [Request(_info(key, SMALL_BYTES)) for key in env.small_keys]
            return sum([len(data) async for _, data in engine.stream(requests)])

    return asyncio.run(main())


def many_obstore(env: Env) -> int:
    import obstore

    store = _obstore(env)
    limit = asyncio.Semaphore(IN_FLIGHT)

    async def one(key: str) -> int:
        async with limit:
            return len(await (await obstore.get_async(store, key)).bytes_async())

    async def main() -> int:
        return sum(await asyncio.gather(*(one(key) for key in env.small_keys)))

    return asyncio.run(main())


def many_s3fs(env: Env) -> int:
    fs = _s3fs(env)
    return sum(
        len(data) for data in fs.cat([f"{BUCKET}/{key}" for key in env.small_keys], batch_size=IN_FLIGHT).values()
    )


def many_pyarrow(env: Env) -> int:
    fs = _pyarrow(env)

    def one(key: str) -> int:
        with fs.open_input_stream(f"{BUCKET}/{key}") as f:
            return len(f.read())

    with ThreadPoolExecutor(IN_FLIGHT) as pool:
        return sum(pool.map(one, env.small_keys))


# ------------------------------------------------------------------------------------------------ listing


def list_s3io(env: Env, url: str | None = None) -> int:
    async def main() -> int:
        async with _s3io_client(env, url) as s3:
            return sum([1 async for _ in s3.list_objects(BUCKET, "list/")])

    return asyncio.run(main())


def list_s3io_tree(env: Env, url: str | None = None) -> int:
    from s3io.table.listing import list_tree

    async def main() -> int:
        async with _s3io_client(env, url) as s3:
            return len(await list_tree(s3, BUCKET, "list/"))

    return asyncio.run(main())


def list_obstore(env: Env, url: str | None = None) -> int:
    import obstore

    return sum(len(batch) for batch in obstore.list(_obstore(env, url), "list/", chunk_size=1000))


def list_s3fs(env: Env) -> int:
    return len(_s3fs(env).find(f"{BUCKET}/list/"))


def list_pyarrow(env: Env) -> int:
    import pyarrow.fs as pafs

    infos = _pyarrow(env).get_file_info(pafs.FileSelector(f"{BUCKET}/list", recursive=True))
    return sum(1 for info in infos if info.type == pafs.FileType.File)


WORKLOADS = {
    "large": "one large object, whole",
    "ranges": f"{RANGE_COUNT} ranges of {RANGE_BYTES // 1024} KiB scattered over the large object",
    "many": f"small objects of {SMALL_BYTES // 1024} KiB, {IN_FLIGHT} in flight",
    "listing": "a listing of every key under a prefix of Hive directories",
    "listing_latency": "the same listing, every answer waiting 20 ms before its first byte",
}
ROWS = (
    Row(
        "large",
        "s3io `RangeEngine.fetch_object` (16 MiB parts, 32 in flight)",
        large_s3io,
        lambda e: e.large_digest,
        judged=True,
    ),
    Row("large", f"obstore, {OBSTORE_PARTS} gathered `get_range_async`", large_obstore, lambda e: e.large_digest),
    Row("large", "s3fs `cat_file`", large_s3fs, lambda e: e.large_digest),
    Row("large", "pyarrow `S3FileSystem.open_input_file().read()`", large_pyarrow, lambda e: e.large_digest),
    Row("ranges", "s3io `RangeEngine.fetch_ranges`", ranges_s3io, lambda e: e.ranges_digest, judged=True),
    Row("ranges", "s3io `S3FileSystem.cat_ranges` (s3fs drop-in)", ranges_s3io_fs, lambda e: e.ranges_digest),
    Row("ranges", "obstore `get_ranges_async`", ranges_obstore, lambda e: e.ranges_digest),
    Row("ranges", "s3fs `cat_ranges`", ranges_s3fs, lambda e: e.ranges_digest),
    Row("many", "s3io `RangeEngine.stream` (whole objects)", many_s3io, lambda e: e.sizes.small * SMALL_BYTES, True),
    Row("many", "obstore `get_async`, gathered", many_obstore, lambda e: e.sizes.small * SMALL_BYTES),
    Row("many", "s3fs `cat` (batch 64)", many_s3fs, lambda e: e.sizes.small * SMALL_BYTES, most=500),
    Row("many", "pyarrow `open_input_stream`, 64 threads", many_pyarrow, lambda e: e.sizes.small * SMALL_BYTES),
    Row("listing", "s3io `S3Client.list_objects` (page after page)", list_s3io, lambda e: e.sizes.listed),
    Row("listing", TREE, list_s3io_tree, lambda e: e.sizes.listed, judged=True),
    Row("listing", "obstore `list`", list_obstore, lambda e: e.sizes.listed),
    Row("listing", "s3fs `find`", list_s3fs, lambda e: e.sizes.listed, most=20_000),
    Row("listing", "pyarrow `get_file_info` (recursive selector)", list_pyarrow, lambda e: e.sizes.listed),
    Row(
        "listing_latency",
        "s3io `S3Client.list_objects` (page after page)",
        lambda e: list_s3io(e, e.slow.url),
        lambda e: e.sizes.listed,
    ),
    Row("listing_latency", TREE, lambda e: list_s3io_tree(e, e.slow.url), lambda e: e.sizes.listed, judged=True),
    Row("listing_latency", "obstore `list`", lambda e: list_obstore(e, e.slow.url), lambda e: e.sizes.listed),
)


# ------------------------------------------------------------------------------------------------ long-lived clients
# The second protocol (issue 39): an executor reads object after object with one client. Each library's client is
# made once per server, before the clock, on one event loop shared by every round (s3fs keeps its own loop thread,
# pyarrow its own threads); the rounds interleave the libraries; nothing is released between rounds but Python's
# garbage (``gc.collect``), as in a long-running process. A row returns the bytes it read and they are checked after
# the clock stops (hashing 256 MiB takes longer than fetching it).


class HeldS3io:
    """One S3Client and one RangeEngine for every round (``fs``: s3io's s3fs drop-in, one for every round)."""

    def __init__(self, env: Env, runner: asyncio.Runner) -> None:
        from s3io.engine import RangeEngine
        from s3io.fs import S3FileSystem

        self.runner = runner
        self.client = _s3io_client(env)
        runner.run(self.client.__aenter__())
        self.engine = RangeEngine(self.client)
        self.fs = S3FileSystem(
            key=ACCESS_KEY, secret=SECRET_KEY, endpoint_url=env.url, client_kwargs={"region_name": REGION}
        )

    def close(self) -> None:
        self.fs.close()
        self.runner.run(self.client.__aexit__(None, None, None))


class HeldObstore:
    """One S3Store for every round, awaited on the shared loop."""

    def __init__(self, env: Env, runner: asyncio.Runner) -> None:
        self.runner = runner
        self.store = _obstore(env)

    def close(self) -> None:
        pass


class HeldS3fs:
    """One s3fs S3FileSystem for every round (its own loop thread, made once)."""

    def __init__(self, env: Env, runner: asyncio.Runner) -> None:
        self.fs = _s3fs(env)

    def close(self) -> None:
        pass


class HeldPyarrow:
    """One pyarrow S3FileSystem and one pool of IN_FLIGHT threads for every round."""

    def __init__(self, env: Env, runner: asyncio.Runner) -> None:
        self.fs = _pyarrow(env)
        self.pool = ThreadPoolExecutor(IN_FLIGHT)

    def close(self) -> None:
        self.pool.shutdown()


HELD: dict[str, Callable[[Env, asyncio.Runner], Any]] = {
    "s3io": HeldS3io,
    "obstore": HeldObstore,
    "s3fs": HeldS3fs,
    "pyarrow": HeldPyarrow,
}


def _held_run(runner: asyncio.Runner, work: Awaitable[Any]) -> list[Any]:
    """``work``'s result run on the held loop, passed out in a list rather than returned by the main coroutine:
    ``asyncio.Runner`` reprs a main task's result on the way out when SIGINT has Python's default handler (3.11), and
    obstore's ``Bytes`` repr is O(n) (seconds for 256 MiB)."""
    box: list[Any] = []

    async def main() -> None:
        box.append(await work)

    runner.run(main())
    return box


def held_large_s3io(held: HeldS3io, env: Env) -> list[Any]:
    return _held_run(held.runner, held.engine.fetch_object(_info("large.bin", env.sizes.large)))


def held_large_obstore(held: HeldObstore, env: Env) -> list[Any]:
    import obstore

    size = env.sizes.large
    step = -(-size // OBSTORE_PARTS)

    async def main() -> list[Any]:
        return await asyncio.gather(
            *(
                obstore.get_range_async(held.store, "large.bin", start=start, end=min(start + step, size))
                for start in range(0, size, step)
            )
        )

    return _held_run(held.runner, main())[0]


def held_large_s3fs(held: HeldS3fs, env: Env) -> list[Any]:
    return [held.fs.cat_file(f"{BUCKET}/large.bin")]


def held_large_pyarrow(held: HeldPyarrow, env: Env) -> list[Any]:
    with held.fs.open_input_file(f"{BUCKET}/large.bin") as f:
        return [f.read()]


def held_ranges_s3io(held: HeldS3io, env: Env) -> list[Any]:
    return _held_run(held.runner, held.engine.fetch_ranges(_info("large.bin", env.sizes.large), env.ranges))[0]


def held_ranges_s3io_fs(held: HeldS3io, env: Env) -> list[Any]:
    n = len(env.ranges)
    return held.fs.cat_ranges([f"{BUCKET}/large.bin"] * n, [a for a, _ in env.ranges], [b for _, b in env.ranges])


def held_ranges_obstore(held: HeldObstore, env: Env) -> list[Any]:
    import obstore

    starts, ends = [a for a, _ in env.ranges], [b for _, b in env.ranges]

    async def main() -> list[Any]:
        return await obstore.get_ranges_async(held.store, "large.bin", starts=starts, ends=ends)

    return _held_run(held.runner, main())[0]


def held_ranges_s3fs(held: HeldS3fs, env: Env) -> list[Any]:
    n = len(env.ranges)
    return held.fs.cat_ranges([f"{BUCKET}/large.bin"] * n, [a for a, _ in env.ranges], [b for _, b in env.ranges])


def held_many_s3io(held: HeldS3io, env: Env) -> int:
    from s3io.engine import Request

    async def main() -> int:
        requests = [Request(_info(key, SMALL_BYTES)) for key in env.small_keys]
        return sum([len(data) async for _, data in held.engine.stream(requests)])

    return held.runner.run(main())


def held_many_obstore(held: HeldObstore, env: Env) -> int:
    import obstore

    async def main() -> int:
        limit = asyncio.Semaphore(IN_FLIGHT)

        async def one(key: str) -> int:
            async with limit:
                return len(await (await obstore.get_async(held.store, key)).bytes_async())

        return sum(await asyncio.gather(*(one(key) for key in env.small_keys)))

    return held.runner.run(main())


def held_many_s3fs(held: HeldS3fs, env: Env) -> int:
    paths = [f"{BUCKET}/{key}" for key in env.small_keys]
    return sum(len(data) for data in held.fs.cat(paths, batch_size=IN_FLIGHT).values())


def held_many_pyarrow(held: HeldPyarrow, env: Env) -> int:
    def one(key: str) -> int:
        with held.fs.open_input_stream(f"{BUCKET}/{key}") as f:
            return len(f.read())

    return sum(held.pool.map(one, env.small_keys))


@dataclass(frozen=True)
class HeldRow:
    """One library's held client doing one job: ``run(held, env)`` returns what ``check`` turns into the value
    compared with ``expected`` (after the clock)."""

    workload: str
    client: str
    library: str  # the key of HELD whose client the row uses
    run: Callable[[Any, Env], Any]
    check: Callable[[Any], Any]
    expected: Callable[[Env], Any]
    judged: bool = False
    most: int | None = None


LONG_LIVED_WORKLOADS = {key: WORKLOADS[key] for key in ("large", "ranges", "many")}
_LARGE = (_digest, lambda e: e.large_digest)
_RANGES = (_digest, lambda e: e.ranges_digest)
_MANY = (lambda n: n, lambda e: e.sizes.small * SMALL_BYTES)
HELD_ROWS = (
    HeldRow("large", "s3io `RangeEngine.fetch_object`", "s3io", held_large_s3io, *_LARGE, judged=True),
    HeldRow("large", f"obstore, {OBSTORE_PARTS} gathered `get_range_async`", "obstore", held_large_obstore, *_LARGE),
    HeldRow("large", "s3fs `cat_file`", "s3fs", held_large_s3fs, *_LARGE),
    HeldRow("large", "pyarrow `open_input_file().read()`", "pyarrow", held_large_pyarrow, *_LARGE),
    HeldRow("ranges", "s3io `RangeEngine.fetch_ranges`", "s3io", held_ranges_s3io, *_RANGES, judged=True),
    HeldRow("ranges", "s3io `S3FileSystem.cat_ranges` (s3fs drop-in)", "s3io", held_ranges_s3io_fs, *_RANGES),
    HeldRow("ranges", "obstore `get_ranges_async`", "obstore", held_ranges_obstore, *_RANGES),
    HeldRow("ranges", "s3fs `cat_ranges`", "s3fs", held_ranges_s3fs, *_RANGES),
    HeldRow("many", "s3io `RangeEngine.stream` (whole objects)", "s3io", held_many_s3io, *_MANY, judged=True),
    HeldRow("many", "obstore `get_async`, gathered", "obstore", held_many_obstore, *_MANY),
    HeldRow("many", "s3fs `cat` (batch 64)", "s3fs", held_many_s3fs, *_MANY, most=500),
    HeldRow("many", "pyarrow `open_input_stream`, 64 threads", "pyarrow", held_many_pyarrow, *_MANY),
)


def _measure_long_lived(envs: list[Env], runs: int) -> dict[tuple[str, str, str], Outcome]:
    """Every HELD_ROWS row on every server ``runs`` times with one client per library and server, made before the
    first round; each round runs every workload, rows rotated each round."""
    outcomes: dict[tuple[str, str, str], Outcome] = {}
    for env in envs:
        for row in HELD_ROWS:
            skipped = row.workload == "many" and row.most is not None and env.sizes.small > row.most
            reason = f"not run above {row.most:,} (about 1,700 a second here: minutes a run)" if skipped else None
            outcomes[env.server, row.workload, row.client] = Outcome([], reason)
    with asyncio.Runner() as runner:
        held: dict[tuple[str, str], Any] = {}
        try:
            for env in envs:
                for library, make in HELD.items():
                    held[env.server, library] = make(env, runner)
            for repetition in range(runs):
                for workload in LONG_LIVED_WORKLOADS:
                    cases = [(env, row) for env in envs for row in HELD_ROWS if row.workload == workload]
                    shift = repetition % len(cases)
                    for env, row in cases[shift:] + cases[:shift]:
                        _run_held(env, row, held[env.server, row.library], outcomes, repetition)
        finally:
            for client in held.values():
                client.close()
    return outcomes


def _run_held(env: Env, row: HeldRow, client: Any, outcomes: dict[tuple[str, str, str], Outcome], rep: int) -> None:
    """One timed run of one row with its held client; checked after the clock, garbage collected outside it."""
    outcome = outcomes[env.server, row.workload, row.client]
    if outcome.failure:
        return
    clock = Clock(env.target.counter)
    try:
        with clock:
            got = row.run(client, env)
        value = row.check(got)
        del got
        if value != row.expected(env):
            raise AssertionError(f"got {value!r}, expected {row.expected(env)!r}")
    except Exception as exc:  # one broken client must not hide the others' figures
        outcome.failure = f"failed: {type(exc).__name__}: {exc}"[:300]
        return
    finally:
        gc.collect()
    assert clock.result is not None
    outcome.measurements.append(clock.result)
    print(f"  object_reads long-lived round {rep + 1}: {env.server}: {row.client}: {clock.result.wall:.3f} s")


# ------------------------------------------------------------------------------------------------ set-up


def _seed(server: Server, sizes: Sizes) -> Env:
    """Upload the large object, the small objects and the listed keys; set-up traffic is not counted."""
    rnd = random.Random(30)
    block = rnd.randbytes(MiB + 4093)
    large = (block * (sizes.large // len(block) + 1))[: sizes.large]
    small_body = rnd.randbytes(SMALL_BYTES)
    small_keys = [f"small/f-{i:07d}.bin" for i in range(sizes.small)]
    starts = sorted(rnd.sample(range(0, sizes.large - RANGE_BYTES, 4096), RANGE_COUNT))
    ranges = [(start, start + RANGE_BYTES) for start in starts]
    client = server.client()
    try:
        client.create_bucket(Bucket=BUCKET)
    except client.exceptions.BucketAlreadyOwnedByYou:
        pass
    client.put_object(Bucket=BUCKET, Key="large.bin", Body=large)
    if server.name == "memory":
        with tempfile.TemporaryDirectory() as tmp:
            body, empty = Path(tmp, "small"), Path(tmp, "empty")
            body.write_bytes(small_body)
            empty.write_bytes(b"")
            server.stack.endpoint.seed_many(BUCKET, "small/", sizes.small, 0, str(body))
            server.stack.endpoint.seed_many(BUCKET, "list/", sizes.listed, sizes.directories, str(empty))
        small_keys = [f"small/f-{i:07d}.parquet" for i in range(sizes.small)]
    else:
        listed = [f"list/d={i % sizes.directories:03d}/f-{i:07d}.parquet" for i in range(sizes.listed)]
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda key: client.put_object(Bucket=BUCKET, Key=key, Body=small_body), small_keys))
            list(pool.map(lambda key: client.put_object(Bucket=BUCKET, Key=key, Body=b""), listed))
    return Env(
        server.name,
        server.target(0.0),
        server.target(FIRST_BYTE_LATENCY),
        sizes,
        _digest([large]),
        ranges,
        _digest([large[a:b] for a, b in ranges]),
        small_keys,
    )


# ------------------------------------------------------------------------------------------------ harness


@dataclass
class Outcome:
    measurements: list[Measurement]
    failure: str | None = None


def _measure(envs: list[Env], runs: int) -> dict[tuple[str, str, str], Outcome]:
    """Every row on every server ``runs`` times; within a workload, rows and servers rotate each run."""
    outcomes: dict[tuple[str, str, str], Outcome] = {}
    for workload in WORKLOADS:
        cases = [(env, row) for env in envs for row in ROWS if row.workload == workload]
        for env, row in cases:
            items = env.sizes.small if workload == "many" else env.sizes.listed
            skipped = row.most is not None and items > row.most
            reason = f"not run above {row.most:,} (about 1,700 a second here: minutes a run)" if skipped else None
            outcomes[env.server, workload, row.client] = Outcome([], reason)
        for repetition in range(runs):
            shift = repetition % len(cases)
            for env, row in cases[shift:] + cases[:shift]:
                outcome = outcomes[env.server, workload, row.client]
                if outcome.failure:
                    continue
                release_free_memory()
                clock = Clock((env.slow if workload.endswith("_latency") else env.target).counter)
                try:
                    with clock:
                        got = row.run(env)
                    if got != row.expected(env):
                        raise AssertionError(f"got {got!r}, expected {row.expected(env)!r}")
                except Exception as exc:  # one broken client must not hide the others' figures
                    outcome.failure = f"failed: {type(exc).__name__}: {exc}"[:300]
                    continue
                finally:
                    gc.collect()
                assert clock.result is not None
                outcome.measurements.append(clock.result)
                print(f"  object_reads run {repetition + 1}: {env.server}: {row.client}: {clock.result.wall:.3f} s")
    return outcomes


def _amount(env: Env, workload: str) -> tuple[float, str]:
    """How much one run moves, and the unit of its rate."""
    if workload == "large":
        return env.sizes.large / 1e6, "MB/s"
    if workload == "ranges":
        return RANGE_COUNT * RANGE_BYTES / 1e6, "MB/s"
    if workload == "many":
        return env.sizes.small, "objects/s"
    return env.sizes.listed, "keys/s"


def _render(
    envs: list[Env],
    outcomes: dict[tuple[str, str, str], Outcome],
    rows: tuple[Any, ...] = ROWS,
    workloads: dict[str, str] = WORKLOADS,
    *,
    first: bool = False,
) -> str:
    """One table per workload: every row's medians and ratios to obstore's (``first``: the first round's wall too)."""
    tables = []
    for workload, about in workloads.items():
        table_rows = []
        for env in envs:
            amount, unit = _amount(env, workload)
            obstore_row = next(r for r in rows if r.workload == workload and r.client.startswith("obstore"))
            peer = outcomes.get((env.server, workload, obstore_row.client))
            peer_wall = median([m.wall for m in peer.measurements]) if peer and peer.measurements else None
            peer_cpu = median([m.cpu for m in peer.measurements]) if peer and peer.measurements else None
            for row in (r for r in rows if r.workload == workload):
                outcome = outcomes[env.server, workload, row.client]
                runs = outcome.measurements
                if not runs:
                    blank = [""] * (7 if first else 6)
                    table_rows.append([env.server, row.client, outcome.failure or "not run", *blank])
                    continue
                wall, cpu = median([m.wall for m in runs]), median([m.cpu for m in runs])
                table_rows.append(
                    [
                        env.server,
                        row.client,
                        f"{wall:.3f} ({min(m.wall for m in runs):.3f}-{max(m.wall for m in runs):.3f})",
                        f"{cpu:.3f} ({min(m.cpu for m in runs):.3f}-{max(m.cpu for m in runs):.3f})",
                        f"{amount / wall:,.0f} {unit}",
                        f"{median([m.requests.total for m in runs]):.0f}",
                        f"{wall / peer_wall:.2f}" if peer_wall else "n/a",
                        f"{cpu / peer_cpu:.2f}" if peer_cpu else "n/a",
                        "✓",
                    ]
                )
                if first:
                    table_rows[-1].insert(3, f"{runs[0].wall:.3f}")
        sizes = ", ".join(f"{env.server}: {_describe(env, workload)}" for env in envs)
        headers = [
            "server",
            "client",
            "wall s, median (min-max)",
            "client CPU s, median (min-max)",
            "rate",
            "requests",
            "wall ÷ obstore",
            "CPU ÷ obstore",
            "checked",
        ]
        if first:
            headers.insert(3, "first round wall s")
        tables.append(f"### {about} ({sizes})\n\n{markdown_table(headers, table_rows, text_columns=2)}")
    return "\n\n".join(tables)


def _describe(env: Env, workload: str) -> str:
    sizes = env.sizes
    if workload in ("large", "ranges"):
        return f"{sizes.large // MiB} MiB"
    if workload == "many":
        return f"{sizes.small:,} objects"
    return f"{sizes.listed:,} keys in {sizes.directories} directories"


def _targets(
    envs: list[Env],
    outcomes: dict[tuple[str, str, str], Outcome],
    rows: tuple[Any, ...] = ROWS,
    workloads: dict[str, str] = WORKLOADS,
) -> str:
    """The issue's "Done means" table: each judged s3io row against obstore's, wall and CPU, on each server."""
    table_rows = []
    for env in envs:
        for workload, about in workloads.items():
            ours = next(r for r in rows if r.workload == workload and r.judged)
            peer = next(r for r in rows if r.workload == workload and r.client.startswith("obstore"))
            mine, theirs = outcomes[env.server, workload, ours.client], outcomes[env.server, workload, peer.client]
            if not mine.measurements or not theirs.measurements:
                table_rows.append([env.server, f"{about} ({_describe(env, workload)})", "not run", "", "", "", ""])
                continue
            wall = median([m.wall for m in mine.measurements]) / median([m.wall for m in theirs.measurements])
            cpu = median([m.cpu for m in mine.measurements]) / median([m.cpu for m in theirs.measurements])
            table_rows.append(
                [
                    env.server,
                    f"{about} ({_describe(env, workload)})",
                    ours.client,
                    f"{wall:.2f}",
                    f"{cpu:.2f}",
                    "met" if wall <= 1.0 and cpu <= 1.2 else "missed",
                ]
            )
    headers = ["server", "workload", "s3io row", "wall ÷ obstore (≤ 1.00)", "CPU ÷ obstore (≤ 1.20)", "target"]
    return markdown_table(headers, table_rows, text_columns=3)


NOTES = """
- One process, one client at a time; wall and CPU include creating the client (each run a fresh one). Client CPU is
  user+sys of the benchmark process over all its threads (obstore's Rust runtime, s3fs's and pyarrow's I/O threads
  included); the servers run in other processes on the same two cores.
- "checked": every run's bytes are compared with the uploaded ones (a digest of the object, of the ranges in
  request order, the total bytes of the small objects, the number of keys listed).
- obstore has no parallel whole-object read: its large-object row is the object as 16 gathered
  `get_range_async` calls; `get_ranges` merges ranges closer than 1 MiB and runs at most 10 GETs at once.
- s3io's rows use its defaults (`EngineConfig()`, `Policy()`), as a user would.
"""


def run(stack: Stack, options: Options) -> Report:
    """Every workload, every client, on each server of ``options.servers``."""
    table = QUICK if options.quick else FULL
    envs = []
    for server in servers(stack, options.servers):
        sizes = table[server.name]
        print(f"  object_reads: seeding {server.label}: {sizes}", flush=True)
        envs.append(_seed(server, sizes))
    outcomes = _measure(envs, options.runs)
    held = _measure_long_lived(envs, options.runs)
    intro = (
        f"Median of {options.runs} runs per row. Servers: "
        + ", ".join(
            f"{env.server} ({'in-memory endpoint' if env.server == 'memory' else 'moto behind the keep-alive proxy'})"
            for env in envs
        )
        + ". Targets (issue 30): s3io at or below obstore's median wall time on the large object, the scattered "
        "ranges, the many small objects and the listing, with client CPU at most 1.2x obstore's."
    )
    return Report(
        "Object reads: s3io vs obstore, s3fs and pyarrow (`object_reads`)",
        f"{intro}\n\n### Targets (issue 30)\n\n{_targets(envs, outcomes)}\n\n{_render(envs, outcomes)}\n{NOTES}\n"
        f"{long_lived_report(envs, held, options.runs)}",
    )


LONG_LIVED_NOTES = """
- One client per library and server for every round, made before the first (not timed): s3io's `S3Client` and one
  `RangeEngine`, obstore's `S3Store`, s3fs's and pyarrow's `S3FileSystem` (pyarrow's 64 threads kept too); one
  event loop for all rounds. Rounds interleave the libraries (rotated each round); only Python's garbage is collected
  between runs (no memory handed back to the OS), as in an executor reading object after object.
- The clock covers the read only: each run's bytes are checked after it stops (a digest of the object, of the ranges
  in request order, the total bytes of the small objects). "first round" is the round that opens the connections.
"""


def long_lived_report(envs: list[Env], outcomes: dict[tuple[str, str, str], Outcome], runs: int) -> str:
    """The long-lived protocol's section: targets (issue 39) then one table per workload."""
    targets = _targets(envs, outcomes, HELD_ROWS, LONG_LIVED_WORKLOADS)
    tables = _render(envs, outcomes, HELD_ROWS, LONG_LIVED_WORKLOADS, first=True).replace("### ", "#### ")
    return (
        f"### Long-lived clients, interleaved rounds (issue 39)\n\nMedian of {runs} rounds per row. Targets (issue "
        "39): s3io at or below obstore's median wall on the large object, the scattered ranges and the small objects, "
        f"client CPU at most 1.2x obstore's.\n\n{targets}\n\n{tables}\n{LONG_LIVED_NOTES}"
    )
