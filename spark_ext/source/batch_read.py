"""``spark.read.format("s3parquet")``: one batch read, the role the data source gives a read (spark_ext.datasource).

Where each step runs (PySpark 4.1+): Spark builds the source and calls ``schema()`` in one Python worker when
``load()`` is called, pickles the instance, and calls ``reader()``, ``pushFilters()`` and ``partitions()`` in
another for each query; ``read()`` runs in executors. The data source makes a ``BatchRead`` on the first of
``schema()`` / ``reader()``: the listing is made once per ``load()`` (by ``schema()``, like Spark's file index; by
``reader()`` when the user gave the schema) and travels inside the pickled source; footers are read once, for the
schema (one file, or all with ``mergeSchema``), and again at planning only for files large enough to split.

A Python worker has no SparkSession: the default parallelism (Spark's default ``minPartitionNum``), the
session time zone, partition type inference and case sensitivity are captured by ``spark_ext.register(spark)``;
without it (automatic registration) they are os.cpu_count(), UTC, true and false, and the options of the same
names override them. Every task checks the settings it was planned with against the running session
(``session_check``): a setting changed since fails the read instead of being silently ignored.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from pyspark.sql.datasource import DataSourceReader
from pyspark.sql.types import StructType, TimestampNTZType, TimestampType

from s3io import blocking
from s3io.s3a import FS_S3A, SPARK_HADOOP
from s3io.settings import loose_key
from s3io.table.data_files import ListedFile, listing_columns, listing_from_columns
from spark_ext.planning.hive import PartitionSpec
from spark_ext.planning.read_options import SESSION_BACKED, ReadOptions, read_bucket
from spark_ext.planning.spark_arrow_types import spark_arrow_schema
from spark_ext.source.batch_reader import S3ParquetPushdownReader, S3ParquetReader, ScanState
from spark_ext.source.driver_side import (
    bind_row_filter,
    discover,
    infer_file_schema,
    list_files,
    pin_location,
    plan_columns,
    planning_reader,
    source_schema,
    summary_files,
)
from spark_ext.source.read_client import read_client
from spark_ext.source.session_check import SessionSetting
from spark_ext.spark_settings import SPARK_OWN_KEYS, SessionDefaults, with_session_store

logger = logging.getLogger("spark_ext.source")


class BatchRead:
    """One ``spark.read...load(...)``: its options parsed, its listing made once, its schema and its reader."""

    def __init__(
        self, options: ReadOptions, session_settings: tuple[SessionSetting, ...], defaults: SessionDefaults
    ) -> None:
        self.options = options
        self.session_settings = session_settings
        self.defaults = defaults
        self._listed: tuple[ListedFile, ...] | None = None
        self._data_schema: StructType | None = None
        self._row_groups: dict[str, tuple[int, ...]] = {}

    @classmethod
    def from_spark(
        cls, options: Mapping[str, str], defaults: SessionDefaults, *, also_known: Sequence[str] = ()
    ) -> BatchRead:
        """The read Spark's options describe, the session's settings filling in what they do not set; ``also_known``:
        option names another role takes (a stream's), offered too when an option is misspelt."""
        completed, settings = with_session_defaults(without_spark_keys(options, keep=("path", "paths")), defaults)
        return cls(pin_location(ReadOptions.from_options(completed, also_known=also_known)), settings, defaults)

    def schema(self) -> StructType:
        """Data columns from the footers (a summary file or the first file, or all with mergeSchema), then the
        partition columns, as Spark's parquet reader infers them."""
        options = self.options
        listed = self._listing()
        spec = discover(listed, options)
        if self._data_schema is None:
            files = [f.info for f in spec.files]
            summaries = summary_files(listed, spec, options)

            async def infer() -> Any:
                async with read_client(options) as client:
                    return await infer_file_schema(planning_reader(client, options), files, summaries, options)

            self._data_schema, self._row_groups = blocking.run(infer())
        schema = source_schema(self._data_schema, spec, options.columns, case_sensitive=options.case_sensitive)
        bind_row_filter(options, schema, spec, self._data_schema)  # an unknown column or a bad literal fails load()
        return schema

    def reader(self, schema: StructType, *, filter_pushdown: bool) -> DataSourceReader:
        """A reader for ``schema`` (ours, or the user's: its columns are the ones read)."""
        options = self.options
        listed = self._listing()
        partitions = discover(listed, options, schema)
        row_filter, read_struct = bind_row_filter(options, schema, partitions, self._data_schema)
        columns = plan_columns(read_struct, partitions, case_sensitive=options.case_sensitive)
        state = ScanState(
            options=options,
            schema=schema,
            partitions=partitions,
            columns=replace(columns, target_schema=spark_arrow_schema(schema)),  # the filter's extra columns dropped
            row_filter=row_filter,
            default_parallelism=default_parallelism(self.defaults),
            row_groups=dict(self._row_groups),
            data_schema=self._data_schema,
            session_settings=relevant_settings(self.session_settings, partitions),
        )
        # The data source is pickled again into every task with the read function: leave the listing behind
        # (the reader has it; a second reader() call lists again and reads the footers of large files again).
        self._listed = None
        self._row_groups = {}
        return (S3ParquetPushdownReader if filter_pushdown else S3ParquetReader)(state)

    def __getstate__(self) -> dict[str, Any]:
        # Spark pickles the source from the worker that ran schema() to the one that plans: the listing travels
        # as columns (a million files pickle in a fraction of a second, not tens of seconds).
        state = self.__dict__.copy()
        if state.get("_listed") is not None:
            state["_listed"] = listing_columns(state["_listed"])
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        if state.get("_listed") is not None:
            state["_listed"] = listing_from_columns(state["_listed"])
        self.__dict__.update(state)

    def _listing(self) -> tuple[ListedFile, ...]:
        if self._listed is None:
            options = self.options

            async def listing() -> list[ListedFile]:
                async with read_client(options) as client:
                    return await list_files(client, options)

            self._listed = tuple(blocking.run(listing()))
            logger.info("s3parquet listed %d data files under %s", len(self._listed), [p.url for p in options.paths])
            # the endpoint answered: what is planned from here on (footers, tasks) keeps every retry
            self.options = replace(options, store=options.store.after_contact())
        return self._listed


def without_spark_keys(options: Mapping[str, str], *, keep: Sequence[str] = ()) -> dict[str, str]:
    """``options`` without the keys Spark adds by itself (``SPARK_OWN_KEYS``), but for those in ``keep``."""
    dropped = {loose_key(k) for k in SPARK_OWN_KEYS} - {loose_key(k) for k in keep}
    return {k: v for k, v in options.items() if loose_key(str(k)) not in dropped}


def default_parallelism(defaults: SessionDefaults) -> int:
    """Spark's default minPartitionNum: captured by register(), else the active session's, else CPU count."""
    if defaults.default_parallelism:
        return defaults.default_parallelism
    try:
        from pyspark.sql import SparkSession

        session = SparkSession.getActiveSession()
        if session is not None:
            return max(1, int(session.sparkContext.defaultParallelism))
    except Exception:  # no JVM in this process (a Python worker), or Spark Connect
        pass
    return max(1, os.cpu_count() or 1)


# S3A keys that decide which store is read and as whom, and the store field a read's own option sets instead.
_CHECKED_S3A = {
    "endpoint": "endpoint",
    "endpoint.region": "region",
    "path.style.access": "addressing",
    "aws.credentials.provider": "credentials",
    "access.key": "credentials",
    "secret.key": "credentials",
    "session.token": "credentials",
}
_SECRET_S3A = ("access.key", "secret.key", "session.token")


def with_session_defaults(
    options: Mapping[str, str], defaults: SessionDefaults
) -> tuple[dict[str, str], tuple[SessionSetting, ...]]:
    """The options, plus the session's settings where the options do not set them; and those settings, which
    each task checks against the running session (see ``session_check``).

    Store settings come, field by field, from the read's options (s3io's names, or S3A's ``fs.s3a.*``), else the
    session's S3A settings (``spark.hadoop.fs.s3a.*`` and the Hadoop configuration), else the environment
    (``AWS_*``, ``S3IO_*``: resolved where the client is made); S3A's per-bucket settings for the read's bucket."""
    out = dict(options)
    given = {loose_key(str(key)) for key in out}
    used = []
    captured = dict(defaults.settings)
    for d in SESSION_BACKED:  # the options whose default is a session setting (their declarations say which)
        if any(loose_key(spelling) in given for spelling in d.spellings):
            continue
        conf, fallback = d.spec.spark_conf, d.spec.spark_fallback
        assert conf is not None
        value = captured.get(conf, fallback)
        if value is not None:
            out[d.name] = value
        if fallback is not None:  # one that changes what a read returns: every task checks it
            used.append(SessionSetting(conf, d.name, value or ""))
    if defaults.jvm_time_zone is not None and "jvmtimezone" not in given:
        out["jvmTimeZone"] = defaults.jvm_time_zone  # not a session setting: the JVM's, fixed when it started
    bucket = read_bucket(out)
    out, chosen = with_session_store(out, dict(defaults.s3a), bucket)
    used += _s3a_checks(dict(defaults.s3a), bucket, chosen)
    return out, tuple(used)


def _s3a_checks(session: Mapping[str, str], bucket: str | None, chosen: set[str | None]) -> list[SessionSetting]:
    """The S3A settings that decide the store, as each task checks them (``spark.hadoop.fs.s3a.*``, the only form a
    task sees), unless the read's own options chose that field."""
    checks = []
    for key, field_name in _CHECKED_S3A.items():
        if field_name in chosen:
            continue
        names = [key] + ([f"bucket.{bucket}.{key}"] if bucket else [])
        for name in names:
            conf, value = SPARK_HADOOP + FS_S3A + name, session.get(FS_S3A + name)
            if key in _SECRET_S3A:
                checks.append(SessionSetting.of_secret(conf, key, value))
            else:
                checks.append(SessionSetting(conf, field_name, value or ""))
    return checks


def relevant_settings(settings: Sequence[SessionSetting], partitions: PartitionSpec) -> tuple[SessionSetting, ...]:
    """The settings that change this read's result: the time zone only with timestamp partition columns, type
    inference only with partition columns, the others (case sensitivity, rebase modes, files, store) always."""
    timestamps = any(isinstance(c.data_type, TimestampType | TimestampNTZType) for c in partitions.columns)
    drop = {
        *([] if timestamps else ["timeZone"]),
        *([] if partitions.columns else ["partitionColumnTypeInference"]),
    }
    return tuple(s for s in settings if s.option not in drop)
