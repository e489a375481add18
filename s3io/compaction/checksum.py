"""An order-independent checksum of a table: the row count, one 64-bit sum per column, and one per row.

Each value gets a 64-bit fingerprint (below); a column's checksum is the sum, modulo 2**64, of the mixed
fingerprints of its values, so it ignores row order and file boundaries but counts every duplicate and every
missing value. The row checksum sums a mix of each row's column fingerprints (each tagged by its position),
so values moved between rows are caught too, which per-column sums alone cannot see. Mixing is splitmix64's
finalizer; everything is vectorised with numpy on Arrow buffers (no Python per value).

Fingerprints, computed on data already conformed to one schema (both sides of a comparison use the same types):
- fixed-width values (integers, floats, booleans, dates, times, timestamps, durations): their bits; every NaN
  is one canonical NaN;
- decimals, fixed-size binary, strings and binary: a polynomial hash of the bytes (base 0x100000001b3,
  modulo 2**64) mixed with the length;
- structs: the mixed sum of the children's fingerprints, each tagged with its field position;
- lists and maps (as lists of key/value structs): the mixed sum of the elements' fingerprints, each tagged
  with its position in the list, plus the length; nulls at any level have their own fingerprint.
A 64-bit sum is not cryptographic; it detects lost, duplicated and altered rows with probability ~1 - 2**-64.

How fast: a few ns per value. Strings are hashed in slices of ``_CHUNK_BYTES`` with cached power tables, so the
temporaries stay in cache and never become fresh pages to fault in; a string column whose values repeat (a sample
says so) is hashed one distinct value at a time through ``dictionary_encode``; tables are updated ``_ROWS_PER_STEP``
rows at a time for the same reason. None of this changes a fingerprint.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

U64 = np.uint64
_MASK = (1 << 64) - 1
_NULL = U64(0x9E3779B97F4A7C15)
_TAG = U64(0xD6E8FEB86659FD93)
_LEN = U64(0xA0761D6478BD642F)
_NAN = U64(0x7FF8000000000001)
_P = 0x100000001B3
_P_INV = pow(_P, -1, 1 << 64)
_CHUNK_BYTES = 1 << 16  # strings are hashed in slices of about this many bytes (temporaries stay in cache)
_POWERS_CACHED = 1 << 17  # power tables up to this length are computed once (2 x 1 MiB)
_REPEAT_SAMPLE = 4096  # values looked at to decide whether a string column repeats enough to hash via a dictionary
_ROWS_PER_STEP = 1 << 16
ROW_KEY = "__row__"


def mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer on a uint64 array (wrapping arithmetic)."""
    x = x ^ (x >> U64(30))
    x = x * U64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> U64(27))
    x = x * U64(0x94D049BB133111EB)
    return x ^ (x >> U64(31))


def fingerprints(array: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """One uint64 per value of ``array`` (see the module doc)."""
    if isinstance(array, pa.ChunkedArray):
        parts = [fingerprints(chunk) for chunk in array.chunks]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=U64)
    n = len(array)
    t = array.type
    if n == 0:
        return np.zeros(0, dtype=U64)
    if pa.types.is_null(t):
        return np.full(n, _NULL, dtype=U64)
    if pa.types.is_dictionary(t):
        return _apply_nulls(array, _take(fingerprints(array.dictionary), array.indices))
    if isinstance(t, pa.ExtensionType):
        return fingerprints(array.storage)
    if pa.types.is_string_view(t) or pa.types.is_large_string(t):
        return fingerprints(array.cast(pa.string()))
    if pa.types.is_binary_view(t) or pa.types.is_large_binary(t):
        return fingerprints(array.cast(pa.binary()))
    if pa.types.is_boolean(t):
        values = np.asarray(array.cast(pa.uint8()).fill_null(0).to_numpy(zero_copy_only=False), dtype=U64)
        out = values + U64(1)
    elif pa.types.is_floating(t):
        out = _float_bits(array)
    elif _is_fixed_int_like(t):
        out = _fixed_bits(array, t.byte_width)
    elif pa.types.is_string(t) or pa.types.is_binary(t):
        out = _strings_hash(array)
    elif pa.types.is_fixed_size_binary(t) or pa.types.is_decimal(t):
        out = _bytes_hash(array.view(pa.binary(t.byte_width)).cast(pa.binary()))
    elif pa.types.is_struct(t):
        out = _struct_hash(array)
    elif pa.types.is_map(t):
        entries = pa.struct([t.key_field, t.item_field])
        return fingerprints(array.cast(pa.list_(pa.field("entries", entries, nullable=False))))
    elif pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        out = _list_hash(array)
    elif pa.types.is_list_view(t) or pa.types.is_large_list_view(t):
        return fingerprints(array.cast(pa.list_(t.value_field)))
    else:
        out = _python_hash(array)
    return _apply_nulls(array, out)


def _is_fixed_int_like(t: pa.DataType) -> bool:
    return (
        pa.types.is_integer(t)
        or pa.types.is_date(t)
        or pa.types.is_time(t)
        or pa.types.is_timestamp(t)
        or pa.types.is_duration(t)
    )


def _tag(index: int) -> np.uint64:
    """A distinct odd-multiple constant for field / column position ``index`` (no scalar overflow warnings)."""
    return U64(((index + 1) * int(_TAG)) & _MASK)


def _apply_nulls(array: pa.Array, out: np.ndarray) -> np.ndarray:
    if array.null_count:
        nulls = np.asarray(array.is_null().to_numpy(zero_copy_only=False), dtype=bool)
        out = out.copy()
        out[nulls] = _NULL
    return out


def _fixed_bits(array: pa.Array, width: int) -> np.ndarray:
    data = array.buffers()[1]
    raw = np.frombuffer(data, dtype=np.dtype(f"<u{width}"), count=len(array) + array.offset)
    return raw[array.offset :].astype(U64)


def _float_bits(array: pa.Array) -> np.ndarray:
    width = array.type.byte_width
    data = array.buffers()[1]
    values = np.frombuffer(data, dtype=np.dtype(f"<f{width}"), count=len(array) + array.offset)[array.offset :]
    bits = values.view(np.dtype(f"<u{width}")).astype(U64)
    nan = np.isnan(values)
    if nan.any():
        bits = bits.copy()
        bits[nan] = _NAN
    return bits


def _take(values: np.ndarray, indices: pa.Array) -> np.ndarray:
    """``values`` at ``indices`` (null indices give an arbitrary value, for ``_apply_nulls`` to replace)."""
    if len(values) == 0:
        return np.zeros(len(indices), dtype=U64)
    positions = np.asarray(indices.fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)
    return values[positions]


def _strings_hash(array: pa.Array) -> np.ndarray:
    """``_bytes_hash``, through a dictionary when a sample shows the values repeat (each distinct one hashed once)."""
    if len(array) >= 4 * _REPEAT_SAMPLE:
        distinct = len(pc.unique(array.slice(0, _REPEAT_SAMPLE)))
        if distinct * 4 <= _REPEAT_SAMPLE:
            encoded = array.dictionary_encode()
            return _take(_bytes_hash(encoded.dictionary), encoded.indices)
    return _bytes_hash(array)


def _bytes_hash(array: pa.Array) -> np.ndarray:
    """Polynomial hash of each value's bytes, via prefix sums over the data buffer, in bounded slices."""
    offsets_all = np.frombuffer(array.buffers()[1], dtype="<i4", count=len(array) + array.offset + 1)
    offsets = offsets_all[array.offset :].astype(np.int64)
    data_buffer = array.buffers()[2]
    data = np.frombuffer(data_buffer, dtype=np.uint8) if data_buffer is not None else np.zeros(0, np.uint8)
    out = np.empty(len(array), dtype=U64)
    start_row = 0
    n = len(array)
    while start_row < n:
        end_row = int(np.searchsorted(offsets, offsets[start_row] + _CHUNK_BYTES, side="right")) - 1
        end_row = min(max(end_row, start_row + 1), n)
        out[start_row:end_row] = _hash_slice(data, offsets[start_row : end_row + 1])
        start_row = end_row
    return out


def _power_table(base: int, length: int) -> np.ndarray:
    """base**k modulo 2**64 for k in [0, length)."""
    table = np.empty(length, dtype=U64)
    table[0] = 1
    table[1:] = U64(base)
    return np.cumprod(table, out=table)


@functools.cache
def _cached_powers() -> tuple[np.ndarray, np.ndarray]:
    """The shared tables, read-only: every caller slices them, none may write."""
    tables = _power_table(_P, _POWERS_CACHED), _power_table(_P_INV, _POWERS_CACHED)
    for table in tables:
        table.flags.writeable = False
    return tables


def _powers(length: int) -> tuple[np.ndarray, np.ndarray]:
    """_P**k and _P**-k modulo 2**64 for k in [0, length): cached up to ``_POWERS_CACHED``."""
    if length <= _POWERS_CACHED:
        forward, inverse = _cached_powers()
        return forward[:length], inverse[:length]
    return _power_table(_P, length), _power_table(_P_INV, length)


def _hash_slice(data: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    base = int(offsets[0])
    total = int(offsets[-1]) - base
    lengths = np.diff(offsets).astype(U64)
    if total == 0:
        return mix(lengths * _LEN)
    symbols = data[base : base + total].astype(U64)
    symbols += U64(1)
    powers, inverse = _powers(total + 1)
    symbols *= powers[:total]
    prefix = np.zeros(total + 1, dtype=U64)
    np.cumsum(symbols, out=prefix[1:])
    starts = (offsets[:-1] - base).astype(np.int64)
    ends = (offsets[1:] - base).astype(np.int64)
    hashes = (prefix[ends] - prefix[starts]) * inverse[starts]
    return mix(hashes ^ mix(lengths * _LEN))


def _struct_hash(array: pa.StructArray) -> np.ndarray:
    acc = np.zeros(len(array), dtype=U64)
    for index, child in enumerate(array.flatten()):
        acc += mix(fingerprints(child) + _tag(index))
    return mix(acc)


def _list_hash(array: pa.Array) -> np.ndarray:
    values = pc.list_flatten(array)
    lengths = np.asarray(pc.list_value_length(array).fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)
    element = fingerprints(values)
    starts = np.zeros(len(lengths), dtype=np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    position = np.arange(len(element), dtype=np.int64) - np.repeat(starts, lengths)
    tagged = mix(element + (position.astype(U64) + U64(1)) * _TAG)
    prefix = np.zeros(len(tagged) + 1, dtype=U64)
    np.cumsum(tagged, out=prefix[1:])
    sums = prefix[starts + lengths] - prefix[starts]
    return mix(sums ^ mix(lengths.astype(U64) * _LEN))


def _python_hash(array: pa.Array) -> np.ndarray:
    """Fallback for types without a vectorised path (unions, ...): hash each value's repr."""
    texts = pa.array([repr(v) for v in array.to_pylist()], type=pa.string())
    return _bytes_hash(texts)


@dataclass
class TableChecksum:
    """Running checksum of record batches of one schema: ``update`` them in any order, then compare."""

    rows: int = 0
    columns: dict[str, int] = field(default_factory=dict)

    @classmethod
    def for_schema(cls, schema: pa.Schema) -> TableChecksum:
        """An empty checksum that already names every column, so zero rows compare equal to zero rows."""
        return cls(0, {name: 0 for name in [*schema.names, ROW_KEY]})

    def update(self, data: pa.RecordBatch | pa.Table) -> None:
        if data.num_rows == 0:
            for name in data.schema.names:
                self.columns.setdefault(name, 0)
            self.columns.setdefault(ROW_KEY, 0)
            return
        for start in range(0, data.num_rows, _ROWS_PER_STEP):
            step = data.slice(start, _ROWS_PER_STEP)
            row = np.zeros(step.num_rows, dtype=U64)
            for index, name in enumerate(step.schema.names):
                values = fingerprints(step.column(index))
                self.columns[name] = (self.columns.get(name, 0) + int(mix(values).sum(dtype=U64))) & _MASK
                row += mix(values ^ _tag(index))
            self.columns[ROW_KEY] = (self.columns.get(ROW_KEY, 0) + int(mix(row).sum(dtype=U64))) & _MASK
        self.rows += data.num_rows

    def digest(self) -> dict[str, str]:
        """Column name (and ``__row__``) to a 16-hex-digit checksum; JSON-friendly."""
        return {name: f"{value:016x}" for name, value in sorted(self.columns.items())}

    def differences(self, other: TableChecksum) -> list[str]:
        """What differs from ``other``, in words; empty when the two tables hold the same multiset of rows."""
        problems = []
        if self.rows != other.rows:
            problems.append(f"row count {self.rows} != {other.rows}")
        for name in sorted(set(self.columns) | set(other.columns)):
            if self.columns.get(name) != other.columns.get(name):
                label = "row checksum" if name == ROW_KEY else f"checksum of column {name!r}"
                problems.append(f"{label} differs")
        return problems


def table_checksum(data: pa.Table | pa.RecordBatch) -> TableChecksum:
    checksum = TableChecksum()
    checksum.update(data)
    return checksum
