"""The layering holds: s3io imports without Spark, nothing in s3io imports spark_ext, s3io's layers are as its
imports put them (values -> transport, resilience, parquet -> s3 -> engine, table, s3a -> store, dataset,
stream_state -> compaction -> write -> the entry points) and the README's stack and CONTRIBUTING's layout say so,
every reader lists through the table layer, the writer and compaction build side by side on the table layer (the
writer imports compaction only to run it), one place makes an S3Client from settings (s3io.store.StoreConfig), one
error root, and one meaning per module name."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

BLOCK_PYSPARK = """
import importlib.abc, sys
class NoSpark(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "pyspark" or name.startswith("pyspark.") or name.startswith("spark_ext"):
            raise ImportError(f"{name} is not installed here")
sys.meta_path.insert(0, NoSpark())
import s3io, s3io.api, s3io.cli, s3io.dataset, s3io.engine, s3io.fs, s3io.table, s3io.parquet.decode
assert callable(s3io.read_parquet) and s3io.S3FileSystem is not None
assert not any(m == "pyspark" or m.startswith(("pyspark.", "spark_ext")) for m in sys.modules)
"""


def test_s3io_imports_without_spark() -> None:
    result = subprocess.run(
        [sys.executable, "-c", BLOCK_PYSPARK], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr


def test_no_s3io_module_imports_spark_ext() -> None:
    offenders = []
    for path in (ROOT / "s3io").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [
                f"{path.relative_to(ROOT)}: {n}" for n in names if n.split(".")[0] in ("spark_ext", "pyspark")
            ]
    assert offenders == []


BLOCK_S3FS = """
import importlib.abc, sys
class NoS3fs(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "s3fs" or name.startswith("s3fs."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, NoS3fs())
import s3io, s3io.api, s3io.cli
assert callable(s3io.read_parquet)
try:
    s3io.S3FileSystem
except ModuleNotFoundError as exc:
    print(exc)
else:
    raise AssertionError("s3io.S3FileSystem imported without s3fs")
"""


def test_s3fs_is_needed_only_by_the_filesystem_and_its_absence_says_what_to_install() -> None:
    """s3fs is the ``fsspec`` extra: the client, the parquet API and the CLI import without it, and asking for
    s3io.S3FileSystem names the extra to install."""
    result = subprocess.run(
        [sys.executable, "-c", BLOCK_S3FS], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    assert "pip install 's3io-spark[fsspec]'" in result.stdout


# s3io's layers, bottom first, as the imports put them: a layer is one step above the highest layer its packages import
# (the values and the entry points each count as one package, whose modules may import each other). So each package
# imports something of the layer just below its own, and packages side by side in a layer import nothing of each
# other. README.md's stack and CONTRIBUTING.md's layout block are drawn from this (the tests below compare them).
VALUES = {"errors", "units", "settings", "policy", "metrics", "logs", "urls", "aio", "scatter", "native_release"}
ENTRY_POINTS = {"api", "blocking", "fs", "cli", "__main__", "__init__"}
S3IO_LAYERS = (
    VALUES,
    {"transport", "resilience", "parquet"},
    {"s3"},
    {"engine", "table", "s3a"},
    {"store", "dataset", "stream_state"},
    {"compaction"},
    {"write"},
    ENTRY_POINTS,
)


def _layer_of(unit: str) -> int:
    """The index in S3IO_LAYERS of a package (as ``_unit`` names it)."""
    for index, members in enumerate(_declared_layers()):
        if unit in members:
            return index
    raise AssertionError(f"s3io/{unit} belongs to no layer: add it to S3IO_LAYERS (and CONTRIBUTING.md's layout)")


def _runtime_imports(tree: ast.Module) -> list[str]:
    """Modules imported at run time (imports under ``if TYPE_CHECKING:`` are only for type hints)."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            skipped.update(id(child) for child in ast.walk(node))
    names: list[str] = []
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "s3io":
                names += [f"s3io.{alias.name}" for alias in node.names]
            else:
                names.append(node.module)
    return names


def _unit(part: str) -> str:
    """The package a first name below s3io belongs to: the values and the entry points are one each."""
    return "values" if part in VALUES else "entry points" if part in ENTRY_POINTS else part


def _s3io_imports() -> dict[str, set[str]]:
    """{package: the other s3io packages its modules import at run time} (packages as ``_unit`` counts them)."""
    imports: dict[str, set[str]] = {}
    for path in sorted((ROOT / "s3io").rglob("*.py")):
        own = _unit(path.relative_to(ROOT / "s3io").parts[0].removesuffix(".py"))
        imports.setdefault(own, set())
        for name in _runtime_imports(ast.parse(path.read_text())):
            parts = name.split(".")
            if parts[0] != "s3io" or len(parts) < 2:
                continue
            target = (
                parts[1]
                if (ROOT / "s3io" / parts[1]).is_dir() or (ROOT / "s3io" / f"{parts[1]}.py").exists()
                else "__init__"
            )
            if _unit(target) != own:
                imports[own].add(_unit(target))
    return imports


def _layers_from_imports() -> list[set[str]]:
    """s3io's packages by height (one above the highest package imported; bottom first), from the imports alone."""
    imports = _s3io_imports()
    height: dict[str, int] = {}
    for _ in range(len(imports)):  # bounded: each pass fixes at least one more package's height
        for unit, targets in imports.items():
            if unit not in height and all(t in height for t in targets):
                height[unit] = 1 + max((height[t] for t in targets), default=-1)
    assert set(height) == set(imports), f"an import cycle among {sorted(set(imports) - set(height))}"
    return [{u for u, h in height.items() if h == level} for level in range(max(height.values()) + 1)]


def _declared_layers() -> list[set[str]]:
    return [{_unit(part) for part in layer} for layer in S3IO_LAYERS]


def test_s3io_layers_are_as_the_imports_put_them() -> None:
    """The layers above are the imports' own: a package in a layer imports only lower layers and something of the
    layer just below (an import upward, or across a layer, moves a package, and this fails until the layers, the
    README's stack and CONTRIBUTING's layout say so)."""
    assert _layers_from_imports() == _declared_layers()


def test_s3io_layers_import_only_their_own_layer_or_below() -> None:
    """Without the heights: no package imports its own layer's others or a layer above (the message names them)."""
    offenders = []
    for unit, targets in _s3io_imports().items():
        offenders += [f"s3io/{unit} imports s3io/{t}" for t in targets if _layer_of(t) >= _layer_of(unit)]
    assert offenders == []


def _readme_rows() -> list[set[str]]:
    """The README's stack below the entry points, top row first: the packages each row names as ``(s3io/...)``."""
    block = next(b for b in (ROOT / "README.md").read_text().split("```") if "(s3io/engine)" in b)
    rows: list[set[str]] = []
    current: set[str] = set()
    for line in block.splitlines():
        named = re.search(r"\(s3io/([^),]*)\)", line)
        if named:
            name = named.group(1)
            current.add("values" if name == "*.py" else _unit(name.removesuffix(".py").strip("/")))
        elif line.strip() == "▼" and current:
            rows.append(current)
            current = set()
    return [*rows, current]


def test_the_readme_stack_is_the_layers() -> None:
    """README.md's picture, row by row from the top, is the layers from the imports (the entry points drawn above
    it as three columns)."""
    assert _readme_rows() == [layer for layer in reversed(_layers_from_imports()) if layer != {"entry points"}]


def test_contributings_layout_lists_s3io_bottom_layer_first() -> None:
    """CONTRIBUTING.md's layout block lists s3io's packages in the order of the layers from the imports, each line
    within one layer."""
    section = (ROOT / "CONTRIBUTING.md").read_text().split("## Layout\n", 1)[1].split("```\n", 2)[1]
    layers = _layers_from_imports()
    rows = []
    for line in section.splitlines():
        names = line.split("#", 1)[0].split()
        if not names or not names[0].startswith("s3io/"):
            continue
        package = names[0].removeprefix("s3io/").strip("/")
        units = {_unit(n) for n in names[1:]} if not package else {_unit(package)}
        found = [index for index, layer in enumerate(layers) if units <= layer]
        assert found, f"{line.split('#')[0].strip()}: its packages are not in one layer"
        rows.append(found[0])
    assert rows == sorted(rows) and set(rows) == set(range(len(layers)))


# The writer and compaction build side by side on the table layer (its journal, lock, recovery and store check):
# the writer reaches compaction only to run it after a write (auto-compaction).
WRITE_TO_COMPACTION = {"s3io/write/auto_compact.py"}


def test_the_writer_imports_compaction_only_for_auto_compaction() -> None:
    offenders = []
    for path in sorted((ROOT / "s3io" / "write").rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        for name in _runtime_imports(ast.parse(path.read_text())):
            if name.split(".")[:2] == ["s3io", "compaction"] and relative not in WRITE_TO_COMPACTION:
                offenders.append(f"{relative}: imports {name}")
    assert offenders == []
    table = [
        f"{path.relative_to(ROOT).as_posix()}: imports {name}"
        for path in sorted((ROOT / "s3io" / "table").rglob("*.py"))
        for name in _runtime_imports(ast.parse(path.read_text()))
        if name.split(".")[:2] in (["s3io", "compaction"], ["s3io", "write"])
    ]
    assert table == []


READ_SIDE = """
import sys
import spark_ext.datasource, spark_ext.stream.stream_read
heavy = ["s3io.compaction", "s3io.compaction.driver", "s3io.compaction.rewrite", "spark_ext.compact.job"]
heavy += ["spark_ext.compact.spark_executor"]
loaded = sorted(name for name in heavy if name in sys.modules)
assert not loaded, f"a read imported the compaction job: {loaded}"
assert "s3io.table.visibility" in sys.modules
import spark_ext, spark_ext.compact
assert callable(spark_ext.compact) and not hasattr(spark_ext.compact, "compact_prefix")  # no names re-exported
loaded = sorted(name for name in heavy if name in sys.modules)
assert not loaded, f"importing spark_ext.compact imported the compaction job: {loaded}"
"""


def test_a_read_imports_the_journal_but_not_the_compaction_job() -> None:
    """The source and the stream read through s3io.table (the stream keeps its state through s3io.stream_state);
    a read loads neither the compaction job, its rewrite nor the Spark executor, and spark_ext.compact (callable, a
    package for ``python -m``) re-exports nothing."""
    result = subprocess.run([sys.executable, "-c", READ_SIDE], capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr


# The modules that read a prefix's data files. They list only through the table layer (s3io.table.list_visible),
# which applies the compaction journal; a LIST of their own would read a compaction's output and inputs both.
READERS = ("s3io/api.py", "s3io/dataset", "spark_ext/source", "spark_ext/planning", "spark_ext/stream/stream_reader.py")
LISTING_CALLS = {"list_objects", "list_pages", "list_page", "list_prefixes"}


def _reader_modules() -> list[Path]:
    found: list[Path] = []
    for name in READERS:
        path = ROOT / name
        found += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    return found


def test_readers_list_only_through_the_table_layer() -> None:
    offenders = []
    for path in _reader_modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in LISTING_CALLS:
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.func.attr}")
    assert offenders == []
    listing = [p for p in _reader_modules() if "list_visible" in p.read_text()]
    assert {p.relative_to(ROOT).as_posix() for p in listing} >= {
        "s3io/api.py",
        "spark_ext/source/driver_side.py",
        "spark_ext/stream/stream_reader.py",
    }


def test_one_place_makes_an_s3_client_from_settings() -> None:
    """Every entry point (the API, the CLIs, the filesystem, the Spark source, the stream, compaction) builds its
    client from a StoreConfig: only s3io/store.py calls S3Client(...)."""
    callers = []
    for top in ("s3io", "spark_ext", "pyspark_s3parquet"):
        for path in sorted((ROOT / top).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if (
                    isinstance(node, ast.Call)
                    and getattr(node.func, "id", getattr(node.func, "attr", None)) == "S3Client"
                ):
                    callers.append(path.relative_to(ROOT).as_posix())
    assert callers == ["s3io/store.py"]


ERRORS_ALONE = """
import sys
import s3io.errors
loaded = sorted(m for m in sys.modules if m.startswith("s3io"))
assert loaded == ["s3io", "s3io.errors"], loaded
from s3io import S3Client, StoreConfig, read_parquet
assert "s3io.s3.client" in sys.modules and S3Client.__module__ == "s3io.s3.client"
"""


def test_the_errors_import_without_the_client() -> None:
    """Every layer imports s3io.errors, which runs s3io/__init__ first: that loads the errors alone, and the package's
    other public names on first use (``from s3io import S3Client`` as before)."""
    result = subprocess.run(
        [sys.executable, "-c", ERRORS_ALONE], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr


# Exceptions that are not errors a caller sees: signals caught inside the module pair that raises them, a planning
# bug's loud failure, and warnings. Every other exception class of s3io and spark_ext derives from S3IOError.
NOT_ERRORS_OF_S3IO = {
    "s3io.engine.singleflight._OwnerLeft": "a signal: a joiner whose run_here owner was cancelled fetches again",
    "s3io.parquet.footer.FooterNeedsMore": "a signal: the footer readers fetch more and parse again",
    "s3io.parquet.schema._Incompatible": "a signal inside the schema merge",
    "s3io.parquet.sparse.RangeNotFetched": "a planning bug (a read outside every fetched range), never a user's error",
    "s3io.s3.list_page.NotFastPath": "a signal: s3io.s3.xml parses the page with ElementTree instead",
    "s3io.s3a.S3ASettingIgnored": "a warning",
    "spark_ext.session.SessionKept": "a warning",
    "spark_ext.source.file_schema._CannotMerge": "a signal inside the schema merge",
}

ERROR_ROOT = """
import importlib, inspect, json, pathlib, sys
from s3io.errors import S3IOError
root, found = pathlib.Path(sys.argv[1]), []
for top in ("s3io", "spark_ext"):
    for path in sorted((root / top).rglob("*.py")):
        module = ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
        if module.endswith("__main__"):
            continue
        for name, value in vars(importlib.import_module(module)).items():
            if inspect.isclass(value) and issubclass(value, BaseException) and value.__module__ == module:
                if not issubclass(value, S3IOError):
                    found.append(f"{module}.{name}")
print(json.dumps(found))
"""


def test_every_error_derives_from_s3io_error() -> None:
    """One error root: ``except s3io.S3IOError`` catches every error s3io and spark_ext raise on purpose (the
    table's and compaction's included); builtin bases (ValueError, TimeoutError, ...) stay beside it."""
    result = subprocess.run(
        [sys.executable, "-c", ERROR_ROOT, str(ROOT)], capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, result.stderr
    assert sorted(json.loads(result.stdout)) == sorted(NOT_ERRORS_OF_S3IO)


# Module names that more than one package uses, each in one meaning: a package's errors, its public calls, a lease on
# a table (the rule, and a stream's), the options of the value the package configures.
SHARED_MODULE_NAMES = {"errors", "api", "lease", "options"}


def test_one_meaning_per_module_name() -> None:
    """A module name means one thing across the tree (``pieces``, ``task`` and ``session`` each meant two or more):
    a name two packages share is one of the few listed above, each used in the one meaning its comment gives."""
    packages_of: dict[str, list[str]] = {}
    for top in ("s3io", "spark_ext", "pyspark_s3parquet"):
        for path in sorted((ROOT / top).rglob("*.py")):
            if not path.stem.startswith("__"):
                packages_of.setdefault(path.stem, []).append(path.parent.relative_to(ROOT).as_posix())
    shared = {name: where for name, where in packages_of.items() if len(where) > 1}
    assert set(shared) <= SHARED_MODULE_NAMES, {n: w for n, w in shared.items() if n not in SHARED_MODULE_NAMES}
