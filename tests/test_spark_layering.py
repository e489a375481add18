"""spark_ext's layering holds, as tests/test_layering.py checks s3io's: spark_settings -> planning -> source (the
batch read) -> stream (the stream read) and writer (both writes), which know nothing of each other -> datasource
(the DataSource Spark builds, handing each call to its role) -> the entry points (register, session, compact). And
the data source decides its role from Spark's calls, never from its caller's stack."""

from __future__ import annotations

import ast
from pathlib import Path

from test_layering import _runtime_imports

ROOT = Path(__file__).resolve().parent.parent

# Bottom first; a module imports spark_ext modules of its own package or of a lower layer. Packages sharing a layer
# (stream, writer) are independent: neither imports the other. The top layer's entry points may use each other.
SPARK_EXT_LAYERS: tuple[set[str], ...] = (
    {"spark_settings", "jvm"},
    {"planning"},
    {"source"},
    {"stream", "writer"},
    {"datasource"},
    {"__init__", "session", "worker_check", "compact"},
)


def _layer_of(part: str) -> int:
    for index, members in enumerate(SPARK_EXT_LAYERS):
        if part in members:
            return index
    raise AssertionError(f"spark_ext/{part} belongs to no layer: add it to SPARK_EXT_LAYERS (and CONTRIBUTING.md)")


def _package_of(name: str) -> str:
    """The first name below spark_ext of a dotted module name (a package or a top-level module)."""
    parts = name.split(".")
    if len(parts) < 2:
        return "__init__"
    return (
        parts[1]
        if (ROOT / "spark_ext" / parts[1]).is_dir() or (ROOT / "spark_ext" / f"{parts[1]}.py").exists()
        else "__init__"
    )


def test_spark_ext_layers_import_only_their_own_package_or_below() -> None:
    offenders = []
    top = len(SPARK_EXT_LAYERS) - 1
    for path in sorted((ROOT / "spark_ext").rglob("*.py")):
        relative = path.relative_to(ROOT / "spark_ext")
        own = relative.parts[0].removesuffix(".py")
        for name in _runtime_imports(ast.parse(path.read_text())):
            if name.split(".")[0] != "spark_ext":
                continue
            target = _package_of(name)
            if target == own:
                continue
            above = _layer_of(target) > _layer_of(own)
            sibling = _layer_of(target) == _layer_of(own) and _layer_of(own) != top
            if above or sibling:
                offenders.append(f"spark_ext/{relative}: imports {name}")
    assert offenders == []


def test_the_layer_check_catches_an_upward_and_a_sibling_import() -> None:
    """The check above is not vacuous: the imports the issue found (source -> stream, source -> writer) and a
    stream -> writer import are each refused by it."""
    for own, name in (("source", "spark_ext.stream.stream_options"), ("source", "spark_ext.writer.options")):
        assert _layer_of(_package_of(name)) > _layer_of(own)
    assert _layer_of(_package_of("spark_ext.writer.batch")) == _layer_of("stream")
    assert _package_of("spark_ext.datasource") == "datasource" and _package_of("spark_ext") == "__init__"


def test_no_spark_ext_module_inspects_its_callers_stack() -> None:
    """A role is chosen by the call Spark makes (reader, streamReader, writer, streamWriter), not by guessing from
    the stack (issue 38: a stream sink's worker was taken for a read)."""
    offenders = []
    for path in sorted((ROOT / "spark_ext").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in ("_getframe", "stack", "currentframe", "f_back"):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.attr}")
    assert offenders == []
