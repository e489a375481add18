"""Which parquet leaf columns make up each top-level column (a struct, list or map column has several)."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.parquet as pq


def leaf_count(arrow_type: pa.DataType) -> int:
    """How many parquet leaf columns store a value of ``arrow_type``."""
    if isinstance(arrow_type, pa.ExtensionType):
        return leaf_count(arrow_type.storage_type)
    if pa.types.is_struct(arrow_type):
        return sum(leaf_count(arrow_type.field(i).type) for i in range(arrow_type.num_fields))
    if pa.types.is_map(arrow_type):
        return leaf_count(arrow_type.key_type) + leaf_count(arrow_type.item_type)
    if (
        pa.types.is_list(arrow_type)
        or pa.types.is_large_list(arrow_type)
        or pa.types.is_fixed_size_list(arrow_type)
        or pa.types.is_list_view(arrow_type)
        or pa.types.is_large_list_view(arrow_type)
    ):
        return leaf_count(arrow_type.value_type)
    return 1


def top_level_leaves(metadata: pq.FileMetaData) -> dict[str, list[int]]:
    """Top-level column name -> indices of its leaf columns, in file order.

    Counts leaves per field of the file's Arrow schema (exact even for names containing dots); if that does not add
    up to the file's leaf count, falls back to the first component of each leaf's dotted path.
    """
    schema = metadata.schema.to_arrow_schema()
    counts = [leaf_count(field.type) for field in schema]
    result: dict[str, list[int]] = {}
    if sum(counts) == metadata.num_columns:
        first = 0
        for field, count in zip(schema, counts, strict=True):
            result.setdefault(field.name, []).extend(range(first, first + count))
            first += count
        return result
    for i in range(metadata.num_columns):
        result.setdefault(metadata.schema.column(i).path.split(".")[0], []).append(i)
    return result


def leaf_indices(metadata: pq.FileMetaData, columns: Sequence[str] | None) -> list[int]:
    """Sorted leaf indices of the chosen top-level columns (all leaves when ``columns`` is None).

    Unknown names are skipped, as ``pq.ParquetFile.read_row_group(columns=...)`` skips them.
    """
    if columns is None:
        return list(range(metadata.num_columns))
    by_name = top_level_leaves(metadata)
    return sorted({index for name in columns for index in by_name.get(name, ())})
