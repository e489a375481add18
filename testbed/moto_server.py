"""moto's S3 on 127.0.0.1, the one launcher of it: in a thread of this process (``MotoServer``: the test session's
store, a store with quirks, the demo's embedded S3) or in a child process (``MotoProcess``, the same server: the
benchmarks', whose CPU must not land in the client's, and the network namespace's); fake AWS credentials, and boto3
helpers for set-up.

moto serves plain HTTP on a free loopback port and, unlike real S3, closes the connection after every
response; put `testbed/faultproxy.py` in front of it to get keep-alive and injected faults. moto checks
no signature, so the server is strict by default: `testbed/sigv4_check.py` recomputes every signed
request's SigV4 signature as S3 does and refuses a mismatch, and `testbed/s3_semantics.py` answers as S3
where moto is kinder (a completed upload is gone), and `testbed/s3_security.py` does what S3 does with
bucket policies on encryption, SSE-C and requester pays. `MotoServer(strict=False)` turns them off (the
benchmarks' and the demo's moto: moto as it is). Middleware given to `MotoServer(*middleware)` sits between the
SigV4 front and moto, so a store's quirk (`testbed/store_quirks.py`) may rewrite a request without breaking its
signature.

    python -m testbed.moto_server [--lenient] [--host H] [--port P]     # MotoProcess's child
"""

from __future__ import annotations

import argparse
import base64
import email.utils
import hashlib
import logging
import os
import sys
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from werkzeug.serving import BaseWSGIServer, make_server

from testbed.processes import ChildServer, S3Endpoint, serve_commands
from testbed.s3_security import S3SecurityApp
from testbed.s3_semantics import S3SemanticsApp
from testbed.sigv4_check import SigV4CheckingApp, moto_bucket_region, moto_secret

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
Middleware = Callable[[WsgiApp], WsgiApp]

FAKE_ACCESS_KEY = "testing"
FAKE_SECRET_KEY = "testing"
FAKE_REGION = "us-east-1"

# Set for the test session so no code path can find real credentials or reach a metadata service.
FAKE_AWS_ENV: dict[str, str] = {
    "AWS_ACCESS_KEY_ID": FAKE_ACCESS_KEY,
    "AWS_SECRET_ACCESS_KEY": FAKE_SECRET_KEY,
    "AWS_DEFAULT_REGION": FAKE_REGION,
    "AWS_REGION": FAKE_REGION,
    "AWS_EC2_METADATA_DISABLED": "true",
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
}

# Removed for the test session: each could point a client at real credentials or a real endpoint.
UNSET_AWS_ENV: tuple[str, ...] = (
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "AWS_ROLE_ARN",
    "AWS_ROLE_SESSION_NAME",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_CA_BUNDLE",
    # a proxy of the machine's would carry the tests' loopback traffic (a test sets one on purpose)
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "all_proxy",
)


# What the fake AWS environment sets (a value) and removes (None).
FAKE_AWS_VARIABLES: dict[str, str | None] = {**dict.fromkeys(UNSET_AWS_ENV), **FAKE_AWS_ENV}


def use_fake_aws_environment() -> None:
    """Set fake credentials and remove profile/endpoint/proxy variables, for this process and the children it
    starts (a benchmark run's whole life; a test session uses ``fake_aws_environment``, which restores them)."""
    _set_environment(FAKE_AWS_VARIABLES)


def fake_aws_environment() -> AbstractContextManager[None]:
    """Fake credentials and no profile/endpoint/proxy variables for a block, the environment restored on exit."""
    return environment(**FAKE_AWS_VARIABLES)


@contextmanager
def environment(**variables: str | None) -> Iterator[None]:
    """Set (a value) or remove (None) environment variables for a block, and restore them after."""
    saved = {name: os.environ.get(name) for name in variables}
    try:
        _set_environment(variables)
        yield
    finally:
        _set_environment(saved)


def _set_environment(variables: Mapping[str, str | None]) -> None:
    for name, value in variables.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def _dated_by(front: SigV4CheckingApp) -> type[MotoRequestHandler]:
    """A request handler whose answers carry the front's clock in their Date header, as S3's carry its own: a
    test that skews the server's clock skews what the client reads too."""

    class DatedHandler(MotoRequestHandler):
        def date_time_string(self, timestamp: float | None = None) -> str:
            return email.utils.formatdate(front.clock() if timestamp is None else timestamp, usegmt=True)

    return DatedHandler


def moto_app(
    *middleware: Middleware, strict: bool = True
) -> tuple[WsgiApp, SigV4CheckingApp | None, S3SecurityApp | None]:
    """moto's WSGI app with ``middleware`` above it (the first given outermost) and, when ``strict``, S3's security
    and semantics under the middleware and the SigV4 front over it: the app, its front and its security layer."""
    app: WsgiApp = DomainDispatcherApplication(create_backend_app)
    security = front = None
    if strict:
        security = app = S3SecurityApp(app)
        app = S3SemanticsApp(app)
    for wrap in reversed(middleware):
        app = wrap(app)
    if strict:
        front = app = SigV4CheckingApp(
            app, {FAKE_ACCESS_KEY: FAKE_SECRET_KEY}, secret_lookup=moto_secret, bucket_region=moto_bucket_region
        )
    return app, front, security


class MotoServer:
    """moto in a server thread on 127.0.0.1 and a free port, a thread per request; start()/stop() or use as a
    context manager. Every moto of a process shares its buckets and objects (moto keeps them in process memory):
    set up through the session's server, run the code under test against one with quirks.

    ``strict`` (default) puts the SigV4-checking front and S3's semantics before moto: ``front.rejections`` lists
    what the signature check refused; ``security`` evaluates bucket policies on encryption, SSE-C and requester pays
    (testbed/s3_security.py). ``middleware`` (testbed/store_quirks.py) sits under the front.
    """

    def __init__(self, *middleware: Middleware, host: str = "127.0.0.1", port: int = 0, strict: bool = True) -> None:
        """Prepare (not start) a server bound to `host`, which must be a loopback address (port 0: the kernel's
        choice, so parallel sessions never collide)."""
        self._middleware = middleware
        self._host = host
        self._port = port
        self._strict = strict
        self._server: BaseWSGIServer | None = None
        self._thread: threading.Thread | None = None
        self._endpoint: S3Endpoint | None = None
        self._werkzeug_level: int | None = None
        self.front: SigV4CheckingApp | None = None
        self.security: S3SecurityApp | None = None

    @property
    def endpoint(self) -> S3Endpoint:
        """The running server's endpoint; raises if not started."""
        if self._endpoint is None:
            raise RuntimeError("MotoServer is not started")
        return self._endpoint

    @property
    def url(self) -> str:
        """The running server's URL (what clients take as endpoint_url)."""
        return self.endpoint.url

    def start(self) -> S3Endpoint:
        """Start serving and return the endpoint."""
        if self._server is not None:
            raise RuntimeError("MotoServer already started")
        werkzeug_logger = logging.getLogger("werkzeug")
        self._werkzeug_level = werkzeug_logger.level
        werkzeug_logger.setLevel(logging.WARNING)  # one access-log line per request is noise (and CPU)
        app, self.front, self.security = moto_app(*self._middleware, strict=self._strict)
        handler = _dated_by(self.front) if self.front is not None else MotoRequestHandler
        server = make_server(self._host, self._port, app, threaded=True, request_handler=handler)
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, name="moto-server", daemon=True)
        self._thread.start()
        host, port = server.server_address[:2]
        self._endpoint = S3Endpoint(url=f"http://{host}:{port}", host=str(host), port=port)
        return self._endpoint

    def stop(self) -> None:
        """Shut the server down and join its thread (a request a store quirk holds must be released first); safe to
        call twice."""
        server, self._server = self._server, None
        thread, self._thread = self._thread, None
        self._endpoint = None
        if server is not None:
            server.shutdown()
            server.server_close()
        if thread is not None:
            thread.join(30)
        if self._werkzeug_level is not None:
            logging.getLogger("werkzeug").setLevel(self._werkzeug_level)
            self._werkzeug_level = None

    def __enter__(self) -> S3Endpoint:
        """Start the server and return its endpoint."""
        return self.start()

    def __exit__(self, *exc: object) -> None:
        """Stop the server."""
        self.stop()


class MotoProcess(ChildServer):
    """The same moto server in a child process of its own (``python -m testbed.moto_server``): its CPU stays out of
    the client's process; ``prefix`` runs it inside something (``ip netns exec NAME``). Lenient (moto as it is)
    unless ``strict``."""

    NAME = "moto (child process)"

    def __init__(
        self, *, strict: bool = False, host: str = "127.0.0.1", port: int = 0, prefix: tuple[str, ...] = ()
    ) -> None:
        args = ["--host", host, "--port", str(port), *([] if strict else ["--lenient"])]
        super().__init__("testbed.moto_server", args, host=host, prefix=prefix)


def main(argv: list[str]) -> None:
    """MotoProcess's child: a MotoServer, its port on stdout, until stdin closes."""
    parser = argparse.ArgumentParser(prog="python -m testbed.moto_server")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--lenient", action="store_true", help="moto as it is: no SigV4 check, no S3 semantics")
    args = parser.parse_args(argv)
    server = MotoServer(host=args.host, port=args.port, strict=not args.lenient)
    endpoint = server.start()
    try:
        serve_commands(endpoint.port, {})
    finally:
        server.stop()


def boto3_client(endpoint_url: str, service: str = "s3", *, region: str = FAKE_REGION, **config: Any) -> Any:
    """A boto3 client for test set-up against `endpoint_url`: fake credentials, path-style, short timeouts."""
    defaults: dict[str, Any] = {
        "connect_timeout": 5,
        "read_timeout": 30,
        "retries": {"total_max_attempts": 2, "mode": "standard"},
        "s3": {"addressing_style": "path"},
    }
    defaults.update(config)
    client = boto3.session.Session().client(
        service,
        endpoint_url=endpoint_url,
        aws_access_key_id=FAKE_ACCESS_KEY,
        aws_secret_access_key=FAKE_SECRET_KEY,
        region_name=region,
        config=Config(**defaults),
    )
    if service == "s3":
        client.meta.events.register("before-call.s3.DeleteObjects", _content_md5)
    return client


def _content_md5(params: dict[str, Any], **kwargs: Any) -> None:
    """DeleteObjects with a Content-MD5, as botocore sent it before its CRC32 default: Swift 2.30.1 refuses it
    without one (400 InvalidRequest), every other store takes it."""
    body = params.get("body")
    if isinstance(body, bytes) and body:
        params["headers"]["Content-MD5"] = base64.b64encode(hashlib.md5(body).digest()).decode()


def unique_bucket_name(prefix: str = "s3io-test") -> str:
    """A fresh valid bucket name, so tests sharing one server never see each other's objects."""
    return f"{prefix}-{uuid.uuid4().hex[:16]}"


def empty_and_delete_bucket(client: Any, bucket: str, max_pages: int = 100) -> None:
    """Delete every object, aborted upload and then the bucket itself (bounded pages; best effort)."""
    for _ in range(max_pages):
        listing = client.list_objects_v2(Bucket=bucket)
        keys = [{"Key": item["Key"]} for item in listing.get("Contents", [])]
        if not keys:
            break
        plain = [k for k in keys if k["Key"].isprintable()]
        if plain:
            client.delete_objects(Bucket=bucket, Delete={"Objects": plain, "Quiet": True})
        for key in keys:  # a key with a control character cannot travel in DeleteObjects' XML body
            if not key["Key"].isprintable():
                client.delete_object(Bucket=bucket, Key=key["Key"])
    for _ in range(max_pages):
        try:
            uploads = client.list_multipart_uploads(Bucket=bucket).get("Uploads", [])
        except ClientError as exc:  # s3rver implements no ListMultipartUploads (nor keeps unfinished uploads' parts)
            if exc.response["Error"]["Code"] != "NotImplemented":
                raise
            break
        if not uploads:
            break
        for upload in uploads:
            client.abort_multipart_upload(Bucket=bucket, Key=upload["Key"], UploadId=upload["UploadId"])
    client.delete_bucket(Bucket=bucket)


if __name__ == "__main__":
    main(sys.argv[1:])
