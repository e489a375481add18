"""Every module of s3io and spark_ext imports on its own, first, in a fresh interpreter (no import cycles).

Why: a cycle hides as long as some other module happens to be imported first (as the package ``__init__``
does); a user or a Spark worker importing the module directly then fails with "partially initialized module".
One child process loads the third-party libraries once, then forks a grandchild per module, one per core at a
time.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import os, sys, importlib, traceback
import pyarrow, pyarrow.parquet, aiohttp, tenacity
try:
    import pyspark.sql  # optional: s3io must import without it, spark_ext needs it
except ImportError:
    pass
failures, running = [], {}
def reap():
    pid, status = os.wait()
    if status != 0:
        failures.append(running[pid])
    del running[pid]
for name in sys.argv[1:]:
    if len(running) >= os.cpu_count():
        reap()
    pid = os.fork()
    if pid == 0:
        try:
            importlib.import_module(name)
        except BaseException:
            traceback.print_exc()
            os._exit(1)
        os._exit(0)
    running[pid] = name
while running:
    reap()
print("FAILED:" + ",".join(sorted(failures)))
"""


def _modules() -> list[str]:
    names = []
    for package in ("s3io", "spark_ext"):
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__main__":
                continue
            if parts[-1] == "__init__":
                parts = parts[:-1]
            names.append(".".join(parts))
    return names


def test_every_module_imports_first_in_a_fresh_interpreter() -> None:
    modules = _modules()
    assert len(modules) > 50
    done = subprocess.run(
        [sys.executable, "-c", CHILD, *modules],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    failed = done.stdout.strip().splitlines()[-1].removeprefix("FAILED:")
    assert failed == "", f"modules that cannot be imported first: {failed}\n{done.stderr[-4000:]}"
