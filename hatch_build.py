"""Hatchling build hook: compiles the JVM scan of s3parquet (jvm/src, Java 17) into spark_ext/jvm/s3parquet-scan.jar
and puts it in the wheel, so ``pip install .``, ``pip install -e .`` and ``python -m build`` all ship it.

It compiles against the jars PySpark ships (no Maven registry needed): $SPARK_HOME/jars, else the pyspark package of
the build environment (requested from pip as a build dependency when the environment has none). Without ``javac``
or Spark's jars the wheel is built without the jar, with a warning: s3parquet then reads every column and prunes
nothing by Spark's filters, exactly as before (``spark_ext`` logs this once per session). ``python hatch_build.py``
rebuilds the jar in a checkout.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import warnings
import zipfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent
SOURCES = ROOT / "jvm" / "src"
RESOURCES = ROOT / "jvm" / "resources"
JAR = ROOT / "spark_ext" / "jvm" / "s3parquet-scan.jar"
JAR_IN_WHEEL = "spark_ext/jvm/s3parquet-scan.jar"


def spark_jars() -> Path | None:
    """The directory of Spark's jars to compile against: $SPARK_HOME/jars, else the installed pyspark's."""
    home = os.environ.get("SPARK_HOME")
    if home and (Path(home) / "jars").is_dir():
        return Path(home) / "jars"
    spec = importlib.util.find_spec("pyspark")
    if spec is not None and spec.origin is not None:
        jars = Path(spec.origin).parent / "jars"
        if jars.is_dir():
            return jars
    return None


def build_jar(jar: Path = JAR) -> str | None:
    """Compile jvm/src and write ``jar``; the reason it could not, or None when it did."""
    javac, jar_tool = shutil.which("javac"), shutil.which("jar")
    if javac is None or jar_tool is None:
        return "javac/jar (a JDK 17) not found on PATH"
    jars = spark_jars()
    if jars is None:
        return "Spark's jars not found (set SPARK_HOME, or install pyspark where the build runs)"
    with tempfile.TemporaryDirectory() as classes:
        sources = sorted(str(p) for p in SOURCES.rglob("*.java"))
        compile_ = [javac, "--release", "17", "-Xlint:all,-path", "-Werror", "-cp", f"{jars}/*", "-d", classes]
        subprocess.run([*compile_, *sources], check=True)
        shutil.copytree(RESOURCES, classes, dirs_exist_ok=True)
        jar.parent.mkdir(parents=True, exist_ok=True)
        partial = jar.with_suffix(".tmp")
        subprocess.run([jar_tool, "--create", "--file", str(partial), "-C", classes, "."], check=True)
        with zipfile.ZipFile(partial) as built:
            assert "META-INF/services/org.apache.spark.sql.sources.DataSourceRegister" in built.namelist()
        partial.replace(jar)
    return None


try:
    from hatchling.builders.hooks.plugin.interface import BuildHookInterface
except ImportError:  # run as a script (python hatch_build.py), outside a build
    BuildHookInterface = object  # type: ignore[assignment,misc]


class JvmScanHook(BuildHookInterface):  # type: ignore[misc,valid-type]
    """Builds the jar for wheels (standard and editable); the sdist carries jvm/ and this file."""

    PLUGIN_NAME = "custom"

    def dependencies(self) -> list[str]:
        return [] if spark_jars() is not None else ["pyspark>=4.1"]

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel":
            return
        reason = build_jar()
        if reason is not None:
            warnings.warn(f"s3io-spark: built without the JVM scan of s3parquet: {reason}", stacklevel=1)
            return
        if version != "editable":  # an editable install finds the jar in the checkout
            build_data["force_include"][str(JAR)] = JAR_IN_WHEEL


if __name__ == "__main__":
    problem = build_jar()
    print(problem or f"wrote {JAR}", file=sys.stderr if problem else sys.stdout)
    sys.exit(1 if problem else 0)
