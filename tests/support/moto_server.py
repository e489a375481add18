"""A moto S3 server on 127.0.0.1 for tests, fake AWS credentials, and boto3 helpers for test set-up.

moto serves plain HTTP on a free loopback port and, unlike real S3, closes the connection after every
response; put `tests/support/faultproxy.py` in front of it to get keep-alive and injected faults. moto checks
no signature, so the server is strict by default: `tests/support/sigv4_check.py` recomputes every signed
request's SigV4 signature as S3 does and refuses a mismatch, and `tests/support/s3_semantics.py` answers as S3
where moto is kinder (a completed upload is gone), and `tests/support/s3_security.py` does what S3 does with
bucket policies on encryption, SSE-C and requester pays. `MotoServer(strict=False)` turns them off.
"""

from __future__ import annotations

import base64
import email.utils
import hashlib
import logging
import os
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from werkzeug.serving import BaseWSGIServer, make_server

from support.s3_security import S3SecurityApp
from support.s3_semantics import S3SemanticsApp
from support.sigv4_check import SigV4CheckingApp, moto_bucket_region, moto_secret

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


@dataclass(frozen=True)
class S3Endpoint:
    """Where a test S3 server listens: `url` is what clients take as endpoint_url."""

    url: str
    host: str
    port: int


@contextmanager
def fake_aws_environment() -> Iterator[None]:
    """Set fake credentials and remove profile/endpoint variables, restoring the environment on exit."""
    saved = {name: os.environ.get(name) for name in (*FAKE_AWS_ENV, *UNSET_AWS_ENV)}
    try:
        for name in UNSET_AWS_ENV:
            os.environ.pop(name, None)
        os.environ.update(FAKE_AWS_ENV)
        yield
    finally:
        for name, value in saved.items():
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


class MotoServer:
    """A moto server thread on 127.0.0.1 and a free port; start()/stop() or use as a context manager.

    ``strict`` (default) puts the SigV4-checking front and S3's semantics before moto: ``front.rejections`` lists
    what the signature check refused; ``security`` evaluates bucket policies on encryption, SSE-C and requester pays
    (tests/support/s3_security.py).
    """

    def __init__(self, host: str = "127.0.0.1", *, strict: bool = True) -> None:
        """Prepare (not start) a server bound to `host`, which must be a loopback address."""
        self._host = host
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

    def start(self) -> S3Endpoint:
        """Start serving on a port the kernel picks (port 0), so parallel sessions never collide."""
        if self._server is not None:
            raise RuntimeError("MotoServer already started")
        werkzeug_logger = logging.getLogger("werkzeug")
        self._werkzeug_level = werkzeug_logger.level
        werkzeug_logger.setLevel(logging.WARNING)  # one access-log line per request is noise in test output
        app = DomainDispatcherApplication(create_backend_app)
        if self._strict:
            self.security = app = S3SecurityApp(app)
            app = S3SemanticsApp(app)
            self.front = app = SigV4CheckingApp(
                app, {FAKE_ACCESS_KEY: FAKE_SECRET_KEY}, secret_lookup=moto_secret, bucket_region=moto_bucket_region
            )
        handler = _dated_by(self.front) if self.front is not None else MotoRequestHandler
        server = make_server(self._host, 0, app, threaded=True, request_handler=handler)
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, name="moto-server", daemon=True)
        self._thread.start()
        host, port = server.server_address[:2]
        self._endpoint = S3Endpoint(url=f"http://{host}:{port}", host=str(host), port=port)
        return self._endpoint

    def stop(self) -> None:
        """Shut the server down and join its thread; safe to call twice."""
        server, self._server = self._server, None
        thread, self._thread = self._thread, None
        self._endpoint = None
        if server is not None:
            server.shutdown()
            server.server_close()
        if thread is not None:
            thread.join(10)
        if self._werkzeug_level is not None:
            logging.getLogger("werkzeug").setLevel(self._werkzeug_level)
            self._werkzeug_level = None

    def __enter__(self) -> S3Endpoint:
        """Start the server and return its endpoint."""
        return self.start()

    def __exit__(self, *exc: object) -> None:
        """Stop the server."""
        self.stop()


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
