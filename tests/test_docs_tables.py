"""One way to declare a setting (issue 40): a setting declared once is a keyword, an option, a flag, a variable and a
row of the docs' tables, and the tables in the docs are the ones the declarations make."""

from __future__ import annotations

import argparse
import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import ClassVar

import pytest

from s3io.compaction.options import CompactionOptions
from s3io.errors import InvalidConfig
from s3io.s3a import s3a_table, store_options
from s3io.settings import Kind, between, check_setting, count, declared, setting, settings
from s3io.store import StoreConfig
from s3io.write.options import WriteOptions
from spark_ext.stream.stream_options import StreamOptions

ROOT = Path(__file__).resolve().parent.parent


def _tables() -> ModuleType:
    spec = importlib.util.spec_from_file_location("option_tables", ROOT / "docs" / "option_tables.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("option_tables", module)
    spec.loader.exec_module(module)
    return module


def test_the_docs_tables_are_the_ones_the_declarations_make() -> None:
    tables = _tables()
    stale = tables.stale()
    assert stale == [], f"stale option tables {stale}: regenerate them with `{tables.COMMAND}`"


@settings
class _Scratch(StoreConfig):
    """A store with one setting more, declared the one way."""

    KIND: ClassVar[str] = "store option"

    widget_limit: int = setting(
        "widgetLimit",
        count(1),
        default=3,
        aliases=("widgets",),
        flag="--widget-limit",
        env="S3IO_WIDGET_LIMIT",
        unit="widgets",
        help="how many widgets a scratch store keeps",
    )


def test_a_setting_declared_once_is_a_keyword_an_option_a_flag_a_variable_and_a_docs_row() -> None:
    assert _Scratch(widget_limit=5).widget_limit == 5 and _Scratch().widget_limit == 3
    assert _Scratch.from_options({"widgetlimit": "7", "stallTimeout": "2s"}).widget_limit == 7
    assert _Scratch.from_options({"WIDGETS": "8"}).widget_limit == 8
    with pytest.raises(InvalidConfig, match=r"widgetLimit.*at least 1"):
        _Scratch.from_options({"widgetLimit": "0"})
    with pytest.raises(InvalidConfig, match=r"widgetLimit is given twice"):
        _Scratch.from_options({"widgetLimit": "1", "widgets": "2"})
    assert _Scratch(widgets=6).widget_limit == 6 and _Scratch().replace(widgets=2).widget_limit == 2  # alias keyword
    with pytest.raises(InvalidConfig, match=r"widget_limit is given twice \(also as widgets\)"):
        _Scratch(widget_limit=1, widgets=2)
    parser = argparse.ArgumentParser()
    _Scratch.add_arguments(parser)
    assert _Scratch.from_args(parser.parse_args(["--widget-limit", "9"]), base=_Scratch()).widget_limit == 9
    assert _Scratch.from_env({"S3IO_WIDGET_LIMIT": "4"}).widget_limit == 4
    with pytest.raises(InvalidConfig, match="S3IO_WIDGET_LIMIT"):
        _Scratch.from_env({"S3IO_WIDGET_LIMIT": "many"})
    tables = _tables()
    rows = [line for line in tables._flags(_Scratch).splitlines() if "widget" in line]
    assert rows == [
        "| `--widget-limit` | `widgetLimit` | `S3IO_WIDGET_LIMIT` | 3 | how many widgets a scratch store keeps |"
    ]
    assert StoreConfig.from_options({}) == StoreConfig.from_env()  # the scratch class left StoreConfig alone
    with pytest.raises(InvalidConfig, match="unknown store option 'widgetLimit'"):
        StoreConfig.from_options({"widgetLimit": "2"})


def test_compaction_lease_ttl_is_named_as_a_writes_and_a_streams_and_keeps_lock_ttl_as_an_alias() -> None:
    """One name for the lease of every holder (compaction, write, stream): leaseTtl; lockTtl / lock_ttl still work."""
    assert CompactionOptions(lock_ttl=5.0).lease_ttl == 5.0
    assert CompactionOptions(lock_ttl="2min").lease_ttl == 120.0  # parsed as the option lockTtl is
    assert StoreConfig(path_style=True).addressing == "path"  # an alias keyword means what its option means
    assert CompactionOptions().replace(lock_ttl=7.0).lease_ttl == 7.0
    assert CompactionOptions.from_options({"lockTtl": "9s"}).lease_ttl == 9.0
    assert CompactionOptions.from_options({"leaseTtl": "3s"}).lease_ttl == 3.0
    ttls = {c.__name__: [d.name for d in declared(c) if "ttl" in d.name.lower()] for c in (WriteOptions, StreamOptions)}
    assert ttls == {"WriteOptions": ["leaseTtl"], "StreamOptions": ["leaseTtl"]}
    assert [d.name for d in declared(CompactionOptions) if "ttl" in d.name.lower()] == ["leaseTtl"]


def test_a_setting_of_choices_given_by_keyword_is_parsed_as_its_option_is() -> None:
    """No choice checked by hand: a keyword value goes through the declared kind (normalised, or the same error)."""
    assert WriteOptions(mode="OVERWRITE").mode == WriteOptions.from_options({"mode": "OVERWRITE"}).mode == "overwrite"
    assert CompactionOptions(schema_mode="Exact").schema_mode == "exact"
    assert CompactionOptions(coerce_timestamps=None).coerce_timestamps is None
    for make, option in (
        (
            lambda: CompactionOptions(schema_mode="loose"),
            lambda: CompactionOptions.from_options({"schemaMode": "loose"}),
        ),
        (lambda: WriteOptions(compression="lzo"), lambda: WriteOptions.from_options({"compression": "lzo"})),
    ):
        with pytest.raises(InvalidConfig) as by_keyword:
            make()
        with pytest.raises(InvalidConfig) as by_option:
            option()
        assert str(by_keyword.value) == str(by_option.value)


@settings
class _Ranged(StoreConfig):
    """A store with one ranged setting more, with its S3A key, declared the one way."""

    KIND: ClassVar[str] = "store option"

    widget_share: float = setting(
        "widgetShare",
        Kind("number", lambda value, name: float(value)),
        default=0.5,
        range=between(0, 1),
        flag="--widget-share",
        env="S3IO_WIDGET_SHARE",
        s3a="fs.s3a.widget.share",
        help="the share of widgets a scratch store keeps",
    )


def test_a_declared_range_is_enforced_from_every_source_and_shown_in_the_docs() -> None:
    """The range is one value: every source is held to it, its error names the setting as given, the range and the
    value, and the docs show the same range."""
    parser = argparse.ArgumentParser()
    _Ranged.add_arguments(parser)
    sources = (
        ("widgetShare", lambda: _Ranged(widget_share=2.0)),
        ("widgetShare", lambda: _Ranged().replace(widget_share=2.0)),
        ("widgetShare", lambda: _Ranged.from_options({"widgetshare": "2"})),
        ("S3IO_WIDGET_SHARE", lambda: _Ranged.from_env({"S3IO_WIDGET_SHARE": "2"})),
        ("--widget-share", lambda: _Ranged.from_args(parser.parse_args(["--widget-share", "2"]), base=_Ranged())),
    )
    for label, make in sources:
        with pytest.raises(InvalidConfig, match=rf"^{re.escape(label)}: must be between 0 and 1, got 2\.0$"):
            make()
    assert _Ranged.from_options({"widgetShare": "1"}).widget_share == 1.0  # the bounds are inside
    (d,) = [d for d in declared(_Ranged) if d.name == "widgetShare"]
    assert _tables()._kind(d) == "number; [0, 1]"


def test_a_function_argument_that_a_setting_gives_is_held_to_its_range_with_its_error() -> None:
    """``check_setting``: one range, one message, for the setting and for a public function's argument."""
    with pytest.raises(InvalidConfig) as from_keyword:
        _Ranged(widget_share=2.0)
    with pytest.raises(InvalidConfig) as from_argument:
        check_setting(_Ranged, "widgetShare", 2.0)
    assert str(from_argument.value) == str(from_keyword.value) == "widgetShare: must be between 0 and 1, got 2.0"
    assert check_setting(_Ranged, "widgetShare", 0.25) == 0.25
    with pytest.raises(KeyError, match="widgetShares"):
        check_setting(_Ranged, "widgetShares", 0.25)


def test_an_s3a_key_declared_on_a_field_is_a_row_of_the_s3a_table() -> None:
    rows = s3a_table(declared(_Ranged))
    assert rows["widget.share"].options() == ("widgetShare",)
    assert store_options({"spark.hadoop.fs.s3a.widget.share": "0.25"}, None, rows) == {"widgetShare": "0.25"}
    assert _Ranged.from_options(store_options({"fs.s3a.widget.share": "0.25"}, None, rows)).widget_share == 0.25
    assert "widget.share" not in s3a_table(declared(StoreConfig))


def test_a_stale_table_is_found_and_named(tmp_path: Path) -> None:
    """The check above is not vacuous: a table edited by hand is reported, with its page and name."""
    tables = _tables()
    page, _ = tables.TABLES["variables"]
    (tmp_path / "docs").mkdir()
    for name in {p for p, _ in tables.TABLES.values()}:
        (tmp_path / name).write_text((ROOT / name).read_text())
    text = (ROOT / page).read_text()
    edited = text.replace("| variable | option | default |", "| variable | option | default value |", 1)
    assert edited != text
    (tmp_path / page).write_text(edited)
    original = tables.ROOT
    try:
        tables.ROOT = tmp_path
        assert tables.stale() == [f"{page}: variables"]
        assert tables.main([]) == 1
        assert tables.main(["--write"]) == 0 and tables.stale() == []
    finally:
        tables.ROOT = original
