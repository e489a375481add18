"""Child process: an in-memory S3 endpoint for benchmarks (benchmarks/memory_s3), buckets and all.

Run as ``python -m benchmarks.object_server [--object FILE BUCKET KEY] [--latency SECONDS]``; started by its launcher,
``testbed.memory_endpoint.MemoryEndpoint`` (tests and benchmarks alike).

Why: moto spends about 3 ms of CPU per request on the same two cores as the client, so every benchmark that
touches many objects measures moto. This server answers from memory in tens of microseconds on kept-alive
connections, so what is left is the client's own cost. It speaks the S3 the benchmarks use (GET with ranges,
HEAD, ListObjectsV2, PUT, multipart uploads, DeleteObject(s), CopyObject, conditional requests, buckets; see
``benchmarks/memory_s3/operations.py``) with S3's headers and XML. ``--object`` seeds one object from a file.
Each listener may wait a fixed time before every answer's first byte (a timer, no CPU), which stands in for
S3's time to first byte.

The control pipe is every child server's (``testbed/processes.py``), one JSON object per line each way:
stdout ``{"port": N}`` once listening; stdin ``counts``, ``reset``, ``listen SECONDS`` (another port on the same
buckets whose answers wait SECONDS: ``{"port": M}``), ``stop`` (or EOF).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.memory_s3.operations import Endpoint, quoted_md5
from benchmarks.memory_s3.store import Bucket, StoredObject
from benchmarks.memory_s3.wire import Connection
from testbed.processes import reply


def seed(endpoint: Endpoint, data: bytes, bucket: str, key: str) -> None:
    """Create `bucket` if needed and store `data` as `key`."""
    target = endpoint.store.buckets.setdefault(bucket, Bucket(bucket))
    target.put(key, StoredObject(data, quoted_md5(data), int(time.time())))


def seed_many(endpoint: Endpoint, argument: str) -> dict[str, Any]:
    """``seed-many BUCKET PREFIX COUNT DIRS FILE``: COUNT objects with FILE's bytes (shared, so a million cost
    their keys, not their bodies) as ``PREFIX d=NNN/f-NNNNNNN.parquet`` over DIRS directories (none if 0)."""
    bucket, prefix, count, dirs, path = argument.split(" ", 4)
    data = Path(path).read_bytes()
    target = endpoint.store.buckets.setdefault(bucket, Bucket(bucket))
    etag, now = quoted_md5(data), int(time.time())
    n_dirs = int(dirs)
    for i in range(int(count)):
        directory = f"d={i % n_dirs:03d}/" if n_dirs else ""
        target.put(f"{prefix}{directory}f-{i:07d}.parquet", StoredObject(data, etag, now))
    return {"ok": True, "objects": len(target)}


async def listen(endpoint: Endpoint, latency: float) -> asyncio.Server:
    """A listener on a free loopback port whose answers wait `latency` seconds before their first byte."""
    loop = asyncio.get_running_loop()
    return await loop.create_server(lambda: Connection(endpoint, latency), "127.0.0.1", 0)


def _port(server: asyncio.Server) -> int:
    return int(server.sockets[0].getsockname()[1])


async def serve(endpoint: Endpoint, latency: float) -> None:
    """Listen, report the port, then answer control commands from stdin until stop/EOF."""
    loop = asyncio.get_running_loop()
    servers = [await listen(endpoint, latency)]
    reply({"port": _port(servers[0])})
    try:
        while True:
            line = await loop.run_in_executor(None, sys.stdin.readline)
            command, _, argument = line.strip().partition(" ")
            if not line or command == "stop":
                return
            if command == "counts":
                reply(endpoint.counts())
            elif command == "reset":
                endpoint.reset()
                reply({"ok": True})
            elif command == "seed-many":
                reply(seed_many(endpoint, argument))
            elif command == "listen":
                try:
                    seconds = float(argument)
                except ValueError:
                    reply({"error": f"listen: expected seconds, got {argument!r}"})
                    continue
                servers.append(await listen(endpoint, seconds))
                reply({"port": _port(servers[-1])})
            else:
                reply(
                    {"error": f"unknown command {command!r}; expected counts, reset, listen SECONDS, seed-many or stop"}
                )
    finally:
        for server in servers:
            server.close()


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="benchmarks.object_server")
    parser.add_argument("--object", nargs=3, metavar=("FILE", "BUCKET", "KEY"), help="seed one object from FILE")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds to wait before every answer")
    args = parser.parse_args(argv)
    endpoint = Endpoint()
    if args.object:
        object_file, bucket, key = args.object
        seed(endpoint, Path(object_file).read_bytes(), bucket, key)
    asyncio.run(serve(endpoint, args.latency))


if __name__ == "__main__":
    main(sys.argv[1:])
