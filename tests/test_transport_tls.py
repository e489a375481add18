"""HTTPS: s3io's transport over TLS, through a TLS-terminating forwarder in front of moto on loopback.

The client runs in a child process because aiohttp builds its verifying SSL context when it is imported,
from the default trust store; the child points SSL_CERT_FILE at the test's own self-signed certificate.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.tls import OPENSSL_MISSING, self_signed_certificate, tls_forwarder

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(OPENSSL_MISSING, reason="needs the openssl command to make a certificate"),
]

REPO = Path(__file__).resolve().parents[1]

CLIENT = """
import asyncio, sys
from s3io import Credentials, S3Client, errors

async def main(endpoint, bucket):
    async with S3Client(endpoint_url=endpoint, credentials=Credentials("testing", "testing")) as s3:
        try:
            await s3.put_object(bucket, "tls.bin", bytes(range(256)) * 40)
        except errors.S3IOError as exc:
            print(f"{type(exc).__name__} attempts={exc.attempts}: {exc}")
            return
        print((await s3.get_object(bucket, "tls.bin", 100, 110)).data.hex())
        print((await s3.head_object(bucket, "tls.bin")).size)

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


def _run_client(endpoint: str, bucket: str, cert_file: Path | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "SSL_CERT_FILE"}
    env.update(PYTHONPATH=str(REPO), S3IO_MAX_ATTEMPTS="3", S3IO_OPERATION_TIMEOUT="30s")
    if cert_file is not None:
        env["SSL_CERT_FILE"] = str(cert_file)
    done = subprocess.run(
        [sys.executable, "-c", CLIENT, endpoint, bucket], capture_output=True, text=True, timeout=90, env=env
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_s3io_reads_and_writes_over_tls_and_refuses_an_untrusted_certificate(
    tmp_path: Path, s3_endpoint, bucket: str, s3_client
) -> None:
    cert, key = self_signed_certificate(tmp_path)
    with tls_forwarder(cert, key, s3_endpoint.url) as endpoint:
        out = _run_client(endpoint, bucket, cert).split()
        assert out == [bytes(range(100, 110)).hex(), "10240"]
        assert s3_client.get_object(Bucket=bucket, Key="tls.bin")["Body"].read() == bytes(range(256)) * 40

        refused = _run_client(endpoint, bucket, None)  # the default trust store does not know our certificate
    assert refused.startswith("InvalidConfig attempts=1:"), refused
    assert "certificate" in refused and "SSL_CERT_FILE" in refused
