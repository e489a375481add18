"""The typed errors of s3io: each names the object, the attempts, the time spent and the last cause.

Messages never contain credentials, signatures or request headers.
"""

from __future__ import annotations

import functools
import os
import types
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])
FULL_TRACEBACK_VARIABLE = "S3IO_FULL_TRACEBACK"  # set to 1: public calls keep every frame and chained cause


class S3IOError(Exception):
    """Base class of every error s3io raises on purpose."""

    def __init__(
        self,
        message: str,
        *,
        bucket: str | None = None,
        key: str | None = None,
        operation: str | None = None,
        attempts: int | None = None,
        elapsed: float | None = None,
        cause: BaseException | str | None = None,
        status: int | None = None,
        code: str | None = None,
    ) -> None:
        self.message = message
        self.bucket = bucket
        self.key = key
        self.operation = operation
        self.attempts = attempts
        self.elapsed = elapsed
        self.cause = cause
        self.status = status
        self.code = code
        super().__init__(self._render())

    @property
    def url(self) -> str | None:
        if self.bucket is None:
            return None
        return f"s3://{self.bucket}/{self.key or ''}"

    def _render(self) -> str:
        parts = [self.message]
        if self.operation:
            parts.append(f"operation={self.operation}")
        if self.url:
            parts.append(f"object={self.url}")
        if self.status is not None:
            parts.append(f"status={self.status}")
        if self.code:
            parts.append(f"code={self.code}")
        if self.attempts is not None:
            parts.append(f"attempts={self.attempts}")
        if self.elapsed is not None:
            parts.append(f"elapsed={self.elapsed:.2f}s")
        if self.cause is not None:
            cause = self.cause if isinstance(self.cause, str) else _describe(self.cause)
            parts.append(f"last cause: {cause}")
        return "; ".join(parts)

    def add_hint(self, hint: str) -> S3IOError:
        """Append ``hint`` (what may explain the error and the fix) to the message; returns self."""
        self.message += hint
        self.args = (self._render(),)
        return self

    def with_fix(self, fix: str) -> S3IOError:
        """Say how to fix it, in the message's first line (once); returns self."""
        if fix not in self.message:
            self.message = f"{self.message} ({fix})"
            self.args = (self._render(),)
        return self

    def with_context(self, **context: object) -> S3IOError:
        """Fill in context (object, attempts, elapsed) that a lower layer did not know; returns self."""
        for name, value in context.items():
            if getattr(self, name, None) is None:
                setattr(self, name, value)
        self.args = (self._render(),)
        return self


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class InvalidConfig(S3IOError, ValueError):
    """A policy value, option or argument is malformed; the message names it and the accepted form."""


class NotFound(S3IOError, FileNotFoundError):
    """The bucket or object does not exist (404). Never retried."""


class PathNotFound(NotFound):
    """A path given to a reader or a job matches no object at all (Spark's PATH_NOT_FOUND); the message names the
    path as the user wrote it."""


class AccessDenied(S3IOError, PermissionError):
    """403: the credentials may not do this. Never retried."""


class PreconditionFailed(S3IOError):
    """412 on a conditional write or delete (If-Match / If-None-Match did not hold)."""


class ObjectChanged(PreconditionFailed):
    """The object was overwritten while we were reading it; no mixed bytes are returned."""


class RequestError(S3IOError):
    """A non-retryable HTTP error (400 and friends) with the S3 code and message."""


class Throttled(S3IOError):
    """S3 kept answering SlowDown / 503 / 429 until the retries or the retry budget ran out."""


class ServerError(S3IOError):
    """S3 kept answering 5xx until the retries ran out."""


class TransportError(S3IOError, ConnectionError):
    """Connections kept failing (reset, refused, broken pipe) until the retries ran out."""


class EndpointUnreachable(TransportError):
    """The endpoint never answered (connection refused, no such host, no first byte) on a first contact, for the
    few attempts ``Policy.first_contact_attempts`` gives it: a wrong URL or port, or a network that does not reach
    it. An endpoint that has answered before keeps the full retries."""


class ProxyUnreachable(EndpointUnreachable):
    """The forward proxy the connections go through (``proxy``, HTTPS_PROXY / HTTP_PROXY) refused or never answered
    them, on a first contact: the proxy's address or the network to it is wrong, not the endpoint's."""


class EndpointNotS3(InvalidConfig):
    """The endpoint answered, but not as S3 does (an error that is not S3's XML): the URL names another server."""


class Truncated(S3IOError):
    """The body ended before its Content-Length, or a range came back shorter than asked."""


class DeadlineExceeded(S3IOError, TimeoutError):
    """A timer fired: ``phase`` is connect, first_byte, stall, attempt or operation."""

    def __init__(self, message: str, *, phase: str, **kwargs: object) -> None:
        self.phase = phase
        super().__init__(message, **kwargs)  # type: ignore[arg-type]

    def _render(self) -> str:
        return f"[phase={self.phase}] " + super()._render()


class RetryBudgetExhausted(S3IOError):
    """The client-wide retry budget is empty: retrying now would only multiply load on a struggling server."""


class ProtocolError(S3IOError):
    """The server's answer contradicts the request: a Content-Range other than the one asked, a 206 to a request
    without Range, an unparseable or oversized XML body. Retried (a proxy or a bad node may have caused it)."""


class ChecksumMismatch(S3IOError):
    """A body's bytes do not have the checksum the store states for them (S3's end-to-end checksums): damaged on
    the way, or another object's bytes under this object's headers. Never returned; retried, then raised naming
    the object."""


class ListingLoop(ProtocolError):
    """A paginated listing repeated a continuation token or marker: the server is looping. Not retried."""


class LoopStopped(S3IOError, RuntimeError):
    """s3io's background event loop died under a blocking call (SystemExit or KeyboardInterrupt escaped a task,
    e.g. from a ``progress`` callback); the call was abandoned. The next blocking call starts a new loop."""


class CorruptFile(S3IOError, ValueError):
    """An object is not a readable parquet file (bad magic, bad footer, undecodable page)."""


class SchemaMismatch(S3IOError, ValueError):
    """Two files give one column incompatible types; the message names both files and the column."""


# ----------------------------------------------------------------------------------------- what a person reads


def concise(exc: S3IOError, *, keep: int | None = 1) -> S3IOError:
    """``exc`` as a public call raises it: its traceback cut to the ``keep``-th frame (the boundary's, at the line
    of the call that failed; None: none) and the innermost one (where it was raised), with no chained cause printed
    (the message names it). The event-loop, retry and cleanup frames between them are what made tracebacks of 40
    to 70 lines point at ``loop.stop()`` or ``await client.close()``. ``S3IO_FULL_TRACEBACK=1`` keeps everything."""
    if os.environ.get(FULL_TRACEBACK_VARIABLE, "") not in ("", "0"):
        return exc
    frames = []
    tb = exc.__traceback__
    while tb is not None:
        frames.append(tb)
        tb = tb.tb_next
    kept = frames[-1:] if keep is None else [*frames[keep : keep + 1], *frames[keep + 1 :][-1:]]
    chain = None
    for entry in reversed(kept):
        chain = types.TracebackType(chain, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    exc.__cause__ = None
    exc.__suppress_context__ = True
    return exc.with_traceback(chain)


def readable_errors(
    fn: F, *, fix: Callable[[S3IOError], S3IOError] | None = None, first: Callable[[], object] | None = None
) -> F:
    """A public entry point whose S3IOErrors are ``concise`` (see there), after ``fix`` (which may say how to fix the
    error in the caller's own terms); other exceptions are left alone. ``first``: called before every call (in the
    same frame, so tracebacks keep their shape)."""

    @functools.wraps(fn)
    def public_call(*args: Any, **kwargs: Any) -> Any:
        if first is not None:
            first()
        try:
            return fn(*args, **kwargs)
        except S3IOError as exc:
            raise concise(fix(exc) if fix is not None else exc) from None

    return public_call  # type: ignore[return-value]


def readable_iteration(items: Iterator[Any], *, fix: Callable[[S3IOError], S3IOError] | None = None) -> Iterator[Any]:
    """``items``, whose S3IOErrors are ``concise`` (after ``fix``) when they end the iteration (a task's batches):
    the frame that raised them only, since a generator's frame may point at its cleanup."""
    try:
        yield from items
    except S3IOError as exc:
        raise concise(fix(exc) if fix is not None else exc, keep=None) from None
