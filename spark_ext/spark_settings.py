"""What a Spark session's configuration says that s3parquet honours, read on the driver (``spark_ext.register``).

A Python data source is built in a Python worker that cannot read the session, so these are read when the source is
registered and travel with it (``SessionDefaults``): resolved on the driver, never re-read on executors.

- S3A's settings: the Hadoop configuration's ``fs.s3a.*`` (core-site.xml, ``spark.hadoop.fs.s3a.*`` given when the
  session started; not core-default.xml's or Spark's defaults, which nobody chose, nor the AWS_* variables Spark
  copies in, which are the environment's), then the session's own ``fs.s3a.*`` and
  ``spark.hadoop.fs.s3a.*`` (``spark.conf.set`` at run time), which win. s3io.s3a maps them onto store options.
- the Spark settings a read option declares as its default (``spark_conf`` in its declaration: the session time zone,
  case sensitivity, ``spark.sql.files.*``, ...: ``planning.read_options.SESSION_BACKED``): ``session_settings``
  captures them, the session's value where the option declares a fallback (and every task checks it), else only
  where the session sets it explicitly (``spark.sql.files.openCostInBytes``: Spark's default is not s3parquet's).
"""

from __future__ import annotations

import logging
import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from s3io.errors import InvalidConfig
from s3io.s3a import FS_S3A, SPARK_HADOOP, S3ASettingIgnored, is_s3a_key
from s3io.settings import Declared
from s3io.store import StoreConfig, layered_options, s3a_store_options, store_field
from s3io.urls import split_s3_url

log = logging.getLogger("spark_ext")

# Keys Spark itself puts among a source's options (a stream's checkpoint, a query's name, where .load/.save/.start
# point): every role ignores the ones it does not use, and none is ever an unknown option.
SPARK_OWN_KEYS = ("path", "paths", "checkpointLocation", "queryName")


TIME_ZONE = "spark.sql.session.timeZone"


@dataclass(frozen=True)
class SessionDefaults:
    """Session settings a Python worker cannot read, captured on the driver by ``spark_ext.register``."""

    default_parallelism: int | None = None  # sparkContext.defaultParallelism
    jvm_time_zone: str | None = None  # the driver JVM's default time zone (legacy timestamps are rebased in it)
    # the Spark settings read options default to (Spark key, value): session_settings below
    settings: tuple[tuple[str, str], ...] = ()
    # the session's S3A settings (fs.s3a.<key>, value): s3a_settings below; secrets among them, so not shown
    s3a: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    @property
    def time_zone(self) -> str | None:
        """The session time zone captured (None: unknown)."""
        return dict(self.settings).get(TIME_ZONE)


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


def session_settings(spark: Any, backed: tuple[Declared, ...]) -> dict[str, str]:
    """The Spark settings that the options ``backed`` declare as their defaults (``spark_conf``), as the session has
    them: its value where the option declares a fallback, else only where the session sets it; a value the option
    does not take is left out (the fallback then holds). A ``spark.sql.files.*`` setting no option declares is named
    in a warning."""
    conf = explicit_conf(spark)
    found: dict[str, str] = {}
    for d in backed:
        key = d.spec.spark_conf
        assert key is not None
        value = conf.get(key) if d.spec.spark_fallback is None else _effective(spark, key)
        if value is None:
            continue
        try:
            d.spec.parse(value, key)
        except (InvalidConfig, ValueError):
            log.debug("%s=%r: not a value of option %s; its fallback holds", key, value, d.name)
            continue
        found[key] = value
    declared = {d.spec.spark_conf for d in backed}
    for key in conf:
        if key.startswith(FILES_PREFIX) and key not in declared:
            honoured = ", ".join(sorted(k for k in declared if k and k.startswith(FILES_PREFIX)))
            warnings.warn(
                S3ASettingIgnored(f"{key} is not honoured by s3parquet (it honours {honoured})"), stacklevel=3
            )
    return found


def _effective(spark: Any, key: str) -> str | None:
    """The session's value of ``key`` (Spark's default included), or None where it has none or cannot say."""
    try:
        value = spark.conf.get(key, None)
    except Exception:  # an old or remote session
        return None
    return str(value) if value not in (None, "") else None


def warn_unhonoured(settings: Mapping[str, str]) -> None:
    """Name every S3A setting s3io cannot honour, once, on the driver (the reads then map them quietly)."""
    buckets = {k[len(FS_S3A) :].split(".")[1] for k in settings if k.lower().startswith(FS_S3A + "bucket.")}
    for bucket in (None, *sorted(buckets)):
        s3a_store_options(settings, bucket)


def session_store(spark: Any, url: str) -> StoreConfig:
    """The store the session's S3A settings describe for the bucket of ``url`` (over the environment's)."""
    return StoreConfig.from_s3a(s3a_settings(spark), bucket=split_s3_url(url)[0])


def quietly(settings: Mapping[str, str], bucket: str | None) -> dict[str, str]:
    """``s3a_store_options`` without its warnings (given once already, where the settings were read)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", S3ASettingIgnored)
        return s3a_store_options(settings, bucket)


def with_session_store(
    options: Mapping[str, str], session_s3a: Mapping[str, str], bucket: str | None
) -> tuple[dict[str, str], set[str | None]]:
    """A read's or a write's options over the session's S3A settings for ``bucket``, store field by store field: the
    options' own store settings (s3io's names, or S3A's ``fs.s3a.*``), else the session's S3A settings, else the
    environment (resolved where the client is made); and the store fields the options set themselves."""
    own_s3a = {k: v for k, v in options.items() if is_s3a_key(k)}
    out = {k: v for k, v in options.items() if not is_s3a_key(k)}
    own = s3a_store_options(own_s3a, bucket)
    chosen = {store_field(k) for k in (*out, *own)}
    return layered_options(quietly(session_s3a, bucket), own, out), chosen
