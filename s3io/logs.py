"""Logging for the project's command lines: only the project's own loggers, never the root logger.

Setting the root logger to DEBUG (``logging.basicConfig``) also turns on botocore's debug logs, which print STS
answers with ``SecretAccessKey`` and ``SessionToken`` and canonical requests with the security token. The
command lines therefore attach one handler to the named project loggers and leave every other logger alone.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable

PROJECT_LOGGERS = ("s3io", "spark_ext")


def level_for(verbosity: int) -> int:
    """-v count to a level: none → ERROR, -v → WARNING (retries), -vv → DEBUG (every attempt)."""
    return logging.ERROR if verbosity <= 0 else logging.WARNING if verbosity == 1 else logging.DEBUG


def configure_cli_logging(verbosity: int, fmt: str, names: Iterable[str] = PROJECT_LOGGERS) -> None:
    """Send the project loggers' records at ``verbosity`` to stderr; other libraries' loggers are untouched."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(fmt))
    level = level_for(verbosity)
    for name in names:
        logger = logging.getLogger(name)
        for old in [h for h in logger.handlers if getattr(h, "_s3io_cli", False)]:
            logger.removeHandler(old)
        handler._s3io_cli = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
        logger.setLevel(level)
        logger.propagate = False
