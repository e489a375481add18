"""Which stores refuse S3's checksum headers on uploads: learnt from the first refusal, kept per endpoint, logged once.

Stores that predate S3's flexible checksums answer a request carrying them with a 400 or a 501 (``InvalidArgument``,
``NotImplemented``, ...) where the same request without them succeeds. The client learns this from the first such
pair of answers (``UploadChecksums.send``) and, for the life of the process, sends that endpoint's uploads without
the headers (the Content-MD5 every store takes instead), saying so once in the log. A store that takes the headers
and ignores them is not a refusal: its reads then state no checksum, and are not verified (docs/integrity.md).

Each ``Feature`` is a capability of the store probe (``s3io.s3.capabilities``): the probe's own upload finds the
refusal before the first upload of the job that probed, and a verdict handed to a worker process records it here
(``VerdictCache.remember``) before the worker's first upload, so the worker never sends the refused form at all.
"""

from __future__ import annotations

import enum
import logging
import threading

from s3io import errors
from s3io.resilience.retryable import INTEGRITY_CODES

log = logging.getLogger("s3io")

REFUSAL_STATUSES = frozenset({400, 501})


class Feature(enum.Enum):
    """A use of S3's checksum headers some stores refuse; the value is how the log line names it."""

    UPLOAD_CHECKSUMS = "a checksum header (x-amz-checksum-*) on PUT, UploadPart and CopyObject"
    FULL_OBJECT_MULTIPART = "a full-object checksum on multipart uploads (x-amz-checksum-type: FULL_OBJECT)"


def is_refusal(exc: BaseException) -> bool:
    """Whether an error may be a store refusing checksum headers (to be confirmed by the request without them): a
    400 or 501 that is not the store saying the bytes arrived damaged (those are retried, and mean it checks)."""
    return (
        isinstance(exc, errors.RequestError)
        and exc.status in REFUSAL_STATUSES
        and exc.code not in INTEGRITY_CODES
        and not isinstance(exc, errors.PreconditionFailed | errors.AccessDenied | errors.NotFound)
    )


class ChecksumRefusals:
    """Refusals by (endpoint, feature) for the life of the process; the first one for a pair is logged."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._refused: dict[tuple[str, Feature], str] = {}

    def refused(self, endpoint: str, feature: Feature) -> bool:
        return (endpoint, feature) in self._refused

    def detail(self, endpoint: str, feature: Feature) -> str | None:
        """What ``endpoint`` answered when it refused ``feature``, or None if it has not."""
        return self._refused.get((endpoint, feature))

    def remember(self, endpoint: str, feature: Feature, detail: str) -> None:
        """Record that ``endpoint`` refuses ``feature`` (``detail``: what it answered); logged the first time."""
        with self._lock:
            first = self._refused.setdefault((endpoint, feature), detail) is detail
        if first:
            log.warning(
                "the store at %s refuses %s (%s; the same request without it succeeded): its uploads go without "
                "it from now on, so they are not sealed with a checksum the store keeps (set checksums=required "
                "to stop trying)",
                endpoint,
                feature.value,
                detail,
            )

    def forget(self, endpoint: str | None = None) -> None:
        """Drop what was learnt about one endpoint (or all): its next upload tries the headers again."""
        with self._lock:
            for key in [k for k in self._refused if endpoint is None or k[0] == endpoint]:
                del self._refused[key]


REFUSALS = ChecksumRefusals()
