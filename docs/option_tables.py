"""The docs' option tables, generated from the settings' declarations (s3io.settings): a Spark read's options, the
store's settings (options, keywords, flags, variables, S3A keys), a write's and a stream's options, the command
lines' flags, the S3IO_* variables and S3A's keys.

Each table sits in its page between ``<!-- generated: NAME -->`` and ``<!-- /generated -->``; tests/test_docs_tables.py
fails when one is stale. Regenerate them all with:

    python docs/option_tables.py --write
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from anywhere: this checkout's code
    sys.path.insert(0, str(ROOT))

from s3io.compaction.options import CompactionOptions  # noqa: E402
from s3io.s3a import FS_S3A  # noqa: E402
from s3io.settings import Declared, declared, kind_of, range_text  # noqa: E402
from s3io.store import S3A_ROWS, StoreConfig  # noqa: E402
from s3io.write.options import WriteOptions  # noqa: E402
from spark_ext.planning.read_options import ReadOptions  # noqa: E402
from spark_ext.stream.stream_options import StreamOptions  # noqa: E402

COMMAND = "python docs/option_tables.py --write"
DASH = "\u2013"  # what a table shows for "none"
KiB, MiB, GiB = 1024, 1024 * 1024, 1024 * 1024 * 1024
_BLOCK = re.compile(r"(<!-- generated: (?P<name>[a-z0-9-]+) -->\n)(?P<body>.*?)(<!-- /generated -->)", re.DOTALL)


def shown(value: Any, unit: str) -> str:
    """A default as the docs write it: sizes in KiB / MiB / GiB, durations with their unit, none as a dash."""
    if value is None or value in ((), ""):
        return DASH
    if isinstance(value, bool):
        return str(value).lower()
    if unit == "bytes" and isinstance(value, int) and value:
        for size, name in ((GiB, "GiB"), (MiB, "MiB"), (KiB, "KiB")):
            if value % size == 0:
                return f"{value // size} {name}"
        return f"{value} bytes"
    if unit == "s" and isinstance(value, int | float):
        for seconds, name in ((86_400, "d"), (3_600, "h"), (60, "min")):
            if value >= seconds and value % seconds == 0:
                return f"{value // seconds:g} {name}"
        return f"{value:g} s"
    if isinstance(value, tuple):
        return ", ".join(str(v) for v in value)
    return str(value)


def _code(*names: str | None) -> str:
    return ", ".join(f"`{n}`" for n in names if n) or DASH


def _kind(d: Declared) -> str:
    kind, unit = kind_of(d.spec.parse)
    unit = d.spec.unit or unit
    text = f"{kind} ({unit})" if unit and unit not in kind else kind
    bounds = range_text(d.spec)
    return f"{text}; {bounds}" if bounds else text


def _default(d: Declared) -> str:
    return shown(d.default, d.spec.unit or kind_of(d.spec.parse)[1])


def _table(header: tuple[str, ...], rows: Iterable[tuple[str, ...]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _documented(cls: type) -> list[Declared]:
    return [d for d in declared(cls) if d.spec.docs]


def read_options() -> str:
    """A Spark read's own options (the store's are in the store table)."""
    rows = (
        (_code(*d.spellings), _kind(d), _default(d), _code(d.spec.spark_conf), d.spec.help)
        for d in _documented(ReadOptions)
        if d.path[0] != "store"
    )
    return _table(("option", "takes", "default", "default from the session's", "meaning"), rows)


def _s3a(d: Declared) -> str:
    """The S3A keys that can set a store setting (its own ``s3a=``, or a row of s3io.s3a's that converts)."""
    return _code(*(FS_S3A + row.key for row in S3A_ROWS.values() if row.to is not None and d.name in row.options()))


def write_options() -> str:
    """A Spark write's own options (and ``s3io.write_parquet``'s keywords); the store's are in the store table."""
    rows = ((_code(*d.spellings), _kind(d), _default(d), d.spec.help) for d in _documented(WriteOptions))
    return _table(("option", "takes", "default", "meaning"), rows)


def stream_options() -> str:
    """A Spark stream's own options (every batch read option applies too)."""
    rows = ((_code(*d.spellings), _kind(d), _default(d), d.spec.help) for d in _documented(StreamOptions))
    return _table(("option", "takes", "default", "meaning"), rows)


def store_settings() -> str:
    """Every store setting (where, as whom, the policy, the range engine): every read, stream, write and command."""
    rows = (
        (
            _code(*d.spellings),
            f"`{d.keyword}`",
            _code(d.spec.flag),
            _code(d.env),
            _s3a(d),
            _kind(d),
            _default(d),
            d.spec.help,
        )
        for d in _documented(StoreConfig)
    )
    return _table(("option", "keyword", "flag", "variable", "S3A", "takes", "default", "meaning"), rows)


def _flags(cls: type) -> str:
    rows = (
        (f"`{d.spec.flag}`", _code(d.name), _code(d.env), _default(d), d.spec.help)
        for d in _documented(cls)
        if d.spec.flag
    )
    return _table(("flag", "option", "variable", "default", "meaning"), rows)


def s3io_flags() -> str:
    """The flags of ``s3io`` (and of ``python -m spark_ext.compact``, which takes them too)."""
    return _flags(StoreConfig)


def compact_flags() -> str:
    """The compaction's own flags (``python -m spark_ext.compact``)."""
    return _flags(CompactionOptions)


def variables() -> str:
    """The S3IO_* variables: every store setting that has one."""
    rows = ((f"`{d.env}`", _code(d.name), _default(d)) for d in _documented(StoreConfig) if d.env)
    return _table(("variable", "option", "default"), rows)


def s3a_keys() -> str:
    """S3A's keys: what each becomes, or why it is ignored."""
    rows = (
        (f"`{FS_S3A}{row.key}`", "mapped" if row.to is not None else "ignored, with a warning", row.doc)
        for row in S3A_ROWS.values()
    )
    return _table(("S3A key", "here", "what it becomes, or why not"), rows)


TABLES: dict[str, tuple[str, Callable[[], str]]] = {
    "read-options": ("docs/spark.md", read_options),
    "write-options": ("docs/writing.md", write_options),
    "stream-options": ("docs/streaming.md", stream_options),
    "store-settings": ("docs/policy.md", store_settings),
    "s3io-flags": ("docs/cli.md", s3io_flags),
    "compact-flags": ("docs/cli.md", compact_flags),
    "variables": ("docs/cli.md", variables),
    "s3a-keys": ("docs/coming-from-s3a.md", s3a_keys),
}


def regenerated(page: str) -> str:
    """``page``'s text with each of its tables as the declarations make it."""
    text = (ROOT / page).read_text()

    def table(match: re.Match[str]) -> str:
        name = match.group("name")
        if name not in TABLES or TABLES[name][0] != page:
            raise KeyError(f"{page}: no generated table named {name!r} for this page (known: {', '.join(TABLES)})")
        return match.group(1) + TABLES[name][1]() + match.group(4)

    return _BLOCK.sub(table, text)


def stale() -> list[str]:
    """The tables whose page does not hold them as generated, as "page: name"."""
    found = []
    for name, (page, make) in TABLES.items():
        text = (ROOT / page).read_text()
        blocks = {m.group("name"): m.group("body") for m in _BLOCK.finditer(text)}
        if blocks.get(name) != make():
            found.append(f"{page}: {name}")
    return found


def main(argv: list[str]) -> int:
    """``--write``: rewrite the stale tables; else list them (exit 1 if any)."""
    pages = sorted({page for page, _ in TABLES.values()})
    if "--write" in argv:
        for page in pages:
            text = regenerated(page)
            if text != (ROOT / page).read_text():
                (ROOT / page).write_text(text)
                print(f"rewrote {page}")
        return 0
    found = stale()
    for entry in found:
        print(f"stale: {entry}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
