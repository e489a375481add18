"""Conditional writes that stay correct when a retry follows a lost response, and never silently unconditional.

The client retries a PUT whose response was lost (reset, 503 after the server acted, timeout). For a conditional
PUT that retry fails with 412 even though the first attempt succeeded: the object now exists (If-None-Match: *)
or has our new ETag (If-Match). So on 412 we read the object back: if it holds exactly the bytes we wrote
(every body we write carries a unique ``write_id``), the write was ours and succeeded. A conditional DELETE
retried after success answers 404: the object is gone either way, which is what we asked for.

A data file's delete goes through the best guard the store honours (``delete_guarded``; the store probe measures
which): a conditional DELETE; Ceph RGW's ``x-amz-delete-if-unmodified-since`` on the Last-Modified the delete was
planned with (whole seconds: only objects older than ``UNMODIFIED_SINCE_MARGIN`` on the store's clock are planned,
so a rewrite after the plan has a later second); or a HEAD If-Match just before a plain DELETE (a window of one
round trip). Control objects (journal entries, the lock) are never deleted conditionally: they are changed by a
conditional replace first (s3io.table.journal, s3io.table.lease).

A condition needs an ETag: ``require_etag`` raises MissingETag where one is missing (a store that sent none, a
listing without ETags), because s3io sends a request without the header when the ETag is None or empty, and that
would silently turn a conditional write into a plain one.
"""

from __future__ import annotations

from s3io.errors import NotFound, PreconditionFailed, S3IOError
from s3io.s3.capabilities import STORE_CLOCK_RESOLUTION, DeleteGuard
from s3io.s3.client import S3Client
from s3io.s3.etags import bare_etag
from s3io.s3.probe import store_capabilities
from s3io.table.layout import probe_prefix

# How much older than the store's clock a file's Last-Modified must be for its delete to be planned under the
# unmodified-since guard: a rewrite after the plan then lands in a later second than the one the delete names.
UNMODIFIED_SINCE_MARGIN = 2 * STORE_CLOCK_RESOLUTION


class MissingETag(S3IOError):
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


async def delete_guard(client: S3Client, bucket: str, prefix: str) -> DeleteGuard:
    """The guard of a data file's delete the store honours best in ``bucket`` (the store probe's verdict, kept per
    endpoint and bucket: no request once probed)."""
    verdict = await store_capabilities(client, bucket, probe_prefix(prefix))
    return verdict.delete_guard


def plannable(guard: DeleteGuard, last_modified: float | None, store_now: float) -> bool:
    """Whether a file may be planned for a delete under ``guard``: under the unmodified-since guard only once its
    Last-Modified is ``UNMODIFIED_SINCE_MARGIN`` older than the store's clock (and known)."""
    if guard is not DeleteGuard.UNMODIFIED_SINCE:
        return True
    return last_modified is not None and last_modified + UNMODIFIED_SINCE_MARGIN <= store_now


async def delete_guarded(
    client: S3Client, guard: DeleteGuard, bucket: str, key: str, etag: str | None, last_modified: float | None
) -> bool:
    """Delete a data file planned with ``etag`` (and ``last_modified``) through ``guard``; False if it was already
    gone; PreconditionFailed if it changed since the plan (it is kept)."""
    if guard is DeleteGuard.CONDITIONAL_DELETE:
        return await delete_if_match(client, bucket, key, etag)
    etag = require_etag(etag, bucket, key, "delete")
    if guard is DeleteGuard.UNMODIFIED_SINCE:
        if last_modified is None:
            raise MissingETag(
                f"cannot delete s3://{bucket}/{key} under {guard.value}: its planned Last-Modified is unknown; "
                "it was kept"
            )
        await client.delete_object(bucket, key, if_unmodified_since=last_modified)
        return True
    try:
        await client.head_object(bucket, key, if_match=etag)
    except NotFound:
        return False
    await client.delete_object(bucket, key)
    return True


async def _etag_of(client: S3Client, bucket: str, key: str, etag: str | None) -> str:
    if etag and bare_etag(etag):
        return etag
    return require_etag((await client.head_object(bucket, key)).etag, bucket, key, "track")
