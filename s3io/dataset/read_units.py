"""Planning a dataset read as pure functions: predicates split by column kind, partition pruning, read units.

A read unit is what one GET task fetches and the consumer decodes in one go: a whole small object, or some
consecutive row groups of a large one with the byte ranges of their selected column chunks. Units are cut by
bytes (``unit_bytes``) so a large file is fetched and decoded a few row groups at a time, never whole.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from s3io.engine.ranges import merge_ranges
from s3io.errors import CorruptFile, InvalidConfig
from s3io.parquet.chunks import chunk_ranges, plan_row_group_splits, select_row_groups
from s3io.parquet.conversions import DEFAULT_CONVERSIONS, ReadConversions
from s3io.parquet.decode import present_columns
from s3io.parquet.naming import file_error
from s3io.parquet.predicates import Predicate, to_expression, validate

Range = tuple[int, int]


@dataclass(frozen=True, slots=True)
class Predicates:
    """A validated conjunction, split into the part statistics can prune and the part partition values decide."""

    all: tuple[Predicate, ...]
    data: tuple[Predicate, ...]  # on columns of the data schema: row-group pruning
    partition: tuple[Predicate, ...]  # on partition columns: whole pieces are pruned by their values


@dataclass(frozen=True, slots=True)
class UnitPlan:
    """Consecutive row groups of one file, the ranges of their chunks, and the bytes the engine will fetch."""

    row_groups: tuple[int, ...]
    ranges: tuple[Range, ...]
    fetch_bytes: int


def combined_schema(schema: pa.Schema, partition_schema: pa.Schema | None) -> pa.Schema:
    """``schema`` then ``partition_schema``: the exact schema of every batch; names must not repeat."""
    if not isinstance(schema, pa.Schema):
        raise InvalidConfig(f"schema: expected a pyarrow.Schema, got {type(schema).__name__}")
    if partition_schema is None or len(partition_schema) == 0:
        fields = list(schema)
    else:
        if not isinstance(partition_schema, pa.Schema):
            raise InvalidConfig(f"partition_schema: expected a pyarrow.Schema, got {type(partition_schema).__name__}")
        fields = list(schema) + list(partition_schema)
    names = [field.name for field in fields]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise InvalidConfig(
            f"column names must be unique across the data and partition schemas; repeated: {', '.join(duplicates)}"
        )
    return pa.schema(fields)


def split_predicates(
    predicates: Sequence[Sequence[Any]] | None, schema: pa.Schema, partition_schema: pa.Schema | None
) -> Predicates:
    """Validate ``predicates`` against the batch schema (InvalidConfig lists the columns) and split them."""
    full = combined_schema(schema, partition_schema)
    normalized = tuple(validate(predicates, full))
    data_names = set(schema.names)
    data = tuple(p for p in normalized if p[0] in data_names)
    partition = tuple(p for p in normalized if p[0] not in data_names)
    return Predicates(normalized, data, partition)


def partition_row(values: Sequence[object], partition_schema: pa.Schema, url: str) -> list[pa.Array]:
    """One-element arrays of a piece's partition values, typed by ``partition_schema``."""
    if len(values) != len(partition_schema):
        raise file_error(
            InvalidConfig,
            f"{len(values)} partition values for {len(partition_schema)} partition columns "
            f"({', '.join(partition_schema.names)})",
            url,
        )
    arrays = []
    for value, field in zip(values, partition_schema, strict=True):
        try:
            if isinstance(value, pa.Scalar):
                scalar = value.cast(field.type)
            else:
                try:
                    scalar = pa.scalar(value, type=field.type)
                except (pa.ArrowException, TypeError, ValueError):
                    scalar = pa.scalar(value).cast(field.type)
        except (pa.ArrowException, TypeError, ValueError) as exc:
            message = f"partition value {value!r} of column {field.name!r} is not a {field.type}"
            raise file_error(InvalidConfig, message, url, cause=exc) from exc
        arrays.append(_one(scalar))
    return arrays


def _one(scalar: pa.Scalar) -> pa.Array:
    return pa.array([scalar], type=scalar.type) if scalar.is_valid else pa.nulls(1, scalar.type)


def partition_matches(row: Sequence[pa.Array], partition_schema: pa.Schema, predicates: Predicates) -> bool:
    """Whether a piece with these partition values can hold a matching row (False prunes the whole piece)."""
    if not predicates.partition:
        return True
    table = pa.Table.from_arrays(list(row), schema=partition_schema)
    return table.filter(to_expression(predicates.partition, partition_schema)).num_rows > 0


def select_groups(
    metadata: pq.FileMetaData,
    wanted: Sequence[int] | None,
    predicates: Predicates,
    schema: pa.Schema,
    url: str,
    conversions: ReadConversions = DEFAULT_CONVERSIONS,
) -> list[int]:
    """The piece's row groups (all when ``wanted`` is None) that statistics do not rule out, in file order."""
    if wanted is not None:
        bad = [rg for rg in wanted if not (isinstance(rg, int) and 0 <= rg < metadata.num_row_groups)]
        if bad:
            message = f"row groups {bad} do not exist (the file has {metadata.num_row_groups})"
            raise file_error(InvalidConfig, message, url)
    survivors = select_row_groups(metadata, predicates.data, schema, conversions, url) if predicates.data else None
    if wanted is None:
        return survivors if survivors is not None else list(range(metadata.num_row_groups))
    keep = set(survivors) if survivors is not None else None
    return [rg for rg in dict.fromkeys(wanted) if keep is None or rg in keep]


def plan_units(
    metadata: pq.FileMetaData,
    size: int,
    row_groups: Sequence[int],
    columns: Sequence[str],
    *,
    unit_bytes: int,
    coalesce_gap: int,
    url: str,
) -> list[UnitPlan]:
    """Read units of a large file: consecutive row groups packed up to ``unit_bytes`` of chunk bytes each.

    Chunk ranges that do not fit in the object mean a corrupt footer: CorruptFile naming the file.
    """
    wanted = present_columns(metadata, columns) or []
    units = []
    for split in plan_row_group_splits(metadata, unit_bytes, row_groups, wanted):
        ranges = chunk_ranges(metadata, split, wanted, size) if wanted else []
        for start, end in ranges:
            if start < 0 or end > size or end < start:
                message = f"column chunk [{start}, {end}) lies outside the file ({size} bytes): corrupt footer"
                raise file_error(CorruptFile, message, url)
        merged = merge_ranges(ranges, coalesce_gap)
        fetch = sum(end - start for start, end in merged)
        units.append(UnitPlan(tuple(split), tuple(ranges), fetch))
    return units
