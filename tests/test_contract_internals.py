"""The contract s3io holds with other libraries' internals: every private name and behaviour it relies on, tested
by name, so a new aiohttp, s3fs or fsspec that changes one fails here, in one named test, not in production.

s3io's transport drives aiohttp below ClientSession (s3io/transport/http_session.py, exchange.py), and
s3io.S3FileSystem subclasses s3fs (s3io/fs.py). pyproject.toml bounds both to the versions this file passed on;
``./run.sh contract-latest`` runs it against the newest releases.
"""

from __future__ import annotations

import asyncio
import inspect

import aiohttp
import fsspec.asyn
import pytest
import s3fs
import s3fs.core
from aiohttp.client_reqrep import ClientRequest
from yarl import URL

pytestmark = pytest.mark.timeout(60)


async def _server(answers: list[bytes]) -> tuple[asyncio.Server, str]:
    """A loopback server: for each request head it reads, it writes the next answer (then any extra ones)."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            for answer in answers:
                await reader.readuntil(b"\r\n\r\n")
                writer.write(answer)
                await writer.drain()
            await reader.read()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, f"127.0.0.1:{server.sockets[0].getsockname()[1]}"


# ------------------------------------------------------------------------------------------------ aiohttp


async def test_aiohttp_connector_hands_out_pooled_connections_keyed_by_a_client_request() -> None:
    """http_session.py: ``ClientRequest(method, URL, loop=)`` is the pool key passed to ``TCPConnector.connect(req,
    traces, timeout)``; the Connection has ``protocol``/``transport`` and ``release()``/``close()``; released
    connections are handed out again; ``connector._close()`` closes synchronously."""
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
    server, host = await _server([answer, answer])
    connector = aiohttp.TCPConnector(limit=4, limit_per_host=0, keepalive_timeout=15)
    timeout = aiohttp.ClientTimeout(total=None, connect=None, sock_connect=3, sock_read=None)
    origin = ClientRequest("GET", URL(f"http://{host}/"), loop=asyncio.get_running_loop())
    try:
        transports = []
        for _ in range(2):
            connection = await connector.connect(origin, [], timeout)
            assert connection.protocol is not None and connection.transport is not None
            transports.append(connection.transport)
            connection.protocol.set_response_params(
                skip_payload=False, read_until_eof=True, auto_decompress=False, read_bufsize=256 * 1024
            )
            connection.transport.write(f"GET / HTTP/1.1\r\nhost: {host}\r\n\r\n".encode())
            message, payload = await connection.protocol.read()
            assert (message.code, message.headers["Content-Length"]) == (200, "2")
            assert await payload.readany() == b"ok" and payload.at_eof()
            assert not connection.protocol.should_close
            connection.release()
        assert transports[0] is transports[1]  # the released connection was pooled and reused
        connector._close()
        assert connector.closed
    finally:
        server.close()
        await server.wait_closed()


async def test_aiohttp_protocol_reports_unsolicited_bytes_through_should_close() -> None:
    """exchange.py: a pooled connection on which bytes arrived while idle reports ``should_close``."""
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
    extra = b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nEVIL"
    server, host = await _server([answer + extra])
    connector = aiohttp.TCPConnector()
    origin = ClientRequest("GET", URL(f"http://{host}/"), loop=asyncio.get_running_loop())
    try:
        connection = await connector.connect(origin, [], aiohttp.ClientTimeout())
        protocol = connection.protocol
        assert protocol is not None and connection.transport is not None
        protocol.set_response_params(read_until_eof=True)
        connection.transport.write(f"GET / HTTP/1.1\r\nhost: {host}\r\n\r\n".encode())
        _, payload = await protocol.read()
        assert await payload.readany() == b"ok"
        for _ in range(100):  # the extra answer is parsed as it arrives (bounded wait)
            if protocol.should_close:
                break
            await asyncio.sleep(0.01)
        assert protocol.should_close
        connection.close()
    finally:
        await connector.close()
        server.close()
        await server.wait_closed()


async def test_asyncio_selector_transport_has_a_tunable_receive_size() -> None:
    """exchange.py tunes ``transport.max_size`` (asyncio's selector transport: the size of each recv())."""
    server, host = await _server([b"HTTP/1.1 204 No Content\r\n\r\n"])
    address, port = host.split(":")
    _, writer = await asyncio.open_connection(address, int(port))
    try:
        transport = writer.transport
        assert isinstance(transport.max_size, int) and transport.max_size > 0  # type: ignore[attr-defined]
        transport.max_size = 64 * 1024  # type: ignore[attr-defined]
    finally:
        writer.close()
        server.close()
        await server.wait_closed()


def test_aiohttp_exceptions_s3io_classifies_exist() -> None:
    """retryable.py maps these aiohttp exceptions to typed errors."""
    from aiohttp.http_exceptions import HttpProcessingError

    for name in (
        "ConnectionTimeoutError",
        "ClientConnectorCertificateError",
        "ClientPayloadError",
        "ClientConnectionError",
        "ClientOSError",
        "ClientResponseError",
        "ServerDisconnectedError",
        "ClientError",
    ):
        assert issubclass(getattr(aiohttp, name), Exception), name
    assert issubclass(HttpProcessingError, Exception)
    assert "socket_factory" in inspect.signature(aiohttp.TCPConnector).parameters


# ------------------------------------------------------------------------------------------------ s3fs / fsspec


def test_s3fs_hooks_and_attributes_s3io_fs_overrides_or_reads() -> None:
    """s3io/fs.py overrides these methods and reads these attributes of s3fs.S3FileSystem and S3File."""
    fs_class = s3fs.S3FileSystem
    for name in (
        "_call_s3",
        "_prepare_config_kwargs",
        "_get_s3_method_kwargs",
        "set_session",
        "get_s3",
        "_info",
        "_cat_file",
        "_cat_ranges",
        "_get_file",
        "_open",
    ):
        assert callable(getattr(fs_class, name, None)), name
    assert "refresh" in inspect.signature(fs_class.set_session).parameters
    open_params = inspect.signature(fs_class._open).parameters
    for name in ("block_size", "acl", "version_id", "fill_cache", "cache_type", "autocommit", "size", "cache_options"):
        assert name in open_params, name
    file_params = inspect.signature(s3fs.core.S3File.__init__).parameters
    for name in ("s3_additional_kwargs", "requester_pays", "cache_options", "size", "version_id"):
        assert name in file_params, name
    assert callable(getattr(s3fs.core.S3File, "_fetch_range", None))
    assert callable(getattr(fsspec.asyn, "_run_coros_in_chunks", None))
    assert callable(fsspec.asyn.sync) and callable(fsspec.asyn.sync_wrapper)
    from s3fs.errors import translate_boto_error
    from s3fs.utils import FileExpired

    assert callable(translate_boto_error) and issubclass(FileExpired, OSError)


def test_s3fs_sends_every_request_through_call_s3_and_keeps_its_private_state(s3_endpoint, bucket: str) -> None:
    """s3fs routes its botocore calls through ``_call_s3`` (the one place s3io puts the policy), keeps the client in
    ``_s3`` and its creator in ``_s3creator``, says whether it owns the session (``_session_is_owned``), and S3File
    exposes ``details`` (with ETag) and ``read_kw`` (If-Match unless local_expiry_check)."""
    calls: list[str] = []

    class Recording(s3fs.S3FileSystem):
        async def _call_s3(self, method, *akwarglist, **kwargs):  # type: ignore[no-untyped-def]
            calls.append(method)
            return await super()._call_s3(method, *akwarglist, **kwargs)

    fs = Recording(endpoint_url=s3_endpoint.url, skip_instance_cache=True)
    fs.pipe(f"{bucket}/k.bin", b"data")
    assert fs.cat(f"{bucket}/k.bin") == b"data"
    with fs.open(f"{bucket}/k.bin") as f:
        assert "ETag" in f.details and f.read_kw.get("IfMatch") == f.details["ETag"]
    assert {"put_object", "get_object"} <= set(calls)
    assert fs._s3 is not None and hasattr(fs, "_s3creator") and hasattr(fs, "_session_is_owned")
    assert callable(fs._get_s3_method_kwargs)
