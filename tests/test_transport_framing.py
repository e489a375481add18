"""Response framing the transport must get right whatever the server picks: Content-Length, chunked, or a
body that ends when the server closes the connection. A small asyncio server on loopback answers with
exactly the bytes each test gives it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from s3io import Credentials, Policy, S3Client, errors
from s3io.transport.exchange import LARGE_RECV_BYTES, RECV_BYTES

pytestmark = pytest.mark.timeout(30)

BODY = bytes(range(256)) * 20  # 5120 bytes
QUICK_RETRIES = Policy(max_attempts=4, backoff_base=0.01, backoff_cap=0.05)


async def _serve(answer: bytes, close_after: bool) -> tuple[asyncio.Server, str, list[bytes]]:
    """A server that reads one request head per answer and writes ``answer``; records the request heads."""
    heads: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                heads.append(head)
                writer.write(answer)
                await writer.drain()
                if close_after:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}", heads


@pytest.fixture
async def client_factory() -> AsyncIterator:
    servers: list[asyncio.Server] = []

    async def make(
        answer: bytes, close_after: bool = False, first_contact_attempts: int | None = 2
    ) -> tuple[S3Client, list[bytes]]:
        server, url, heads = await _serve(answer, close_after)
        servers.append(server)
        credentials = Credentials("AKIDEXAMPLE", "secret")
        policy = QUICK_RETRIES.replace(first_contact_attempts=first_contact_attempts)
        return S3Client(policy, endpoint_url=url, credentials=credentials, region="us-east-1"), heads

    yield make
    for server in servers:
        server.close()
        await server.wait_closed()


def _chunked(body: bytes, size: int) -> bytes:
    parts = [b"%x\r\n%s\r\n" % (len(body[i : i + size]), body[i : i + size]) for i in range(0, len(body), size)]
    return b"".join(parts) + b"0\r\n\r\n"


async def test_a_chunked_body_is_decoded_and_the_connection_reused(client_factory) -> None:
    answer = b'HTTP/1.1 200 OK\r\nETag: "e1"\r\nTransfer-Encoding: chunked\r\n\r\n' + _chunked(BODY, 1000)
    s3, heads = await client_factory(answer)
    async with s3:
        whole = await s3.get_object("bucket", "chunked.bin")
        assert (whole.data, whole.object_size) == (BODY, len(BODY))
        # a suffix read answered with the whole object, unsized: s3io keeps only the tail it asked for
        tail = await s3.get_object("bucket", "chunked.bin", -50)
        assert (tail.data, tail.start, tail.object_size) == (BODY[-50:], len(BODY) - 50, len(BODY))
        # a range answered with the whole object (a proxy that ignores Range): the range is cut out of it, and the
        # body is not read past the range's end
        part = await s3.get_object("bucket", "chunked.bin", 100, 300)
        assert (part.data, part.start) == (BODY[100:300], 100)
    assert len(heads) == 3  # all on one connection (the server loops on it); no retry
    assert b"range: bytes=-50" in heads[1].lower() and b"range: bytes=100-299" in heads[2].lower()


async def test_a_body_delimited_by_the_connection_closing_is_read_to_the_end(client_factory) -> None:
    answer = b'HTTP/1.1 200 OK\r\nETag: "e2"\r\nConnection: close\r\n\r\n' + BODY
    s3, heads = await client_factory(answer, close_after=True)
    async with s3:
        assert (await s3.get_object("bucket", "until-close.bin")).data == BODY
        assert (await s3.get_object("bucket", "until-close.bin")).data == BODY  # a new connection, not the closed one
    assert len(heads) == 2


async def test_a_garbled_status_line_is_a_transport_error_after_the_retries(client_factory) -> None:
    s3, heads = await client_factory(b"HTTX/9 what\r\n\r\n", close_after=True, first_contact_attempts=None)
    async with s3:
        with pytest.raises(errors.TransportError, match="malformed HTTP response"):
            await s3.get_object("bucket", "garbled.bin")
    assert len(heads) == s3.policy.max_attempts
    assert heads[0].startswith(b"GET /bucket/garbled.bin HTTP/1.1\r\n")


async def test_a_first_contact_that_never_answers_in_http_says_the_endpoint_is_not_s3(client_factory) -> None:
    s3, heads = await client_factory(b"HTTX/9 what\r\n\r\n", close_after=True)
    async with s3:
        with pytest.raises(errors.EndpointNotS3, match=r"answered, but not in HTTP.*it is not an S3 endpoint"):
            await s3.get_object("bucket", "garbled.bin")
    assert len(heads) == s3.policy.first_contact_attempts == 2  # not max_attempts: nothing it says will change


async def test_receive_size_is_64_kib_for_a_small_answer_and_256_kib_once_a_body_needs_a_second_read(
    client_factory,
) -> None:
    """asyncio's 256 KiB receives map and unmap fresh pages on every read, even of a 1 KiB answer; an exchange
    starts at 64 KiB and goes back to 256 KiB only for a body that needs more than one read."""
    big = bytes(range(256)) * 4096  # 1 MiB, written by the server in one piece
    for body, expected_size in ((BODY, RECV_BYTES), (big, LARGE_RECV_BYTES)):
        answer = b'HTTP/1.1 200 OK\r\nETag: "e3"\r\nContent-Length: %d\r\n\r\n' % len(body) + body
        s3, heads = await client_factory(answer)
        async with s3:
            for _ in range(2):
                assert (await s3.get_object("bucket", "object.bin")).data == body
            connection = await s3._transport.session().connect("http", s3.endpoint.host)  # type: ignore[attr-defined]
            try:
                assert connection.transport is not None
                assert connection.transport.max_size == expected_size  # type: ignore[attr-defined]
            finally:
                connection.release()
        # both GETs on one connection; the probe got that pooled connection (a fresh one would have asyncio's
        # default size, which fails the small case)
        assert len(heads) == 2
