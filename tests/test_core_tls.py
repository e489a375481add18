"""HTTPS: s3io's transport over TLS, through a TLS-terminating forwarder in front of moto on loopback.

The client runs in a child process because aiohttp builds its verifying SSL context when it is imported,
from the default trust store; the child points SSL_CERT_FILE at the test's own self-signed certificate.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command to make a certificate"),
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


def _certificate(directory: Path) -> tuple[Path, Path]:
    cert, key = directory / "cert.pem", directory / "key.pem"
    subject = ["-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"]
    files = ["-keyout", str(key), "-out", str(cert)]
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", *subject, *files],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key


@contextlib.contextmanager
def _tls_forwarder(cert: Path, key: Path, upstream: str) -> Iterator[str]:
    """Terminate TLS on a loopback port and pipe each connection's bytes to ``upstream`` (plain HTTP)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    target = urlsplit(upstream)
    loop = asyncio.new_event_loop()
    ready: list[str] = []

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()

    async def handle(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        server_reader, server_writer = await asyncio.open_connection(target.hostname, target.port)
        await asyncio.gather(pipe(client_reader, server_writer), pipe(server_reader, client_writer))

    async def start() -> asyncio.Server:
        server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=context)
        ready.append(f"https://127.0.0.1:{server.sockets[0].getsockname()[1]}")
        return server

    server = loop.run_until_complete(start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield ready[0]
    finally:
        loop.call_soon_threadsafe(server.close)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()


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
    cert, key = _certificate(tmp_path)
    with _tls_forwarder(cert, key, s3_endpoint.url) as endpoint:
        out = _run_client(endpoint, bucket, cert).split()
        assert out == [bytes(range(100, 110)).hex(), "10240"]
        assert s3_client.get_object(Bucket=bucket, Key="tls.bin")["Body"].read() == bytes(range(256)) * 40

        refused = _run_client(endpoint, bucket, None)  # the default trust store does not know our certificate
    assert refused.startswith("InvalidConfig attempts=1:"), refused
    assert "certificate" in refused and "SSL_CERT_FILE" in refused
