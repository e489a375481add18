"""The documentation's examples run as written (against moto instead of the endpoint they name)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _python_block(page: str, after_heading: str) -> str:
    text = (ROOT / page).read_text()
    section = text.split(after_heading, 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match, f"no python block after {after_heading!r}"
    return match.group(1)


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("page", "heading"),
    [("docs/policy.md", "# The policy: one immutable value"), ("docs/python.md", "## The S3 client")],
)
def test_readme_block_runs(page: str, heading: str, s3_endpoint, s3_client) -> None:
    s3_client.create_bucket(Bucket="bucket")
    code = _python_block(page, heading).replace("http://127.0.0.1:9000", s3_endpoint.url)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=50, check=False)
    assert result.returncode == 0, result.stderr[-3000:]


def _layout_block() -> dict[str, set[str]]:
    """CONTRIBUTING.md's layout block as {package path: the module names its lines list}."""
    section = (ROOT / "CONTRIBUTING.md").read_text().split("## Layout\n", 1)[1]
    block = section.split("```\n", 2)[1]
    listed: dict[str, set[str]] = {}
    for line in block.splitlines():
        names = line.split("#", 1)[0].split()
        if names:
            listed.setdefault(names[0], set()).update(names[1:])
    return listed


def test_the_layout_block_lists_every_package_and_module_of_the_tree() -> None:
    root = ROOT
    tree: dict[str, set[str]] = {}
    for top in ("s3io", "spark_ext", "pyspark_s3parquet"):
        for init in sorted((root / top).rglob("__init__.py")):
            package = init.parent
            modules = {p.stem for p in package.glob("*.py") if not p.stem.startswith("__")}
            tree[f"{package.relative_to(root).as_posix()}/"] = modules
    assert _layout_block() == tree
