"""Conditional writes that stay correct when a retry follows a lost response, and never silently unconditional.

The client retries a PUT whose response was lost (reset, 503 after the server acted, timeout). For a conditional
PUT that retry fails with 412 even though the first attempt succeeded: the object now exists (If-None-Match: *)
or has our new ETag (If-Match). So on 412 we read the object back: if it holds exactly the bytes we wrote
(every body we write carries a unique ``write_id``), the write was ours and succeeded. A conditional DELETE
retried after success answers 404: the object is gone either way, which is what we asked for.

A condition needs an ETag: ``require_etag`` raises MissingETag where one is missing (a store that sent none, a
listing without ETags), because s3io sends a request without the header when the ETag is None or empty, and that
would silently turn a conditional write into a plain one.
"""

from __future__ import annotations

from s3io.errors import NotFound, PreconditionFailed
from s3io.s3.client import S3Client
from s3io.s3.etags import bare_etag


class MissingETag(Exception):
    """The store gave no ETag for an object we must change conditionally: refused rather than sent unconditionally."""


def require_etag(etag: str | None, bucket: str, key: str, what: str) -> str:
    """``etag`` if it is usable in If-Match; MissingETag (naming the object and the refused action) otherwise."""
    if etag is None or not bare_etag(etag):
        raise MissingETag(
            f"cannot {what} s3://{bucket}/{key} conditionally: the store gave no ETag for it, and without one the "
            "request would be unconditional; nothing was sent. Use a store that returns ETags on PUT, HEAD and LIST"
        )
    return etag


async def _ours_after_412(client: S3Client, bucket: str, key: str, body: bytes) -> str | None:
    try:
        current = await client.get_object(bucket, key)
    except NotFound:
        return None
    return current.etag if current.data == body else None


async def put_if_absent(client: S3Client, bucket: str, key: str, body: bytes) -> str:
    """Create ``key`` only if it does not exist; returns its ETag; PreconditionFailed if someone else's exists."""
    try:
        result = await client.put_object(bucket, key, body, if_none_match=True, content_type="application/json")
    except PreconditionFailed:
        etag = await _ours_after_412(client, bucket, key, body)
        if etag is None:
            raise
        return require_etag(etag, bucket, key, "track")
    return await _etag_of(client, bucket, key, result.etag)


async def put_if_match(client: S3Client, bucket: str, key: str, body: bytes, etag: str | None) -> str:
    """Replace ``key`` only if its ETag is still ``etag``; returns the new ETag; PreconditionFailed otherwise."""
    etag = require_etag(etag, bucket, key, "replace")
    try:
        result = await client.put_object(bucket, key, body, if_match=etag, content_type="application/json")
    except (PreconditionFailed, NotFound):
        new_etag = await _ours_after_412(client, bucket, key, body)
        if new_etag is None:
            raise
        return require_etag(new_etag, bucket, key, "track")
    return await _etag_of(client, bucket, key, result.etag)


async def delete_if_match(client: S3Client, bucket: str, key: str, etag: str | None) -> bool:
    """Delete ``key`` if it still has ``etag``; False if it was already gone; PreconditionFailed if it changed."""
    etag = require_etag(etag, bucket, key, "delete")
    try:
        await client.delete_object(bucket, key, if_match=etag)
    except NotFound:
        return False
    return True


async def _etag_of(client: S3Client, bucket: str, key: str, etag: str | None) -> str:
    if etag and bare_etag(etag):
        return etag
    return require_etag((await client.head_object(bucket, key)).etag, bucket, key, "track")
