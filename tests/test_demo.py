"""The README's first command, end to end: the demo must pass every one of its own checks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.timeout(400)
def test_demo_runs_end_to_end_and_verifies_itself() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_ENDPOINT_URL")}
    env["PYSPARK_PYTHON"] = sys.executable
    result = subprocess.run(
        [sys.executable, "-m", "examples.demo", "--files-per-day", "20"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=380,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = result.stdout.split("summary", 1)[1]
    assert summary.count("PASS") == 7 and "FAIL" not in summary
    assert "files packed into" in result.stdout and "status          ok" in result.stdout
