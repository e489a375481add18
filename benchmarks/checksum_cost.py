"""What S3's checksums cost the client: CPU per small GET and per MiB uploaded, before and after (issue 29).

    .venv/bin/python -m benchmarks.checksum_cost [--gets 400] [--puts 6] [--rounds 8] [--no-instructions]

"Before" is ``Policy(checksums="required")``: what s3io sent before checksums (Content-MD5 with every upload body,
no checksum asked on reads). "After" is the default, ``"when_supported"``: a CRC64NVME with every upload body and no
Content-MD5, and every whole-object GET asking for the stored checksum and checking the body against it. moto runs
in a child process behind the fault proxy (another child: keep-alive connections, as S3 keeps them) and states the
CRC64NVME it keeps, so the GETs of "after" really compute one.

Two measures, as the machine is shared and noisy: client CPU seconds (``time.process_time``) with the two modes
interleaved round by round in one process (median per round), and user-space instructions counted by callgrind in
child processes (per GET and per MiB = the difference between a short and a long run, start-up cancelled out).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import time

import boto3

from benchmarks.infra import REPO_ROOT, use_fake_aws_environment
from s3io import Policy, S3Client
from testbed.faultproxy import FaultProxyProcess
from testbed.moto_server import MotoProcess

BUCKET = "bench-checksums"
SMALL_KEY = "small-1k"
SMALL = random.Random(0).randbytes(1024)
UPLOAD = random.Random(1).randbytes(8 * 1024 * 1024)
MiB = 1024 * 1024
MODES = {"before (required)": "required", "after (when_supported)": "when_supported"}
CALLGRIND_RUNS = {"get": (50, 450), "put": (1, 4)}  # GETs of 1 KiB / PUTs of 8 MiB in the short and the long run


def prepare(endpoint: str) -> None:
    """The bucket, and the 1 KiB object stored with its CRC64NVME (as S3 keeps one for every new object)."""
    s3 = boto3.client("s3", endpoint_url=endpoint)
    s3.create_bucket(Bucket=BUCKET)
    s3.put_object(Bucket=BUCKET, Key=SMALL_KEY, Body=SMALL, ChecksumAlgorithm="CRC64NVME")


async def _gets(s3: S3Client, count: int) -> None:
    for _ in range(count):
        result = await s3.get_object(BUCKET, SMALL_KEY)
        assert result.data == SMALL


async def _puts(s3: S3Client, count: int) -> None:
    for n in range(count):
        await s3.put_object(BUCKET, f"upload-{n}", UPLOAD)


async def interleaved(endpoint: str, gets: int, puts: int, rounds: int) -> dict[str, dict[str, list[float]]]:
    """CPU seconds per GET and per MiB uploaded, each mode once per round, the order alternating."""
    cpu: dict[str, dict[str, list[float]]] = {name: {"get": [], "put": []} for name in MODES}
    clients = {name: S3Client(Policy(checksums=mode), endpoint_url=endpoint) for name, mode in MODES.items()}
    try:
        for s3 in clients.values():  # warm-up: connections, caches
            await _gets(s3, 20)
            await _puts(s3, 1)
        for i in range(rounds):
            for name in list(MODES)[i % 2 :] + list(MODES)[: i % 2]:
                s3 = clients[name]
                started = time.process_time()
                await _gets(s3, gets)
                cpu[name]["get"].append((time.process_time() - started) / gets)
                started = time.process_time()
                await _puts(s3, puts)
                cpu[name]["put"].append((time.process_time() - started) / (puts * len(UPLOAD) / MiB))
    finally:
        for s3 in clients.values():
            await s3.close()
    return cpu


def _child(mode: str, what: str, count: int, endpoint: str) -> None:
    """Run ``count`` GETs or PUTs in this process (the parent runs it under callgrind)."""
    use_fake_aws_environment()

    async def main() -> None:
        async with S3Client(Policy(checksums=mode), endpoint_url=endpoint) as s3:
            await _gets(s3, 20)
            await (_gets(s3, count) if what == "get" else _puts(s3, count))

    asyncio.run(main())


def _instructions(mode: str, what: str, count: int, endpoint: str) -> int:
    command = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, "-m"]
    command += ["benchmarks.checksum_cost", "--child", mode, what, str(count), endpoint]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800, env=env, cwd=REPO_ROOT, check=False)
    match = re.search(r"Collected : (\d+)", done.stderr)
    if done.returncode != 0 or match is None:
        raise RuntimeError(f"callgrind child failed (exit {done.returncode}): {done.stderr[-1500:]}")
    return int(match.group(1))


def instructions(endpoint: str) -> dict[str, dict[str, float]]:
    """Instructions per GET and per MiB uploaded, by mode: (long run - short run) / the difference in work."""
    counts: dict[str, dict[str, float]] = {}
    for name, mode in MODES.items():
        counts[name] = {}
        for what, (short, long) in CALLGRIND_RUNS.items():
            difference = _instructions(mode, what, long, endpoint) - _instructions(mode, what, short, endpoint)
            unit = (long - short) * (1 if what == "get" else len(UPLOAD) / MiB)
            counts[name][what] = difference / unit
            print(f"  callgrind: {name} {what} done", flush=True)
    return counts


def report(cpu: dict[str, dict[str, list[float]]], counted: dict[str, dict[str, float]] | None) -> str:
    before, after = list(MODES)
    lines = ["| mode | CPU µs / 1 KiB GET | CPU ms / MiB uploaded | k instructions / GET | M instructions / MiB |"]
    lines.append("|---|---:|---:|---:|---:|")
    for name in MODES:
        get = statistics.median(cpu[name]["get"]) * 1e6
        put = statistics.median(cpu[name]["put"]) * 1e3
        k = f"{counted[name]['get'] / 1e3:.1f}" if counted else "-"
        m = f"{counted[name]['put'] / 1e6:.2f}" if counted else "-"
        lines.append(f"| {name} | {get:.1f} | {put:.3f} | {k} | {m} |")
    if counted:
        for what, label in (("get", "per GET"), ("put", "per MiB uploaded")):
            change = counted[after][what] / counted[before][what] - 1
            lines.append(f"\ninstructions {label}: after / before - 1 = {change * 100:+.1f} %")
    for what, label in (("get", "per GET"), ("put", "per MiB uploaded")):
        ratios = [a / b for a, b in zip(cpu[after][what], cpu[before][what], strict=True)]
        lines.append(
            f"CPU {label}, after / before per round: median {statistics.median(ratios):.3f} "
            f"(rounds: {', '.join(f'{r:.3f}' for r in ratios)})"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(prog="benchmarks.checksum_cost", description=__doc__.splitlines()[0])
    parser.add_argument("--gets", type=int, default=400)
    parser.add_argument("--puts", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--no-instructions", action="store_true")
    parser.add_argument("--child", nargs=4, metavar=("MODE", "WHAT", "COUNT", "ENDPOINT"))
    args = parser.parse_args()
    if args.child:
        mode, what, count, endpoint = args.child
        _child(mode, what, int(count), endpoint)
        return
    use_fake_aws_environment()
    with MotoProcess() as moto:
        prepare(moto.url)
        with FaultProxyProcess(moto.url) as proxy:
            cpu = asyncio.run(interleaved(proxy.url, args.gets, args.puts, args.rounds))
            counted = None if args.no_instructions or shutil.which("valgrind") is None else instructions(proxy.url)
    print(report(cpu, counted))


if __name__ == "__main__":
    main()
