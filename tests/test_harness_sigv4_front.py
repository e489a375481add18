"""The SigV4 front (testbed/sigv4_check.py) tells a body its sender cut short from a body that is not what was
signed: the first is S3's IncompleteBody, answered to no one (a crash test kills writers mid-PUT), the second is
XAmzContentSHA256Mismatch, a signing bug the strictness check must keep catching."""

from __future__ import annotations

import socket
import time
from hashlib import sha256
from typing import Any
from urllib.parse import urlsplit

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from testbed.moto_server import FAKE_ACCESS_KEY, FAKE_REGION, FAKE_SECRET_KEY
from testbed.sigv4_check import Rejection

pytestmark = [pytest.mark.timeout(60), pytest.mark.signature_errors_expected]

WAIT_SECONDS = 20.0


BODY = bytes(range(256)) * 64  # what every request here is signed for


def _put(url: str, sent: bytes) -> bytes:
    """A PUT to ``url`` signed as botocore signs one of BODY (payload hash included), with ``sent`` as the bytes on
    the wire after the headers; the sender then stops sending (as a killed process does). Returns what the server
    answered, read until it closed (at most 64 reads)."""
    request = AWSRequest(method="PUT", url=url, data=BODY, headers={"x-amz-content-sha256": sha256(BODY).hexdigest()})
    SigV4Auth(Credentials(FAKE_ACCESS_KEY, FAKE_SECRET_KEY), "s3", FAKE_REGION).add_auth(request)
    parts = urlsplit(url)
    headers = {**dict(request.headers.items()), "Host": parts.netloc, "Content-Length": str(len(BODY))}
    head = "\r\n".join([f"PUT {parts.path} HTTP/1.1", *(f"{k}: {v}" for k, v in headers.items())]) + "\r\n\r\n"
    received = b""
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as sock:
        sock.sendall(head.encode("latin-1") + sent)
        sock.shutdown(socket.SHUT_WR)
        for _ in range(64):
            chunk = sock.recv(65536)
            if not chunk:
                break
            received += chunk
    return received


def _rejections_for(front: Any, key: str) -> list[Rejection]:
    """The front's refusals of `key`, waited for (the server thread sees the closed connection a little later)."""
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        found = [r for r in front.take_rejections() if r.path.endswith(key)]
        if found:
            return found
        time.sleep(0.05)
    return []


def test_a_body_cut_short_by_its_sender_is_incomplete_body_not_a_signing_error(
    s3_endpoint: Any, moto_server: Any, bucket: str
) -> None:
    _put(f"{s3_endpoint.url}/{bucket}/cut", BODY[: len(BODY) // 2])
    refused = _rejections_for(moto_server.front, "/cut")
    assert [(r.code, r.body_cut) for r in refused] == [("IncompleteBody", True)], refused


def test_a_whole_body_that_is_not_the_signed_one_is_still_a_hash_mismatch(
    s3_endpoint: Any, moto_server: Any, bucket: str
) -> None:
    answer = _put(f"{s3_endpoint.url}/{bucket}/altered", b"\xff" + BODY[1:])
    refused = _rejections_for(moto_server.front, "/altered")  # taken before any assert: none is left for a later test
    assert [(r.code, r.body_cut) for r in refused] == [("XAmzContentSHA256Mismatch", False)], refused
    assert b" 400 " in answer.split(b"\r\n", 1)[0] and b"XAmzContentSHA256Mismatch" in answer, answer[:400]
