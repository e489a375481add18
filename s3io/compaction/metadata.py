"""What an output says besides its columns: the footer keys it carries over from its inputs, and the keys that
keep files out of one output.

- Spark's keys (``org.apache.spark.*``) change what Spark reads from the same bytes: ``legacyDateTime``,
  ``legacyINT96``, ``timeZone`` and ``version`` say whether dates and timestamps were written rebased to the
  hybrid Julian calendar (Spark shifts them back on read), and ``sql.parquet.row.metadata`` holds Spark's own
  schema (intervals, variant, char/varchar, comments, which the parquet types alone do not say). They are part of
  a file's identity: files whose Spark keys differ never share an output, and an output carries its inputs' keys
  unchanged. Values are copied as they are (a LEGACY-rebased date keeps its bytes), so the same keys keep meaning
  the same thing. Merging keys instead (two Spark schemas into one) would be a second schema unification, in
  Spark's rules: not worth it for files one writer wrote with one setting, which is what shares a directory.
- Other schema-level keys (users', pandas') describe the output when every input carries them with one value, and
  are kept; a key whose value differs between the inputs, or that some lack, describes some rows only and is
  dropped (pyarrow.dataset keeps its first file's metadata instead, whatever the others say). pandas' key is kept
  when the inputs' differ only in a RangeIndex's bounds (pandas writes each file's own): the output's RangeIndex
  then spans its own rows, 0 to its row count, as pandas' ``concat(ignore_index=True)`` and pyarrow.dataset (which
  ignores a RangeIndex whose length is not the table's) give.
- The writer regenerates ``ARROW:schema`` and the journal's keys (s3io.table.layout): never carried over.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from s3io.table import layout

SPARK_PREFIX = b"org.apache.spark."
SPARK_VERSION = b"org.apache.spark.version"
LEGACY_DATETIME = b"org.apache.spark.legacyDateTime"
LEGACY_INT96 = b"org.apache.spark.legacyINT96"
ARROW_SCHEMA = b"ARROW:schema"
PANDAS = b"pandas"
REGENERATED = frozenset({ARROW_SCHEMA, layout.INPUTS_METADATA_KEY, layout.INPUTS_MODIFIED_METADATA_KEY})

Metadata = Mapping[bytes, bytes]


def file_metadata(raw: Metadata | None) -> dict[bytes, bytes]:
    """A footer's key-value metadata without the keys a writer regenerates (what an output may carry over)."""
    return {key: value for key, value in (raw or {}).items() if key not in REGENERATED}


def spark_keys(metadata: Metadata | None) -> dict[bytes, bytes]:
    """The keys that change what Spark reads (``org.apache.spark.*``): part of a file's identity."""
    return {key: value for key, value in (metadata or {}).items() if key.startswith(SPARK_PREFIX)}


def spark_keys_conflict(current: Metadata, example: str, other: Metadata, url: str) -> str | None:
    """None if both files carry the same Spark keys, else words naming the first key that differs."""
    if current == other:
        return None
    key = min(k for k in {*current, *other} if current.get(k) != other.get(k))
    return (
        f"the footer key {key.decode(errors='replace')!r} is {_shown(current.get(key))} in {example} but "
        f"{_shown(other.get(key))} in {url}: Spark reads the same bytes differently by its org.apache.spark.* keys "
        "(calendar rebase, Spark types), so such files are not compacted together"
    )


def _shown(value: bytes | None) -> str:
    if value is None:
        return "absent"
    text = value.decode(errors="replace")
    return repr(text if len(text) <= 60 else text[:57] + "...")


def int96_rebase_conflict(metadata: Metadata) -> str | None:
    """Why a file's INT96 columns cannot become microsecond timestamps, or None.

    Spark reads INT96 by one rebase rule (Julian if ``legacyINT96``, or written before Spark 3.1) and microsecond
    timestamps and dates by another (``legacyDateTime``, or before 3.0). An output stores INT96 as microseconds,
    read by the second rule: where the two differ, the values would shift by days. Files Spark did not write (no
    version key) are read by the session's settings, the same for both by default."""
    version = metadata.get(SPARK_VERSION)
    if version is None:
        return None
    text = version.decode(errors="replace")
    legacy_int96 = text < "3.1.0" or LEGACY_INT96 in metadata  # Spark compares version strings so
    legacy_dates = text < "3.0.0" or LEGACY_DATETIME in metadata
    if legacy_int96 == legacy_dates:
        return None
    int96_rule, dates_rule = ("LEGACY", "CORRECTED") if legacy_int96 else ("CORRECTED", "LEGACY")
    return (
        f"Spark {text} wrote its INT96 timestamps in {int96_rule} rebase mode (org.apache.spark.legacyINT96) but its "
        f"dates and other timestamps in {dates_rule} mode (org.apache.spark.legacyDateTime): as microseconds, the "
        "INT96 values would be read by the second rule and shift; left as it is"
    )


def output_metadata(inputs: Sequence[Metadata | None], rows: int) -> dict[bytes, bytes]:
    """The schema metadata of an output of ``rows`` rows holding ``inputs`` (each one's ``file_metadata``): the
    keys every input carries with one value; pandas' key also when the values differ only in RangeIndex bounds."""
    if not inputs:
        return {}
    first, *others = (m or {} for m in inputs)
    kept: dict[bytes, bytes] = {}
    for key, value in first.items():
        values = [value, *(m.get(key) for m in others)]
        if key == PANDAS:
            merged = _merged_pandas(values, rows)
            if merged is not None:
                kept[key] = merged
        elif all(v == value for v in values):
            kept[key] = value
    return kept


def footer_metadata(schema: pa.Schema, metadata: Metadata) -> dict[bytes, bytes]:
    """The key-value metadata pyarrow writes for ``schema`` with ``metadata``: the keys, then ``ARROW:schema``
    (the schema serialized, base64), so pyarrow readers see the metadata too. Written when the output is closed,
    once every input is known (pyarrow reads a file's schema metadata from ``ARROW:schema``, not the footer)."""
    serialized = schema.with_metadata(dict(metadata) or None).serialize().to_pybytes()
    return {**metadata, ARROW_SCHEMA: base64.b64encode(serialized)}


def _merged_pandas(values: Sequence[bytes | None], rows: int) -> bytes | None:
    """pandas' metadata of the output, or None when the inputs' say different things (see the module doc)."""
    if any(v is None for v in values):
        return None
    try:
        parsed = [json.loads(v) for v in values]  # type: ignore[arg-type]
    except ValueError:
        return None
    if not all(isinstance(p, dict) and isinstance(p.get("index_columns"), list) for p in parsed):
        return values[0] if all(v == values[0] for v in values) else None
    if any(_without_range_bounds(p) != _without_range_bounds(parsed[0]) for p in parsed):
        return None
    merged = dict(parsed[0])
    merged["index_columns"] = [
        {**entry, "start": 0, "stop": rows, "step": 1} if _is_range(entry) else entry
        for entry in merged["index_columns"]
    ]
    return json.dumps(merged).encode()


def _is_range(entry: Any) -> bool:
    return isinstance(entry, dict) and entry.get("kind") == "range"


def _without_range_bounds(pandas: dict[str, Any]) -> dict[str, Any]:
    """pandas' metadata with each RangeIndex's start, stop and step left out (they describe one file's rows)."""
    bounds = ("start", "stop", "step")
    index = [
        {k: v for k, v in entry.items() if k not in bounds} if _is_range(entry) else entry
        for entry in pandas["index_columns"]
    ]
    return {**pandas, "index_columns": index}
