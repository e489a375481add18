"""Hive partitions of a plain read: ``key=value`` directories below a path's root become columns.

As ``pyarrow.dataset.dataset(..., partitioning="hive")`` makes them, so that ``s3io.read_parquet`` reads what
pyarrow reads: only directory names count (never the file's own name); values are URL-decoded;
``__HIVE_DEFAULT_PARTITION__`` is null, and so is a key a file's path does not have; columns come in the order
their keys are first seen. Inferred types are pyarrow's: ``int32`` when every value is a whole number that fits,
else ``string``. A schema given instead names the partition columns and their types (other keys are ignored, as
pyarrow ignores them), and each value is cast to its type. The Spark source discovers partitions Spark's way
(``spark_ext.planning.hive``); this is the standalone API's.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import unquote

import pyarrow as pa

from s3io.errors import InvalidConfig

HIVE = "hive"
HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"
_WHOLE_NUMBER = re.compile(r"[+-]?[0-9]+")
_INT32 = (-(2**31), 2**31 - 1)

Partitioning = str | pa.Schema | None


@dataclass(frozen=True, slots=True)
class Partitions:
    """The partition columns of a read, and each file's values for them (in ``schema`` order; None is null)."""

    schema: pa.Schema
    values: tuple[tuple[object, ...], ...]


def check_partitioning(partitioning: object) -> Partitioning:
    """``partitioning`` if it is "hive", a pyarrow.Schema or None; else InvalidConfig naming the accepted forms."""
    if partitioning is None or partitioning == HIVE or isinstance(partitioning, pa.Schema):
        return partitioning  # type: ignore[return-value]
    raise InvalidConfig(
        f"partitioning: expected 'hive' (key=value directories become columns, types inferred), a pyarrow.Schema "
        f"(those columns, those types) or None (no partition columns), got {partitioning!r}"
    )


def hive_segments(directory: str, url: str) -> dict[str, str | None]:
    """The ``key=value`` segments of a relative directory path (``"a=1/b=x/"``), decoded; a null value is None."""
    found: dict[str, str | None] = {}
    for segment in directory.split("/"):
        name, equals, raw = segment.partition("=")
        if not equals or not name:
            continue
        key = unquote(name)
        if key in found:
            raise InvalidConfig(
                f"{url}: the partition key {key!r} appears twice in its path; pass partitioning=None to read it "
                "without partition columns"
            )
        value = unquote(raw)
        found[key] = None if value == HIVE_NULL else value
    return found


def discover(files: Sequence[tuple[str, str]], partitioning: Partitioning) -> Partitions:
    """Partition columns and values of ``files``, given as (URL, directory path relative to the read's root)."""
    if partitioning is None or not files:
        return Partitions(pa.schema([]), tuple(() for _ in files))
    segments = [hive_segments(directory, url) for url, directory in files]
    if isinstance(partitioning, pa.Schema):
        typed = (_typed(url, found, partitioning) for (url, _), found in zip(files, segments, strict=True))
        return Partitions(partitioning, tuple(typed))
    names = list(dict.fromkeys(name for found in segments for name in found))
    if not names:
        return Partitions(pa.schema([]), tuple(() for _ in files))
    fields = [pa.field(name, _inferred_type([found.get(name) for found in segments])) for name in names]
    schema = pa.schema(fields)
    return Partitions(schema, tuple(_inferred(found, schema) for found in segments))


def _inferred_type(values: Sequence[str | None]) -> pa.DataType:
    present = [v for v in values if v is not None]
    if present and all(_WHOLE_NUMBER.fullmatch(v) and _INT32[0] <= int(v) <= _INT32[1] for v in present):
        return pa.int32()
    return pa.string()


def _inferred(found: dict[str, str | None], schema: pa.Schema) -> tuple[object, ...]:
    values: list[object] = []
    for field in schema:
        value = found.get(field.name)
        values.append(int(value) if value is not None and pa.types.is_int32(field.type) else value)
    return tuple(values)


def _typed(url: str, found: dict[str, str | None], schema: pa.Schema) -> tuple[object, ...]:
    values: list[object] = []
    for field in schema:
        value = found.get(field.name)
        if value is None:
            values.append(None)
            continue
        try:
            values.append(pa.array([value], pa.string()).cast(field.type)[0].as_py())
        except (pa.ArrowException, ValueError) as exc:
            raise InvalidConfig(
                f"{url}: partition value {value!r} of {field.name!r} is not a {field.type} (the partitioning "
                "schema's type); give that column another type, or pass partitioning='hive' to infer the types"
            ) from exc
    return tuple(values)
