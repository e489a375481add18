"""cpu_per_get_instructions: instructions per small GET, counted by valgrind (callgrind), row by row.

Why: client CPU time on a 2-core machine shared with other processes drifts by ±50 % from run to run;
an instruction count does not. Each asynchronous row of ``cpu_per_get`` runs in a child process under
callgrind twice, with a small and a large number of GETs; the difference divided by the difference in GETs
is the per-GET count, start-up and imports cancelled out. Counts are user-space instructions of the client
process: the kernel's side of the syscalls is not counted, and is the same for every row (one send, one
receive per GET on a kept-alive connection).

    .venv/bin/python -m benchmarks.run --only cpu_per_get_instructions
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass

from benchmarks import cpu_per_get
from benchmarks.api import Options, Report
from benchmarks.infra import REPO_ROOT, RequestCounts, Stack
from benchmarks.results import markdown_table, median

FULL = (100, 600)  # GETs in the small and the large run
QUICK = (20, 70)
WARMUP = 20
CHILD_TIMEOUT = 900.0
ROWS = [case for case in cpu_per_get.CASES if case.how.startswith("async") and not case.name.startswith("s3fs")]


@dataclass(frozen=True)
class _Uncounted:
    """Stands in for the server handle inside the child: the parent's pipe to it is not reachable from there."""

    def reset(self) -> None:
        return None

    def counts(self) -> RequestCounts:
        return RequestCounts({})


def _child(row: int, endpoint: str, gets: int) -> None:
    """Run one row's GET loop in this process (the parent runs it under callgrind)."""
    from benchmarks.infra import use_fake_aws_environment

    use_fake_aws_environment()
    expected = random.Random(0).randbytes(cpu_per_get.OBJECT_SIZE)
    target = cpu_per_get.Target(endpoint, cpu_per_get.BUCKET, cpu_per_get.KEY, expected)
    ROWS[row].run(target, _Uncounted(), gets, WARMUP)  # type: ignore[arg-type]


def _instructions(row: int, endpoint: str, gets: int) -> int:
    """Instructions callgrind counted for a child running ``gets`` GETs of ``row``."""
    command = [
        "valgrind",
        "--tool=callgrind",
        "--callgrind-out-file=/dev/null",
        sys.executable,
        "-m",
        "benchmarks.cpu_per_get_instructions",
        "--child",
        str(row),
        endpoint,
        str(gets),
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run(command, capture_output=True, text=True, timeout=CHILD_TIMEOUT, env=env, cwd=REPO_ROOT)
    match = re.search(r"Collected : (\d+)", done.stderr)
    if done.returncode != 0 or match is None:
        raise RuntimeError(f"{ROWS[row].name}: child failed (exit {done.returncode}): {done.stderr[-1500:]}")
    return int(match.group(1))


def run(stack: Stack, options: Options) -> Report:
    """Every row's instructions per GET (median of ``options.runs`` differences)."""
    title = "Instructions per small GET (`cpu_per_get_instructions`)"
    if shutil.which("valgrind") is None:
        return Report(title, "Not run: valgrind is not installed (Debian package `valgrind`).\n")
    small, large = QUICK if options.quick else FULL
    endpoint = cpu_per_get.SERVERS[0].start(stack, cpu_per_get.prepare(stack)).url
    per_get: dict[str, list[float]] = {case.name: [] for case in ROWS}
    for repetition in range(options.runs):
        for row, case in enumerate(ROWS):
            counts = [_instructions(row, endpoint, gets) for gets in (small, large)]
            per_get[case.name].append((counts[1] - counts[0]) / (large - small))
            print(f"  cpu_per_get_instructions run {repetition + 1}: {case.name} done", flush=True)
    reference = median(per_get[cpu_per_get.REFERENCE])
    floor = median(per_get[cpu_per_get.FLOOR])
    rows = [
        [
            case.name,
            f"{median(per_get[case.name]) / 1000:.1f}",
            f"{(median(per_get[case.name]) - floor) / 1000:+.1f}",
            f"{median(per_get[case.name]) / reference:.2f}",
        ]
        for case in ROWS
    ]
    table = markdown_table(
        ["client (async, own loop)", "k instructions/GET", "above transport floor, k", "÷ s3io"], rows, text_columns=1
    )
    return Report(
        title,
        f"""Each row's GET loop ({WARMUP} warm-up GETs, then {small} or {large} GETs of the 1 KiB object from
the in-memory S3 endpoint of `cpu_per_get`) runs in a child process under `valgrind --tool=callgrind`; per
GET = (count at {large} - count at {small}) / {large - small}, median of {options.runs}. User-space
instructions of the client only; the kernel's share of each send and receive is not counted. Unlike CPU
seconds, these counts do not move with the load.

{table}
""",
    )


def main() -> None:
    parser = argparse.ArgumentParser(prog="benchmarks.cpu_per_get_instructions", description=__doc__.splitlines()[0])
    parser.add_argument("--child", nargs=3, metavar=("ROW", "ENDPOINT", "GETS"), required=True)
    args = parser.parse_args()
    row, endpoint, gets = args.child
    _child(int(row), endpoint, int(gets))


if __name__ == "__main__":
    main()
