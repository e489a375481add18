"""What ``spark_ext.register`` changes on the driver: ``DataFrameWriter.save`` and ``DataStreamWriter.start`` of
s3parquet say what works instead of ``.partitionBy(...)`` and put the cause first, and so does a task's
``PythonException`` whose worker error is an s3io one.

``.partitionBy``: PySpark 4.3 fails such a write inside the JVM, before any of the source's code runs, with "The
provided partitioning or clustering columns do not match the existing table's" (a Python data source declares no
partitioning, and ``PythonWrite`` cannot take one). The wrapper raises InvalidConfig naming the way that works
(``.option("partitionBy", "day,region")`` or ``spark_ext.write``).

The cause first: a failed write reaches the driver as Py4J's ``Writing job failed`` over ~150 lines of JVM stack,
the s3io error on line ~65 (measured, PySpark 4.3). The wrapper raises ``SparkWriteFailed``, whose message is the
s3io error's own line (the object named), from Spark's exception (its ``__cause__``: the full story, printed
under it). A write whose commit point was passed says so first (``WriteIsCommitted``). Nothing else of Spark's
writers changes; installing twice installs once.

A task's failure (``df.collect()`` of a read whose file was truncated or deleted after planning): PySpark raises
the ``PythonException`` it builds from the JVM's, whose ``__str__`` is ``f"{msg}:\n{traceback}"`` with ``msg``
fixed by the JVM (``BasePythonRunner.ReaderIterator.handlePythonException``: "An exception was thrown from the
Python worker"; pyspark/errors/exceptions/captured.py, ``PythonException.__str__``), so nothing a worker raises
comes before that header. ``install`` wraps that ``__str__``: when the worker's error is an s3io (or spark_ext) one,
its own line comes first and Spark's header after the rest of it; every other PythonException reads as before.
"""

from __future__ import annotations

import functools
import re
from typing import Any

from s3io.errors import InvalidConfig, S3IOError

NAME = "s3parquet"
SPARK_REFUSAL = "partitioning or clustering columns do not match"
HINT = (
    "s3parquet: Spark does not pass .partitionBy(...) to a Python data source (it fails the write with 'The "
    "provided partitioning or clustering columns do not match the existing table's'); give the partition columns "
    "as an option instead: .option('partitionBy', 'day,region'), or use spark_ext.write(df, url, "
    "partition_by=[...]), which also rebalances the rows into right-sized files"
)
# Where Spark quotes a Python worker's error in its own message (with hideTraceback, the error's line follows).
_QUOTED = re.compile(
    r"(?:An exception was thrown from the Python worker|Failed to commit or abort Python data source write"
    r"|Failed to create Python data source instance|Failed to initialize Python data source writer)"
    r": (?P<line>(?:s3io|spark_ext)\.[\w.]+: .*)"
)
# A traceback's last line (hideTraceback off): the error's own line.
_RAISED = re.compile(r"^(?P<line>(?:s3io|spark_ext)\.[\w.]+: .*)$", re.MULTILINE)
_COMMITTED = "WriteIsCommitted"
TRACEBACK_HEADER = "Traceback (most recent call last):"
HIDE_TRACEBACK_CONF = "spark.sql.execution.pyspark.udf.hideTraceback.enabled"  # as spark_ext.HIDE_TRACEBACK_CONF


class SparkWriteFailed(S3IOError):
    """A Spark write of s3parquet failed: the s3io error it failed with, as its first line; Spark's own exception
    (the JVM's stack, the worker's traceback) is its ``__cause__``."""


def cause_line(message: str) -> str | None:
    """The s3io error's own line in a Spark exception's message: a commit that passed its commit point first,
    else the first error Spark quotes; None when the message holds none."""
    lines = [m.group("line").strip() for m in _QUOTED.finditer(message)]
    lines += [m.group("line").strip() for m in _RAISED.finditer(message)]
    committed = [line for line in lines if _COMMITTED in line.split(":", 1)[0]]
    found = committed or lines
    return found[0] if found else None


def worker_error_first(header: str, traceback: str) -> str | None:
    """A Python worker's error as a task failure should read: the s3io error's own line first (the object named),
    then the rest of what the worker sent, then Spark's ``header``; None when the worker's error is not ours.

    ``traceback`` is the worker's report: the exception's own lines (hideTraceback on) or a whole traceback (off),
    whose last s3io line is the error raised (the ones above it are its causes)."""
    text = traceback.strip()
    if text.startswith(TRACEBACK_HEADER):
        raised = _RAISED.findall(text)
        return f"{raised[-1].strip()}\n{header}:\n{text}" if raised else None
    if _RAISED.match(text) is None:
        return None
    return f"{text}\n({header}; set {HIDE_TRACEBACK_CONF}=false for its traceback)"


def _install_worker_errors() -> None:
    """Wrap PySpark's ``PythonException.__str__`` (once): an s3io error from a worker reads cause first."""
    from pyspark.errors.exceptions.captured import PythonException

    if getattr(PythonException, "_s3io_cause_first", False):
        return
    original = PythonException.__str__

    @functools.wraps(original)
    def cause_first(self: Any) -> str:
        try:
            parameters = self.getMessageParameters()
            shaped = worker_error_first(parameters["msg"], parameters["traceback"]) if parameters else None
        except Exception:  # no JVM any more, a message without these parameters: PySpark's own text
            shaped = None
        return shaped if shaped is not None else original(self)

    PythonException.__str__ = cause_first  # type: ignore[method-assign]
    PythonException._s3io_cause_first = True  # type: ignore[attr-defined]


def _ours(writer: Any, given: str | None) -> bool:
    source = given or getattr(writer, "_s3io_format", None)
    return isinstance(source, str) and source.lower() == NAME


def install() -> None:
    """Wrap ``DataFrameWriter.format`` and ``.save``, ``DataStreamWriter.format`` and ``.start``, and
    ``PythonException.__str__`` (once)."""
    from pyspark.sql.readwriter import DataFrameWriter
    from pyspark.sql.streaming.readwriter import DataStreamWriter

    _install_worker_errors()
    for cls, action in ((DataFrameWriter, "save"), (DataStreamWriter, "start")):
        if getattr(cls, "_s3io_save_calls", False):
            continue
        original_format, original_action = cls.format, getattr(cls, action)

        @functools.wraps(original_format)
        def remembering_format(self: Any, source: str, _format: Any = original_format) -> Any:
            self._s3io_format = source
            return _format(self, source)

        @functools.wraps(original_action)
        def explained(self: Any, *args: Any, _action: Any = original_action, **kwargs: Any) -> Any:
            given = kwargs.get("format", args[1] if len(args) > 1 else None)
            if _ours(self, given) and kwargs.get("partitionBy"):
                raise InvalidConfig(HINT)
            try:
                return _action(self, *args, **kwargs)
            except S3IOError:
                raise
            except Exception as exc:
                if not _ours(self, given):
                    raise
                if SPARK_REFUSAL in str(exc):
                    raise InvalidConfig(HINT) from exc
                line = cause_line(str(exc))
                if line is None:
                    raise
                raise SparkWriteFailed(line) from exc

        cls.format = remembering_format  # type: ignore[method-assign]
        setattr(cls, action, explained)
        cls._s3io_save_calls = True  # type: ignore[attr-defined]
