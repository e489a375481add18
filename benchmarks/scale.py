"""scale: how listing and planning grow with the number of files (10k, 100k, 1M) on the in-memory endpoint.

Why: landing zones hold 100,000 to millions of small files; every planning step must grow linearly, and 1M
files must be listed and planned in at most 60 s and 2 GiB of driver memory, with no Spark task carrying the
whole listing. The endpoint is seeded in place (one shared body; no upload requests), in 100 Hive directories.
Each step runs in a fresh process (benchmarks/scale_probe.py) so its peak RSS is its own: s3io's listing alone;
s3parquet's ``load()`` + ``partitions()`` as Spark's planner worker runs them (``minPartitionNum`` 200); a
stream's first trigger (10,000 of the files); and a compaction dry run (listing and plan; the plan is made from
the listing, footers are read only by the tasks that rewrite). Figures and a plot (``benchmarks/scale.png``) go
to RESULTS.md.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks.api import Options, Report
from benchmarks.infra import REPO_ROOT, Stack
from benchmarks.results import markdown_table

SIZES = (10_000, 100_000, 1_000_000)
SIZES_QUICK = (1_000, 10_000)
DIRS = 100
STEPS = ("list", "batch", "stream", "compaction")
STEP_TIMEOUT = 900.0
PLOT = REPO_ROOT / "benchmarks" / "scale.png"
TARGET_SECONDS, TARGET_MIB = 60.0, 2048.0


def _body() -> bytes:
    sink = io.BytesIO()
    pq.write_table(pa.table({"id": pa.array(range(10), pa.int64()), "v": pa.array([0.5] * 10)}), sink)
    return sink.getvalue()


def _probe(what: str, endpoint: str, url: str) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    try:
        done = subprocess.run(
            [sys.executable, "-m", "benchmarks.scale_probe", what, endpoint, url],
            capture_output=True,
            text=True,
            timeout=STEP_TIMEOUT,
            env=env,
            cwd=REPO_ROOT,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"over {STEP_TIMEOUT:.0f} s"}
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or ["failed"])[-1][:200]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def _plot(results: dict[tuple[int, str], dict[str, Any]], sizes: tuple[int, ...]) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    figure, (seconds, memory) = plt.subplots(1, 2, figsize=(10, 4))
    for step in STEPS:
        points = [(n, results[n, step]) for n in sizes if "seconds" in results.get((n, step), {})]
        if points:
            seconds.plot([n for n, _ in points], [r["seconds"] for _, r in points], marker="o", label=step)
            memory.plot([n for n, _ in points], [r["peak_rss_mib"] for _, r in points], marker="o", label=step)
    for axes, label, target in ((seconds, "seconds", TARGET_SECONDS), (memory, "peak RSS MiB", TARGET_MIB)):
        axes.set_xscale("log")
        axes.set_yscale("log")
        axes.set_xlabel("files")
        axes.set_ylabel(label)
        axes.axhline(target, color="grey", linestyle="--", linewidth=1)
        axes.legend()
    figure.tight_layout()
    figure.savefig(PLOT, dpi=80)
    return True


def run(stack: Stack, options: Options) -> Report:
    sizes = SIZES_QUICK if options.quick else SIZES
    endpoint = stack.endpoint
    results: dict[tuple[int, str], dict[str, Any]] = {}
    with tempfile.NamedTemporaryFile(suffix=".parquet", delete=False) as body:
        body.write(_body())
    try:
        for n in sizes:
            bucket = f"scale-{n}-{time.time_ns()}"
            started = time.perf_counter()
            endpoint.seed_many(bucket, "land/", n, DIRS, body.name)
            print(f"  scale: {n:,} files seeded in {time.perf_counter() - started:.1f} s", flush=True)
            for step in STEPS:
                result = _probe(step, endpoint.url, f"s3://{bucket}/land/")
                results[n, step] = result
                print(f"  scale: {n:,} files, {step}: {result}", flush=True)
    finally:
        Path(body.name).unlink(missing_ok=True)
    rows = []
    for n in sizes:
        for step in STEPS:
            r = results[n, step]
            if "error" in r:
                rows.append([f"{n:,}", step, r["error"], "", "", ""])
                continue
            detail = {k: v for k, v in r.items() if k not in ("seconds", "peak_rss_mib")}
            rows.append(
                [
                    f"{n:,}",
                    step,
                    f"{r['seconds']:.1f}",
                    f"{r['peak_rss_mib']:.0f}",
                    f"{r.get('pickled_max', 0) / 1024:.0f} KiB" if "pickled_max" in r else "—",
                    ", ".join(f"{k}={v}" for k, v in detail.items() if not k.startswith("pickled")),
                ]
            )
    table = markdown_table(["files", "step", "seconds", "peak RSS MiB", "largest pickled task", "detail"], rows, 2)
    plotted = _plot(results, sizes)
    largest = sizes[-1]
    verdicts = []
    for step in ("batch", "stream", "compaction"):
        r = results.get((largest, step), {})
        if "seconds" in r:
            fast, small = r["seconds"] <= TARGET_SECONDS, r["peak_rss_mib"] <= TARGET_MIB
            verdict = {
                (True, True): "meets ≤ {s} s and ≤ {m} GiB",
                (False, True): "**misses** ≤ {s} s (meets ≤ {m} GiB)",
                (True, False): "**misses** ≤ {m} GiB (meets ≤ {s} s)",
                (False, False): "**misses** ≤ {s} s and ≤ {m} GiB",
            }[fast, small].format(s=f"{TARGET_SECONDS:.0f}", m=f"{TARGET_MIB / 1024:.0f}")
            why = f" ({r['requests']:,} requests)" if step == "compaction" and r.get("requests") else ""
            verdicts.append(
                f"- {step} at {largest:,} files: {r['seconds']:.1f} s, {r['peak_rss_mib']:.0f} MiB — {verdict}{why}."
            )
        else:
            verdicts.append(f"- {step} at {largest:,} files: {r.get('error', 'not measured')}.")
    body_text = (
        f"{len(sizes)} sizes, {DIRS} Hive directories each, one shared ~{len(_body())}-byte parquet body, seeded in "
        "the in-memory endpoint without requests. One fresh process per step (peak RSS = that step's).\n\n"
        + table
        + ("\n\n![files vs seconds and MiB](scale.png)" if plotted else "\n\n(matplotlib not installed: no plot)")
        + "\n\nTargets (issue 13): linear growth; 1M files listed and planned in ≤ 60 s and ≤ 2 GiB; no task "
        "carries the whole listing (largest pickled task above).\n\n" + "\n".join(verdicts)
    )
    return Report("Scale: listing and planning 10k, 100k and 1M files (`scale`)", body_text)
