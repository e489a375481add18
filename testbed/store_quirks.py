"""Stores that answer as other S3 stores do, one behaviour at a time: WSGI middleware for moto (``MotoServer(
*middleware)``), and ``store_with(*quirks)``, such a store for a block.

moto before 5.2.6 ignores per-object ETags in DeleteObjects; ``honours_bulk_etags`` adds them, so ``store_with(
honours_bulk_etags)`` has every behaviour AWS S3 documents whatever moto's version, and each quirk stacked on it
takes one away, as a store that lacks it answers (measured on Ceph RGW 16.2.15 where that store is named):

    ignores_bulk_etags                          moto before 5.2.6: DeleteObjects deletes whatever its <ETag>

    ignores_header("PUT", "If-None-Match")      a store that ignores conditional create
    lax_conditionals                            one that ignores If-Match and If-None-Match on PUT and DELETE
    refuses_header("PUT", "If-None-Match")      one that answers 501 NotImplemented to it
    refuses_quoted_if_match                     RGW 16: PUT If-Match with a quoted ETag is 412 even when it matches
    refuses_every_if_match_put                  a store whose PUT If-Match never holds
    ignores_header("DELETE", "If-Match")        RGW 16: DELETE If-Match ignored
    refuses_header("DELETE", "If-Match")        LocalStack 2026.3: DELETE If-Match answered 501
    honours_delete_if_unmodified_since          RGW 16's own x-amz-delete-if-unmodified-since (ISO 8601, whole
                                                seconds); moto without it ignores the header
    ignores_ranges                              a store that answers every GET with the whole object
    empties_multipart_etag                      RGW 16: CompleteMultipartUpload answers <ETag></ETag>
    without_etags(matches)                      a store that sends no ETag header to the requests ``matches``
    listings_without_etags                      a store whose ListObjectsV2 carries no <ETag>
    ignores_checksum_headers                    RGW 16: upload checksums accepted, then neither checked nor kept
    refuses_checksum_headers                    a store older than S3's checksums: 400 to a request carrying one
    swaps_bytes_under_etag(key)                 a store that holds other bytes under an object's recorded ETag
    Gate(predicate).middleware                  a store that receives chosen requests late: held until the test
                                                releases them, after other clients acted (a write that lands late)

    with store_with(honours_bulk_etags, refuses_quoted_if_match) as url: ...
    gate = Gate(lambda r: r.method == "PUT" and "/journal/" in r.path)
    with store_with(gate.middleware) as url:
        gate.arm(); ...; assert gate.wait_held(1, timeout=30); ...; gate.release(); assert gate.wait_drained(30)

Middleware sits under the SigV4 front (which checks the request as the client signed it), so rewriting a request
here never breaks its signature. The store shares buckets and objects with every other moto of the process (the
``s3_endpoint`` fixture's): set up with boto3 there, run the code under test here.
"""

from __future__ import annotations

import base64
import calendar
import hashlib
import io
import re
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import parse_qs

from testbed.moto_server import Middleware, MotoServer, WsgiApp

Environ = dict[str, Any]
S3_NS = "http://s3.amazonaws.com/doc/2006-03-01/"
PART_CHECKSUM = re.compile(rb"<Checksum[A-Z0-9]+>[^<]*</Checksum[A-Z0-9]+>")  # a part's in CompleteMultipartUpload
MAX_HOLD_SECONDS = 120.0  # a request a Gate holds goes through after this even if the test never releases it


@contextmanager
def store_with(*quirks: Middleware) -> Iterator[str]:
    """A strict moto (SigV4 front, S3's semantics) with ``quirks`` under its front, in this process, for a block:
    yields its URL; fails after the block if the front refused a request, as S3 would have."""
    server = MotoServer(*quirks)
    server.start()
    try:
        yield server.url
    finally:
        server.stop()
    refused = [r for r in (server.front.take_rejections() if server.front else []) if not r.wrong_region]
    assert not refused, f"the S3 front refused {len(refused)} request(s) as S3 would: {refused[:3]}"


def stacked(*quirks: Middleware) -> Middleware:
    """Several quirks as one (the first given outermost)."""

    def wrap(app: WsgiApp) -> WsgiApp:
        for quirk in reversed(quirks):
            app = quirk(app)
        return app

    return wrap


def _environ_name(header: str) -> str:
    return "HTTP_" + header.upper().replace("-", "_")


def _error(start_response: Callable[..., Any], status: str, code: str, message: str) -> list[bytes]:
    body = (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code><Message>{message}</Message>'
        "<RequestId>quirk</RequestId></Error>"
    ).encode()
    start_response(status, [("Content-Type", "application/xml"), ("Content-Length", str(len(body)))])
    return [body]


def _read_body(environ: Environ) -> bytes:
    length = int(environ.get("CONTENT_LENGTH") or 0)
    body = environ["wsgi.input"].read(length) if length else b""
    environ["wsgi.input"] = io.BytesIO(body)
    return body


def _replace_body(environ: Environ, body: bytes) -> None:
    environ["wsgi.input"] = io.BytesIO(body)
    environ["CONTENT_LENGTH"] = str(len(body))
    if "HTTP_CONTENT_MD5" in environ:
        environ["HTTP_CONTENT_MD5"] = base64.b64encode(hashlib.md5(body).digest()).decode()


def _captured(app: WsgiApp, environ: Environ) -> tuple[str, list[tuple[str, str]], bytes]:
    """Call ``app`` and return its whole answer: status, headers, body."""
    captured: list[Any] = []

    def start(status: str, headers: list[tuple[str, str]], *exc_info: Any) -> Any:
        captured.append((status, headers))
        return lambda data: None

    body = b"".join(app(environ, start))
    status, headers = captured[0]
    return status, headers, body


def _respond(
    start_response: Callable[..., Any], status: str, headers: list[tuple[str, str]], body: bytes
) -> list[bytes]:
    headers = [(n, v) for n, v in headers if n.lower() != "content-length"]
    start_response(status, [*headers, ("Content-Length", str(len(body)))])
    return [body]


def ignores_header(method: str, header: str) -> Middleware:
    """A store that ignores ``header`` on ``method`` requests: it is dropped before moto sees it."""

    def wrap(app: WsgiApp) -> WsgiApp:
        def serve(environ: Environ, start_response: Callable[..., Any]) -> Iterable[bytes]:
            if environ.get("REQUEST_METHOD") == method:
                environ.pop(_environ_name(header), None)
            return app(environ, start_response)

        return serve

    return wrap


lax_conditionals = stacked(
    *(ignores_header(method, header) for method in ("PUT", "DELETE") for header in ("If-Match", "If-None-Match"))
)
"""A store that ignores If-Match / If-None-Match on PUT and DELETE (many S3-compatible stores): dropped before moto."""


def refuses_header(method: str, header: str) -> Middleware:
    """A store that does not implement ``header`` on ``method``: 501 NotImplemented."""

    def wrap(app: WsgiApp) -> WsgiApp:
        def serve(environ: Environ, start_response: Callable[..., Any]) -> Iterable[bytes]:
            if environ.get("REQUEST_METHOD") == method and _environ_name(header) in environ:
                message = f"{header} is not supported"
                return _error(start_response, "501 Not Implemented", "NotImplemented", message)
            return app(environ, start_response)

        return serve

    return wrap


def refuses_quoted_if_match(app: WsgiApp) -> WsgiApp:
    """Ceph RGW 16: a PUT whose If-Match ETag is quoted (as S3 sends ETags) is refused with 412, matching or not;
    an unquoted one is compared with the object's ETag."""

    def serve(environ: Environ, start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("REQUEST_METHOD") == "PUT" and environ.get("HTTP_IF_MATCH", "").startswith('"'):
            return _error(start_response, "412 Precondition Failed", "PreconditionFailed", "quoted")
        return app(environ, start_response)

    return serve


def refuses_every_if_match_put(app: WsgiApp) -> WsgiApp:
    """A store whose PUT If-Match never holds: 412 whatever the ETag and its form."""

    def serve(environ: Environ, start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("REQUEST_METHOD") == "PUT" and "HTTP_IF_MATCH" in environ:
            return _error(start_response, "412 Precondition Failed", "PreconditionFailed", "never")
        return app(environ, start_response)

    return serve


def ignores_ranges(app: WsgiApp) -> WsgiApp:
    """A store that ignores Range: every GET answers 200 with the whole object."""

    def serve(environ: Environ, start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("REQUEST_METHOD") == "GET":
            environ.pop("HTTP_RANGE", None)
        return app(environ, start_response)

    return serve


def empties_multipart_etag(app: WsgiApp) -> WsgiApp:
    """Ceph RGW 16: a CompleteMultipartUpload answer whose <ETag> element is empty."""

    def serve(environ: Environ, start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("REQUEST_METHOD") != "POST" or "uploadId=" not in environ.get("QUERY_STRING", ""):
            return app(environ, start_response)
        status, headers, body = _captured(app, environ)
        if status.startswith("200"):
            body = re.sub(rb"<ETag>[^<]*</ETag>", b"<ETag></ETag>", body)
        return _respond(start_response, status, headers, body)

    return serve


def without_etags(matches: Callable[[str, str], bool]) -> Middleware:
    """A store that sends no ETag header in its answers to requests for which ``matches(method, path)``."""

    def wrap(app: WsgiApp) -> WsgiApp:
        def serve(environ: Environ, start_response: Callable[..., Any]) -> Iterable[bytes]:
            if not matches(environ.get("REQUEST_METHOD", ""), environ.get("PATH_INFO", "")):
                return app(environ, start_response)

            def start(status: str, headers: list[tuple[str, str]], *exc_info: Any) -> Any:
                return start_response(status, [(n, v) for n, v in headers if n.lower() != "etag"], *exc_info)

            return app(environ, start)

        return serve

    return wrap


def listings_without_etags(app: WsgiApp) -> WsgiApp:
    """A store whose object listings (ListObjectsV2) carry no <ETag> elements."""

    def serve(environ: Environ, start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("REQUEST_METHOD") != "GET" or "list-type=2" not in environ.get("QUERY_STRING", ""):
            return app(environ, start_response)
        status, headers, body = _captured(app, environ)
        return _respond(start_response, status, headers, re.sub(rb"<ETag>[^<]*</ETag>", b"", body))

    return serve


def _checksum_headers(environ: Environ) -> list[str]:
    """The upload checksum headers of a request (not ``x-amz-checksum-mode``, which asks for the stored one)."""
    return [
        name
        for name in environ
        if (name.startswith("HTTP_X_AMZ_CHECKSUM_") and name != "HTTP_X_AMZ_CHECKSUM_MODE")
        or name == "HTTP_X_AMZ_SDK_CHECKSUM_ALGORITHM"
    ]


def ignores_checksum_headers(app: WsgiApp) -> WsgiApp:
    """Ceph RGW 16 (measured): a PUT, UploadPart, multipart upload or CopyObject carrying checksum headers succeeds,
    and the store keeps no checksum: a HEAD or GET with checksum mode states none. The headers, and the parts'
    checksums in a CompleteMultipartUpload body, are dropped before moto sees them."""

    def serve(environ: Environ, start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("REQUEST_METHOD") in ("PUT", "POST"):
            for name in _checksum_headers(environ):
                del environ[name]
            if "uploadId=" in environ.get("QUERY_STRING", "") and environ.get("REQUEST_METHOD") == "POST":
                _replace_body(environ, PART_CHECKSUM.sub(b"", _read_body(environ)))
        return app(environ, start_response)

    return serve


def refuses_checksum_headers(app: WsgiApp) -> WsgiApp:
    """A store older than S3's flexible checksums: a request carrying a checksum header is 400 InvalidArgument (the
    same request without it succeeds)."""

    def serve(environ: Environ, start_response: Callable[..., Any]) -> Iterable[bytes]:
        refused = _checksum_headers(environ)
        if environ.get("REQUEST_METHOD") in ("PUT", "POST") and refused:
            header = refused[0].removeprefix("HTTP_").replace("_", "-").lower()
            return _error(start_response, "400 Bad Request", "InvalidArgument", f"unsupported header {header}")
        return app(environ, start_response)

    return serve


def swaps_bytes_under_etag(key: str, etag: str) -> Middleware:
    """A store that answers for ``key`` under ``etag`` (quoted, as S3 sends it) whatever it holds: a request naming
    ``etag`` in a condition is taken as naming the object there now, and every answer about ``key`` carries
    ``etag``. Put other bytes of the same size there and it serves them as the object that had ``etag``: what a
    store that mixes up objects does, which no ETag or size check can see."""

    def wrap(app: WsgiApp) -> WsgiApp:
        def serve(environ: Environ, start_response: Callable[..., Any]) -> Iterable[bytes]:
            bucket, _, path_key = environ.get("PATH_INFO", "").lstrip("/").partition("/")
            source = environ.get("HTTP_X_AMZ_COPY_SOURCE", "")
            if path_key != key and not source.endswith(f"/{key}"):
                return app(environ, start_response)
            current = _current_etag(app, environ, bucket, key)
            for header in ("HTTP_IF_MATCH", "HTTP_X_AMZ_COPY_SOURCE_IF_MATCH"):
                if environ.get(header, "").strip('"') == etag.strip('"') and current is not None:
                    environ[header] = f'"{current}"'
            if path_key != key:
                return app(environ, start_response)

            def start(status: str, headers: list[tuple[str, str]], *exc_info: Any) -> Any:
                lied = [(n, etag if n.lower() == "etag" else v) for n, v in headers]
                return start_response(status, lied, *exc_info)

            return app(environ, start)

        return serve

    return wrap


def honours_bulk_etags(app: WsgiApp) -> WsgiApp:
    """DeleteObjects as AWS S3 documents it: an object whose <ETag> is not its current one is not deleted and is
    reported as a PreconditionFailed error (moto deletes it)."""

    def serve(environ: Environ, start_response: Callable[..., Any]) -> Iterable[bytes]:
        query = parse_qs(environ.get("QUERY_STRING", ""), keep_blank_values=True)
        if environ.get("REQUEST_METHOD") != "POST" or "delete" not in query:
            return app(environ, start_response)
        bucket = environ.get("PATH_INFO", "").strip("/").split("/")[0]
        request = ET.fromstring(_read_body(environ))
        kept: list[str] = []
        refused: list[str] = []
        for obj in [e for e in request if _local(e.tag) == "Object"]:
            fields = {_local(child.tag): child.text or "" for child in obj}
            etag = fields.get("ETag")
            if etag is not None and _current_etag(app, environ, bucket, fields["Key"]) != etag.strip('"'):
                refused.append(fields["Key"])
            else:
                kept.append(fields["Key"])
        errors = "".join(
            f"<Error><Key>{_xml_text(k)}</Key><Code>PreconditionFailed</Code><Message>At least one of the "
            "pre-conditions you specified did not hold</Message></Error>"
            for k in refused
        ).encode()
        if not kept:
            body = f'<?xml version="1.0" encoding="UTF-8"?>\n<DeleteResult xmlns="{S3_NS}">'.encode()
            body += errors + b"</DeleteResult>"
            return _respond(start_response, "200 OK", [("Content-Type", "application/xml")], body)
        objects = "".join(f"<Object><Key>{_xml_text(k)}</Key></Object>" for k in kept)
        _replace_body(environ, f"<Delete><Quiet>false</Quiet>{objects}</Delete>".encode())
        status, headers, body = _captured(app, environ)
        if status.startswith("200") and errors:
            body = body.replace(b"</DeleteResult>", errors + b"</DeleteResult>")
        return _respond(start_response, status, headers, body)

    return serve


def ignores_bulk_etags(app: WsgiApp) -> WsgiApp:
    """DeleteObjects as moto before 5.2.6 serves it: each object's <ETag> dropped, so a changed object is deleted."""

    def serve(environ: Environ, start_response: Callable[..., Any]) -> Iterable[bytes]:
        query = parse_qs(environ.get("QUERY_STRING", ""), keep_blank_values=True)
        if environ.get("REQUEST_METHOD") == "POST" and "delete" in query:
            _replace_body(environ, re.sub(rb"<ETag>[^<]*</ETag>", b"", _read_body(environ)))
        return app(environ, start_response)

    return serve


def honours_delete_if_unmodified_since(app: WsgiApp) -> WsgiApp:
    """Ceph RGW 16's delete condition (measured): a DELETE whose ``x-amz-delete-if-unmodified-since`` (ISO 8601,
    ``2026-11-28T15:04:05Z``) is earlier than the object's Last-Modified (whole seconds) is 412 and the object kept;
    another form is 400; an absent object is deleted as S3 deletes one (204)."""

    def serve(environ: Environ, start_response: Callable[..., Any]) -> Iterable[bytes]:
        given = environ.pop("HTTP_X_AMZ_DELETE_IF_UNMODIFIED_SINCE", None)
        if environ.get("REQUEST_METHOD") != "DELETE" or given is None:
            return app(environ, start_response)
        try:
            since = calendar.timegm(time.strptime(given, "%Y-%m-%dT%H:%M:%SZ"))
        except ValueError:
            return _error(start_response, "400 Bad Request", "InvalidArgument", "bad date")
        bucket, _, key = environ.get("PATH_INFO", "").lstrip("/").partition("/")
        modified = _current_header(app, environ, bucket, key, "last-modified")
        if modified is not None and parsedate_to_datetime(modified).timestamp() > since:
            return _error(start_response, "412 Precondition Failed", "PreconditionFailed", "modified since")
        return app(environ, start_response)

    return serve


@dataclass(frozen=True)
class GatedRequest:
    """What a Gate's predicate sees: method, path (with the bucket), query string and the request body."""

    method: str
    path: str
    query: str
    body: bytes


class Gate:
    """A store that receives requests late: once armed, it holds those that match ``predicate`` before moto sees
    them (each in its own server thread) until ``release()``, so other clients act first."""

    def __init__(self, predicate: Callable[[GatedRequest], bool]) -> None:
        self._predicate = predicate
        self._armed = threading.Event()
        self._open = threading.Event()
        self._lock = threading.Condition()
        self._holding = 0
        self.held: list[GatedRequest] = []  # every request held so far, in arrival order

    def arm(self) -> None:
        """Start holding matching requests (requests before this pass)."""
        self._armed.set()

    def release(self) -> None:
        """Let every held request (and every later one) through to the store."""
        self._open.set()

    def wait_held(self, count: int, timeout: float) -> bool:
        """Wait until at least ``count`` requests have been held; False on timeout."""
        with self._lock:
            return self._lock.wait_for(lambda: len(self.held) >= count, timeout)

    def wait_drained(self, timeout: float) -> bool:
        """Wait until every held request has been released and answered by the store; False on timeout."""
        with self._lock:
            return self._lock.wait_for(lambda: self._holding == 0, timeout)

    def middleware(self, app: WsgiApp) -> WsgiApp:
        """The quirk to give ``store_with``."""

        def serve(environ: Environ, start_response: Callable[..., Any]) -> Iterable[bytes]:
            if self._armed.is_set() and not self._open.is_set():
                body = _read_body(environ)
                method, path = environ.get("REQUEST_METHOD", ""), environ.get("PATH_INFO", "")
                request = GatedRequest(method, path, environ.get("QUERY_STRING", ""), body)
                if self._predicate(request):
                    return self._hold(request, lambda: app(environ, start_response))
            return app(environ, start_response)

        return serve

    def _hold(self, request: GatedRequest, forward: Callable[[], Iterable[bytes]]) -> Iterable[bytes]:
        """Wait for ``release()``, then let the store act; counted as held until the store has answered."""
        with self._lock:
            self._holding += 1
            self.held.append(request)
            self._lock.notify_all()
        try:
            self._open.wait(MAX_HOLD_SECONDS)
            return forward()
        finally:
            with self._lock:
                self._holding -= 1
                self._lock.notify_all()


def _current_etag(app: WsgiApp, environ: Environ, bucket: str, key: str) -> str | None:
    """The object's ETag (unquoted) from a HEAD sent to ``app`` itself (WSGI paths are decoded), or None."""
    etag = _current_header(app, environ, bucket, key, "etag")
    return None if etag is None else etag.strip('"')


def _current_header(app: WsgiApp, environ: Environ, bucket: str, key: str, name: str) -> str | None:
    """A header of the object's HEAD answer, from a HEAD sent to ``app`` itself, or None (no such object)."""
    dropped = ("CONTENT_LENGTH", "CONTENT_TYPE", "HTTP_CONTENT_MD5", "REQUEST_URI", "RAW_URI", "werkzeug.request")
    head = {  # moto finds the service from the auth header; the request's own conditions are not the HEAD's
        k: v for k, v in environ.items() if k not in dropped and not k.startswith(("HTTP_IF_", "HTTP_X_AMZ_COPY_"))
    }
    path = f"/{bucket}/{key}"
    head.update(REQUEST_METHOD="HEAD", PATH_INFO=path, QUERY_STRING="", **{"wsgi.input": io.BytesIO()})
    status, headers, _ = _captured(app, head)
    if not status.startswith("200"):
        return None
    return next((v for n, v in headers if n.lower() == name), None)


def _local(tag: str) -> str:
    """A tag without its namespace."""
    return tag.rsplit("}", 1)[-1]


def _xml_text(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
