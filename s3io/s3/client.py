"""S3Client: every S3 operation as one method, each run through the attempt runner (deadlines + retries).

Ranges are half-open ``[start, end)`` byte offsets. A GET that dies after k bytes resumes from byte k,
pinned to the first response's ETag with If-Match, so an object overwritten mid-read raises ObjectChanged
instead of returning mixed bytes; partial data is never returned as success. A whole-object GET asks for the
checksum the store keeps and checks the bytes against it (``Policy.checksums``, docs/integrity.md): a mismatch is
retried and never returned.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping
from dataclasses import replace
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import quote

from multidict import CIMultiDictProxy

from s3io import errors
from s3io.metrics import Metrics, MetricsSnapshot
from s3io.policy import WHEN_SUPPORTED, Policy
from s3io.resilience.attempt import AttemptRunner
from s3io.resilience.deadline import Watchdog
from s3io.resilience.first_contact import EndpointContact
from s3io.resilience.retryable import clock_correction, error_for_status, foreign_answer
from s3io.s3 import xml
from s3io.s3.capabilities import VERDICTS, EtagForm, endpoint_key
from s3io.s3.checksum_refusals import Feature, is_refusal
from s3io.s3.checksums import (
    ALGORITHM_HEADER,
    CHECKSUM_MODE_HEADER,
    UPLOAD_ALGORITHM,
    StoredChecksum,
    stated_checksum,
)
from s3io.s3.encryption import NO_ENCRYPTION, SSE_C, Encryption
from s3io.s3.etags import bare_etag, multipart_etag, same_etag
from s3io.s3.get_range import BOUNDED, WHOLE, GetRange
from s3io.s3.multipart import MultipartWriter
from s3io.s3.paging import ListingGuard
from s3io.s3.range_read import RangeRead
from s3io.s3.redirect import bucket_region, regional_endpoint
from s3io.s3.request import S3Request
from s3io.s3.types import DeleteError, DeleteResult, GetResult, MultipartUpload, ObjectInfo, PutResult
from s3io.s3.upload_checksums import UploadChecksums
from s3io.scatter import Pieces
from s3io.transport.credentials import CredentialProvider, Credentials
from s3io.transport.endpoint import Endpoint, resolve_endpoint
from s3io.transport.exchange import Response
from s3io.transport.proxy import proxy_for
from s3io.transport.session import Route
from s3io.transport.sigv4 import EMPTY_SHA256, UNSIGNED_PAYLOAD, Signer, canonical_query
from s3io.transport.transport import AiohttpTransport, HttpRequest, Transport
from s3io.transport.trust import ssl_context

DELETE_BATCH = 1000
COMPLETE_MULTIPART_HEAD = "complete_multipart_head"  # the HEAD that reads an ETag a store left out of its answer
# A single DELETE's answers that concern its key alone: reported per key, as DeleteObjects reports them; anything
# else (the server gone, the deadline, throttling past the retries) fails the whole call at once, as a batch's
# would, instead of costing every remaining key an operation's deadline of its own.
_KEY_REFUSALS = (errors.AccessDenied, errors.PreconditionFailed, errors.NotFound, errors.RequestError)
# The writes a bucket policy on encryption judges (S3 authorizes all three as s3:PutObject, and judges an upload's
# parts by the encryption it was created with): an AccessDenied there says which encryption was asked for.
_ENCRYPTED_WRITES = frozenset({"put", "create_multipart", "copy"})
REQUEST_PAYER_HEADER = "x-amz-request-payer"
log = logging.getLogger("s3io")


class S3Client:
    """An S3 client bound to one event loop. Use ``async with S3Client(...) as s3`` or call ``close()``."""

    def __init__(
        self,
        policy: Policy | None = None,
        *,
        endpoint_url: str | None = None,
        region: str | None = None,
        credentials: Credentials | str | None = None,
        addressing: str = "auto",
        encryption: Encryption = NO_ENCRYPTION,
        requester_pays: bool = False,
        proxy: str | None = None,
        ca_bundle: str | None = None,
        transport: Transport | None = None,
        credential_providers: tuple[str, ...] | None = None,
        require_atomic_deletes: bool = False,
    ) -> None:
        """``encryption``: what writes ask S3 to encrypt with, and the SSE-C key reads send (s3io.s3.encryption);
        ``requester_pays``: every request says the requester pays (``x-amz-request-payer``); ``proxy``: a forward
        proxy URL, "direct", or None for the environment's (s3io.transport.proxy); ``ca_bundle``: the CAs TLS trusts
        (None: AWS_CA_BUNDLE, the profile's, else the default store; s3io.transport.trust); ``credential_providers``:
        with ``credentials`` None, which of botocore's providers to ask (None: all). ``transport``: how requests
        reach the wire (default: aiohttp's pool, ``AiohttpTransport``, through ``proxy``, trusting ``ca_bundle``); a
        ``MockTransport`` answers them from a function, for unit tests of the layers above it.
        ``require_atomic_deletes``: the user's demand that writes and compaction run only where the store guards a
        data file's delete atomically (s3io.table's store check refuses otherwise)."""
        self.policy = policy if policy is not None else Policy.from_env()
        self.endpoint = resolve_endpoint(endpoint_url, region, addressing)
        if encryption.algorithm == SSE_C and self.endpoint.scheme != "https":
            raise errors.InvalidConfig(
                f"sseCustomerKey: SSE-C sends the customer key with every request, and S3 takes it only over https; "
                f"the endpoint is {self.endpoint.scheme}://{self.endpoint.host} (give an https:// endpoint; nothing "
                "was sent)"
            )
        self.encryption = encryption
        self.require_atomic_deletes = require_atomic_deletes
        self._write_headers = encryption.write_headers()
        self._read_headers = encryption.read_headers()
        self._requester_pays = requester_pays
        self._endpoint_key = endpoint_key(self.endpoint)  # where the store's probed capabilities are kept
        self.metrics = Metrics()
        self._credentials = CredentialProvider(credentials, self.endpoint.region, providers=credential_providers)
        refresh = self._credentials.refresh if self._credentials.refreshable else None  # else a retry changes nothing
        self._runner = AttemptRunner(
            self.policy, self.metrics, refresh_credentials=refresh, contact=EndpointContact(self._endpoint_key)
        )
        if transport is None:
            route = Route(
                proxy_for(proxy, self.endpoint.scheme, self.endpoint.host),
                ssl_context(ca_bundle) if self.endpoint.scheme == "https" else None,
            )
            transport = AiohttpTransport(self.policy, route)
        self._transport: Transport = transport
        self._cleanup: set[asyncio.Task[None]] = set()  # see run_cleanup
        self._bucket_endpoints: dict[str, Endpoint] = {}  # buckets S3 said live in another region
        self._regional_signers: dict[tuple[Signer, str], Signer] = {}
        self._clock_offset = 0.0  # seconds added to this machine's clock when signing (learnt from S3's refusals)
        self._checksums = UploadChecksums(self.policy.checksums, self._endpoint_key)

    def __repr__(self) -> str:
        return f"S3Client(endpoint={self.endpoint.scheme}://{self.endpoint.host}, {self._credentials!r})"

    async def __aenter__(self) -> S3Client:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the connections; the client cannot be used afterwards (in-flight operations fail). Cleanup still
        running in the background (the abort of a cancelled multipart upload) is waited for first, within its own
        deadline, so closing the client right after a cancel does not leave the upload's parts stored."""
        if self._cleanup:
            await asyncio.wait(set(self._cleanup), timeout=self.policy.operation_timeout)
        await self._transport.close()

    def run_cleanup(self, work: Coroutine[Any, Any, None]) -> None:
        """Run ``work`` (cleanup a cancelled caller must not wait for) in a task that ``close()`` waits for."""
        task = asyncio.get_running_loop().create_task(work)
        self._cleanup.add(task)
        task.add_done_callback(self._cleanup.discard)

    def abort(self) -> None:
        """Close the connections synchronously, from any thread, e.g. when the client's event loop has stopped."""
        self._transport.abort()

    def stats(self) -> MetricsSnapshot:
        """Counters so far: requests by (operation, status), retries by reason, timeouts by phase, bytes."""
        return self.metrics.snapshot()

    # ----------------------------------------------------------------- plumbing

    async def _send(
        self, watchdog: Watchdog, request: S3Request, *, redirected: bool = False, reclocked: bool = False
    ) -> Response:
        """Address, sign and send one request; an error answer raises its typed error. A wrong-region answer is
        learnt and the request sent again (once), signed for the bucket's region; so is a refusal that this
        machine's clock explains (``Policy.correct_clock_skew``), signed with the server's time."""
        bucket, key, method, body = request.bucket, request.key, request.method, request.body
        endpoint = self._bucket_endpoints.get(bucket, self.endpoint) if self._bucket_endpoints else self.endpoint
        host, path = endpoint.target(bucket, key)
        qs = canonical_query(request.query) if request.query else ""
        headers = {} if request.headers is None else dict(request.headers)  # signed: never the caller's dict
        headers["host"] = host
        if self._requester_pays:
            headers[REQUEST_PAYER_HEADER] = "requester"
        signer = self._credentials.ready_signer() or await self._credentials.signer()
        if signer is not None:
            if signer.region != endpoint.region:
                signer = self._signer_for(signer, endpoint.region)
            payload_hash = EMPTY_SHA256 if not body else hashlib.sha256(body).hexdigest()
            signer.sign(method, path, qs, headers, payload_hash, now=time.time() + self._clock_offset)
        elif body:
            headers["x-amz-content-sha256"] = UNSIGNED_PAYLOAD
        status: int | str = "error"
        wire = HttpRequest(
            method,
            endpoint.scheme,
            host,
            f"{path}?{qs}" if qs else path,
            headers,
            body,
            request.on_headers,
            request.on_chunk,
            request.landing,
        )
        sent = time.time()
        try:
            response = await self._transport.send(wire, watchdog)
            status = response.status
        except asyncio.CancelledError:
            status = "cancelled"
            raise
        finally:
            self.metrics.request(request.operation, status, watchdog.elapsed())
            if body:
                self.metrics.bytes_out += len(body)
        self.metrics.bytes_in += response.received
        if response.status >= 300 or (request.error_in_200 and response.body):
            region = bucket_region(response.status, response.headers, response.body) if bucket else None
            if region is not None and region != endpoint.region and not redirected:
                self._learn_region(bucket, region)
                return await self._send(watchdog, request, redirected=True)
            code, message = xml.error_fields(response.body)
            if response.status >= 300 or code is not None:
                if signer is not None and not reclocked and self.policy.correct_clock_skew:
                    headers_in = response.headers
                    offset = clock_correction(
                        response.status,
                        code,
                        headers_in.get("Date"),
                        headers_in.get("Age"),
                        sent,
                        time.time(),
                        self._clock_offset,
                    )
                    if offset is not None:
                        self._learn_clock(offset, endpoint)
                        return await self._send(watchdog, request, redirected=redirected, reclocked=True)
                if region is not None:
                    message = f"{message or 'wrong region'} (the bucket is in {region}; pass region={region!r})"
                error = error_for_status(
                    response.status,
                    code or _status_code(response.status),
                    message,
                    server_date=response.headers.get("Date"),
                    clock_offset=self._clock_offset,
                    foreign=None if code is not None else foreign_answer(response.headers, response.body),
                    endpoint=self._endpoint_key,
                    bucket=bucket,
                    key=key or None,
                )
                if isinstance(error, errors.AccessDenied) and request.operation in _ENCRYPTED_WRITES:
                    error.add_hint(self.encryption.refused_write_hint())
                raise error
        if response.overflowed:
            raise errors.ProtocolError(
                f"the answer to {method} exceeded {len(response.body)} bytes, more than any S3 answer of this kind; "
                "the connection was closed",
                bucket=bucket,
                key=key or None,
            )
        return response

    def _learn_clock(self, offset: float, endpoint: Endpoint) -> None:
        """Sign with this machine's clock plus ``offset`` from now on (the server refused a request for skew)."""
        where = "behind" if offset > 0 else "ahead of"
        log.warning(
            "this machine's clock is %.0f s %s the clock of %s, which refused a request for it: signing with the "
            "server's time from now on (set correctClockSkew=false to refuse instead); fix the clock (NTP)",
            abs(offset),
            where,
            endpoint.host,
        )
        self._clock_offset = offset

    def _learn_region(self, bucket: str, region: str) -> None:
        """Send this bucket's requests to ``region`` from now on (S3 said it lives there)."""
        log.warning(
            "bucket %s is in region %s, not %s: re-signing for %s (pass region=%r to skip the redirect)",
            bucket,
            region,
            self.endpoint.region,
            region,
            region,
        )
        self._bucket_endpoints[bucket] = regional_endpoint(self.endpoint, region)

    def _signer_for(self, signer: Signer, region: str) -> Signer:
        """``signer``'s credentials for another region, kept until the credentials change."""
        regional = self._regional_signers.get((signer, region))
        if regional is None:
            if len(self._regional_signers) > 64:
                self._regional_signers.clear()  # old credentials' signers
            regional = self._regional_signers[(signer, region)] = signer.for_region(region)
        return regional

    # ----------------------------------------------------------------- reads

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

    async def list_page(
        self,
        bucket: str,
        prefix: str = "",
        *,
        delimiter: str | None = None,
        continuation_token: str | None = None,
        start_after: str | None = None,
        max_keys: int = 1000,
    ) -> tuple[list[ObjectInfo], list[str], str | None]:
        """One ListObjectsV2 page: (objects, common prefixes, next continuation token or None).

        Keys travel url-encoded (``encoding-type=url``: a key may hold characters XML cannot carry) and are
        decoded here."""
        query = {"list-type": "2", "max-keys": str(max_keys), "encoding-type": "url"}
        if prefix:
            query["prefix"] = prefix
        if delimiter:
            query["delimiter"] = delimiter
        if continuation_token:
            query["continuation-token"] = continuation_token
        if start_after:
            query["start-after"] = start_after

        async def attempt(watchdog: Watchdog) -> tuple[list[ObjectInfo], list[str], str | None]:
            response = await self._send(watchdog, S3Request("list", "GET", bucket, query=query))
            return xml.parse_list_page(bucket, response.body)

        return await self._runner.run("list", bucket, prefix, attempt)

    async def list_pages(
        self,
        bucket: str,
        prefix: str = "",
        *,
        delimiter: str | None = None,
        start_after: str | None = None,
        page_size: int = 1000,
    ) -> AsyncIterator[tuple[list[ObjectInfo], list[str]]]:
        """(objects, common prefixes) of each ListObjectsV2 page under ``prefix`` (at most ``page_size`` entries,
        S3's maximum and default 1,000), each page its own operation with its own deadline. A server that hands back
        a continuation token it gave before is looping: ListingLoop after that page, not an endless read. So is one
        whose page goes back to a key (or prefix) at or before one an earlier page gave (S3 lists in key order), with
        fresh tokens: ListingLoop before that page; and one that gives page after page of nothing, each saying more
        follows (``paging.MAX_EMPTY_PAGES`` in a row)."""
        token: str | None = None
        guard = ListingGuard(bucket, prefix)
        while True:
            objects, prefixes, token = await self.list_page(
                bucket,
                prefix,
                delimiter=delimiter,
                continuation_token=token,
                start_after=start_after,
                max_keys=page_size,
            )
            guard.page([o.key for o in objects] + prefixes)
            yield objects, prefixes
            if token is None:
                return
            guard.next(token)

    async def list_objects(
        self,
        bucket: str,
        prefix: str = "",
        *,
        delimiter: str | None = None,
        start_after: str | None = None,
        page_size: int = 1000,
    ) -> AsyncIterator[ObjectInfo]:
        """Every object under ``prefix``, page by page (``list_pages``: ListingLoop if the server loops)."""
        pages = self.list_pages(bucket, prefix, delimiter=delimiter, start_after=start_after, page_size=page_size)
        async for objects, _ in pages:
            for obj in objects:
                yield obj

    async def list_prefixes(self, bucket: str, prefix: str = "", delimiter: str = "/") -> list[str]:
        """The common prefixes ("directories") directly under ``prefix`` (ListingLoop if the server loops)."""
        return [p async for _, prefixes in self.list_pages(bucket, prefix, delimiter=delimiter) for p in prefixes]

    async def list_multipart_uploads(
        self, bucket: str, prefix: str = "", *, page_size: int = 1000
    ) -> AsyncIterator[MultipartUpload]:
        """Uploads under ``prefix`` that were started and neither completed nor aborted, page by page.

        A process killed mid-upload leaves one behind (its parts stay stored); ``abort_multipart_upload``
        removes it. Each page is its own operation with its own deadline.
        """
        if not 1 <= page_size <= 1000:
            raise errors.InvalidConfig(f"page_size: expected 1 to 1000, got {page_size}", bucket=bucket)
        markers: tuple[str, str] | None = None
        guard = ListingGuard(bucket, prefix, "key and upload-id marker")
        while True:
            query = {"uploads": "", "max-uploads": str(page_size), "encoding-type": "url"}
            if prefix:
                query["prefix"] = prefix
            if markers is not None:
                query["key-marker"], query["upload-id-marker"] = markers

            async def attempt(
                watchdog: Watchdog, query: dict[str, str] = query
            ) -> tuple[list[MultipartUpload], tuple[str, str] | None]:
                response = await self._send(watchdog, S3Request("list_uploads", "GET", bucket, query=query))
                return xml.parse_uploads_page(bucket, response.body)

            uploads, next_markers = await self._runner.run("list_uploads", bucket, prefix, attempt)
            guard.page([u.key for u in uploads], ordered=False)  # one key's uploads may span pages
            for upload in uploads:
                yield upload
            if next_markers is None:
                return
            guard.next(next_markers)
            markers = next_markers

    # ----------------------------------------------------------------- writes

    async def put_object(
        self,
        bucket: str,
        key: str,
        data: bytes,
        *,
        if_none_match: bool = False,
        if_match: str | None = None,
        if_match_form: EtagForm | None = None,
        content_type: str | None = None,
    ) -> PutResult:
        """Write an object; ``if_none_match=True`` creates it only if absent (PreconditionFailed otherwise).

        ``if_match``: replace it only if its ETag is this one, written in ``if_match_form``; by default in the form
        the store's probed capabilities say it honours (``probe.store_capabilities``: Ceph RGW 16 takes it only
        unquoted), else as given. The body carries its CRC64NVME (``Policy.checksums``: the store checks it and keeps
        it for readers), or its Content-MD5 where checksums are ``required`` or the store refuses the CRC header
        (``upload_checksums``)."""
        _check_key(bucket, key)
        _check_etag(bucket, key, if_match)
        headers: dict[str, str] = dict(self._write_headers)
        if if_none_match:
            headers["if-none-match"] = "*"
        if if_match is not None:
            if if_match_form is None and (verdict := VERDICTS.get(self._endpoint_key, bucket)) is not None:
                if_match_form = verdict.if_match_form
            headers["if-match"] = if_match if if_match_form is None else if_match_form.render(if_match)
        if content_type:
            headers["content-type"] = content_type

        async def put(crc: bool) -> PutResult:
            sent = {**headers, **self._checksums.body_headers(data, crc=crc)}

            async def attempt(watchdog: Watchdog) -> PutResult:
                response = await self._send(
                    watchdog, S3Request("put", "PUT", bucket, key, headers=dict(sent), body=data)
                )
                return PutResult(response.headers.get("ETag"), self._checksums.stated(sent))

            return await self._runner.run("put", bucket, key, attempt)

        return await self._checksums.send(Feature.UPLOAD_CHECKSUMS, put)

    async def create_multipart_upload(self, bucket: str, key: str, *, content_type: str | None = None) -> str:
        """Start a multipart upload; where checksums are sent, declared with a full-object CRC64NVME, which this
        client's ``upload_part`` and ``complete_multipart_upload`` then carry (parts of one upload go through one
        client)."""
        _check_key(bucket, key)
        headers = {"content-type": content_type} if content_type else {}
        headers.update(self._write_headers)

        async def create(full_object: bool) -> str:
            sent = {**headers, **UploadChecksums.create_headers(full_object)}

            async def attempt(watchdog: Watchdog) -> str:
                response = await self._send(
                    watchdog,
                    S3Request("create_multipart", "POST", bucket, key, query={"uploads": ""}, headers=dict(sent)),
                )
                upload_id = xml.parse(response.body, "CreateMultipartUpload answer").findtext("UploadId")
                if not upload_id:
                    raise errors.RequestError("CreateMultipartUpload returned no UploadId", bucket=bucket, key=key)
                return upload_id

            upload_id = await self._runner.run("create_multipart", bucket, key, attempt)
            if full_object:
                self._checksums.created(upload_id)
            return upload_id

        return await self._checksums.send(Feature.FULL_OBJECT_MULTIPART, create)

    async def upload_part(self, bucket: str, key: str, upload_id: str, part_number: int, data: bytes) -> str:
        """Upload one part (with its CRC when the upload was created with a checksum); returns its ETag."""
        _check_key(bucket, key)
        query = {"partNumber": str(part_number), "uploadId": upload_id}
        integrity = {**self._checksums.part_headers(upload_id, part_number, data), **self._read_headers}

        async def attempt(watchdog: Watchdog) -> str:
            headers = dict(integrity)
            response = await self._send(
                watchdog,
                S3Request("upload_part", "PUT", bucket, key, query=query, headers=headers, body=data),
            )
            etag = response.headers.get("ETag")
            if not etag:
                raise errors.RequestError("UploadPart returned no ETag", bucket=bucket, key=key)
            return etag

        return await self._runner.run("upload_part", bucket, key, attempt)

    async def complete_multipart_upload(
        self, bucket: str, key: str, upload_id: str, parts: list[tuple[int, str]]
    ) -> PutResult:
        """Assemble the parts; an <Error> inside a 200 response is detected and retried like a 5xx.

        A retry after a lost answer finds the upload gone (404 NoSuchUpload) although the object was written:
        the object is then looked up, and accepted if its ETag is the one S3 gives these parts. An answer whose
        <ETag> is empty (Ceph RGW 16's first answer) completed the upload: the ETag is read with one HEAD
        (``complete_multipart_head`` in the stats), never by completing again. An upload created with a checksum
        states each part's CRC and the whole object's, combined from them: S3 checks it against the object it
        assembled. A store that refuses it completes without it (learnt once), the parts' CRCs still in the XML;
        one that refuses those too (Swift 2.30.1: a ``<Part>`` carrying one is 400 MalformedXML) completes with the
        parts' numbers and ETags alone, which still name what is assembled (each part's CRC went with its upload).
        """
        _check_key(bucket, key)
        ordered = sorted(parts)
        values, full_object = self._checksums.completion(upload_id, [n for n, _ in ordered])
        element = self._checksums.element()

        async def complete(full: bool) -> PutResult:
            body = xml.complete_multipart_request(ordered, values, element)
            headers = {**full_object, **self._read_headers} if full else dict(self._read_headers)
            try:
                result = await self._complete(bucket, key, upload_id, ordered, body, headers)
            except errors.RequestError as exc:
                if full or not values or not is_refusal(exc):
                    raise
                bare = xml.complete_multipart_request(ordered)  # the fallback's last step: no part checksums either
                result = await self._complete(bucket, key, upload_id, ordered, bare, headers)
            return replace(result, checksum=self._checksums.stated(headers))

        if full_object:
            result = await self._checksums.send(Feature.FULL_OBJECT_MULTIPART, complete)
        else:
            result = await complete(False)
        self._checksums.finished(upload_id)  # kept after a failure: the caller may complete it again
        return result

    async def _complete(
        self,
        bucket: str,
        key: str,
        upload_id: str,
        ordered: list[tuple[int, str]],
        body: bytes,
        headers: dict[str, str],
    ) -> PutResult:
        """CompleteMultipartUpload with ``body`` and ``headers``, its lost answer recognised (see the caller)."""
        tries = 0
        gone: list[errors.NotFound] = []

        async def attempt(watchdog: Watchdog) -> PutResult | None:
            nonlocal tries
            tries += 1
            try:
                response = await self._send(
                    watchdog,
                    S3Request(
                        "complete_multipart",
                        "POST",
                        bucket,
                        key,
                        query={"uploadId": upload_id},
                        headers=dict(headers),
                        body=body,
                        error_in_200=True,
                    ),
                )
            except errors.NotFound as exc:
                if tries == 1 or exc.code != "NoSuchUpload":
                    raise
                gone.append(exc)
                return None
            return _put_result(response.body, "CompleteMultipartUploadResult", bucket, key, etag_required=False)

        result = await self._runner.run("complete_multipart", bucket, key, attempt)
        stated = self._checksums.stated(headers)
        if result is None:  # looked up once the attempt is over: it holds a connection slot and a stall timer
            return await self._completed_by_lost_answer(bucket, key, ordered, stated, gone[-1])
        if result.etag is None:
            return await self._etag_left_out(bucket, key, ordered, stated)
        return result

    async def _made_of(
        self, bucket: str, key: str, info: ObjectInfo, parts: list[tuple[int, str]], stated: StoredChecksum | None
    ) -> bool:
        """Whether the object ``info`` describes is the one these parts make: its ETag is the one S3 gives them or,
        where an ETag is not its data's MD5 (SSE-KMS, SSE-C, a store of other ETags), the whole-object checksum it
        keeps is the one the completion stated (one HEAD). False when that cannot be told."""
        expected = multipart_etag([etag for _, etag in parts])
        if expected is not None and same_etag(info.etag, expected):
            return True
        if (expected is not None and self.encryption.etags_are_digests) or stated is None:
            return False
        try:
            kept = await self.object_checksum(bucket, key, if_match=info.etag)
        except errors.PreconditionFailed:  # replaced again since the HEAD: not ours to claim
            return False
        return kept is not None and kept.algorithm == stated.algorithm and kept.value == stated.value

    def _why_not_made_of(self, etag: str | None, parts: list[tuple[int, str]], stated: StoredChecksum | None) -> str:
        """Why ``_made_of`` said no, for an error or a log line."""
        expected = multipart_etag([e for _, e in parts])
        if expected is not None and self.encryption.etags_are_digests:
            return f"its ETag is {etag}, these parts make {expected}"
        if stated is None:
            return (
                f"its ETag ({etag}) is not an MD5 these parts' ETags make (SSE-KMS, SSE-C or another store's "
                "ETags), and no checksum was stated to tell by (checksums are not when_supported)"
            )
        return f"its ETag ({etag}) does not tell, and the checksum it keeps is not the {stated.describe()} stated"

    async def _etag_left_out(
        self, bucket: str, key: str, parts: list[tuple[int, str]], stated: StoredChecksum | None
    ) -> PutResult:
        """The upload completed but the answer named no ETag: the object's, if it is the one these parts make (one
        HEAD, see ``_made_of``); None if that cannot be told (another writer replaced it since, or neither the
        parts' ETags nor a checksum tell)."""
        info = await self._head(bucket, key, None, COMPLETE_MULTIPART_HEAD)
        if await self._made_of(bucket, key, info, parts, stated):
            return PutResult(info.etag)
        log.info(
            "s3://%s/%s: the store's CompleteMultipartUpload answer had no ETag and the object now there is not "
            "known to be the one these parts make (%s): its ETag is unknown",
            bucket,
            key,
            self._why_not_made_of(info.etag, parts, stated),
        )
        return PutResult(None)

    async def _completed_by_lost_answer(
        self,
        bucket: str,
        key: str,
        parts: list[tuple[int, str]],
        stated: StoredChecksum | None,
        exc: errors.NotFound,
    ) -> PutResult:
        """After NoSuchUpload on a retry: the PutResult if the object is the one these parts make (``_made_of``),
        else ``exc``."""
        try:
            info = await self.head_object(bucket, key)
        except errors.NotFound:
            raise exc from None
        if await self._made_of(bucket, key, info, parts, stated):
            log.info("s3://%s/%s: an earlier attempt completed the upload (its answer was lost)", bucket, key)
            return PutResult(info.etag)
        certain = multipart_etag([e for _, e in parts]) is not None and self.encryption.etags_are_digests
        raise errors.NotFound(
            "the multipart upload is gone (NoSuchUpload) and the object now at the key is "
            f"{'not' if certain else 'not known to be'} the one these parts make "
            f"({self._why_not_made_of(info.etag, parts, stated)}); another writer may have completed or replaced it",
            bucket=bucket,
            key=key,
            status=404,
            code="NoSuchUpload",
        ) from exc

    async def abort_multipart_upload(self, bucket: str, key: str, upload_id: str) -> None:
        _check_key(bucket, key)
        self._checksums.finished(upload_id)

        async def attempt(watchdog: Watchdog) -> None:
            try:
                await self._send(
                    watchdog, S3Request("abort_multipart", "DELETE", bucket, key, query={"uploadId": upload_id})
                )
            except errors.NotFound:
                return

        await self._runner.run("abort_multipart", bucket, key, attempt)

    async def upload_exists(self, bucket: str, key: str, upload_id: str) -> bool:
        """Whether a multipart upload is still open (neither completed nor aborted): ListParts of at most one part,
        answered 200 while it is and 404 NoSuchUpload once it is not. ListMultipartUploads is no substitute: on Ceph
        RGW 16 a listing of a write's prefix named none of its open uploads (measured)."""
        _check_key(bucket, key)

        async def attempt(watchdog: Watchdog) -> bool:
            try:
                await self._send(
                    watchdog,
                    S3Request("list_parts", "GET", bucket, key, query={"uploadId": upload_id, "max-parts": "1"}),
                )
            except errors.NotFound:
                return False
            return True

        return await self._runner.run("list_parts", bucket, key, attempt)

    async def create_bucket(self, bucket: str) -> None:
        """Create a bucket in the client's region; a bucket that already exists and is ours is not an error."""
        region = self.endpoint.region
        body = None
        if region != "us-east-1":
            body = (
                '<CreateBucketConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
                f"<LocationConstraint>{region}</LocationConstraint></CreateBucketConfiguration>"
            ).encode()

        async def attempt(watchdog: Watchdog) -> None:
            try:
                await self._send(watchdog, S3Request("create_bucket", "PUT", bucket, body=body))
            except errors.RequestError as exc:
                if exc.code != "BucketAlreadyOwnedByYou":
                    raise

        await self._runner.run("create_bucket", bucket, None, attempt)

    def multipart_writer(
        self,
        bucket: str,
        key: str,
        *,
        part_size: int = 8 * 1024 * 1024,
        concurrency: int = 4,
        content_type: str | None = None,
        slots: asyncio.Semaphore | None = None,
        after_part: Callable[[], None] | None = None,
    ) -> MultipartWriter:
        """A streaming writer: parts uploaded in parallel, bounded memory, aborted on any failure (see
        s3io.s3.multipart for ``slots``, ``after_part`` and ``stage()``)."""
        _check_key(bucket, key)
        return MultipartWriter(
            self,
            bucket,
            key,
            part_size=part_size,
            concurrency=concurrency,
            content_type=content_type,
            slots=slots,
            after_part=after_part,
        )

    async def delete_object(
        self, bucket: str, key: str, *, if_match: str | None = None, if_unmodified_since: float | None = None
    ) -> None:
        """Delete one object (absent objects are not an error, as in S3). ``if_match``: only if it has that ETag;
        ``if_unmodified_since`` (seconds since the epoch): only if its Last-Modified is not later, by Ceph RGW's
        ``x-amz-delete-if-unmodified-since`` (ISO 8601, whole seconds; a store without it ignores it: the probe
        says which honours it). Either refused: PreconditionFailed."""
        _check_key(bucket, key)
        _check_etag(bucket, key, if_match)
        headers = {"if-match": if_match} if if_match is not None else {}
        if if_unmodified_since is not None:
            headers["x-amz-delete-if-unmodified-since"] = iso8601_seconds(if_unmodified_since)

        async def attempt(watchdog: Watchdog) -> None:
            await self._send(watchdog, S3Request("delete", "DELETE", bucket, key, headers=dict(headers)))

        await self._runner.run("delete", bucket, key, attempt)

    async def delete_objects(
        self, bucket: str, keys: list[str], *, etags: Mapping[str, str] | None = None
    ) -> DeleteResult:
        """Delete many objects in DeleteObjects batches of 1000; per-key failures come back in ``errors``.

        ``etags``: a key listed there is deleted only if it still has that ETag (S3's per-object condition; a
        store that ignores it deletes anyway: check support before relying on it). A key holding a character XML
        1.0 cannot carry as sent (a control character other than tab and LF) cannot travel in DeleteObjects' body:
        such keys are deleted one DELETE each (If-Match their ETag), their outcome reported the same way."""
        etags = dict(etags or {})
        for key in keys:
            _check_key(bucket, key)
            _check_etag(bucket, key, etags.get(key))
        deleted: list[str] = []
        failed: list[DeleteError] = []
        for key in [k for k in keys if not xml.xml_safe(k)]:
            try:
                await self.delete_object(bucket, key, if_match=etags.get(key))
                deleted.append(key)
            except _KEY_REFUSALS as exc:  # S3's answer for this key, as DeleteObjects reports one
                failed.append(DeleteError(key, exc.code or type(exc).__name__, exc.message))
        keys = [k for k in keys if xml.xml_safe(k)]
        for i in range(0, len(keys), DELETE_BATCH):
            batch = keys[i : i + DELETE_BATCH]
            body = xml.delete_request(batch, etags)

            async def attempt(
                watchdog: Watchdog, body: bytes = body, batch: list[str] = batch
            ) -> tuple[list[str], list[DeleteError]]:
                response = await self._send(
                    watchdog,
                    S3Request(
                        "delete_many",
                        "POST",
                        bucket,
                        query={"delete": ""},
                        headers={"content-md5": _md5(body)},
                        body=body,
                        error_in_200=True,
                    ),
                )
                ok, bad = xml.parse_delete_result(response.body)
                answered = set(ok).union(e.key for e in bad)
                missing = [k for k in batch if k not in answered]
                if missing:
                    raise errors.ProtocolError(
                        f"a DeleteObjects answer says nothing of {len(missing)} of the {len(batch)} keys sent (e.g. "
                        f"{xml.shorten(missing[0], 128)!r}): neither deleted nor failed",
                        bucket=bucket,
                    )
                return ok, bad

            ok, bad = await self._runner.run("delete_many", bucket, None, attempt)
            deleted.extend(ok)
            failed.extend(bad)
        return DeleteResult(tuple(deleted), tuple(failed))

    async def copy_object(
        self, src_bucket: str, src_key: str, dst_bucket: str, dst_key: str, *, if_match: str | None = None
    ) -> PutResult:
        """Server-side copy (up to 5 GiB); ``if_match`` pins the source version. Where checksums are sent
        (``Policy.checksums``), the copy asks for the CRC64NVME of what it wrote (``x-amz-checksum-algorithm``):
        ``PutResult.checksum`` is the one the answer states (None where it states none), for the caller to compare
        with the source's; a store that refuses the header is learnt once and copied to without it."""
        _check_key(src_bucket, src_key)
        _check_key(dst_bucket, dst_key)
        _check_etag(src_bucket, src_key, if_match)
        headers = {
            "x-amz-copy-source": quote(f"/{src_bucket}/{src_key}", safe="/~"),
            **self._write_headers,
            **self.encryption.copy_source_headers(),
        }
        if if_match is not None:
            headers["x-amz-copy-source-if-match"] = if_match

        async def copy(checksum: bool) -> PutResult:
            sent = {**headers, ALGORITHM_HEADER: UPLOAD_ALGORITHM.name} if checksum else headers

            async def attempt(watchdog: Watchdog) -> PutResult:
                response = await self._send(
                    watchdog,
                    S3Request("copy", "PUT", dst_bucket, dst_key, headers=dict(sent), error_in_200=True),
                )
                return _put_result(response.body, "CopyObjectResult", dst_bucket, dst_key)

            return await self._runner.run("copy", dst_bucket, dst_key, attempt)

        return await self._checksums.send(Feature.UPLOAD_CHECKSUMS, copy)


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


def _check_etag(bucket: str, key: str, etag: str | None, what: str = "if_match") -> None:
    """A condition with an empty ETag would be sent as no condition at all: refuse it."""
    if etag is not None and not bare_etag(etag):
        raise errors.InvalidConfig(
            f"{what}: an empty ETag would make this request unconditional; pass the object's ETag or None",
            bucket=bucket,
            key=key,
        )


def _check_key(bucket: str, key: str) -> None:
    """An object operation needs a key: an empty one would address the bucket itself (its listing, or DeleteBucket)."""
    if not key:
        raise errors.InvalidConfig(
            f"an empty object key addresses the bucket s3://{bucket}/ itself, not an object; give the object's key",
            bucket=bucket,
        )


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


def _put_result(body: bytes, root: str, bucket: str, key: str, *, etag_required: bool = True) -> PutResult:
    """The ETag of a CopyObject or CompleteMultipartUpload answer; an answer that is not ``root`` with an ETag (an
    error or a truncated body inside a 200) is a ProtocolError, never a write taken as done. Without
    ``etag_required``, an empty <ETag> element in a ``root`` answer is PutResult(None)."""
    element = xml.parse(body, f"{root} answer")
    etag = element.findtext("ETag")
    if not etag and not etag_required and element.tag == root and element.find("ETag") is not None:
        return PutResult(None)
    if element.tag != root or not etag:
        raise errors.ProtocolError(
            f"a 200 whose body is not a {root} with an ETag ({len(body)} bytes, root <{element.tag}>): the write "
            "cannot be taken as done",
            bucket=bucket,
            key=key,
        )
    return PutResult(etag, xml.stated_checksum(element))


def _md5(data: bytes) -> str:
    return base64.b64encode(hashlib.md5(data).digest()).decode()


def _status_code(status: int) -> str:
    return {404: "NotFound", 403: "AccessDenied", 412: "PreconditionFailed", 503: "SlowDown"}.get(status, str(status))


def iso8601_seconds(when: float) -> str:
    """``when`` (seconds since the epoch) as ISO 8601 UTC in whole seconds, the form RGW's delete condition takes
    (``2026-11-28T15:04:05Z``; RFC 1123 and epoch forms are refused with 400). Truncated, as Last-Modified is."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(int(when)))
