"""``spark.read.format("s3parquet")``: a Spark Python data source reading parquet from S3 through s3io.

Where each step runs (PySpark 4.1+): Spark builds the source and calls ``schema()`` in one Python worker when
``load()`` is called, pickles the instance, and calls ``reader()``, ``pushFilters()`` and ``partitions()`` in
another for each query; ``read()`` runs in executors. So the listing is made once per ``load()`` (by ``schema()``,
like Spark's file index; by ``reader()`` when the user gave the schema) and travels inside the pickled source;
footers are read once, for the schema (one file, or all with ``mergeSchema``), and again at planning only for
files large enough to split. A write (``df.write.format("s3parquet")``) builds the source too, in Spark's
write worker, and then asks for ``writer()`` or ``streamWriter()`` (spark_ext.writer): its options are a write's,
so then nothing of the read side is parsed or listed (``_made_for_a_write``).

A Python worker has no SparkSession: the default parallelism (Spark's default ``minPartitionNum``), the
session time zone, partition type inference and case sensitivity are captured by ``spark_ext.register(spark)``;
without it (automatic registration) they are os.cpu_count(), UTC, true and false, and the options of the same
names override them. Every task checks the settings it was planned with against the running session
(``session_check``): a setting changed since fails the read instead of being silently ignored.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType, TimestampNTZType, TimestampType

from s3io import blocking
from s3io.errors import InvalidConfig
from s3io.s3a import FS_S3A, SPARK_HADOOP, is_s3a_key, store_options
from s3io.settings import loose_key
from s3io.store import layered_options, store_field
from s3io.table.data_files import ListedFile, listing_columns, listing_from_columns
from spark_ext.planning.hive import PartitionSpec
from spark_ext.planning.read_options import ReadOptions, read_bucket, redact
from spark_ext.source.batch_reader import S3ParquetPushdownReader, S3ParquetReader, ScanState
from spark_ext.source.driver_side import (
    bind_row_filter,
    discover,
    infer_file_schema,
    list_files,
    make_client,
    pin_location,
    plan_columns,
    planning_reader,
    source_schema,
    summary_files,
)
from spark_ext.source.session_check import SessionSetting
from spark_ext.source.spark_arrow_types import spark_arrow_schema
from spark_ext.source.user_errors import spark_facing
from spark_ext.spark_settings import FILE_SETTINGS, quietly
from spark_ext.stream.stream_options import KNOWN_STREAM_OPTIONS, StreamOptions, has_stream_options
from spark_ext.writer.options import has_write_options

NAME = "s3parquet"
logger = logging.getLogger("spark_ext.source")


@dataclass(frozen=True)
class SessionDefaults:
    """Session settings a Python worker cannot read, captured on the driver by ``spark_ext.register``."""

    default_parallelism: int | None = None  # sparkContext.defaultParallelism
    time_zone: str | None = None  # spark.sql.session.timeZone
    partition_column_type_inference: bool | None = None  # spark.sql.sources.partitionColumnTypeInference.enabled
    case_sensitive: bool | None = None  # spark.sql.caseSensitive
    datetime_rebase_mode: str | None = None  # spark.sql.parquet.datetimeRebaseModeInRead
    int96_rebase_mode: str | None = None  # spark.sql.parquet.int96RebaseModeInRead
    jvm_time_zone: str | None = None  # the driver JVM's default time zone (legacy timestamps are rebased in it)
    # the session's S3A settings (fs.s3a.<key>, value): spark_ext.spark_settings; secrets among them, so not shown
    s3a: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    files: tuple[tuple[str, str], ...] = ()  # the spark.sql.files.* settings the session sets (spark_settings)


class S3ParquetDataSource(DataSource):
    """Parquet files on S3 as a DataFrame: ``spark.read.format("s3parquet").load("s3://bucket/table/")``.

    Options (case-insensitive; unknown ones are errors listing the known ones) are those of
    ``spark_ext.planning.read_options``: Spark's file-source options (basePath, recursiveFileLookup, pathGlobFilter,
    ignoreMissingFiles, ignoreCorruptFiles, mergeSchema, maxPartitionBytes, openCostInBytes, minPartitionNum),
    ``columns`` (read only these), S3 settings (endpoint, region, pathStyle, anonymous, credentials) and every
    s3io policy and range-engine field (connectTimeout, stallTimeout, maxAttempts, maxConcurrency, ...).
    """

    session_defaults: ClassVar[SessionDefaults] = SessionDefaults()
    filter_pushdown: ClassVar[bool] = False  # see spark_ext.register: PySpark 4.3 reuses stale pushed plans

    @classmethod
    def name(cls) -> str:
        return NAME

    @spark_facing
    def __init__(self, options: Mapping[str, str]) -> None:
        super().__init__(options)  # type: ignore[arg-type]
        completed, self.session_settings = with_session_defaults(options, self.session_defaults)
        self._completed = completed
        self.stream_options: StreamOptions | None = None
        self._listed: tuple[ListedFile, ...] | None = None
        self._data_schema: StructType | None = None
        self._row_groups: dict[str, tuple[int, ...]] = {}
        self._read_options: ReadOptions | None = None
        if has_stream_options(completed):  # readStream: its state, not a listing, decides what is read
            self.stream_options = _stream_options(completed)
            self._read_options = self.stream_options.read
        elif not (has_write_options(completed) or _made_for_a_write()):
            self._read_options = self._parsed_read_options()
            self._listing()  # at load(), as Spark lists files when the DataFrame is created
            # the endpoint answered: what is planned from here on (footers, tasks) keeps every retry
            self._read_options = replace(self._read_options, store=self._read_options.store.after_contact())

    def _parsed_read_options(self) -> ReadOptions:
        return pin_location(ReadOptions.from_options(self._completed, also_known=KNOWN_STREAM_OPTIONS))

    @property
    def read_options(self) -> ReadOptions:
        """The options of a read, parsed on first use (a write's options are not a read's)."""
        if self._read_options is None:
            self._read_options = self._parsed_read_options()
        return self._read_options

    def __repr__(self) -> str:
        return f"{type(self).__name__}({redact(dict(self.options))!r})"

    @spark_facing
    def schema(self) -> StructType:
        """Data columns from the footers (a summary file or the first file, or all with mergeSchema), then the
        partition columns, as Spark's parquet reader infers them. A stream keeps the schema it first inferred."""
        if self.stream_options is not None:
            from spark_ext.stream.stream_schema import stream_schema  # spark_ext.stream builds on this package

            return stream_schema(self.stream_options, self._infer_schema)
        return self._infer_schema()

    def _infer_schema(self) -> StructType:
        options = self.read_options
        listed = self._listing()
        spec = discover(listed, options)
        if self._data_schema is None:
            files = [f.info for f in spec.files]
            summaries = summary_files(listed, spec, options)

            async def infer() -> Any:
                async with make_client(options) as client:
                    return await infer_file_schema(planning_reader(client, options), files, summaries, options)

            self._data_schema, self._row_groups = blocking.run(infer())
        schema = source_schema(self._data_schema, spec, options.columns, case_sensitive=options.case_sensitive)
        bind_row_filter(options, schema, spec, self._data_schema)  # an unknown column or a bad literal fails load()
        return schema

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

    @spark_facing
    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        """The writer of ``df.write.format("s3parquet").mode(...).save(path)`` (spark_ext.writer.batch)."""
        from spark_ext.writer.batch import batch_writer  # the write side builds on s3io.write

        return batch_writer(self._write_options(), schema, overwrite, self.session_defaults.time_zone)

    @spark_facing
    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        """The sink of ``df.writeStream.format("s3parquet").start(path)`` (spark_ext.writer.stream)."""
        from spark_ext.writer.batch import stream_sink

        return stream_sink(self._write_options(), schema, overwrite, self.session_defaults.time_zone)

    def _write_options(self) -> dict[str, str]:
        """A write's options over the session's S3A settings for its bucket, store field by store field (as a read's
        are: ``with_session_defaults``); the session's read settings (spark.sql.files.*, case sensitivity) are a
        read's, not a write's."""
        options = dict(self.options)
        own_s3a = {k: v for k, v in options.items() if is_s3a_key(k)}
        out = {k: v for k, v in options.items() if not is_s3a_key(k)}
        bucket = read_bucket(out)
        return layered_options(quietly(dict(self.session_defaults.s3a), bucket), store_options(own_s3a, bucket), out)

    @spark_facing
    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """A stream reader for ``schema`` (see spark_ext.stream.stream_reader); ``streamName`` is required."""
        from spark_ext.stream.stream_reader import S3ParquetStreamReader  # the stream reader builds on this package

        options = self.stream_options or _stream_options(self._completed)
        return S3ParquetStreamReader(
            options,
            schema,
            default_parallelism=self.default_parallelism(),
            session_settings=tuple(s for s in self.session_settings if s.option == "caseSensitive"),
        )

    @spark_facing
    def reader(self, schema: StructType) -> DataSourceReader:
        """A reader for ``schema`` (ours, or the user's: its columns are the ones read)."""
        if self.stream_options is not None:
            raise InvalidConfig(
                "options streamName/stateLocation/maxFilesPerTrigger/... are for spark.readStream; a batch read "
                "(spark.read) takes none of them"
            )
        options = self.read_options
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
            default_parallelism=self.default_parallelism(),
            row_groups=dict(self._row_groups),
            data_schema=self._data_schema,
            session_settings=relevant_settings(self.session_settings, partitions),
        )
        # This instance is pickled again into every task with the read function: leave the listing behind
        # (the reader has it; a second reader() call lists again and reads the footers of large files again).
        self._listed = None
        self._row_groups = {}
        return (S3ParquetPushdownReader if self.filter_pushdown else S3ParquetReader)(state)

    @classmethod
    def default_parallelism(cls) -> int:
        """Spark's default minPartitionNum: captured by register(), else the active session's, else CPU count."""
        captured = cls.session_defaults.default_parallelism
        if captured:
            return captured
        try:
            from pyspark.sql import SparkSession

            session = SparkSession.getActiveSession()
            if session is not None:
                return max(1, int(session.sparkContext.defaultParallelism))
        except Exception:  # no JVM in this process (a Python worker), or Spark Connect
            pass
        return max(1, os.cpu_count() or 1)

    def _listing(self) -> tuple[ListedFile, ...]:
        if self._listed is None:
            options = self.read_options

            async def listing() -> list[ListedFile]:
                async with make_client(options) as client:
                    return await list_files(client, options)

            self._listed = tuple(blocking.run(listing()))
            logger.info("s3parquet listed %d data files under %s", len(self._listed), [p.url for p in options.paths])
        return self._listed


SPARK_WRITE_WORKERS = ("pyspark.sql.worker.write_into_data_source",)  # where PySpark 4.x builds a source to write


def _made_for_a_write(depth: int = 6) -> bool:
    """Whether Spark's write worker is building this source (its caller's module, a few frames up): the source
    then lists nothing (a write's target may not exist yet). Anywhere else the source is a read's."""
    frame = sys._getframe(1)
    for _ in range(depth):
        if frame is None:
            return False
        if frame.f_globals.get("__name__") in SPARK_WRITE_WORKERS:
            return True
        frame = frame.f_back
    return False


def _stream_options(options: Mapping[str, str]) -> StreamOptions:
    """A stream's options, its reads pinned to where this process (the driver) finds S3 (``pin_location``)."""
    parsed = StreamOptions.from_options(options)
    return replace(parsed, read=pin_location(parsed.read))


_SESSION_SETTINGS = (  # (option, Spark setting, SessionDefaults field, the value without register())
    ("timeZone", "spark.sql.session.timeZone", "time_zone", "UTC"),
    (
        "partitionColumnTypeInference",
        "spark.sql.sources.partitionColumnTypeInference.enabled",
        "partition_column_type_inference",
        "true",
    ),
    ("caseSensitive", "spark.sql.caseSensitive", "case_sensitive", "false"),
    ("datetimeRebaseMode", "spark.sql.parquet.datetimeRebaseModeInRead", "datetime_rebase_mode", "CORRECTED"),
    ("int96RebaseMode", "spark.sql.parquet.int96RebaseModeInRead", "int96_rebase_mode", "CORRECTED"),
)


# The session's settings that change what a read returns, each checked by every task (a read option wins over it).
_CHECKED_FILE_OPTIONS = {"ignoreCorruptFiles": "false", "ignoreMissingFiles": "false", "mergeSchema": "false"}
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
    own_s3a = {k: v for k, v in options.items() if is_s3a_key(k)}
    out = {k: v for k, v in options.items() if not is_s3a_key(k)}
    given = {loose_key(key) for key in out}
    used = []
    for option, conf, attribute, fallback in _SESSION_SETTINGS:
        if option.lower() in given:
            continue
        captured = getattr(defaults, attribute)
        value = fallback if captured is None else str(captured).lower() if isinstance(captured, bool) else captured
        out[option] = value
        used.append(SessionSetting(conf, option, value))
    if defaults.jvm_time_zone is not None and "jvmtimezone" not in given:
        out["jvmTimeZone"] = defaults.jvm_time_zone  # not a session setting: the JVM's, fixed when it started
    files = dict(defaults.files)
    for conf, option in FILE_SETTINGS.items():
        if option.lower() in given:
            continue
        if conf in files:
            out[option] = files[conf]
        if option in _CHECKED_FILE_OPTIONS:
            used.append(SessionSetting(conf, option, files.get(conf, _CHECKED_FILE_OPTIONS[option])))
    bucket = read_bucket(out)
    own = store_options(own_s3a, bucket)
    chosen = {store_field(k) for k in (*out, *own)}
    out = layered_options(quietly(dict(defaults.s3a), bucket), own, out)
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


def bound_to_session(
    defaults: SessionDefaults, *, filter_pushdown: bool = False, base: type[S3ParquetDataSource] = S3ParquetDataSource
) -> type[S3ParquetDataSource]:
    """A subclass carrying a session's defaults. Its qualified name is not importable, so cloudpickle ships it
    by value (with the defaults) to the Python workers, where the base class is imported by reference."""
    return type(
        base.__name__,
        (base,),
        {
            "session_defaults": defaults,
            "filter_pushdown": filter_pushdown,
            "__module__": base.__module__,
            "__qualname__": f"{base.__qualname__}.<session>",
            "__doc__": base.__doc__,
        },
    )
