"""How a file's columns become the read schema's columns: name matching and which type conversions are allowed.

A read has one schema but many files, which may spell a column in another case or store it in another type.
``ReadConversions`` is the policy for one read (a frozen value passed down to every batch): match names exactly
or ignoring case (nested struct fields too), allow any lossless cast or only those a rule accepts, and whether
timestamps may drop digits finer than the target unit, and ``adjust``: a per-file change to the decoded values,
decided from the file's footer (Spark's calendar rebase of files written in its legacy mode). The default is what
s3io always did: exact names, any safe cast, values as stored.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from s3io.errors import SchemaMismatch
from s3io.parquet.naming import file_error

# (file type, read type) -> None when the conversion is allowed, else the reason it is not.
ConversionRule = Callable[[pa.DataType, pa.DataType], str | None]
INT96_UNIT = "us"  # INT96 timestamps are read in microseconds: nanoseconds wrap outside 1677-2262 (schema.py)


class FileAdjustment(Protocol):
    """A change a read makes to one file's decoded batches before they are conformed to the read schema."""

    @property
    def columns(self) -> frozenset[str]:
        """The file's top-level columns whose values it changes: their statistics do not bound the values read."""
        ...

    def apply(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """``batch`` (the file's names and types) with the values changed; raises an S3IOError naming the file."""
        ...


# (footer, url) -> the adjustment of that file's values, or None (no change: the usual case, decided cheaply).
AdjustmentRule = Callable[[pq.FileMetaData, str], FileAdjustment | None]


@dataclass(frozen=True, slots=True)
class ReadConversions:
    """The name-matching and type-conversion policy of one read."""

    case_insensitive: bool = False  # a file column matches a read column whose name differs only in case
    rule: ConversionRule | None = None  # None: any cast Arrow does without losing values
    truncate_time: bool = False  # timestamps finer than the read type's unit are truncated, not refused
    int96_unit: str | None = INT96_UNIT  # decode INT96 timestamps in this unit (None: pyarrow's nanoseconds)
    adjust: AdjustmentRule | None = None  # None: every file's values are read as stored

    @property
    def is_default(self) -> bool:
        return not self.case_insensitive and self.rule is None


DEFAULT_CONVERSIONS = ReadConversions()


def file_adjustment(conversions: ReadConversions, metadata: pq.FileMetaData, url: str) -> FileAdjustment | None:
    """The adjustment ``conversions`` make to the file with this footer, or None when its values are read as stored."""
    return None if conversions.adjust is None else conversions.adjust(metadata, url)


def match_names(
    available: Sequence[str], wanted: Sequence[str], conversions: ReadConversions, *, url: str | None, where: str = ""
) -> dict[str, str]:
    """For each wanted name the file has: wanted name -> the file's name. An exact match wins; ignoring case,
    two file names that fold to the wanted one are ambiguous (SchemaMismatch naming them and ``url``)."""
    exact = set(available)
    folded: dict[str, list[str]] = {}
    if conversions.case_insensitive:
        for name in available:
            folded.setdefault(name.lower(), []).append(name)
    found: dict[str, str] = {}
    for name in wanted:
        if conversions.case_insensitive:
            candidates = folded.get(name.lower(), [])
            if len(candidates) > 1:
                shown = ", ".join(repr(c) for c in candidates)
                message = (
                    f"column {where}{name!r} is ambiguous: the file has {shown}, which differ only in case "
                    "(names are matched ignoring case; set spark.sql.caseSensitive=true, or caseSensitive, to match "
                    "them exactly)"
                )
                raise file_error(SchemaMismatch, message, url)
            if candidates:
                found[name] = candidates[0]
        elif name in exact:
            found[name] = name
    return found


def convert_column(
    column: pa.Array | pa.ChunkedArray,
    target: pa.DataType,
    conversions: ReadConversions,
    *,
    name: str,
    url: str | None,
) -> pa.Array | pa.ChunkedArray:
    """``column`` in the ``target`` type under ``conversions``; SchemaMismatch names ``url`` and the column."""
    if isinstance(column, pa.ChunkedArray):
        chunks = [convert_column(chunk, target, conversions, name=name, url=url) for chunk in column.chunks]
        return pa.chunked_array(chunks, type=target)
    try:
        return _convert(column, target, conversions, name, url)
    except SchemaMismatch:
        raise
    except (pa.ArrowException, ValueError, TypeError) as exc:
        message = f"column {name!r} cannot be read as {target}: {exc}"
        raise file_error(SchemaMismatch, message, url, cause=exc) from exc


def _convert(
    array: pa.Array, target: pa.DataType, conversions: ReadConversions, path: str, url: str | None
) -> pa.Array:
    source = array.type
    if source.equals(target):
        return array
    if pa.types.is_dictionary(source):
        return _convert(array.dictionary_decode(), target, conversions, path, url)
    if _is_list_like(source) and not pa.types.is_list(source):
        array = array.cast(pa.list_(source.value_field))  # large / fixed-size lists and views as plain lists
        source = array.type
    if pa.types.is_struct(source) and pa.types.is_struct(target):
        return _convert_struct(array, target, conversions, path, url)
    if pa.types.is_list(source) and pa.types.is_list(target):
        offsets, (values,) = _rebased(array, [array.values])
        values = _convert(values, target.value_type, conversions, f"{path}[]", url)
        return pa.ListArray.from_arrays(offsets, values, type=target, mask=_nulls_mask(array))
    if pa.types.is_map(source) and pa.types.is_map(target):
        offsets, (keys, items) = _rebased(array, [array.keys, array.items])
        keys = _convert(keys, target.key_type, conversions, f"{path}.key", url)
        items = _convert(items, target.item_type, conversions, f"{path}.value", url)
        return pa.MapArray.from_arrays(offsets, keys, items, type=target, mask=_nulls_mask(array))
    nested = (pa.types.is_struct, pa.types.is_list, pa.types.is_map)
    if any(check(source) or check(target) for check in nested):
        raise file_error(
            SchemaMismatch, f"column {path!r} is {source} in the file but the read schema says {target}", url
        )
    if conversions.rule is not None:
        reason = conversions.rule(source, target)
        if reason is not None:
            message = f"column {path!r} is {source} in the file and cannot be read as {target}: {reason}"
            raise file_error(SchemaMismatch, message, url)
    options = pc.CastOptions(target, allow_time_truncate=conversions.truncate_time)
    return pc.cast(array, options=options)


def _convert_struct(
    array: pa.StructArray, target: pa.StructType, conversions: ReadConversions, path: str, url: str | None
) -> pa.Array:
    source = array.type
    names = [source.field(i).name for i in range(source.num_fields)]
    wanted = [target.field(i).name for i in range(target.num_fields)]
    found = match_names(names, wanted, conversions, url=url, where=f"{path}.")
    children = []
    for i in range(target.num_fields):
        field = target.field(i)
        if field.name in found:
            child = array.field(names.index(found[field.name]))
            children.append(_convert(child, field.type, conversions, f"{path}.{field.name}", url))
        else:
            children.append(pa.nulls(len(array), field.type))
    fields = [target.field(i) for i in range(target.num_fields)]
    return pa.StructArray.from_arrays(children, fields=fields, mask=_nulls_mask(array))


def _rebased(array: pa.Array, children: list[pa.Array]) -> tuple[pa.Array, list[pa.Array]]:
    """Offsets starting at 0 and the children cut to them: a sliced list or map array, made rebuildable."""
    offsets = array.offsets
    start, end = offsets[0].as_py(), offsets[-1].as_py()
    rebased = pc.subtract(offsets, pa.scalar(start, offsets.type))
    return rebased, [child.slice(start, end - start) for child in children]


def _nulls_mask(array: pa.Array) -> pa.Array | None:
    return pc.is_null(array) if array.null_count else None


def _is_list_like(arrow_type: pa.DataType) -> bool:
    t = pa.types
    return (
        t.is_list(arrow_type)
        or t.is_large_list(arrow_type)
        or t.is_fixed_size_list(arrow_type)
        or t.is_list_view(arrow_type)
        or t.is_large_list_view(arrow_type)
    )
