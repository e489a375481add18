"""ETags as S3 and its look-alikes send them: one rule for comparing them, and S3's multipart ETag.

Listings, HEAD, GET and PUT may differ in quoting, and some stores mark ETags weak (``W/"..."``); the value
inside is what identifies an object's content.
"""

from __future__ import annotations

import hashlib


def bare_etag(etag: str) -> str:
    """The ETag without a weak marker or quotes."""
    return etag.removeprefix("W/").strip('"')


def same_etag(a: str | None, b: str | None) -> bool:
    """True if both ETags are known and name the same content (quotes and weak markers ignored)."""
    if a is None or b is None:
        return False
    return a == b or bare_etag(a) == bare_etag(b)  # the same string (the usual case, per GET of a read) costs no copy


def multipart_etag(part_etags: list[str]) -> str | None:
    """The ETag S3 gives an object completed from parts with these ETags: the MD5 of the parts' binary MD5s,
    then ``-N``; None if a part's ETag is not an MD5 (SSE-KMS, or a store with other ETags)."""
    digests = []
    for etag in part_etags:
        bare = bare_etag(etag)
        if len(bare) != 32:
            return None
        try:
            digests.append(bytes.fromhex(bare))
        except ValueError:
            return None
    return f'"{hashlib.md5(b"".join(digests)).hexdigest()}-{len(part_etags)}"'
