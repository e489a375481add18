"""The documentation holds: the site builds with no broken link, its examples run as written (against moto instead
of the endpoint they name), the README stays short, and CONTRIBUTING.md's layout block matches the tree.

The python blocks of docs/ that need no SparkSession run here, in this checkout's environment; the README's
quickstarts (Spark included) and docs/cluster.md's spark-submit run from the installed wheel in test_wheel.py.
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support.doc_blocks import ROOT, CodeBlock, code_blocks

from testbed.moto_server import boto3_client, empty_and_delete_bucket

DOC_ENDPOINT = "http://127.0.0.1:9000"  # the endpoint the examples name
README_LIMIT = 12 * 1024
USES_SPARK = re.compile(r"\bspark\b(?!_)")  # the name `spark`, not `spark_ext`


def _docs_python_blocks() -> list[CodeBlock]:
    pages = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").rglob("*.md"))
    return [b for page in pages for b in code_blocks(page) if b.language == "python"]


STANDALONE = [b for b in _docs_python_blocks() if not USES_SPARK.search(b.code)]


@pytest.fixture(scope="module")
def example_data(s3_endpoint) -> Iterator[str]:
    """The bucket the examples name, holding the files they read: events/, a.parquet, 2024-01-01/ and landing/ (too
    few files to compact: the compaction examples plan nothing)."""
    client = boto3_client(s3_endpoint.url)
    client.create_bucket(Bucket="bucket")
    table = pa.table({"id": pa.array(range(10), pa.int64()), "ts": pa.array(range(10), pa.timestamp("s"))})
    keys = ("events/part-0.parquet", "events/part-1.parquet", "a.parquet", "2024-01-01/part-0.parquet")
    for key in (*keys, "landing/part-0.parquet"):
        sink = io.BytesIO()
        pq.write_table(table, sink)
        client.put_object(Bucket="bucket", Key=key, Body=sink.getvalue())
    try:
        yield "bucket"
    finally:
        empty_and_delete_bucket(client, "bucket")


def test_the_docs_have_standalone_examples_to_run() -> None:
    assert len(STANDALONE) >= 5, [b.name for b in STANDALONE]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("block", STANDALONE, ids=[b.name for b in STANDALONE])
def test_docs_python_block_runs(block: CodeBlock, s3_endpoint, example_data, tmp_path: Path) -> None:
    script = tmp_path / "example.py"
    script.write_text(block.code.replace(DOC_ENDPOINT, s3_endpoint.url))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(ROOT)  # this checkout's code, whatever the environment's install points at
    env["AWS_ENDPOINT_URL"] = s3_endpoint.url
    result = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=100, check=False
    )
    assert result.returncode == 0, f"{block.name}:\n{result.stderr[-3000:]}"


@pytest.mark.timeout(120)
def test_the_site_builds_strictly(tmp_path: Path) -> None:
    """mkdocs --strict fails on a link to a missing page or anchor, and on a page left out of the nav."""
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "site" / "index.html").is_file() and (tmp_path / "site" / "spark" / "index.html").is_file()
    print(f"\nmkdocs build --strict: {time.monotonic() - started:.1f} s")


def test_pip_pyspark_has_no_s3a_filesystem_as_the_s3a_page_says() -> None:
    """docs/coming-from-s3a.md opens with it: pip's PySpark has Hadoop's client jars but not hadoop-aws."""
    pyspark = pytest.importorskip("pyspark")
    jars = [p.name for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar")]
    assert any(name.startswith("hadoop-client") for name in jars), jars
    assert not [name for name in jars if "hadoop-aws" in name or "aws-java-sdk" in name], jars
    assert "S3AFileSystem not found" in (ROOT / "docs" / "coming-from-s3a.md").read_text()


def test_the_site_css_wraps_table_cells_the_theme_keeps_on_one_line() -> None:
    """The readthedocs theme sets ``white-space: nowrap`` on table cells (and code): the site's own CSS, loaded after
    it, wraps them, so a wide table is read at 1280 px instead of showing its first column."""
    import mkdocs.themes.readthedocs as theme

    theme_css = (Path(theme.__file__).parent / "css" / "theme.css").read_text()
    assert ".wy-table-responsive table td,.wy-table-responsive table th{white-space:nowrap}" in theme_css
    assert "css/wide.css" in (ROOT / "mkdocs.yml").read_text()
    rules = {
        selector.strip(): body
        for selectors, body in re.findall(r"([^{}]+)\{([^}]*)\}", (ROOT / "docs" / "css" / "wide.css").read_text())
        for selector in re.sub(r"/\*.*?\*/", "", selectors, flags=re.S).split(",")
    }
    for cell in ("td", "th"):
        assert "white-space: normal" in rules[f".wy-table-responsive table {cell}"]
        assert "overflow-wrap: anywhere" in rules[f".wy-table-responsive table {cell} code"]


def test_the_readme_stays_a_few_screens() -> None:
    size = len((ROOT / "README.md").read_bytes())
    assert size < README_LIMIT, f"README.md is {size} bytes: move reference material to docs/"


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
    tree: dict[str, set[str]] = {}
    for top in ("s3io", "spark_ext", "pyspark_s3parquet"):
        for init in sorted((ROOT / top).rglob("__init__.py")):
            package = init.parent
            modules = {p.stem for p in package.glob("*.py") if not p.stem.startswith("__")}
            tree[f"{package.relative_to(ROOT).as_posix()}/"] = modules
    assert _layout_block() == tree
