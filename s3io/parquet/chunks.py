"""Which bytes of a parquet file to fetch: column-chunk ranges, row-group spans, row-group splits, pruning.

Ranges are [start, end) with an exclusive end, one per column chunk, sorted; merging neighbours is the range
engine's job. They match what pyarrow reads for a column chunk (without ``pre_buffer``), including its padding
for files from parquet-mr before 1.2.9, whose chunk sizes omit the dictionary page header (PARQUET-816).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from s3io.parquet.conversions import DEFAULT_CONVERSIONS, ReadConversions, file_adjustment, match_names
from s3io.parquet.leaves import leaf_indices, top_level_leaves
from s3io.parquet.predicates import BoundPredicate, bind, may_match_with_leaves

PARQUET_816_PADDING = 100  # pyarrow's kMaxDictHeaderSize
_PARQUET_MR_VERSION = re.compile(r"parquet-mr version (\d+)\.(\d+)\.(\d+)")


def chunk_range(metadata: pq.FileMetaData, row_group: int, leaf: int, file_size: int | None = None) -> tuple[int, int]:
    """[start, end) of one column chunk: from its dictionary page (if any) over total_compressed_size bytes."""
    column = metadata.row_group(row_group).column(leaf)
    start = column.data_page_offset
    dictionary = column.dictionary_page_offset
    if column.has_dictionary_page and dictionary is not None and 0 < dictionary < start:
        start = dictionary
    end = start + column.total_compressed_size
    if _needs_parquet_816_padding(metadata.created_by):
        end += PARQUET_816_PADDING if file_size is None else min(PARQUET_816_PADDING, max(0, file_size - end))
    return start, end


def chunk_ranges(
    metadata: pq.FileMetaData,
    row_groups: Sequence[int],
    columns: Sequence[str] | None,
    file_size: int | None = None,
) -> list[tuple[int, int]]:
    """Sorted [start, end) ranges of the chunks of the chosen top-level columns (None: all) in those row groups.

    A struct, list or map column brings all its leaves; names the file lacks are skipped. Pass ``file_size`` so
    the PARQUET-816 padding of very old files stops at the end of the file.
    """
    return _ranges(metadata, row_groups, leaf_indices(metadata, columns), file_size)


def row_group_byte_span(
    metadata: pq.FileMetaData, row_group: int, columns: Sequence[str] | None = None, file_size: int | None = None
) -> tuple[int, int]:
    """[start, end) from the first to the last byte of the row group's chosen chunks ((0, 0) when none)."""
    ranges = chunk_ranges(metadata, [row_group], columns, file_size)
    if not ranges:
        return 0, 0
    return ranges[0][0], max(end for _, end in ranges)


def row_group_bytes(metadata: pq.FileMetaData, row_group: int, columns: Sequence[str] | None = None) -> int:
    """Bytes to fetch for the row group's chosen chunks (compressed, on-disk size)."""
    return _bytes(metadata, row_group, leaf_indices(metadata, columns))


def plan_row_group_splits(
    metadata: pq.FileMetaData,
    max_split_bytes: int,
    row_groups: Iterable[int] | None = None,
    columns: Sequence[str] | None = None,
) -> list[list[int]]:
    """Consecutive row groups packed greedily into splits of at most ``max_split_bytes`` fetched bytes.

    A row group larger than the limit is a split of its own; row groups are never cut. ``row_groups`` (default:
    all) may be a pruned subset; order is kept. Sizes count only the chosen columns' chunks.
    """
    if max_split_bytes <= 0:
        raise ValueError(f"max_split_bytes must be positive, got {max_split_bytes}")
    chosen = range(metadata.num_row_groups) if row_groups is None else row_groups
    leaves = leaf_indices(metadata, columns)
    splits: list[list[int]] = []
    current: list[int] = []
    current_bytes = 0
    for rg in chosen:
        size = _bytes(metadata, rg, leaves)
        if current and current_bytes + size > max_split_bytes:
            splits.append(current)
            current, current_bytes = [], 0
        current.append(rg)
        current_bytes += size
    if current:
        splits.append(current)
    return splits


def select_row_groups(
    metadata: pq.FileMetaData,
    predicates: Iterable[Sequence[Any]] | None,
    schema: pa.Schema | None = None,
    conversions: ReadConversions = DEFAULT_CONVERSIONS,
    url: str | None = None,
) -> list[int]:
    """Indices of the row groups whose statistics do not rule out every row; ``schema`` defaults to the file's.

    Pass the read (unified) schema when there is one, so values and statistics compare in the read types, and the
    read's conversions, so a predicate finds its column as the read does (ignoring case, if names are matched so),
    and never prunes by a column whose values the conversions adjust in this file.
    """
    read_schema = schema if schema is not None else metadata.schema.to_arrow_schema()
    bound = bind(predicates, read_schema)
    if not bound:
        return list(range(metadata.num_row_groups))
    by_name = top_level_leaves(metadata)
    wanted = sorted({p.column for p in bound})
    spelled = match_names(list(by_name), wanted, conversions, url=url)  # read name -> the file's name
    adjustment = file_adjustment(conversions, metadata, url or "")
    adjusted = adjustment.columns if adjustment is not None else frozenset()
    leaf_of: dict[str, int | None] = {}
    for name in wanted:
        if name in spelled:
            leaves = by_name[spelled[name]]
            flat = len(leaves) == 1 and metadata.schema.column(leaves[0]).path == spelled[name]
            # An adjusted column's statistics bound the stored values, not the values read: they cannot prune.
            leaf_of[name] = leaves[0] if flat and spelled[name] not in adjusted else None
    stored = _stored_durations(metadata, bound, spelled)
    return [
        rg
        for rg in range(metadata.num_row_groups)
        if may_match_with_leaves(metadata.row_group(rg), bound, leaf_of, stored)
    ]


def _stored_durations(
    metadata: pq.FileMetaData, bound: Sequence[BoundPredicate], spelled: dict[str, str]
) -> dict[str, pa.DataType]:
    """The file's Arrow type of each filtered duration column: parquet stores it as a plain INT64 of that unit."""
    durations = [p.column for p in bound if pa.types.is_duration(p.column_type) and p.column in spelled]
    if not durations:
        return {}
    file_schema = metadata.schema.to_arrow_schema()
    stored = {}
    for name in durations:
        index = file_schema.get_field_index(spelled[name])
        if index >= 0 and pa.types.is_duration(file_schema.field(index).type):
            stored[name] = file_schema.field(index).type
    return stored


def _ranges(
    metadata: pq.FileMetaData, row_groups: Iterable[int], leaves: Sequence[int], file_size: int | None
) -> list[tuple[int, int]]:
    return sorted({chunk_range(metadata, rg, leaf, file_size) for rg in row_groups for leaf in leaves})


def _bytes(metadata: pq.FileMetaData, row_group: int, leaves: Sequence[int]) -> int:
    return sum(end - start for start, end in _ranges(metadata, [row_group], leaves, None))


def _needs_parquet_816_padding(created_by: str | None) -> bool:
    """pyarrow pads chunks of parquet-mr < 1.2.9 files; so must we, or it reads past what we fetched."""
    match = _PARQUET_MR_VERSION.search(created_by or "")
    return bool(match) and tuple(int(part) for part in match.groups()) < (1, 2, 9)
