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
from s3io.settings import loose_key, spellings, unknown_option
from s3io.store import StoreConfig
from s3io.table import layout
from s3io.write.options import APPEND, OVERWRITE, WriteOptions
from spark_ext.planning.read_options import read_bucket
from spark_ext.spark_settings import SPARK_OWN_KEYS, SessionDefaults, with_session_store

# Keys Spark adds by itself, which a write ignores (its path is read on its own: ``path``).
IGNORED_LOOSE = {loose_key(k) for k in SPARK_OWN_KEYS} - {"path", "paths"}


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


def with_session_options(options: Mapping[str, str], defaults: SessionDefaults) -> dict[str, str]:
    """A write's options over the session's S3A settings for its bucket, store field by store field (as a read's
    are); the session's read settings (spark.sql.files.*, case sensitivity) are a read's, not a write's."""
    return with_session_store(options, dict(defaults.s3a), read_bucket(options))[0]


def parse_write_options(values: Mapping[str, Any], *, overwrite: bool) -> WriteTarget:
    """The target of a write from Spark's options (``path`` and the rest) and its save mode; Spark's own keys
    (``checkpointLocation``, ``queryName``, ...) are ignored."""
    given = {k: v for k, v in values.items() if loose_key(str(k)) not in IGNORED_LOOSE}
    path = next((v for k, v in given.items() if loose_key(str(k)) == "path"), None)
    if not path:
        raise InvalidConfig(
            "s3parquet write: no path; pass it to .save('s3://bucket/prefix/') (or .start(...) for a stream)"
        )
    if next((k for k in given if loose_key(str(k)) == "paths"), None) is not None:
        raise InvalidConfig("s3parquet write: one path only (.save('s3://bucket/prefix/')), not several")
    rest = {k: v for k, v in given.items() if loose_key(str(k)) not in ("path", "mode")}
    options, rest = WriteOptions.take_options(rest)
    store, rest = StoreConfig.take_options(rest)
    if rest:
        known = (*spellings(WriteOptions), *spellings(StoreConfig), "path")
        raise unknown_option(str(next(iter(rest))), known, kind="s3parquet write option")
    bucket, prefix = layout.parse_prefix(str(path))
    return WriteTarget(bucket, prefix, options.replace(mode=OVERWRITE if overwrite else APPEND), store.pinned())
