"""Interleaved A/B/C in one process: s3io's ``S3Client.get_object``, aiohttp's ClientSession and s3io's transport floor.

    .venv/bin/python -m benchmarks.cpu_per_get_ab [--gets 500] [--rounds 6]

Separate runs (the ``cpu_per_get`` table) drift with the machine's load; alternating the two clients round by
round in one process, on one proxy, isolates what s3io adds above aiohttp + signing: the watchdog timers, the
attempt runner, range validation and metrics. Prints the median client CPU per GET of each.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from urllib.parse import urlsplit

import aiohttp
import boto3

from benchmarks.cpu_per_get import TransportFloor
from benchmarks.infra import ACCESS_KEY, REGION, SECRET_KEY, Stack, use_fake_aws_environment
from s3io import S3Client
from s3io.transport.sigv4 import EMPTY_SHA256, Signer

BUCKET, KEY = "bench-cpu-ab", "object-1k"


async def _rounds(endpoint: str, gets: int, rounds: int) -> dict[str, list[float]]:
    signer = Signer(ACCESS_KEY, SECRET_KEY, None, REGION)
    host = urlsplit(endpoint).netloc
    path = f"/{BUCKET}/{KEY}"
    url = f"{endpoint}{path}"
    names = ("s3io S3Client.get_object", "transport floor", "aiohttp ClientSession")
    cpu: dict[str, list[float]] = {name: [] for name in names}
    transport_floor = TransportFloor(endpoint, BUCKET, KEY)
    async with S3Client(endpoint_url=endpoint) as s3, aiohttp.ClientSession() as session:

        async def ours() -> None:
            for _ in range(gets):
                await s3.get_object(BUCKET, KEY)

        async def floor() -> None:
            for _ in range(gets):
                await transport_floor.get()

        async def raw() -> None:
            for _ in range(gets):
                headers = {"host": host}
                signer.sign("GET", path, "", headers, EMPTY_SHA256)
                async with session.get(url, headers=headers) as response:
                    await response.read()

        runs = dict(zip(names, (ours, floor, raw), strict=True))
        for run in runs.values():  # warm-up: connections, caches
            await run()
        for i in range(rounds):
            order = list(runs)[i % len(runs) :] + list(runs)[: i % len(runs)]
            for name in order:
                started = time.process_time()
                await runs[name]()
                cpu[name].append((time.process_time() - started) / gets * 1000)
    await transport_floor.close()
    return cpu


def main() -> None:
    parser = argparse.ArgumentParser(prog="benchmarks.cpu_per_get_ab", description=__doc__.splitlines()[0])
    parser.add_argument("--gets", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    use_fake_aws_environment()
    with Stack() as stack:
        boto3.client("s3", endpoint_url=stack.moto_url).create_bucket(Bucket=BUCKET)
        boto3.client("s3", endpoint_url=stack.moto_url).put_object(Bucket=BUCKET, Key=KEY, Body=b"x" * 1024)
        cpu = asyncio.run(_rounds(stack.proxy(0.0).url, args.gets, args.rounds))
    for name, values in cpu.items():
        print(f"{name:28s} median {statistics.median(values):.3f} ms CPU/GET  rounds: {[round(v, 3) for v in values]}")


if __name__ == "__main__":
    main()
