"""The options of ``df.write.format("s3parquet")`` and ``df.writeStream.format("s3parquet")``: where (the path),
how to write (s3io.write.WriteOptions: partitionBy, targetFileSize, partitionOverwriteMode, compression, ...), and
the store (s3io.store.StoreConfig: endpoint, credentials, policy). Spark lower-cases the keys; an unknown one is an
error naming the known ones.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from s3io.errors import InvalidConfig
from s3io.settings import loose_key, option_spellings, unknown_option
from s3io.store import StoreConfig, store_option_names
from s3io.table import layout
from s3io.write.options import APPEND, OVERWRITE, WriteOptions

# Options Spark or this project's read side adds by itself, which a write ignores: the session settings that
# spark_ext.register captures for reads, and a stream's checkpoint location (Spark's own).
IGNORED = ("timeZone", "partitionColumnTypeInference", "caseSensitive", "datetimeRebaseMode", "int96RebaseMode")
IGNORED_LOOSE = {loose_key(k) for k in (*IGNORED, "jvmTimeZone", "checkpointLocation", "queryName")}


_WRITE_ONLY = {loose_key(name) for name in option_spellings(WriteOptions)}


def has_write_options(values: Mapping[str, Any]) -> bool:
    """Whether ``values`` name an option only a write takes (then they are not parsed as a read's)."""
    return any(loose_key(str(key)) in _WRITE_ONLY for key in values)


@dataclass(frozen=True)
class WriteTarget:
    """A write's parsed options: the directory, how to write, and the store (pinned to where the driver finds
    it, so executors write to the store the driver commits on)."""

    bucket: str
    prefix: str
    options: WriteOptions
    store: StoreConfig

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"


def parse_write_options(values: Mapping[str, Any], *, overwrite: bool) -> WriteTarget:
    """The target of a write from Spark's options (``path`` and the rest) and its save mode."""
    given = {k: v for k, v in values.items() if loose_key(str(k)) not in IGNORED_LOOSE}
    path = next((v for k, v in given.items() if loose_key(str(k)) == "path"), None)
    if not path:
        raise InvalidConfig(
            "s3parquet write: no path; pass it to .save('s3://bucket/prefix/') (or .start(...) for a stream)"
        )
    if next((k for k in given if loose_key(str(k)) == "paths"), None) is not None:
        raise InvalidConfig("s3parquet write: one path only (.save('s3://bucket/prefix/')), not several")
    rest = {k: v for k, v in given.items() if loose_key(str(k)) not in ("path", "mode")}
    options, rest = WriteOptions.from_options(rest, strict=False)
    store, rest = StoreConfig.take_options(rest)
    if rest:
        known = (*option_spellings(WriteOptions), *store_option_names(), "path")
        raise unknown_option(str(next(iter(rest))), known, kind="s3parquet write option")
    bucket, prefix = layout.parse_prefix(str(path))
    return WriteTarget(bucket, prefix, options.replace(mode=OVERWRITE if overwrite else APPEND), store.pinned())
