"""Errors that name the file: an s3:// url becomes the error's bucket/key, any other url goes into the message."""

from __future__ import annotations

from typing import TypeVar

from s3io.errors import S3IOError

E = TypeVar("E", bound=S3IOError)


def file_error(cls: type[E], message: str, url: str | None, *, cause: BaseException | str | None = None) -> E:
    """Build ``cls`` so that its rendered message names ``url`` (as ``object=s3://...`` for s3 urls)."""
    if url and url.startswith("s3://"):
        bucket, _, key = url[len("s3://") :].partition("/")
        return cls(message, bucket=bucket, key=key, cause=cause)
    return cls(f"{url}: {message}" if url else message, cause=cause)
