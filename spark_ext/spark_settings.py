"""What a Spark session's configuration says that s3parquet honours, read on the driver (``spark_ext.register``).

A Python data source is built in a Python worker that cannot read the session, so these are read when the source is
registered and travel with it (``SessionDefaults``): resolved on the driver, never re-read on executors.

- S3A's settings: the Hadoop configuration's ``fs.s3a.*`` (core-site.xml, ``spark.hadoop.fs.s3a.*`` given when the
  session started; not core-default.xml's or Spark's defaults, which nobody chose, nor the AWS_* variables Spark
  copies in, which are the environment's), then the session's own ``fs.s3a.*`` and
  ``spark.hadoop.fs.s3a.*`` (``spark.conf.set`` at run time), which win. s3io.s3a maps them onto store options.
- ``spark.sql.files.*`` (and ``spark.sql.parquet.mergeSchema``) that the built-in parquet reader honours, where the
  session sets them explicitly; ``FILE_SETTINGS`` names the read option each one is the default of.
"""

from __future__ import annotations

import logging
import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from s3io.s3a import FS_S3A, SPARK_HADOOP, S3ASettingIgnored, is_s3a_key, store_options
from s3io.store import StoreConfig
from s3io.urls import split_s3_url

log = logging.getLogger("spark_ext")

# Keys Spark itself puts among a source's options (a stream's checkpoint, a query's name, where .load/.save/.start
# point): every role ignores the ones it does not use, and none is ever an unknown option.
SPARK_OWN_KEYS = ("path", "paths", "checkpointLocation", "queryName")


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
    # the session's S3A settings (fs.s3a.<key>, value): s3a_settings below; secrets among them, so not shown
    s3a: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    files: tuple[tuple[str, str], ...] = ()  # the spark.sql.files.* settings the session sets (file_settings)


# Spark's setting -> the s3parquet option it is the default of (a read's own option wins over it).
FILE_SETTINGS = {
    "spark.sql.files.ignoreCorruptFiles": "ignoreCorruptFiles",
    "spark.sql.files.ignoreMissingFiles": "ignoreMissingFiles",
    "spark.sql.files.maxPartitionBytes": "maxPartitionBytes",
    "spark.sql.files.openCostInBytes": "openCostInBytes",
    "spark.sql.files.minPartitionNum": "minPartitionNum",
    "spark.sql.parquet.mergeSchema": "mergeSchema",
}
FILES_PREFIX = "spark.sql.files."
# Where Hadoop says a value came from, for values nobody chose: hadoop-aws's core-default.xml, Spark's defaults
# ("Set by Spark to default values"), and AWS_* variables Spark copies in ("Set by Spark on <host> from
# AWS_ACCESS_KEY_ID"): the environment, which s3io reads itself, below the session.
_NOT_CHOSEN = re.compile(r"core-default\.xml|to default values| from AWS_")


def explicit_conf(spark: Any) -> dict[str, str]:
    """The session's settings that were set (at start or since), not Spark's defaults."""
    try:
        return {str(k): str(v) for k, v in dict(spark.conf.getAll).items()}
    except Exception:  # an old or remote session: nothing to read
        return {}


def s3a_settings(spark: Any) -> dict[str, str]:
    """The session's S3A settings, ``fs.s3a.<key>`` -> value, the session's own over the Hadoop configuration's."""
    found: dict[str, str] = {}
    try:
        hadoop = spark.sparkContext._jsc.hadoopConfiguration()
        for key, value in dict(hadoop.getValByRegex(r"^fs\.s3a\.")).items():
            if not _chosen(hadoop.getPropertySources(key)):
                continue
            found[str(key)] = str(value)
    except Exception:  # Spark Connect: no JVM here
        log.debug("no Hadoop configuration to read S3A settings from", exc_info=True)
    for key, value in explicit_conf(spark).items():
        if is_s3a_key(key):
            found[key[len(SPARK_HADOOP) :] if key.lower().startswith(SPARK_HADOOP) else key] = value
    return found


def _chosen(sources: Any) -> bool:
    """Whether a Hadoop setting with these sources was set by someone (core-site.xml, spark.hadoop.*, code)."""
    return sources is None or not all(_NOT_CHOSEN.search(str(source)) for source in sources)


def file_settings(spark: Any) -> dict[str, str]:
    """The ``spark.sql.files.*`` settings s3parquet honours, where the session sets them; a ``spark.sql.files.*``
    setting it does not honour is named in a warning."""
    conf = explicit_conf(spark)
    out = {key: conf[key] for key in FILE_SETTINGS if key in conf}
    for key in conf:
        if key.startswith(FILES_PREFIX) and key not in FILE_SETTINGS:
            warnings.warn(
                S3ASettingIgnored(f"{key} is not honoured by s3parquet (it honours {', '.join(FILE_SETTINGS)})"),
                stacklevel=3,
            )
    return out


def warn_unhonoured(settings: Mapping[str, str]) -> None:
    """Name every S3A setting s3io cannot honour, once, on the driver (the reads then map them quietly)."""
    buckets = {k[len(FS_S3A) :].split(".")[1] for k in settings if k.lower().startswith(FS_S3A + "bucket.")}
    for bucket in (None, *sorted(buckets)):
        store_options(settings, bucket)


def session_store(spark: Any, url: str) -> StoreConfig:
    """The store the session's S3A settings describe for the bucket of ``url`` (over the environment's)."""
    return StoreConfig.from_s3a(s3a_settings(spark), bucket=split_s3_url(url)[0])


def quietly(settings: Mapping[str, str], bucket: str | None) -> dict[str, str]:
    """``store_options`` without its warnings (given once already, where the settings were read)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", S3ASettingIgnored)
        return store_options(settings, bucket)
