"""s3io.fs.S3FileSystem: s3fs with every S3 request under an s3io Policy, and reads served by s3io's S3Client.

How s3fs is wrapped (one place each):
- ``_call_s3``: s3fs sends every botocore request through it. Here it runs the request through s3io's
  AttemptRunner: each attempt under a Watchdog (response within connect + first_byte timeouts, plus an
  upload allowance for a request body; the attempt and operation caps), retries decided by
  ``s3io.resilience.retryable.classify`` after botocore errors become typed s3io errors (``_typed_boto_error``).
- Multipliers off: botocore makes one attempt per call (``retries={"total_max_attempts": 1}``; note that
  botocore's ``max_attempts`` counts *retries*, so ``max_attempts: 1`` would still mean two attempts), and
  s3fs's own loop makes one (``retries = 1``). botocore's connect/read timeouts come from the policy
  (connect_timeout, read_timeout = stall_timeout) and its sockets get the policy's TCP options.
- Reads: ``_cat_file``, ``_cat_ranges``, ``_get_file`` and ``open(...).read()`` (S3IOFile._fetch_range) use
  an s3io S3Client, one per event loop (resumable, ETag-pinned ranged GETs with stall timers); ``open()`` for
  reading sends no HEAD (S3IOFile: the size and ETag come from fsspec's listing or from a GET of the object's last
  bytes, held to serve the reads they cover). s3fs's options for
  company buckets are the S3Client's too (``_native_settings``): SSE-C (``s3_additional_kwargs``'
  ``SSECustomerAlgorithm`` / ``SSECustomerKey``), requester pays (``requester_pays=True``), a CA bundle
  (``client_kwargs={"verify": path}``), proxies (``config_kwargs={"proxies": {...}}``, or the environment's). The
  few options only botocore can honour (versions, profiles, unverified TLS, proxy TLS settings, client
  certificates, other GetObject parameters) send reads through botocore instead, still under the policy via
  ``_call_s3``.

Names: ``S3FileSystem`` serves ``s3io://``; ``S3FileSystemAsS3`` is the same class named ``s3`` first, for tools that
choose their read path by the protocol's name (DuckDB) and for ``install_as_s3()``, which registers it for ``s3://``.

A raw view of the objects, as s3fs's contract is: ``ls``, ``find``, ``glob`` and reads show every object as it is
and do not apply the compaction journal (s3io.table), so a prefix mid-compaction may show a group's output and its
inputs both. The project's own readers (``s3io.read_parquet``, the Spark source) list through ``s3io.table``.

Errors keep s3fs's contract (FileNotFoundError, PermissionError, FileExpired, OSError with errno), chained
(``__cause__``) to the typed s3io error that names the operation, object, attempts and time spent.
"""

from __future__ import annotations

import asyncio
import base64
import errno
import hashlib
import logging
import os
import shutil
import tempfile
import uuid
import weakref
from collections.abc import AsyncIterator, Callable, Hashable, Iterable, Mapping
from contextlib import suppress
from typing import Any, TypeVar
from urllib.parse import urlsplit

import aiohttp
import fsspec
import s3fs
from botocore.exceptions import (
    ClientError,
    ConnectTimeoutError,
    HTTPClientError,
    IncompleteReadError,
    ReadTimeoutError,
    ResponseStreamingError,
)
from botocore.exceptions import ConnectionError as BotoConnectionError
from botocore.parsers import ResponseParserError
from fsspec.asyn import _run_coros_in_chunks, sync, sync_wrapper
from fsspec.callbacks import DEFAULT_CALLBACK
from s3fs.errors import ERROR_CODE_TO_EXCEPTION, translate_boto_error
from s3fs.utils import FileExpired

from s3io import errors, native_release
from s3io.aio import map_bounded
from s3io.engine.ranges import iter_parts
from s3io.metrics import Metrics, MetricsSnapshot
from s3io.policy import Policy
from s3io.resilience.attempt import AttemptRunner
from s3io.resilience.deadline import Watchdog
from s3io.resilience.retryable import error_for_status, from_wire
from s3io.s3.client import S3Client
from s3io.s3.etags import bare_etag, same_etag
from s3io.s3.get_range import BOUNDED, GetRange
from s3io.s3.object_reads import stated_size
from s3io.s3.paging import ListingGuard
from s3io.s3.types import GetResult
from s3io.store import StoreConfig
from s3io.transport.credentials import ANONYMOUS, Credentials
from s3io.transport.proxy import DIRECT
from s3io.transport.sockets import socket_factory

__all__ = ["PROTOCOL", "S3FileSystem", "S3FileSystemAsS3", "S3IOFile", "install_as_s3", "uninstall_as_s3"]

log = logging.getLogger("s3io.fs")
T = TypeVar("T")

PROTOCOL = "s3io"
NO_BOTOCORE_RETRIES = {"total_max_attempts": 1, "mode": "standard"}
# A request body extends the response deadline by its size at this floor rate (1 MiB/s): a 50 MiB part
# may take 50 s more than a HEAD; slower uploads need a larger first_byte_timeout.
UPLOAD_FLOOR_BYTES_PER_SECOND = 1 << 20
CLOSE_TIMEOUT_SECONDS = 2.0
DELETE_OBJECTS_MD5 = "s3io-delete-objects-md5"  # the handler's id: registered once per botocore client
# GetObject parameters the S3Client does not send: a read that needs one goes through botocore.
BOTOCORE_ONLY_GET_PARAMS = frozenset(
    {
        "ExpectedBucketOwner",
        "IfModifiedSince",
        "IfNoneMatch",
        "IfUnmodifiedSince",
        "PartNumber",
        "ResponseCacheControl",
        "ResponseContentDisposition",
        "ResponseContentEncoding",
        "ResponseContentLanguage",
        "ResponseContentType",
        "ResponseExpires",
        "VersionId",
    }
)
SSE_C_PARAMS = ("SSECustomerAlgorithm", "SSECustomerKey", "SSECustomerKeyMD5")
# errno for the typed errors that are not OSErrors already, as s3fs maps the same S3 codes.
_ERRNO = (
    (errors.Throttled, errno.EBUSY),
    (errors.RetryBudgetExhausted, errno.EBUSY),
    (errors.ServerError, getattr(errno, "EREMOTEIO", errno.EIO)),
    (errors.PreconditionFailed, errno.EINVAL),
    (errors.RequestError, errno.EINVAL),
)
# open() for reading learns the size and ETag from one GET of the object's last bytes (no HEAD), at most a block: a
# footer-first reader (parquet, DuckDB, ORC) reads its footer from them, and a file this small is read by it alone.
OPEN_PROBE_BYTES = 256 << 10
BODY_CHUNK = 1 << 16  # bytes asked of a botocore body per timed read
DOWNLOAD_FLOOR_BYTES_PER_SECOND = 1 << 20  # past the operation's deadline, a body read must keep up this rate
# Typed errors that stand for an answer from S3: raised as s3fs would raise that answer.
_S3_ANSWERS = (
    errors.NotFound,
    errors.AccessDenied,
    errors.PreconditionFailed,
    errors.RequestError,
    errors.Throttled,
    errors.ServerError,
)


class S3FileSystem(s3fs.S3FileSystem):
    """s3fs's filesystem with s3io deadlines and retries on every request and s3io's resumable reads.

    Takes s3fs's storage options plus ``policy`` (a Policy, or a mapping of option strings such as
    ``{"connectTimeout": "3s"}``) and any Policy field as a flat option (``max_attempts=3``,
    ``stall_timeout="5s"``); flat options override ``policy``, which overrides ``S3IO_*`` variables.
    Serves ``s3io://bucket/key``; ``install_as_s3()`` makes it serve ``s3://`` and ``s3a://`` too.
    """

    protocol = (PROTOCOL, "s3", "s3a")
    retries = 1  # s3fs's own retry loop: one pass; the policy retries

    def __init__(self, *args: Any, policy: Policy | Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        flat = {name: kwargs.pop(name) for name in Policy.field_names() if name in kwargs}
        self.policy = _resolve_policy(policy, flat)
        super().__init__(*args, **kwargs)
        self.metrics = Metrics()  # botocore requests, by botocore operation name (head_object, put_object, ...)
        refresh = None if self.anon or self.key else self._refresh_botocore_credentials
        self._runner = AttemptRunner(self.policy, self.metrics, refresh_credentials=refresh)
        self._single_runner: AttemptRunner | None = None
        self._retired_stats = MetricsSnapshot()  # counters of S3Clients already closed
        self._s3io_clients: dict[asyncio.AbstractEventLoop, S3Client] = {}
        self._botocore_reads_because = self._static_botocore_read_reason()
        self._native = self._native_settings() if self._botocore_reads_because is None else {}
        if self._botocore_reads_because:
            log.info(
                "s3io.fs: reads go through botocore (under the policy) because of %s", self._botocore_reads_because
            )
        weakref.finalize(self, _close_clients_now, self._s3io_clients)

    # ------------------------------------------------------------------ botocore under the policy

    def _prepare_config_kwargs(self) -> dict[str, Any]:
        """botocore Config: no botocore retries; timeouts, pool size and TCP options from the policy."""
        config = dict(self.config_kwargs)
        if config.get("retries") not in (None, NO_BOTOCORE_RETRIES):
            log.warning("s3io.fs: config_kwargs['retries'] ignored; the s3io policy retries (max_attempts)")
        config["retries"] = dict(NO_BOTOCORE_RETRIES)
        config.setdefault("connect_timeout", self.policy.connect_timeout)
        config.setdefault("read_timeout", self.policy.stall_timeout)
        config.setdefault("max_pool_connections", self.policy.max_connections)
        connector_args = dict(config.get("connector_args") or {})
        connector_args.setdefault("socket_factory", socket_factory(self.policy))
        config["connector_args"] = connector_args
        return config

    async def set_session(self, refresh: bool = False, kwargs: Mapping[str, Any] | None = None) -> Any:
        """s3fs's botocore client, its DeleteObjects given a Content-MD5 (``_delete_objects_md5``)."""
        s3 = await super().set_session(refresh, dict(kwargs or {}))
        s3.meta.events.register("before-call.s3.DeleteObjects", _delete_objects_md5, unique_id=DELETE_OBJECTS_MD5)
        return s3

    async def _call_s3(self, method: str, *akwarglist: Mapping[str, Any], **kwargs: Any) -> Any:
        """One botocore request under the policy: a Watchdog per attempt, retries by s3io's table."""
        await self.set_session()
        bucket, key = kwargs.get("Bucket"), kwargs.get("Key")
        call_kwargs = self._get_s3_method_kwargs(getattr(self._s3, method), *akwarglist, **kwargs)
        rewind, body_size, runner = self._body_plan(call_kwargs.get("Body"))
        policy = self.policy
        response_budget = policy.connect_timeout + policy.first_byte_timeout + body_size / UPLOAD_FLOOR_BYTES_PER_SECOND

        async def attempt(watchdog: Watchdog) -> Any:
            if rewind is not None:
                rewind()
            s3 = await self.get_s3(bucket)
            call = getattr(s3, method)
            watchdog.start_phase("first_byte", response_budget)
            loop = asyncio.get_running_loop()
            started = loop.time()
            try:
                out = await call(**call_kwargs)
            except BaseException as exc:
                self.metrics.request(method, _status_of(exc), loop.time() - started)
                if not isinstance(exc, Exception):
                    raise
                typed = _typed_boto_error(exc, method, bucket, key)
                if typed is exc:
                    raise
                raise typed from exc
            status = out.get("ResponseMetadata", {}).get("HTTPStatusCode", 200) if isinstance(out, dict) else 200
            self.metrics.request(method, status, loop.time() - started)
            return out

        try:
            out = await runner.run(method, bucket, key, attempt)
        except errors.S3IOError as exc:
            translated = _fsspec_error(exc, _path(bucket, key))
            if translated is exc:
                raise
            raise translated from exc
        if method == "get_object" and isinstance(out, dict) and "Body" in out:
            out["Body"] = _WatchedBody(out["Body"], policy, bucket, key)
        return out

    call_s3 = sync_wrapper(_call_s3)  # s3fs's call_s3 wraps s3fs's own _call_s3 function

    async def _list_pages(self, method: str, **kwargs: Any) -> AsyncIterator[dict[str, Any]]:
        """s3fs's listing pages, each under the policy (``_call_s3``), with the S3 client's loop checks
        (``paging.ListingGuard``): a server that loops ends the listing with an OSError (cause ListingLoop)."""
        bucket, prefix = kwargs.get("Bucket", ""), kwargs.get("Prefix", "")
        versions = method == "list_object_versions"
        guard = ListingGuard(bucket, prefix, "key and version-id marker" if versions else "continuation token")
        while True:
            out = await self._call_s3(method, **kwargs)
            entries = [*out.get("Contents", []), *out.get("Versions", []), *out.get("DeleteMarkers", [])]
            names = [e["Key"] for e in entries] + [p["Prefix"] for p in out.get("CommonPrefixes", [])]
            marker: Hashable = None
            try:
                guard.page(names, ordered=not versions)  # one key's versions may span pages
                if out.get("IsTruncated"):
                    if versions:
                        marker = (out.get("NextKeyMarker", ""), out.get("NextVersionIdMarker", ""))
                    else:
                        marker = out.get("NextContinuationToken")
                        if not marker:
                            raise errors.ProtocolError(
                                "a listing page says more follows (IsTruncated) but gives no continuation token",
                                bucket=bucket,
                                key=prefix,
                            )
                    guard.next(marker)
            except errors.ProtocolError as exc:
                raise _fsspec_error(exc, _path(bucket, prefix)) from exc
            yield out
            if marker is None:
                return
            if versions:
                kwargs["KeyMarker"], kwargs["VersionIdMarker"] = marker
            else:
                kwargs["ContinuationToken"] = marker

    def _body_plan(self, body: Any) -> tuple[Callable[[], Any] | None, int, AttemptRunner]:
        """(rewind before each attempt, body size, runner): a body that cannot be re-sent gets one attempt."""
        if body is None:
            return None, 0, self._runner
        if isinstance(body, bytes | bytearray | str):
            return None, len(body), self._runner
        if isinstance(body, memoryview):
            return None, body.nbytes, self._runner
        seekable = getattr(body, "seekable", None)
        if callable(seekable) and seekable():
            position = body.tell()
            size = max(0, body.seek(0, os.SEEK_END) - position)
            body.seek(position)
            return (lambda: body.seek(position)), size, self._runner
        if self._single_runner is None:
            self._single_runner = AttemptRunner(self.policy.replace(max_attempts=1), self.metrics)
        return None, 0, self._single_runner

    async def _refresh_botocore_credentials(self) -> None:
        """After ExpiredToken: a new botocore client re-resolves credentials from the provider chain."""
        await self.set_session(refresh=True)

    # ------------------------------------------------------------------ reads through s3io

    @property
    def reads_via_s3io(self) -> bool:
        """Whether plain reads use the s3io S3Client (False when an option needs botocore)."""
        return self._botocore_reads_because is None

    def _static_botocore_read_reason(self) -> str | None:
        """Why reads must use botocore for this instance's options (None: s3io can serve them)."""
        get_params = BOTOCORE_ONLY_GET_PARAMS.intersection({**self.s3_additional_kwargs, **self.req_kw})
        if get_params:
            return f"GetObject parameters {sorted(get_params)}"
        if not getattr(self, "_session_is_owned", self.session is None):
            return "a caller-provided botocore session"
        if self.kwargs.get("profile"):
            return "a named profile"
        verify = self.client_kwargs.get("verify")
        if verify is not None and not isinstance(verify, str | os.PathLike) and verify is not True:
            return "client_kwargs['verify'] (TLS without verification)"
        for name in ("proxies_config", "client_cert"):
            if self.config_kwargs.get(name) is not None:
                return f"config_kwargs[{name!r}]"
        endpoint = self._endpoint_url()
        if endpoint is None and not self.client_kwargs.get("use_ssl", self.use_ssl):
            return "use_ssl=False without an endpoint_url"
        return None

    def _native_settings(self) -> dict[str, Any]:
        """The S3Client settings that s3fs's options for company buckets give (see the module doc): the SSE-C key,
        requester pays, the CA bundle, the proxy; botocore's meaning of each, so reads and writes agree."""
        settings: dict[str, Any] = {}
        given = {**self.s3_additional_kwargs, **self.req_kw}
        algorithm, key = given.get("SSECustomerAlgorithm"), given.get("SSECustomerKey")
        if algorithm is not None or key is not None:
            if algorithm != "AES256" or key is None:
                raise errors.InvalidConfig(
                    "s3_additional_kwargs: SSE-C takes SSECustomerAlgorithm='AES256' with SSECustomerKey (the 32-byte "
                    "key, as boto3 takes it)"
                )
            # botocore base64-encodes the key it is given, unless the caller gave its MD5 too (then it is encoded)
            if "SSECustomerKeyMD5" in given:
                settings["sse_customer_key"] = key
            else:
                settings["sse_customer_key"] = key if isinstance(key, bytes) else str(key).encode("utf-8")
        if given.get("RequestPayer") == "requester":
            settings["requester_pays"] = True
        verify = self.client_kwargs.get("verify")
        if isinstance(verify, str | os.PathLike):
            settings["ca_bundle"] = os.fspath(verify)
        proxies = self.config_kwargs.get("proxies")
        if proxies is not None:  # botocore's Config(proxies=...): these, for the endpoint's scheme, and never the env's
            endpoint = self._endpoint_url()
            scheme = urlsplit(endpoint).scheme if endpoint else "https"
            settings["proxy"] = proxies.get(scheme) or DIRECT
        return settings

    def _botocore_read_reason(
        self, version_id: str | None = None, extra: Mapping[str, Any] | None = None
    ) -> str | None:
        if self._botocore_reads_because:
            return self._botocore_reads_because
        if version_id:
            return "a version id"
        if extra and BOTOCORE_ONLY_GET_PARAMS.intersection(extra):
            return "per-file GetObject parameters"
        return None

    def _endpoint_url(self) -> str | None:
        return self.endpoint_url or self.client_kwargs.get("endpoint_url")

    def _s3io_client(self) -> S3Client:
        """The S3Client of the running event loop, created on first use there."""
        loop = asyncio.get_running_loop()
        client = self._s3io_clients.get(loop)
        if client is None:
            for retired in _discard_stopped(self._s3io_clients):
                self._retired_stats = _add_snapshots(self._retired_stats, retired.stats())
            client = StoreConfig.from_kwargs(
                endpoint_url=self._endpoint_url(),
                region=self.client_kwargs.get("region_name") or self.config_kwargs.get("region_name"),
                credentials=self._s3io_credentials(),
                addressing=(self.config_kwargs.get("s3") or {}).get("addressing_style") or "auto",
                policy=self.policy,
                **self._native,
            ).client()
            self._s3io_clients[loop] = client
        return client

    def _s3io_credentials(self) -> Credentials | str | None:
        if self.anon:
            return ANONYMOUS
        key = self.key or self.client_kwargs.get("aws_access_key_id")
        secret = self.secret or self.client_kwargs.get("aws_secret_access_key")
        token = self.token or self.client_kwargs.get("aws_session_token")
        if key and secret:
            return Credentials(key, secret, token)
        return None  # botocore's provider chain (environment, config files, container, instance metadata)

    async def _s3io_get(
        self, path: str, bucket: str, key: str, want: GetRange, if_match: str | None = None
    ) -> GetResult:
        """One ranged GET through the S3Client; past the end of the object is empty, as in a local file."""
        try:
            return await self._s3io_client().get_range(bucket, key, want, if_match=if_match)
        except errors.S3IOError as exc:
            if isinstance(exc, errors.RequestError) and exc.status == 416:
                return GetResult(b"", if_match, None, want.start)
            translated = _fsspec_error(exc, path, if_match)
            if translated is exc:
                raise
            raise translated from exc

    async def _read(
        self,
        path: str,
        start: int | None = None,
        end: int | None = None,
        *,
        if_match: str | None = None,
        version_id: str | None = None,
        chunksize: int | None = None,
        max_concurrency: int | None = None,
    ) -> GetResult:
        """Bytes ``[start, end)`` of ``path`` with the ETag they came from (fsspec semantics for limits)."""
        bucket, key, path_version = self.split_path(path)
        version_id = version_id or path_version
        if self._botocore_read_reason(version_id):
            data = await super()._cat_file(
                path, version_id=version_id, start=start, end=end, chunksize=chunksize, max_concurrency=max_concurrency
            )
            return GetResult(data, None, None, max(start or 0, 0))
        if not key:
            raise IsADirectoryError(errno.EISDIR, "not an object (no key)", path)
        if not start and end is None:
            return await self._read_whole(path, bucket, key, if_match, chunksize, max_concurrency)
        want = await self._resolve_limits(path, start, end)
        if want.kind == BOUNDED and want.end == want.start:
            return GetResult(b"", if_match, None, want.start)
        return await self._s3io_get(path, bucket, key, want, if_match)

    async def _read_whole(
        self, path: str, bucket: str, key: str, if_match: str | None, chunksize: int | None, max_concurrency: int | None
    ) -> GetResult:
        """A whole object: the first chunk tells size and ETag; the rest follow in parallel, pinned to it."""
        chunk = chunksize or self.default_block_size
        leading: list[bytes] = []
        etag, position, size = await self._first_chunk(path, bucket, key, chunk, if_match, leading.append)

        async def part(span: tuple[int, int]) -> bytes:
            return await self._sized_part(path, bucket, key, span, etag, size)

        parts = await map_bounded(part, iter_parts(position, size, chunk), max_concurrency or self.max_concurrency)
        data = b"".join([*leading, *parts])
        return GetResult(data, etag, size, 0)

    async def _sized_part(
        self, path: str, bucket: str, key: str, span: tuple[int, int], etag: str | None, size: int
    ) -> bytes:
        """Bytes ``span`` of an object an earlier answer said is ``size`` bytes: all of them, or FileExpired (a
        server that claimed a petabyte is caught at the first part past its real end, not asked for every part)."""
        got = await self._s3io_get(path, bucket, key, GetRange.bounded(*span), etag)
        if got.object_size not in (None, size) or len(got.data) != span[1] - span[0]:
            stated = "" if got.object_size is None else f" of a {got.object_size}-byte object"
            changed = errors.ObjectChanged(
                f"bytes {span[0]}-{span[1] - 1} came back as {len(got.data)} bytes{stated}; the first answer said "
                f"the object is {size} bytes",
                bucket=bucket,
                key=key,
            )
            raise _fsspec_error(changed, path, etag) from changed
        return got.data

    async def _first_chunk(
        self, path: str, bucket: str, key: str, chunk: int, if_match: str | None, keep: Callable[[bytes], Any]
    ) -> tuple[str | None, int, int]:
        """The first chunk, given to ``keep``; (ETag, bytes read, the object's size). S3 states the size in that
        answer; one that does not (a 206 of total "*", a 200 of unstated length cut at the chunk's end) is never
        taken for the whole object, nor followed chunk after chunk (a server that never states it would be read
        forever): a short chunk is the whole object, a full one is sized by one HEAD pinned to its ETag."""
        got = await self._s3io_get(path, bucket, key, GetRange.bounded(0, chunk), if_match)
        etag = if_match or got.etag
        keep(got.data)
        position = len(got.data)
        if got.object_size is not None:
            return etag, position, got.object_size
        if position < chunk:
            return etag, position, position
        try:
            size = await stated_size(self._s3io_client().head_object, bucket, key, etag=etag, held=position)
        except errors.S3IOError as exc:
            raise _fsspec_error(exc, path, etag) from exc
        return etag, position, size

    async def _resolve_limits(self, path: str, start: int | None, end: int | None) -> GetRange:
        """fsspec limits as a GetRange: a negative start alone is the last -start bytes (the S3Client sends
        bytes=-n); other negative limits count from the end (a HEAD when needed); an end at or before the start
        is an empty range."""
        start = 0 if start is None else start
        if start < 0 and end is None:
            return GetRange.suffix(-start)
        if start < 0 or (end is not None and end < 0):
            size = (await self._info(path))["size"]
            if start < 0:
                start = max(0, size + start)
            if end is not None and end < 0:
                end = max(0, size + end)
        if end is None:
            return GetRange.starting_at(start)
        return GetRange.bounded(start, max(start, end))

    async def _info(self, path: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """s3fs's ``_info``; a FileNotFoundError carries S3's code (``.code``: NoSuchBucket, NoSuchKey)."""
        try:
            return await super()._info(path, *args, **kwargs)
        except FileNotFoundError as exc:
            _with_code(exc)
            raise

    async def _cat_file(
        self,
        path: str,
        version_id: str | None = None,
        start: int | None = None,
        end: int | None = None,
        chunksize: int | None = None,
        max_concurrency: int | None = None,
    ) -> bytes:
        result = await self._read(
            path, start, end, version_id=version_id, chunksize=chunksize, max_concurrency=max_concurrency
        )
        return result.data

    async def _cat_ranges(
        self,
        paths: list[str],
        starts: int | Iterable[int | None] | None,
        ends: int | Iterable[int | None] | None,
        max_gap: int | None = None,
        batch_size: int | None = None,
        on_error: str = "return",
        **kwargs: Any,
    ) -> list[bytes | BaseException]:
        """Ranges in request order; ranges of one path that came from different versions raise FileExpired."""
        if max_gap is not None or kwargs:
            return await super()._cat_ranges(
                paths, starts, ends, max_gap=max_gap, batch_size=batch_size, on_error=on_error, **kwargs
            )
        if not isinstance(paths, list):
            raise TypeError("paths must be a list")
        starts = list(starts) if isinstance(starts, Iterable) else [starts] * len(paths)
        ends = list(ends) if isinstance(ends, Iterable) else [ends] * len(paths)
        if len(starts) != len(paths) or len(ends) != len(paths):
            raise ValueError("paths, starts and ends must have the same length")
        coros = [self._read(p, s, e) for p, s, e in zip(paths, starts, ends, strict=True)]
        results = await _run_coros_in_chunks(
            coros, batch_size=batch_size or self.batch_size, nofiles=True, return_exceptions=True
        )
        etags: dict[str, set[str]] = {}
        for path, result in zip(paths, results, strict=True):
            if isinstance(result, GetResult) and result.etag:
                etags.setdefault(path, set()).add(bare_etag(result.etag))
        out: list[bytes | BaseException] = []
        for path, result in zip(paths, results, strict=True):
            if not isinstance(result, GetResult):
                out.append(result)
            elif len(etags.get(path, ())) > 1:
                out.append(FileExpired(filename=path, e_tag=" or ".join(sorted(etags[path]))))
            else:
                out.append(result.data)
        if on_error != "return":
            for item in out:
                if isinstance(item, BaseException):
                    raise item
        return out

    async def _get_file(
        self,
        rpath: str,
        lpath: str,
        callback: Any = DEFAULT_CALLBACK,
        version_id: str | None = None,
        chunksize: int | None = None,
        max_concurrency: int | None = None,
        **kwargs: Any,
    ) -> None:
        """Download in ETag-pinned chunks, each written as it arrives, into a temporary file beside ``lpath`` that
        replaces it once whole: a failed download leaves ``lpath`` as it was (never truncated, never deleted)."""
        if os.path.isdir(lpath):
            return
        bucket, key, path_version = self.split_path(rpath)
        if kwargs or self._botocore_read_reason(version_id or path_version) or not key:
            await super()._get_file(
                rpath,
                lpath,
                callback=callback,
                version_id=version_id,
                chunksize=chunksize,
                max_concurrency=max_concurrency,
                **kwargs,
            )
            return
        chunk = chunksize or self.default_block_size
        target, temporary, replace = _download_plan(lpath)
        try:
            with open(temporary, "wb") as out:
                etag, position, size = await self._first_chunk(rpath, bucket, key, chunk, None, out.write)
                callback.set_size(size)
                callback.relative_update(position)

                async def part(span: tuple[int, int]) -> None:
                    data = await self._sized_part(rpath, bucket, key, span, etag, size)
                    out.seek(span[0])
                    out.write(data)
                    callback.relative_update(len(data))

                await map_bounded(part, iter_parts(position, size, chunk), max_concurrency or self.max_concurrency)
            if replace:
                if os.path.isfile(target):
                    shutil.copymode(target, temporary)
                os.replace(temporary, target)
            elif temporary != target:
                with open(temporary, "rb") as source, open(target, "wb") as destination:
                    shutil.copyfileobj(source, destination)
        finally:
            if temporary != target:
                with suppress(FileNotFoundError):
                    os.remove(temporary)

    def _open(
        self,
        path: str,
        mode: str = "rb",
        block_size: int | None = None,
        acl: str | bool = False,
        version_id: str | None = None,
        fill_cache: bool | None = None,
        cache_type: str | None = None,
        autocommit: bool = True,
        size: int | None = None,
        requester_pays: bool | None = None,
        cache_options: dict | None = None,
        **kwargs: Any,
    ) -> S3IOFile:
        """s3fs's ``_open`` (same options, same defaults), returning an S3IOFile."""
        if not self.version_aware and version_id:
            raise ValueError("version_id cannot be specified if the filesystem is not version aware")
        s3_additional_kwargs = {**self.s3_additional_kwargs, **kwargs}
        return S3IOFile(
            self,
            path,
            mode,
            block_size=block_size or self.default_block_size,
            acl=acl or self.s3_additional_kwargs.get("ACL", False) or self.s3_additional_kwargs.get("acl", False),
            version_id=version_id,
            fill_cache=self.default_fill_cache if fill_cache is None else fill_cache,
            s3_additional_kwargs=s3_additional_kwargs,
            cache_type=cache_type or self.default_cache_type,
            autocommit=autocommit,
            requester_pays=self.requester_pays if requester_pays is None else requester_pays,
            cache_options=cache_options,
            size=size,
        )

    # ------------------------------------------------------------------ lifecycle and counters

    def stats(self) -> MetricsSnapshot:
        """Counters of this filesystem: botocore requests by operation name (``head_object``, ...) and the
        S3Clients' requests (``get``), retries by reason, timeouts by phase."""
        snapshot = _add_snapshots(self.metrics.snapshot(), self._retired_stats)
        for client in list(self._s3io_clients.values()):
            snapshot = _add_snapshots(snapshot, client.stats())
        return snapshot

    async def aclose(self) -> None:
        """Close the S3Clients and the botocore client; both are re-created if the filesystem is used again."""
        current = asyncio.get_running_loop()
        clients = list(self._s3io_clients.items())
        self._s3io_clients.clear()
        for _, client in clients:
            self._retired_stats = _add_snapshots(self._retired_stats, client.stats())
        for loop, client in clients:
            if loop is current:
                await client.close()
            elif loop.is_running():
                with suppress(Exception):
                    future = asyncio.run_coroutine_threadsafe(client.close(), loop)
                    await asyncio.wait_for(asyncio.wrap_future(future), CLOSE_TIMEOUT_SECONDS)
            else:
                _abort_client(client)
        creator = getattr(self, "_s3creator", None)
        self._s3 = None
        self._s3creator = None
        if creator is not None:
            with suppress(Exception):
                await creator.__aexit__(None, None, None)

    def close(self) -> None:
        """Blocking ``aclose`` for a synchronous filesystem (runs on fsspec's IO loop)."""
        if self.asynchronous:
            raise RuntimeError("an asynchronous filesystem is closed with `await fs.aclose()`")
        if self.loop is not None and self.loop.is_running():
            sync(self.loop, self.aclose)
        else:
            _close_clients_now(self._s3io_clients)


class S3FileSystemAsS3(S3FileSystem):
    """s3io's filesystem named ``s3`` first: tools that choose how to read by the protocol name (DuckDB) read through
    it as through s3fs, and the paths it writes say ``s3://``. ``install_as_s3()`` registers it for ``s3://``."""

    protocol = ("s3", "s3a", PROTOCOL)


class _WatchedBody:
    """A GET's botocore body, read by s3fs after ``_call_s3`` returned (outside its attempt), with s3io's timers:
    each chunk must come within the stall timeout, and the time spent waiting in reads (not the consumer's own)
    may pass the operation's deadline only by what the bytes received earn at ``DOWNLOAD_FLOOR_BYTES_PER_SECOND``.
    So a dead or dripping server ends the read with DeadlineExceeded, and a large healthy body or a slow consumer
    does not."""

    def __init__(self, body: Any, policy: Policy, bucket: str | None, key: str | None) -> None:
        self._body = body
        self._stall = policy.stall_timeout
        self._allowed = policy.operation_timeout
        self._waited = 0.0
        self._received = 0
        self._context = {"bucket": bucket, "key": key, "operation": "get_object"}

    async def read(self, amt: int | None = -1) -> bytes:
        """Up to ``amt`` bytes (all that are left for None or a negative amount), a chunk at a time under the timers."""
        if amt is not None and amt >= 0:
            return await self._chunk(amt)
        chunks = []
        while chunk := await self._chunk(BODY_CHUNK):
            chunks.append(chunk)
        return b"".join(chunks)

    async def iter_chunks(self, chunk_size: int = BODY_CHUNK) -> AsyncIterator[bytes]:
        while chunk := await self._chunk(chunk_size):
            yield chunk

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self.iter_chunks()

    async def __aenter__(self) -> _WatchedBody:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.close()

    async def _chunk(self, amt: int) -> bytes:
        loop = asyncio.get_running_loop()
        left = self._allowed + self._received / DOWNLOAD_FLOOR_BYTES_PER_SECOND - self._waited
        phase = "stall" if self._stall < left else "operation"
        limit = max(0.0, self._stall if phase == "stall" else left)
        started = loop.time()
        try:
            data = await asyncio.wait_for(self._body.read(amt), limit)
        except TimeoutError:
            self.close()
            what = f"no body bytes for {limit:.1f} s" if phase == "stall" else "the operation's deadline passed"
            raise errors.DeadlineExceeded(f"{what} while reading the answer", phase=phase, **self._context) from None
        finally:
            self._waited += loop.time() - started
        self._received += len(data)
        return data

    def close(self) -> None:
        self._body.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._body, name)


class S3IOFile(s3fs.core.S3File):
    """s3fs's file whose reads are ranged GETs through the S3Client, all pinned to one ETag.

    Opened for reading without a size, it sends no HEAD (s3fs sends one): the size and ETag come from a listing
    fsspec holds, or else from one GET of the last ``OPEN_PROBE_BYTES`` (at most one block), whose bytes are kept
    to serve the reads they cover.
    """

    retries = 1
    _s3io_etag: str | None = None
    _held_start = 0
    _held = b""

    def __init__(
        self, s3: S3FileSystem, path: str, mode: str = "rb", block_size: int = 50 << 20, **kwargs: Any
    ) -> None:
        if "r" in mode and kwargs.get("size") is None and self._probe_serves(s3, path, kwargs.get("version_id")):
            name = s3._strip_protocol(path)
            entry = next((e for e in s3._ls_from_cache(name) or () if e.get("name") == name), None)
            if entry is not None and entry.get("type") == "file":  # a listing saw it: its size and ETag, as s3fs
                self._details, self._s3io_etag, kwargs["size"] = entry, entry.get("ETag"), entry["size"]
            else:
                kwargs["size"] = self._probe(s3, path, max(1, min(OPEN_PROBE_BYTES, block_size)))
        super().__init__(s3, path, mode, block_size, **kwargs)
        native_release.track(self)  # pyarrow's I/O threads may drop it last, at exit

    @staticmethod
    def _probe_serves(fs: S3FileSystem, path: str, version_id: str | None) -> bool:
        """Whether a GET can stand for s3fs's HEAD at open: s3io serves the reads and no version is involved."""
        _, _, path_version = fs.split_path(path)
        return not fs.version_aware and fs._botocore_read_reason(version_id or path_version) is None

    def _probe(self, fs: S3FileSystem, path: str, length: int) -> int | None:
        """GET the object's last ``length`` bytes, keep them, and return its size (None when the answer did not
        state it: then s3fs's HEAD sizes the file, as before)."""
        bucket, key, _ = fs.split_path(path)
        if not key:
            raise ValueError(f"Attempt to open non key-like path: {path}")
        got = sync(fs.loop, fs._s3io_get, path, bucket, key, GetRange.suffix(length))
        if got.object_size is None:
            return None
        self._s3io_etag = got.etag
        self._held_start, self._held = got.start, bytes(got.data)
        return got.object_size

    def _fetch_range(self, start: int, end: int) -> bytes:
        end = min(end, self.size) if self.size is not None else end
        held_end = self._held_start + len(self._held)
        if self._held and self._held_start <= end <= held_end and start < end:
            tail = self._held[max(start, self._held_start) - self._held_start : end - self._held_start]
            if start >= self._held_start:
                return tail
            return self._fetch_new(start, self._held_start) + tail
        return self._fetch_new(start, end)

    def _fetch_new(self, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` from the store, pinned to the ETag the file was opened at."""
        fs: S3FileSystem = self.fs
        if fs._botocore_read_reason(self.version_id, self.req_kw):
            return super()._fetch_range(start, end)
        opened_as = (self._details or {}).get("ETag")
        if fs.local_expiry_check:
            # the store ignores If-Match (VAST, for one): compare the ETag of each answer with the one at open
            result = sync(fs.loop, fs._read, self.path, start, end)
            expected = opened_as or self._s3io_etag
            if expected and result.etag and not same_etag(result.etag, expected):
                raise FileExpired(filename=self.path, e_tag=expected)
        else:
            if_match = self.read_kw.get("IfMatch") or self._s3io_etag
            result = sync(fs.loop, fs._read, self.path, start, end, if_match=if_match)
        if self._s3io_etag is None and result.etag:
            self._s3io_etag = result.etag
        if self.size is not None and len(result.data) != max(0, min(end, self.size) - start):
            bucket, key, _ = fs.split_path(self.path)
            changed = errors.ObjectChanged(
                f"bytes {start}-{end - 1} came back as {len(result.data)} bytes; the object was {self.size} bytes "
                "when opened (replaced by a shorter one on a store that ignores If-Match, or a short answer)",
                bucket=bucket,
                key=key,
            )
            raise FileExpired(filename=self.path, e_tag=opened_as or self._s3io_etag or "?") from changed
        return result.data


# ---------------------------------------------------------------------- protocol registration

_replaced: dict[str, type | None] = {}


def install_as_s3(protocols: Iterable[str] = ("s3", "s3a")) -> None:
    """Serve ``s3://`` and ``s3a://`` with s3io in this process (explicit opt-in; undo: uninstall_as_s3): every later
    ``fsspec.filesystem("s3")`` and ``s3://`` URL gets an S3FileSystemAsS3, which writes ``s3://`` paths."""
    for protocol in protocols:
        current = fsspec.registry.get(protocol)
        if current is S3FileSystemAsS3:
            continue
        _replaced.setdefault(protocol, current)
        fsspec.register_implementation(protocol, S3FileSystemAsS3, clobber=True)


def uninstall_as_s3() -> None:
    """Give ``s3://`` and ``s3a://`` back to what served them before install_as_s3 (s3fs by default)."""
    for protocol, previous in list(_replaced.items()):
        if fsspec.registry.get(protocol) is S3FileSystemAsS3:
            fsspec.register_implementation(protocol, previous or s3fs.S3FileSystem, clobber=True)
        del _replaced[protocol]


try:
    fsspec.register_implementation(PROTOCOL, S3FileSystem, clobber=False)
except ValueError:  # another class already serves "s3io"; it is not ours to replace
    log.debug("s3io.fs: protocol %r is already registered to another class", PROTOCOL)


# ---------------------------------------------------------------------- helpers


def _resolve_policy(policy: Policy | Mapping[str, Any] | None, flat: Mapping[str, Any]) -> Policy:
    """``policy`` (see Policy.resolve), then the policy options given as flat keyword arguments over it."""
    resolved = Policy.resolve(policy)
    return Policy.from_mapping(flat, base=resolved) if flat else resolved


def _typed_boto_error(exc: Exception, operation: str, bucket: str | None, key: str | None) -> BaseException:
    """The typed s3io error for a botocore failure, so ``retryable.classify`` decides; others unchanged."""
    context: dict[str, Any] = {"operation": operation, "bucket": bucket, "key": key}
    if isinstance(exc, ClientError):
        response = exc.response or {}
        error = response.get("Error") or {}
        status = int(response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
        return error_for_status(status, error.get("Code"), error.get("Message"), **context)
    if isinstance(exc, ConnectTimeoutError):
        return errors.DeadlineExceeded("connect timed out", phase="connect", cause=exc, **context)
    if isinstance(exc, ReadTimeoutError):
        return errors.DeadlineExceeded("socket read timed out", phase="stall", cause=exc, **context)
    if isinstance(exc, IncompleteReadError | ResponseStreamingError):
        return errors.Truncated("response body ended early", cause=exc, **context)
    if isinstance(exc, ResponseParserError):
        # S3 has sent unparseable bodies while throttling (s3fs issue #484): treated as a server error.
        return errors.ServerError("unparseable response", cause=exc, **context)
    if isinstance(exc, HTTPClientError | BotoConnectionError):
        # aiobotocore wraps aiohttp's exception: classify that one (a body cut short is Truncated, a timer a
        # timeout). A malformed response (ClientResponseError, status 400 from aiohttp's parser, not from S3)
        # and anything unknown stay connection failures, retried as botocore and s3fs retry them.
        original = exc.kwargs.get("error")
        if isinstance(original, BaseException) and not isinstance(original, aiohttp.ClientResponseError):
            typed = from_wire(original, **context)
            if isinstance(typed, errors.S3IOError):
                return typed
        return errors.TransportError("connection failed", cause=exc, **context)
    return exc  # aiohttp/socket errors: the AttemptRunner's from_wire; anything else is not retried


def _delete_objects_md5(params: dict[str, Any], **kwargs: Any) -> None:
    """A DeleteObjects body's Content-MD5, which S3 requires of it and which botocore (since 1.36) replaces with a
    CRC32 header: OpenStack Swift 2.30.1 refuses a DeleteObjects without it (400 InvalidRequest). s3io's own client
    sends one too."""
    body = params.get("body")
    if isinstance(body, bytes) and body and "Content-MD5" not in params["headers"]:
        params["headers"]["Content-MD5"] = base64.b64encode(hashlib.md5(body).digest()).decode()


def _status_of(exc: BaseException) -> int | str:
    if isinstance(exc, ClientError):
        return (exc.response or {}).get("ResponseMetadata", {}).get("HTTPStatusCode") or "error"
    return "error"


def _fsspec_error(exc: errors.S3IOError, path: str, etag: str | None = None) -> BaseException:
    """What s3fs would raise for the failure (FileNotFoundError, FileExpired, OSError with errno)."""
    if isinstance(exc, errors.ObjectChanged):
        return FileExpired(filename=path, e_tag=etag or "?")
    if isinstance(exc, _S3_ANSWERS):
        client_error = _find_cause(exc, ClientError)
        if client_error is not None:
            return translate_boto_error(client_error, set_cause=False)
    if isinstance(exc, OSError):
        return exc
    if isinstance(exc, _S3_ANSWERS) and (exc.code or exc.status):
        # S3's own answer through s3io's client: the class s3fs gives that code (botocore names a bodiless
        # answer by its status), so an expired token is a PermissionError on every path, as in s3fs
        constructor = ERROR_CODE_TO_EXCEPTION.get(exc.code or str(exc.status))
        return constructor(str(exc)) if constructor is not None else OSError(errno.EIO, str(exc))
    code = next((number for kind, number in _ERRNO if isinstance(exc, kind)), errno.EIO)
    return OSError(code, str(exc))


def _with_code(exc: FileNotFoundError) -> None:
    """Give a FileNotFoundError S3's code: that of the NotFound behind it, else NoSuchKey (the listing that
    came last found the bucket but not the key)."""
    if getattr(exc, "code", None):
        return
    seen = 0
    current: BaseException | None = exc.__cause__ or exc.__context__
    while current is not None and seen < 8:
        code = getattr(current, "code", None)
        if isinstance(current, errors.NotFound) and code not in (None, "NotFound"):
            exc.code = code  # type: ignore[attr-defined]
            return
        current, seen = current.__cause__ or current.__context__, seen + 1
    exc.code = "NoSuchKey"  # type: ignore[attr-defined]


def _find_cause(exc: BaseException, kind: type[BaseException]) -> Any:
    seen = 0
    current: BaseException | None = exc
    while current is not None and seen < 8:
        if isinstance(current, kind):
            return current
        current = current.__cause__
        seen += 1
    return None


def _download_plan(lpath: str) -> tuple[str, str, bool]:
    """(target, temporary file, whether the temporary replaces the target) for downloading to ``lpath``.

    The bytes go to a temporary file first, so a failed download leaves the target as it was. Beside the target it
    replaces it (``os.replace``) when the directory lets us and no other name links to it; else it is written in a
    temporary directory and copied into the target in place (a read-only directory, a hard link: as s3fs writes).
    A special file (``/dev/null``, a FIFO) is written directly, and a file we may not write is refused at once,
    as ``open(lpath, "wb")`` would refuse it."""
    target = os.path.realpath(lpath)  # a symlink keeps pointing where it did; its target gets the bytes
    folder, name = os.path.split(target)
    if os.path.exists(target):
        if not os.path.isfile(target):
            return target, target, False
        if not os.access(target, os.W_OK):
            raise PermissionError(errno.EACCES, "Permission denied", lpath)
        beside = os.access(folder, os.W_OK) and os.stat(target).st_nlink == 1
    elif not os.access(folder, os.W_OK):
        raise PermissionError(errno.EACCES, "Permission denied", lpath)
    else:
        beside = True
    part = f".{name}.s3io-{uuid.uuid4().hex[:12]}.part"
    return target, os.path.join(folder if beside else tempfile.gettempdir(), part), beside


def _path(bucket: str | None, key: str | None) -> str:
    return f"{bucket or ''}/{key or ''}".rstrip("/")


def _add_snapshots(a: MetricsSnapshot, b: MetricsSnapshot) -> MetricsSnapshot:
    def merged(x: dict, y: dict) -> dict:
        return {k: x.get(k, 0) + y.get(k, 0) for k in set(x) | set(y)}

    return MetricsSnapshot(
        requests=merged(a.requests, b.requests),
        retries=merged(a.retries, b.retries),
        timeouts=merged(a.timeouts, b.timeouts),
        bytes_in=a.bytes_in + b.bytes_in,
        bytes_out=a.bytes_out + b.bytes_out,
        hedges=a.hedges + b.hedges,
        latency_buckets=tuple(x + y for x, y in zip(a.latency_buckets, b.latency_buckets, strict=True)),
    )


_closing: set[asyncio.Future] = set()


def _close_clients_now(clients: dict[asyncio.AbstractEventLoop, S3Client]) -> None:
    """Close every S3Client from any thread (also the weakref finalizer: it holds no filesystem)."""
    try:
        current: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        current = None
    for loop, client in list(clients.items()):
        clients.pop(loop, None)
        if loop is current:
            task = loop.create_task(client.close())
            _closing.add(task)
            task.add_done_callback(_closing.discard)
        elif loop.is_running():
            future = asyncio.run_coroutine_threadsafe(client.close(), loop)
            with suppress(Exception):
                future.result(CLOSE_TIMEOUT_SECONDS)
        else:
            _abort_client(client)


def _discard_stopped(clients: dict[asyncio.AbstractEventLoop, S3Client]) -> list[S3Client]:
    """Drop clients of loops that no longer run (asyncio.run finished, a forked child): their sockets close."""
    dropped = [clients.pop(loop) for loop in [loop for loop in clients if not loop.is_running()]]
    for client in dropped:
        _abort_client(client)
    return dropped


def _abort_client(client: S3Client) -> None:
    """Close a client whose loop is not running: its connector's sockets are closed synchronously."""
    with suppress(Exception):
        client.abort()
