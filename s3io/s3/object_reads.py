"""The S3 client's reads: GET (whole, a range, into the caller's buffer), HEAD and the stored checksum.

Ranges are half-open ``[start, end)`` byte offsets. A GET that dies after k bytes resumes from byte k,
pinned to the first response's ETag with If-Match, so an object overwritten mid-read raises ObjectChanged
instead of returning mixed bytes; partial data is never returned as success. A whole-object GET asks for the
checksum the store keeps and checks the bytes against it (``Policy.checksums``, docs/integrity.md): a mismatch is
retried and never returned.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from email.utils import parsedate_to_datetime

from multidict import CIMultiDictProxy

from s3io import errors
from s3io.policy import WHEN_SUPPORTED
from s3io.resilience.deadline import Watchdog
from s3io.s3 import xml
from s3io.s3.checksums import (
    CHECKSUM_MODE_HEADER,
    StoredChecksum,
    stated_checksum,
)
from s3io.s3.etags import same_etag
from s3io.s3.get_range import BOUNDED, WHOLE, GetRange
from s3io.s3.range_read import RangeRead
from s3io.s3.request import S3Request
from s3io.s3.request_core import RequestCore, _check_etag, _check_key
from s3io.s3.types import GetResult, ObjectInfo
from s3io.scatter import Pieces


class ObjectReads(RequestCore):
    """GET, HEAD and the stored checksum (see the module doc)."""

    async def get_object(
        self,
        bucket: str,
        key: str,
        start: int | None = None,
        end: int | None = None,
        *,
        if_match: str | None = None,
        into: memoryview | bytearray | None = None,
    ) -> GetResult:
        """Bytes ``[start, end)`` of an object (whole object when both are None; ``start=-n``: the last n bytes).

        The offsets are ``GetRange.from_offsets``'s; ``get_range`` takes the range as a value. Resumes a broken
        body from the last byte received, pinned to the ETag; raises ObjectChanged if the object was replaced,
        Truncated/DeadlineExceeded/... after the policy's retries. ``into``: see ``get_range``.
        """
        if start is None and end is not None:
            start = 0
        try:
            want = GetRange.from_offsets(start, end)
        except ValueError as exc:
            _check_key(bucket, key)
            _check_etag(bucket, key, if_match)
            raise errors.InvalidConfig(f"range: {exc}", bucket=bucket, key=key) from None
        return await self.get_range(bucket, key, want, if_match=if_match, into=into)

    async def get_range(
        self,
        bucket: str,
        key: str,
        want: GetRange,
        *,
        if_match: str | None = None,
        into: memoryview | bytearray | Pieces | None = None,
    ) -> GetResult:
        """The bytes of an object that ``want`` selects (whole, bounded, from an offset, or the last n bytes).

        Resumes a broken body from the last byte received, pinned to the ETag; raises ObjectChanged if the
        object was replaced, Truncated/DeadlineExceeded/... after the policy's retries. The whole object is checked
        against the checksum its store states (``Policy.checksums="when_supported"``): bytes without it are read
        again, and ChecksumMismatch names the object after the retries; a range cannot be checked (docs/integrity.md).

        ``data`` is ``bytes``, unless ``into`` is given: a writable buffer of exactly a bounded range's length (or of
        the object's size, for the whole object), which the body is written into in place (a large one straight
        from the socket); ``data`` is then a view of it (of its first bytes when the object ends inside the range;
        ``bytes`` when a whole object turns out larger than ``into``). A GET ``into`` one buffer per part is how
        the range engine assembles a large read without joining anything. ``into`` as ``Pieces`` (a bounded range):
        the bytes between the runs the caller keeps land in scratch; ``data`` is then those pieces.
        """
        _check_key(bucket, key)
        _check_etag(bucket, key, if_match)
        if want.kind == BOUNDED and want.end == want.start:
            return GetResult(b"", if_match, None, want.start)
        target: memoryview | Pieces | None = None
        if isinstance(into, Pieces):
            if want.kind != BOUNDED or want.expected_length != len(into):
                raise errors.InvalidConfig(
                    f"into: pieces of exactly a bounded range's length; got {len(into)} bytes for "
                    f"{want.header() or 'the whole object'}",
                    bucket=bucket,
                    key=key,
                )
            target = into
        elif into is not None:
            target = memoryview(into).cast("B")
            if target.readonly or want.kind not in (BOUNDED, WHOLE) or want.expected_length not in (None, len(target)):
                raise errors.InvalidConfig(
                    "into: a writable buffer of exactly the range's length, for a bounded range (or of the object's "
                    f"size, for the whole object); got {'a read-only ' if target.readonly else ''}{len(target)} bytes "
                    f"for {want.header() or 'the whole object'}",
                    bucket=bucket,
                    key=key,
                )
        verify = want.kind == WHOLE and self.policy.checksums == WHEN_SUPPORTED
        read = RangeRead(bucket, key, want, if_match, target, verify=verify)

        async def attempt(watchdog: Watchdog) -> None:
            headers: dict[str, str] = {CHECKSUM_MODE_HEADER: "ENABLED"} if verify else {}
            if self._read_headers:
                headers.update(self._read_headers)
            range_header = read.request_range().header()
            if range_header:
                headers["range"] = range_header
            if read.etag:
                headers["if-match"] = read.etag
            try:
                await self._send(
                    watchdog,
                    S3Request(
                        "get",
                        "GET",
                        bucket,
                        key,
                        headers=headers,
                        on_headers=read.on_headers,
                        on_chunk=read.add,
                        landing=read if target is not None else None,
                    ),
                )
            except errors.PreconditionFailed as exc:
                raise errors.ObjectChanged(
                    f"object changed during the read (ETag is no longer {read.etag})", bucket=bucket, key=key
                ) from exc
            read.check_complete()
            if read.stated is not None:
                read.check_checksum()

        await self._runner.run("get", bucket, key, attempt)
        return read.result()

    async def head_object(self, bucket: str, key: str, *, if_match: str | None = None) -> ObjectInfo:
        """Size, ETag and modification time of an object; NotFound if it does not exist; PreconditionFailed if
        ``if_match`` is not its ETag (checked here too: s3rver ignores If-Match on HEAD)."""
        _check_key(bucket, key)
        _check_etag(bucket, key, if_match)
        return await self._head(bucket, key, if_match, "head")

    async def _head(self, bucket: str, key: str, if_match: str | None, operation: str) -> ObjectInfo:
        headers = {"if-match": if_match} if if_match is not None else {}
        headers.update(self._read_headers)

        async def attempt(watchdog: Watchdog) -> ObjectInfo:
            response = await self._send(watchdog, S3Request(operation, "HEAD", bucket, key, headers=dict(headers)))
            info = _info_from_headers(bucket, key, response.headers)
            if if_match is not None and info.etag is not None and not same_etag(info.etag, if_match):
                raise errors.PreconditionFailed(
                    f"the store answered a HEAD If-Match {if_match} with another object (ETag {info.etag}): taken as "
                    "the 412 it should have been",
                    bucket=bucket,
                    key=key,
                    status=412,
                    code="PreconditionFailed",
                )
            return info

        return await self._runner.run(operation, bucket, key, attempt)

    async def object_checksum(self, bucket: str, key: str, *, if_match: str | None = None) -> StoredChecksum | None:
        """The checksum the store keeps for the whole object (one HEAD with checksum mode), pinned to ``if_match``;
        None when checksums are not verified (``Policy.checksums``), or the store states none or a composite one."""
        if self.policy.checksums != WHEN_SUPPORTED:
            return None
        _check_key(bucket, key)
        _check_etag(bucket, key, if_match)
        headers = {CHECKSUM_MODE_HEADER: "ENABLED", **self._read_headers}
        if if_match is not None:
            headers["if-match"] = if_match

        async def attempt(watchdog: Watchdog) -> StoredChecksum | None:
            response = await self._send(watchdog, S3Request("head", "HEAD", bucket, key, headers=dict(headers)))
            etag = response.headers.get("ETag")
            if if_match is not None and etag is not None and not same_etag(etag, if_match):
                raise errors.ObjectChanged(
                    f"object changed while its checksum was asked (ETag {etag}, expected {if_match})",
                    bucket=bucket,
                    key=key,
                )
            stated = stated_checksum(response.headers)
            return stated if stated is not None and stated.covers_object else None

        try:
            return await self._runner.run("head", bucket, key, attempt)
        except errors.ObjectChanged:
            raise
        except errors.PreconditionFailed as exc:
            raise errors.ObjectChanged(
                f"object changed while its checksum was asked (ETag is no longer {if_match})", bucket=bucket, key=key
            ) from exc


async def stated_size(
    head: Callable[..., Awaitable[ObjectInfo]], bucket: str, key: str, *, etag: str | None, held: int
) -> int:
    """The size of an object whose GET answers never stated it, from one HEAD (``head``: a client's head_object)
    pinned to the read's ``etag``: never reading on part after part without one. ObjectChanged when the HEAD is
    of another version, or says less than the ``held`` bytes already read."""
    try:
        info = await head(bucket, key, if_match=etag)
    except errors.PreconditionFailed as exc:
        raise errors.ObjectChanged(
            f"object changed while its size was asked (ETag {etag})", bucket=bucket, key=key
        ) from exc
    if etag is not None and info.etag is not None and not same_etag(info.etag, etag):
        raise errors.ObjectChanged(
            f"object changed while its size was asked (ETag {info.etag}, expected {etag})", bucket=bucket, key=key
        )
    if info.size < held:
        raise errors.ObjectChanged(
            f"a HEAD says the object is {info.size} bytes, but {held} were already read from it", bucket=bucket, key=key
        )
    return info.size


def _info_from_headers(bucket: str, key: str, headers: CIMultiDictProxy[str]) -> ObjectInfo:
    """A HEAD's answer as an ObjectInfo; a size or date that is not one is a ProtocolError naming the header."""
    length = headers.get("Content-Length")
    if length is None or not length.isdigit():
        what = "no Content-Length" if length is None else f"a Content-Length of {xml.shorten(length, 64)!r}"
        raise errors.ProtocolError(f"a HEAD answer with {what}: the object's size is unknown", bucket=bucket, key=key)
    modified = headers.get("Last-Modified")
    try:
        last_modified = parsedate_to_datetime(modified).timestamp() if modified else None
    except (TypeError, ValueError):
        raise errors.ProtocolError(
            f"a HEAD answer with a Last-Modified of {xml.shorten(modified, 64)!r}, not an HTTP date",
            bucket=bucket,
            key=key,
        ) from None
    return ObjectInfo(
        bucket=bucket, key=key, size=int(length), etag=headers.get("ETag") or None, last_modified=last_modified
    )
