"""moto's S3 served in-process behind WSGI middleware: a store that ignores conditional writes, and a request gate.

Why: some misbehaviour can only be shown inside the server. A proxy must not rewrite headers (they are SigV4
signed), yet many S3-compatible stores ignore ``If-None-Match`` / ``If-Match`` on PUT and DELETE
(``lax_conditionals``); and a request can reach a store long after it was sent, after other clients acted
(``Gate`` holds chosen requests before the store sees them, until the test releases them, each in its own server
thread). moto keeps its backend in process memory, so this server shares buckets and objects with every other moto
server of the process (the ``s3_endpoint`` fixture's): set up with boto3 there, run the code under test here.

    with MotoWsgiServer(lax_conditionals) as url: ...               # conditional headers never reach moto
    gate = Gate(lambda r: r.method == "PUT" and "/journal/" in r.path)
    with MotoWsgiServer(gate.middleware) as url:
        gate.arm(); ...; assert gate.wait_held(1, timeout=30); ...; gate.release(); assert gate.wait_drained(30)
"""

from __future__ import annotations

import io
import logging
import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from werkzeug.serving import BaseWSGIServer, make_server

from support.moto_server import FAKE_ACCESS_KEY, FAKE_SECRET_KEY
from support.s3_semantics import S3SemanticsApp
from support.sigv4_check import SigV4CheckingApp, moto_bucket_region, moto_secret

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
Middleware = Callable[[WsgiApp], WsgiApp]
MAX_HOLD_SECONDS = 120.0  # a held request goes through after this even if the test never releases it


def lax_conditionals(app: WsgiApp) -> WsgiApp:
    """A store that ignores If-Match / If-None-Match on PUT and DELETE: the headers are dropped before moto."""

    def serve(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("REQUEST_METHOD") in ("PUT", "DELETE"):
            environ.pop("HTTP_IF_MATCH", None)
            environ.pop("HTTP_IF_NONE_MATCH", None)
        return app(environ, start_response)

    return serve


def without_etags(matches: Callable[[str, str], bool]) -> Middleware:
    """A store that sends no ETag header in its answers to requests for which ``matches(method, path)``."""

    def wrap(app: WsgiApp) -> WsgiApp:
        def serve(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
            if not matches(environ.get("REQUEST_METHOD", ""), environ.get("PATH_INFO", "")):
                return app(environ, start_response)

            def start(status: str, headers: list[tuple[str, str]], *exc_info: Any) -> Any:
                return start_response(status, [(n, v) for n, v in headers if n.lower() != "etag"], *exc_info)

            return app(environ, start)

        return serve

    return wrap


def listings_without_etags(app: WsgiApp) -> WsgiApp:
    """A store whose object listings (ListObjectsV2) carry no <ETag> elements."""

    def serve(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("REQUEST_METHOD") != "GET" or "list-type=2" not in environ.get("QUERY_STRING", ""):
            return app(environ, start_response)
        captured: list[Any] = []

        def start(status: str, headers: list[tuple[str, str]], *exc_info: Any) -> Any:
            captured.append((status, headers))
            return lambda data: None

        body = b"".join(app(environ, start))
        body = re.sub(rb"<ETag>[^<]*</ETag>", b"", body)
        status, headers = captured[0]
        headers = [(n, v) for n, v in headers if n.lower() != "content-length"]
        start_response(status, [*headers, ("Content-Length", str(len(body)))])
        return [body]

    return serve


@dataclass(frozen=True)
class GatedRequest:
    """What a Gate's predicate sees: method, path (with the bucket), query string and the request body."""

    method: str
    path: str
    query: str
    body: bytes


class Gate:
    """Holds requests that match ``predicate`` (once armed) before the store sees them, until ``release()``."""

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
        def serve(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
            if self._armed.is_set() and not self._open.is_set():
                length = int(environ.get("CONTENT_LENGTH") or 0)
                body = environ["wsgi.input"].read(length) if length else b""
                environ["wsgi.input"] = io.BytesIO(body)
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


class MotoWsgiServer:
    """moto's WSGI app behind ``middleware``, served on 127.0.0.1 and a free port, a thread per request."""

    def __init__(self, *middleware: Middleware) -> None:
        self._middleware = middleware
        self._server: BaseWSGIServer | None = None
        self._thread: threading.Thread | None = None
        self.front: SigV4CheckingApp | None = None

    def start(self) -> str:
        """Start serving; returns the endpoint URL. As the session's server, the store is strict: S3's semantics
        under the middleware, and the SigV4 check above it (it sees the request as the client signed it)."""
        app: WsgiApp = S3SemanticsApp(DomainDispatcherApplication(create_backend_app))
        for wrap in reversed(self._middleware):
            app = wrap(app)
        self.front = SigV4CheckingApp(
            app, {FAKE_ACCESS_KEY: FAKE_SECRET_KEY}, secret_lookup=moto_secret, bucket_region=moto_bucket_region
        )
        app = self.front
        logging.getLogger("werkzeug").setLevel(logging.WARNING)
        server = make_server("127.0.0.1", 0, app, threaded=True, request_handler=MotoRequestHandler)
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, name="moto-wsgi", daemon=True)
        self._thread.start()
        host, port = server.server_address[:2]
        return f"http://{host}:{port}"

    def stop(self) -> None:
        """Stop serving and join the thread (held requests of a Gate must be released first); fails if the
        signature check refused any request, as S3 would have."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None
        refused = [r for r in (self.front.take_rejections() if self.front else []) if not r.wrong_region]
        assert not refused, f"the S3 front refused {len(refused)} request(s) as S3 would: {refused[:3]}"

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
