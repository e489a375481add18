"""Session settings a read was planned with, checked against the session's settings when its tasks run.

A Python data source cannot read the session's configuration when ``load()`` runs, so ``spark_ext.register``
captures the time zone, partition type inference and case sensitivity, and they travel with every read. A later
``spark.conf.set(...)`` would be silently ignored; instead each task compares what the read used with the
settings Spark propagates to its tasks (explicitly set SQL settings arrive as local properties) and fails, naming
the setting, when they differ in a way that changes the result. A setting given as an option is never checked:
the option is what the user asked for.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from s3io.errors import S3IOError

_UTC_NAMES = frozenset({"utc", "z", "gmt", "etc/utc", "etc/gmt", "etc/universal", "universal", "+00:00", "-00:00"})


class SessionSettingChanged(S3IOError, ValueError):
    """The session's setting differs from the one the read was planned with; the message says how to fix it."""


@dataclass(frozen=True, slots=True)
class SessionSetting:
    """A session setting the read used: its Spark key, the option that overrides it, and the value used ("": none;
    a ``secret`` one is kept as a digest, never as itself)."""

    conf: str
    option: str
    used: str
    secret: bool = False

    @classmethod
    def of_secret(cls, conf: str, option: str, value: str | None) -> SessionSetting:
        return cls(conf, option, digest(value) if value else "", secret=True)

    def matches(self, current: str) -> bool:
        if self.secret:
            return self.used == (digest(current) if current else "")
        a, b = self.used.strip().lower(), current.strip().lower()
        return a == b or (a in _UTC_NAMES and b in _UTC_NAMES)


def digest(value: str) -> str:
    """A short digest of a secret: tells a changed value from the one used, and reveals nothing of it."""
    return hashlib.sha256(value.encode()).hexdigest()[:16]


def check_session(settings: Sequence[SessionSetting], local_property: Callable[[str], str | None]) -> None:
    """Raise SessionSettingChanged for the first setting the running session has set to another value."""
    for setting in settings:
        current = local_property(setting.conf)
        if current is not None and not setting.matches(current) and setting.secret:
            raise SessionSettingChanged(
                f"{setting.conf} is set in the session to another value than this read was planned with (captured "
                "by spark_ext.register): call spark_ext.register(spark) again after changing it and load the "
                f"DataFrame again, or pass .option({setting.option!r}, ...) for this read"
            )
        if current is not None and not setting.matches(current):
            raise SessionSettingChanged(
                f"{setting.conf} is {current!r} in the session but this read was planned with "
                f"{setting.used or '(not set)'!r} "
                f"(captured by spark_ext.register, or the default): the result would not be what Spark's parquet "
                f"reader returns. Call spark_ext.register(spark) again after changing the setting and load the "
                f"DataFrame again, or pass .option({setting.option!r}, ...) to choose the value for this read"
            )


def task_local_property(key: str) -> str | None:
    """The running Spark task's local property ``key`` (None outside a task)."""
    from pyspark import TaskContext

    context = TaskContext.get()
    return context.getLocalProperty(key) if context is not None else None
