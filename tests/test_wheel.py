"""The wheel is what users install, so it is what these tests install: the sdist and the wheel are built as pip
builds them (isolated, the wheel from the sdist), the wheel goes into a fresh virtual environment with only its
declared dependencies, and the README's quickstarts run there, outside the checkout, against the session's moto
server: Python and the CLI on the base install, then Spark (``spark_ext.session()``), streaming and compaction with
the ``spark`` extra, and docs/cluster.md's spark-submit on ``local-cluster[2,1,1024]`` (auto-registration, no
``register()``).

pip's local cache makes the installs quick (no compiling of .pyc files: ``--no-compile``); each step's time is
printed (``pytest -s``).
"""

from __future__ import annotations

import io
import json
import os
import re
import shlex
import subprocess
import sys
import tarfile
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from support.doc_blocks import ROOT, block_under, code_blocks

import s3io
from testbed.moto_server import boto3_client, empty_and_delete_bucket

pytestmark = pytest.mark.timeout(900)

DOC_ENDPOINT = "http://127.0.0.1:9000"  # the endpoint the README's quickstarts name
QUICKSTART_BUCKET = "demo"
DROPPED_ENV = ("PYTHONPATH", "VIRTUAL_ENV", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYSPARK_SUBMIT_ARGS")


@dataclass
class FreshInstall:
    """A virtual environment holding the built wheel, and how to run the documentation's code in it."""

    venv: Path
    wheel: Path
    sdist: Path
    workdir: Path
    endpoint: str
    env: dict[str, str]
    seconds: dict[str, float] = field(default_factory=dict)

    def run(self, step: str, argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` in the environment (its bin/ first on PATH), from a directory outside the checkout."""
        started = time.monotonic()
        result = subprocess.run(
            argv, cwd=self.workdir, env=self.env, capture_output=True, text=True, timeout=timeout, check=False
        )
        self.seconds[step] = time.monotonic() - started
        assert result.returncode == 0, f"{step} failed:\n{result.stdout[-2000:]}\n{result.stderr[-4000:]}"
        return result

    def python_block(self, step: str, code: str, timeout: float = 120) -> str:
        script = self.workdir / f"{step}.py"
        script.write_text(code.replace(DOC_ENDPOINT, self.endpoint))
        return self.run(step, [str(self.venv / "bin" / "python"), str(script)], timeout).stdout

    def bash_block(self, step: str, code: str, timeout: float = 120) -> str:
        argv = ["bash", "-euo", "pipefail", "-c", code.replace(DOC_ENDPOINT, self.endpoint)]
        return self.run(step, argv, timeout).stdout

    def pip_install(self, step: str, requirement: str) -> None:
        """pip of this checkout's environment, installing into the fresh one (it has no pip of its own)."""
        pip = [sys.executable, "-m", "pip", "--python", str(self.venv / "bin" / "python"), "install", "-q"]
        self.run(step, [*pip, "--no-compile", requirement], 600)


def _readme_environment(endpoint: str) -> dict[str, str]:
    """The variables the README's quickstart exports (credentials, region, the endpoint), the endpoint being the
    session's moto server, which stands in for the one the block starts."""
    block = block_under("README.md", "## Quickstart", "bash")
    assert 'moto_server -p "$S3_PORT"' in block.code, block.code
    exported: dict[str, str] = {}
    for line in block.code.splitlines():
        if line.startswith("export "):
            exported.update(item.split("=", 1) for item in shlex.split(line, comments=True)[1:])
    assert exported.get("AWS_ENDPOINT_URL") == "http://127.0.0.1:$S3_PORT", exported
    return {**exported, "S3_PORT": endpoint.rsplit(":", 1)[1], "AWS_ENDPOINT_URL": endpoint}


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory, s3_endpoint) -> Iterator[FreshInstall]:
    """Build the sdist and the wheel, and install the wheel (no extras) into a new virtual environment."""
    base = tmp_path_factory.mktemp("wheel")
    dist, venv, workdir = base / "dist", base / "venv", base / "work"
    workdir.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in DROPPED_ENV and not k.startswith("AWS_ENDPOINT_URL")}
    env.update(_readme_environment(s3_endpoint.url))
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["SPARK_LOCAL_IP"] = "127.0.0.1"  # Spark binds and talks on loopback only, as the suite's sessions do
    started = time.monotonic()
    subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(dist), str(ROOT)], capture_output=True, timeout=300, check=True
    )
    built = time.monotonic() - started
    (wheel,) = dist.glob("*.whl")
    (sdist,) = dist.glob("*.tar.gz")
    install = FreshInstall(venv, wheel, sdist, workdir, s3_endpoint.url, env, {"build sdist + wheel": built})
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], timeout=120, check=True)
    install.seconds["create venv"] = time.monotonic() - started
    install.pip_install("install wheel", str(install.wheel))
    yield install
    print("\n" + "\n".join(f"wheel test: {step:32} {seconds:6.1f} s" for step, seconds in install.seconds.items()))


@pytest.fixture(scope="module")
def quickstart_data(fresh: FreshInstall) -> Iterator[str]:
    """The README's Python quickstart, run in the fresh environment: it creates the bucket and the files that the
    other quickstarts read; its output."""
    try:
        yield fresh.python_block("python quickstart", block_under("README.md", "### Python", "python").code)
    finally:
        empty_and_delete_bucket(boto3_client(fresh.endpoint), QUICKSTART_BUCKET)


@pytest.fixture(scope="module")
def with_spark(fresh: FreshInstall) -> FreshInstall:
    """The same environment with the wheel's ``spark`` extra (PySpark and the pandas it supports)."""
    fresh.pip_install("install the spark extra", f"{fresh.wheel}[spark]")
    return fresh


def test_the_wheel_carries_its_metadata_and_reports_its_version(fresh: FreshInstall) -> None:
    probe = (
        "import importlib.metadata as m, importlib.util as u, json, s3io\n"
        "meta = m.metadata('s3io-spark')\n"
        "print(json.dumps({'version': m.version('s3io-spark'), 'attr': s3io.__version__,\n"
        "  'license': meta['License-Expression'], 'license_file': meta['License-File'],\n"
        "  'python': meta['Requires-Python'], 'extras': sorted(meta.get_all('Provides-Extra')),\n"
        "  'files': [u.find_spec(name).origin for name in ('s3io', 'spark_ext', 'pyspark_s3parquet')]}))\n"
    )
    facts = json.loads(fresh.python_block("metadata", probe))
    assert facts["version"] == facts["attr"] == s3io.__version__
    assert facts["license"] == "Apache-2.0" and facts["license_file"] == "LICENSE"
    assert facts["python"] == ">=3.11"
    assert {"fsspec", "spark", "docs"} <= set(facts["extras"])
    assert all(path.startswith(str(fresh.venv)) for path in facts["files"]), facts["files"]  # not the checkout
    assert fresh.bash_block("version", "s3io --version").strip() == f"s3io {s3io.__version__}"
    with tarfile.open(fresh.sdist) as sdist:
        names = {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}
    assert {"LICENSE", "README.md", "CHANGELOG.md", "pyproject.toml", "s3io/__init__.py", "mkdocs.yml"} <= names
    assert {"hatch_build.py", "jvm/src/org/s3io/spark/S3ParquetProvider.java"} <= names  # the wheel's jar is built
    with zipfile.ZipFile(fresh.wheel) as wheel:  # by hatch_build.py, from the sources the sdist carries
        jar = wheel.read("spark_ext/jvm/s3parquet-scan.jar")
    with zipfile.ZipFile(io.BytesIO(jar)) as classes:
        assert "org/s3io/spark/S3ParquetProvider.class" in classes.namelist()


def test_the_python_api_and_the_cli_need_no_spark(fresh: FreshInstall, quickstart_data: str) -> None:
    no_spark = subprocess.run(
        [str(fresh.venv / "bin" / "python"), "-c", "import pyspark"], env=fresh.env, capture_output=True, timeout=60
    )
    assert no_spark.returncode != 0, "the base install must not bring PySpark: it is the spark extra"
    assert "10 ['id', 'v', 'day']" in quickstart_data
    listing = fresh.bash_block("cli quickstart", block_under("README.md", "### Command line", "bash").code)
    listed = re.findall(r"^\S+ \S+ +\d+ events/day=2026-01-0[12]/part-\d\.parquet$", listing, re.MULTILINE)
    assert len(listed) == 6, listing
    assert "size:" in listing and "etag:" in listing


def test_spark_submit_on_a_cluster_with_the_installed_wheel(with_spark: FreshInstall, quickstart_data: str) -> None:
    app = block_under("docs/cluster.md", "## spark-submit", "python").code
    (with_spark.workdir / "app.py").write_text(app.replace(DOC_ENDPOINT, with_spark.endpoint))
    output = with_spark.bash_block(
        "spark-submit, local-cluster", block_under("docs/cluster.md", "## spark-submit", "bash").code, timeout=400
    )
    assert "rows: 60" in output, output[-2000:]


# README.md's blocks that are not run here, each with what stands in for it (asserted below)
NOT_RUN_HERE = {
    "# s3io — an S3 reader layer that cannot hang": "./run.sh test is what CI runs; ./run.sh demo: test_demo.py",
    "## Install": "the fixtures: the built wheel with its spark extra in a fresh venv whose bin/ is first on PATH",
    "## Quickstart": "the session's moto server, and the variables the block exports (_readme_environment)",
}
SAME_SESSION = ("### Streaming", "### Writing")  # "In the same session": appended to the Spark block's process


def test_a_newcomer_following_the_readme_in_order_reads_streams_writes_and_compacts(
    with_spark: FreshInstall, quickstart_data: str
) -> None:
    """Every code block of README.md, in order, as a newcomer runs them in the activated venv, from an empty bucket:
    the Python quickstart, the CLI, Spark's read, stream and write (one process: "in the same session"),
    compaction. Spark finds the source by installation: no block calls register()."""
    blocks = [b for b in code_blocks("README.md") if b.language in ("bash", "python")]
    install = next(b for b in blocks if b.heading == "## Install").code
    assert "python3 -m venv .venv && . .venv/bin/activate" in install and "pip install '.[spark]'" in install
    assert {b.heading for b in blocks} - set(NOT_RUN_HERE) >= {"### Python", "### Spark", "### Compaction"}
    empty_and_delete_bucket(boto3_client(with_spark.endpoint), QUICKSTART_BUCKET)  # the base-install run's data
    readme = (ROOT / "README.md").read_text()
    steps: list[tuple[str, str, str]] = []  # (heading, language, code): consecutive same-session blocks joined
    for block in blocks:
        if block.heading in NOT_RUN_HERE:
            continue
        if block.heading in SAME_SESSION:
            assert f"{block.heading}\n\nIn the same session" in readme, block.heading
            heading, language, code = steps.pop()
            steps.append((heading, language, code + block.code))
        else:
            steps.append((block.heading, block.language, block.code))
    outputs = {}
    for heading, language, code in steps:
        assert "register(" not in code, heading
        run = with_spark.python_block if language == "python" else with_spark.bash_block
        outputs[heading] = run(f"readme {heading.strip('# ')}", code, timeout=400)
    assert "10 ['id', 'v', 'day']" in outputs["### Python"], outputs
    listed = re.findall(r"^\S+ \S+ +\d+ events/day=2026-01-0[12]/part-\d\.parquet$", outputs["### Command line"], re.M)
    assert len(listed) == 6 and "etag:" in outputs["### Command line"], outputs["### Command line"]
    assert re.findall(r"^\d+", outputs["### Spark"], re.MULTILINE) == ["60", "60", "60"], outputs["### Spark"]
    report = outputs["### Compaction"]
    assert re.search(r"status\s+ok", report) and re.search(r"files\s+6 -> 2", report), report
    assert re.search(r"rows rewritten\s+60", report), report
