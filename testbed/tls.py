"""TLS on loopback for tests: a self-signed certificate for 127.0.0.1, and a forwarder that terminates TLS in front
of a plain-HTTP server (moto), so a client speaks https to it exactly as to S3.

The certificate is its own CA: a client trusts it by taking it as its CA bundle (``caBundle``, ``AWS_CA_BUNDLE``)
or, in a process of its own, with ``SSL_CERT_FILE`` (aiohttp builds its default context at import).
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import ssl
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

OPENSSL_MISSING = shutil.which("openssl") is None


def self_signed_certificate(directory: Path) -> tuple[Path, Path]:
    """(certificate, key) PEM files for CN/SAN 127.0.0.1, valid one day, made with the openssl command."""
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
def tls_forwarder(cert: Path, key: Path, upstream: str) -> Iterator[str]:
    """Terminate TLS on a loopback port and pipe each connection's bytes to ``upstream`` (plain HTTP); yields the
    ``https://127.0.0.1:port`` URL. Every connection and the thread are closed on exit."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    target = urlsplit(upstream)
    loop = asyncio.new_event_loop()
    ready: list[str] = []
    writers: set[asyncio.StreamWriter] = set()

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
        writers.add(client_writer)
        try:
            server_reader, server_writer = await asyncio.open_connection(target.hostname, target.port)
        except OSError:
            client_writer.close()
            return
        writers.add(server_writer)
        await asyncio.gather(pipe(client_reader, server_writer), pipe(server_reader, client_writer))

    async def start() -> asyncio.Server:
        server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=context)
        ready.append(f"https://127.0.0.1:{server.sockets[0].getsockname()[1]}")
        return server

    def close_all() -> None:
        server.close()
        for writer in writers:
            writer.close()
        loop.stop()

    server = loop.run_until_complete(start())
    thread = threading.Thread(target=loop.run_forever, name="tls-forwarder", daemon=True)
    thread.start()
    try:
        yield ready[0]
    finally:
        loop.call_soon_threadsafe(close_all)
        thread.join(timeout=10)
        loop.close()
