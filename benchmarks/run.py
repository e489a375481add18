"""One command for every benchmark: ``python -m benchmarks.run [--only NAME] [--quick] [--runs N] [--server S]``.

Starts moto, the keep-alive proxy and the in-memory S3 endpoint once each, when first needed (separate
processes), runs the chosen benchmarks (the many-object ones against every chosen server), and replaces each
one's section of benchmarks/RESULTS.md with its table, the exact command, the date and the machine.
"""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType

from benchmarks import (
    compaction,
    cpu_per_get,
    cpu_per_get_instructions,
    ingest,
    memory_budget,
    object_reads,
    request_rate,
    scale,
    spark_memory,
    spark_pruning,
    spark_small_files,
    streaming,
    tools,
    writing,
)
from benchmarks.api import Options, Report
from benchmarks.infra import REPO_ROOT, Stack, use_fake_aws_environment
from benchmarks.results import RESULTS_PATH, load_average, machine_facts, now, render_section, write_section
from benchmarks.servers import SERVER_NAMES

BENCHMARKS: dict[str, Callable[[Stack, Options], Report]] = {
    "cpu_per_get": cpu_per_get.run,
    "cpu_per_get_instructions": cpu_per_get_instructions.run,
    "request_rate": request_rate.run,
    "small_files": ingest.run_small_files,
    "large_files": ingest.run_large_files,
    "object_reads": object_reads.run,
    "memory_budget": memory_budget.run,
    "spark_small_files": spark_small_files.run,
    "spark_memory": spark_memory.run,
    "spark_pruning": spark_pruning.run,
    "compaction": compaction.run,
    "streaming": streaming.run,
    "scale": scale.run,
    "writing": writing.run,
    "tools": tools.run,
}


def _command(argv: list[str]) -> str:
    """The command line as typed from the repository root, so a reader can re-run it."""
    python = Path(sys.executable)
    try:
        shown = str(python.relative_to(REPO_ROOT))
    except ValueError:
        shown = str(python)
    return shlex.join([shown, "-m", "benchmarks.run", *argv])


def _raise_on_sigterm(signum: int, frame: FrameType | None) -> None:
    """SIGTERM unwinds like Ctrl-C, so the servers are stopped by the Stack's cleanup."""
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="benchmarks.run", description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", choices=sorted(BENCHMARKS), help="run only this (repeatable)")
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run of the harness")
    parser.add_argument("--runs", type=int, default=3, help="repetitions per row; tables show medians (default 3)")
    parser.add_argument(
        "--server",
        action="append",
        choices=SERVER_NAMES,
        help="S3 server of the many-object benchmarks (repeatable; default: all, in one run): moto behind the "
        "keep-alive proxy, or the in-memory endpoint",
    )
    parser.add_argument("--output", type=Path, default=RESULTS_PATH, help="results file (default: %(default)s)")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    names = args.only or list(BENCHMARKS)
    options = Options(quick=args.quick, runs=args.runs, servers=tuple(args.server or SERVER_NAMES))
    command = _command(argv)
    signal.signal(signal.SIGTERM, _raise_on_sigterm)
    use_fake_aws_environment()
    try:
        with Stack() as stack:
            _run_all(stack, names, options, command, args.output)
    except KeyboardInterrupt:
        print("benchmarks.run: interrupted; servers stopped, finished sections kept", file=sys.stderr)
        return 130
    return 0


def _run_all(stack: Stack, names: list[str], options: Options, command: str, output: Path) -> None:
    """Run each benchmark and write its section as soon as it finishes (an interrupt keeps the earlier ones)."""
    for name in names:
        print(f"== {name}{' (quick)' if options.quick else ''}", flush=True)
        started = time.perf_counter()
        date, load_before = now(), load_average()
        report = BENCHMARKS[name](stack, options)
        load = f"{load_before} at start, {load_average()} at end"
        if options.quick:
            report = Report(report.title + " — QUICK smoke run, not for comparison", report.body)
        section = render_section(name, report, command, date, machine_facts(), load)
        write_section(name, section, output)
        print(section, flush=True)
        print(f"== {name}: {time.perf_counter() - started:.0f} s, written to {output}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
