"""RESULTS.md: one section per benchmark, replaced in place, each with its command, date and machine facts.

A section sits between ``<!-- bench:NAME -->`` and ``<!-- /bench:NAME -->``, so benchmarks can be run one
at a time without losing the others' figures.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import os
import platform
import re
import statistics
from collections.abc import Sequence
from pathlib import Path

from benchmarks.api import Report

RESULTS_PATH = Path(__file__).resolve().parent / "RESULTS.md"
PREAMBLE = """# s3io benchmarks

Produced by `python -m benchmarks.run` (`./run.sh bench`); each section says the exact command, the date and
the machine. Servers (moto, the keep-alive proxy, the in-memory S3 endpoint) run in their own processes on
127.0.0.1, so "client CPU" is the benchmark process alone: `time.process_time()`, user+sys over all its
threads. Figures are medians of the runs stated in each section. The machine's cores are shared with other
jobs, so expect some noise.
"""
PACKAGES = ("pyarrow", "aiohttp", "s3fs", "aiobotocore", "botocore", "moto", "numpy")


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[str]], text_columns: int = 1) -> str:
    """A GitHub markdown table: the first `text_columns` left-aligned, the rest (numbers) right-aligned."""
    align = ["---"] * text_columns + ["---:"] * (len(headers) - text_columns)
    lines = ["| " + " | ".join(headers) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def load_average() -> str:
    """The 1/5/15-minute load averages: other jobs on the same cores skew CPU and wall figures."""
    return "/".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a"


def machine_facts() -> str:
    """One line a reader can compare machines by: cores, CPU, kernel, Python and library versions."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    versions = ", ".join(f"{name} {_version(name)}" for name in PACKAGES)
    return f"nproc {cores} ({_cpu_model()}), Linux {platform.release()}, Python {platform.python_version()}, {versions}"


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")


def render_section(name: str, report: Report, command: str, date: str, machine: str, load: str) -> str:
    """The marked section: title, provenance, then the benchmark's own body."""
    return (
        f"<!-- bench:{name} -->\n"
        f"## {report.title}\n\n"
        f"- Command: `{command}`\n"
        f"- Date: {date}\n"
        f"- Machine: {machine}\n"
        f"- Load average (1/5/15 min): {load}\n\n"
        f"{report.body.strip()}\n"
        f"<!-- /bench:{name} -->"
    )


def write_section(name: str, section: str, path: Path = RESULTS_PATH) -> None:
    """Replace the section named `name` in `path`, or append it; create the file with a preamble if absent."""
    text = path.read_text() if path.exists() else PREAMBLE
    pattern = re.compile(rf"<!-- bench:{re.escape(name)} -->.*?<!-- /bench:{re.escape(name)} -->", re.DOTALL)
    if pattern.search(text):
        text = pattern.sub(lambda _: section, text, count=1)
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    tmp = path.with_suffix(".md.tmp")
    tmp.write_text(text)
    tmp.replace(path)
