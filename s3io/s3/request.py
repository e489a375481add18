"""S3Request: one S3 operation's request before it is addressed and signed, as a small value.

The client's ``_send`` takes it, addresses it (the bucket's endpoint), signs a copy of its headers and hands it to
the transport; after a wrong-region answer it sends the same value again, signed afresh for the bucket's region.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from multidict import CIMultiDictProxy

from s3io.transport.landing import BodyTarget


@dataclass(slots=True)
class S3Request:
    """What to send for one attempt of an operation; ``headers`` are the caller's (never signed in place)."""

    operation: str  # the name metrics count the request under: get, head, list, put, ...
    method: str
    bucket: str
    key: str = ""
    query: dict[str, str] | None = None
    headers: dict[str, str] | None = None
    body: bytes | None = None
    on_headers: Callable[[int, CIMultiDictProxy[str]], None] | None = None
    on_chunk: Callable[[bytes], bool | None] | None = None
    landing: BodyTarget | None = None  # a data body received in place (a GET ``into`` a buffer)
    error_in_200: bool = False  # an <Error> body in a 200 answer is an error (CopyObject, CompleteMultipartUpload)
