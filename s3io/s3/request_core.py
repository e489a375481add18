"""The generic request core of the S3 client: one request addressed, signed (the bucket's region, the clock S3
keeps) and sent through the transport, its error answer raised as a typed error; the client's lifetime (close,
cleanup, abort) and counters; the checks and answer parsing the operation families share.

``S3Client`` (s3io.s3.client) is this core with the operation families on it: reads (s3io.s3.object_reads), listings
(s3io.s3.object_listing), writes and deletes (s3io.s3.object_writes) and multipart uploads
(s3io.s3.multipart_uploads), as object_store keeps its generic HTTP client apart from the S3 operations. Each
operation builds an ``S3Request`` and runs its attempt through ``self._runner.run(...)``.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
import time
from collections.abc import Coroutine
from typing import Any, Self

from s3io import errors
from s3io.metrics import Metrics, MetricsSnapshot
from s3io.policy import Policy
from s3io.resilience.attempt import AttemptRunner
from s3io.resilience.deadline import Watchdog
from s3io.resilience.first_contact import EndpointContact
from s3io.resilience.retryable import clock_correction, error_for_status, foreign_answer
from s3io.s3 import xml
from s3io.s3.capabilities import endpoint_key
from s3io.s3.encryption import NO_ENCRYPTION, SSE_C, Encryption
from s3io.s3.etags import bare_etag
from s3io.s3.redirect import bucket_region, regional_endpoint
from s3io.s3.request import S3Request
from s3io.s3.types import PutResult
from s3io.s3.upload_checksums import UploadChecksums
from s3io.transport.credentials import CredentialProvider, Credentials
from s3io.transport.endpoint import Endpoint, resolve_endpoint
from s3io.transport.exchange import Response
from s3io.transport.http_session import Route
from s3io.transport.proxy import proxy_for
from s3io.transport.sigv4 import EMPTY_SHA256, UNSIGNED_PAYLOAD, Signer, canonical_query
from s3io.transport.transport import AiohttpTransport, HttpRequest, Transport
from s3io.transport.trust import ssl_context

log = logging.getLogger("s3io")

# The writes a bucket policy on encryption judges (S3 authorizes all three as s3:PutObject, and judges an upload's
# parts by the encryption it was created with): an AccessDenied there says which encryption was asked for.
_ENCRYPTED_WRITES = frozenset({"put", "create_multipart", "copy"})

REQUEST_PAYER_HEADER = "x-amz-request-payer"


class RequestCore:
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

    async def __aenter__(self) -> Self:
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
