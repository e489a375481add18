"""The Hive-style directories of a partitioned write, named as Spark names them, and the split of a batch by them.

A row goes to ``<prefix>col1=v1/col2=v2/``: each value as Spark casts it to a string (integers in decimal, booleans
``true``/``false``, dates ``yyyy-MM-dd``, decimals plain, timestamps ``yyyy-MM-dd HH:mm:ss[.ffffff]`` in the
column's zone), null and the empty string as ``__HIVE_DEFAULT_PARTITION__``, and the characters Spark escapes
(``ExternalCatalogUtils.escapePathName``: control characters, ``"#%'*/:=?\\{[]^`` and DEL) as ``%XX``. The partition
columns are left out of the files, as Spark leaves them out. Floating-point, binary and nested partition columns
are refused (their text form is not one every reader parses back to the same value): cast them to string first.
"""

from __future__ import annotations

import datetime
import decimal
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from s3io.errors import InvalidConfig

HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"
_ESCAPED = frozenset([chr(c) for c in range(1, 0x20)] + list("\"#%'*/:=?\\{[]^") + ["\x7f"])


def escape_path_name(text: str) -> str:
    """Spark's (Hive's) escaping of a partition column name or value in a path."""
    return "".join(f"%{ord(c):02X}" if c in _ESCAPED else c for c in text)


def value_text(value: object) -> str | None:
    """A partition value as Spark casts it to a string (None: the null partition)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime.datetime):
        text = f"{_date_text(value)} {value.hour:02d}:{value.minute:02d}:{value.second:02d}"
        return text + (f".{value.microsecond:06d}".rstrip("0") if value.microsecond else "")
    if isinstance(value, datetime.date):
        return _date_text(value)
    if isinstance(value, decimal.Decimal):
        return format(value, "f")
    return str(value)


def _date_text(value: datetime.date) -> str:
    """``yyyy-MM-dd`` with the year zero-padded to four digits, as Spark writes it (``strftime("%Y")`` is not padded
    on Linux: year 1 would be ``1-01-01``, which Spark infers as a string)."""
    return f"{value.year:04d}-{value.month:02d}-{value.day:02d}"


def _supported(data_type: pa.DataType) -> bool:
    if pa.types.is_dictionary(data_type):
        return _supported(data_type.value_type)
    return (
        pa.types.is_string(data_type)
        or pa.types.is_large_string(data_type)
        or pa.types.is_integer(data_type)
        or pa.types.is_boolean(data_type)
        or pa.types.is_date32(data_type)
        or pa.types.is_decimal(data_type)
        or pa.types.is_timestamp(data_type)
    )


class Partitioner:
    """Splits batches of ``schema`` into the rows of each partition directory (``partition_by``, in order)."""

    def __init__(self, schema: pa.Schema, partition_by: Sequence[str]) -> None:
        self.columns = tuple(_resolve(schema, name) for name in partition_by)
        if self.columns and len(self.columns) == len(schema):
            raise InvalidConfig(
                f"partition_by: every column ({', '.join(self.columns)}) is a partition column, so the files would "
                "hold no column at all (Spark refuses this too); leave at least one column out"
            )
        for name in self.columns:
            data_type = schema.field(name).type
            if not _supported(data_type):
                raise InvalidConfig(
                    f"partition_by: column {name!r} is of type {data_type}, which is not written as a partition "
                    "directory (its text form does not read back as the same value everywhere); partition by a "
                    "string, integer, boolean, date, decimal or timestamp column, e.g. a cast of it to string"
                )
        kept = [f for f in schema if f.name not in self.columns]
        self.data_schema = pa.schema(kept, metadata=schema.metadata)

    def directory(self, values: Sequence[object]) -> str:
        """The directory (relative, ending with "/") of rows with ``values`` in the partition columns."""
        parts = []
        for name, value in zip(self.columns, values, strict=True):
            text = value_text(value)
            shown = HIVE_NULL if text is None or text == "" else escape_path_name(text)
            parts.append(f"{escape_path_name(name)}={shown}/")
        return "".join(parts)

    def split(self, batch: pa.RecordBatch) -> list[tuple[str, pa.RecordBatch]]:
        """(directory, the rows of it without the partition columns), directories in order of their values."""
        if batch.num_rows == 0:
            return []
        if not self.columns:
            return [("", batch)]
        order = pc.sort_indices(
            batch.select(list(self.columns)),
            sort_keys=[(c, "ascending") for c in self.columns],  # nulls last, pyarrow's default
        )
        ordered = batch.take(order)
        starts = _run_starts(ordered, self.columns)
        data_names = [f.name for f in self.data_schema]
        out = []
        for start, end in zip(starts, [*starts[1:], ordered.num_rows], strict=True):
            rows = ordered.slice(start, end - start)
            values = [rows.column(c)[0].as_py() for c in self.columns]
            out.append((self.directory(values), rows.select(data_names)))
        return out


def _resolve(schema: pa.Schema, name: str) -> str:
    """The schema's column ``name`` (exactly, else the one column equal but for case)."""
    if schema.get_field_index(name) >= 0:
        return name
    close = [f.name for f in schema if f.name.lower() == name.lower()]
    if len(close) == 1:
        return close[0]
    raise InvalidConfig(
        f"partition_by: no column {name!r} in the data (columns: {', '.join(schema.names)})"
        if not close
        else f"partition_by: {name!r} matches several columns ({', '.join(close)}); name one exactly"
    )


def _run_starts(ordered: pa.RecordBatch, columns: Sequence[str]) -> list[int]:
    """The first row of each run of equal partition values in a sorted batch (nulls equal to each other)."""
    n = ordered.num_rows
    if n <= 1:
        return [0]
    changed = None
    for name in columns:
        column = ordered.column(name)
        if pa.types.is_dictionary(column.type):
            column = column.cast(column.type.value_type)
        later, earlier = column.slice(1), column.slice(0, n - 1)
        differs = pc.fill_null(pc.not_equal(later, earlier), False)
        differs = pc.or_(differs, pc.not_equal(pc.is_null(later), pc.is_null(earlier)))
        changed = differs if changed is None else pc.or_(changed, differs)
    assert changed is not None
    return [0, *(i + 1 for i in pc.indices_nonzero(changed).to_pylist())]
