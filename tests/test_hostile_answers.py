"""A server that lies, loops or floods: every answer is checked against the request, every non-data body is capped,
and a connection holding bytes nobody asked for is never reused. Against the scripted S3 server (a real socket)."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
from collections.abc import Callable, Iterator

import pytest
import s3fs
from s3fs.utils import FileExpired

import s3io
from s3io import Credentials, Policy, S3Client, errors
from s3io.engine import UNKNOWN_SIZE, RangeEngine
from s3io.engine.config import EngineConfig
from s3io.s3 import paging
from s3io.s3.etags import multipart_etag
from s3io.transport.exchange import ERROR_BODY_LIMIT, XML_BODY_LIMIT
from testbed.scripted_s3 import Reply, Request, ScriptedS3, error_reply, etag_of, list_body, repeated

pytestmark = pytest.mark.timeout(120)

SIZE = 10_000
DATA = bytes((i * 7) % 251 for i in range(SIZE))
QUICK = Policy(max_attempts=3, backoff_base=0.01, backoff_cap=0.02, operation_timeout=30, first_byte_timeout=10)
MiB = 1024 * 1024


@pytest.fixture
def server() -> Iterator[ScriptedS3]:
    with ScriptedS3({"obj.bin": DATA, "other.bin": b"the other object"}) as scripted:
        yield scripted


def client(server: ScriptedS3, policy: Policy = QUICK) -> S3Client:
    return S3Client(
        policy, endpoint_url=server.url, credentials=Credentials("AKIDEXAMPLE", "secret"), region="us-east-1"
    )


def fs_on(server: ScriptedS3, **options: object) -> s3io.S3FileSystem:
    """The fsspec filesystem on the scripted server: a fresh instance, no listings cache, 3 attempts (``options``
    override or add to those)."""
    defaults = {"skip_instance_cache": True, "use_listings_cache": False, "max_attempts": 3}
    return s3io.S3FileSystem(
        key="AKIDEXAMPLE",
        secret="secret",
        endpoint_url=server.url,
        client_kwargs={"region_name": "us-east-1"},
        **{**defaults, **options},
    )


def lie_once(server: ScriptedS3, reply: Reply) -> None:
    """The first GET gets ``reply``; every later request the honest answer."""
    told: list[int] = []

    def script(request: Request) -> Reply | None:
        if request.method == "GET" and not told:
            told.append(request.seq)
            return reply
        return None

    server.script = script


def partial(first: int, last: int, *, size: int = SIZE, body: bytes | None = None) -> Reply:
    """A 206 claiming bytes first..last (inclusive) of an object of ``size``, with those bytes (or ``body``)."""
    data = DATA[first : last + 1] if body is None else body
    return Reply(206, {"Content-Range": f"bytes {first}-{last}/{size}", "ETag": etag_of(DATA)}, data)


# ------------------------------------------------------------------------------------------ item 4: Content-Range


LIES = {
    "shorter range": ((100, 200), partial(100, 149)),
    "longer range": ((100, 200), partial(100, 299)),
    "different start": ((100, 200), partial(0, 99)),
    "206 to a whole-object request": ((None, None), partial(0, 99)),
    "206 with the wrong suffix": ((-100, None), partial(0, 99)),
    "from-offset answered from elsewhere": ((9_000, None), partial(8_000, SIZE - 1)),
    "Content-Length not the range's": ((100, 200), partial(100, 199, body=DATA[100:150])),
    "malformed Content-Range": ((100, 200), Reply(206, {"Content-Range": "bytes 100-abc/xyz"}, DATA[100:200])),
}


def expected_bytes(start: int | None, end: int | None) -> bytes:
    if start is None:
        return DATA
    if start < 0:
        return DATA[start:]
    return DATA[start:end]


@pytest.mark.parametrize("case", list(LIES))
async def test_a_206_other_than_the_range_asked_is_refused_then_retried(server: ScriptedS3, case: str) -> None:
    """A 206 must carry exactly the Content-Range asked for (clamped at the object's end); one that does not is a
    retryable ProtocolError, never data: the caller gets the right bytes from the next, honest answer."""
    (start, end), lie = LIES[case]
    lie_once(server, lie)
    async with client(server) as s3:
        result = await s3.get_object("bucket", "obj.bin", start, end)
        assert result.data == expected_bytes(start, end)
        assert s3.stats().retries == {"protocol": 1}
    assert server.count("GET") == 2


async def test_a_server_that_keeps_lying_about_ranges_gives_a_protocol_error_naming_the_object(
    server: ScriptedS3,
) -> None:
    server.script = lambda request: partial(100, 149) if request.method == "GET" else None
    async with client(server) as s3:
        with pytest.raises(errors.ProtocolError, match=r"asked bytes=100-199.*bytes 100-149/10000") as info:
            await s3.get_object("bucket", "obj.bin", 100, 200)
    assert info.value.url == "s3://bucket/obj.bin" and info.value.attempts == QUICK.max_attempts
    assert server.count("GET") == QUICK.max_attempts


async def test_a_range_past_the_end_is_clamped_as_s3_clamps_it(server: ScriptedS3) -> None:
    async with client(server) as s3:
        result = await s3.get_object("bucket", "obj.bin", SIZE - 10, SIZE + 500)
        assert (result.data, result.start, result.object_size) == (DATA[-10:], SIZE - 10, SIZE)
        assert (await s3.get_object("bucket", "obj.bin", -(SIZE * 2))).data == DATA
        assert s3.stats().retry_count == 0


async def test_paths_outside_the_engine_check_ranges_too(server: ScriptedS3, tmp_path) -> None:
    """fsspec whole reads and ``get_file`` parts go through the same checks: a lying first part is retried."""
    fs = s3io.S3FileSystem(
        endpoint_url=server.url, key="AKIDEXAMPLE", secret="secret", max_attempts=3, default_block_size=4096
    )
    lie_once(server, partial(0, 999))  # the first part asked 0-4095
    assert fs.cat_file("bucket/obj.bin") == DATA
    lie_once(server, partial(0, 99))  # the last 100 bytes asked, the first 100 answered
    assert fs.cat_file("bucket/obj.bin", start=-100) == DATA[-100:]
    lie_once(server, partial(0, 99))
    with fs.open("bucket/obj.bin", block_size=1000, cache_type="none") as f:
        f.seek(SIZE - 100)
        assert f.read() == DATA[-100:]
    lie_once(server, partial(100, 4195))  # the first part asked 0-4095, the answer starts elsewhere
    fs.get_file("bucket/obj.bin", str(tmp_path / "copy.bin"))
    assert (tmp_path / "copy.bin").read_bytes() == DATA


# ------------------------------------------------------------------------ item 9: a 200 to a ranged request


async def test_a_200_to_a_ranged_get_stops_reading_once_the_range_is_in(server: ScriptedS3) -> None:
    """A proxy that ignores Range answers with the whole object: s3io keeps the range, stops reading there and
    closes that connection (its unread bytes must not become the next answer)."""
    big = 32 * MiB
    pattern = bytes(range(256))

    def whole(request: Request) -> Reply | None:
        if request.key == "big.bin":
            return Reply(200, {"ETag": '"big"'}, body_chunks=repeated(pattern, big), content_length=big)
        return None

    server.script = whole
    async with client(server) as s3:
        head = await s3.get_object("bucket", "big.bin", 0, 100)
        assert (head.data, head.start, head.object_size) == (pattern[:100], 0, big)
        middle = await s3.get_object("bucket", "big.bin", 1000, 1100)
        assert middle.data == (pattern * 5)[1000 % 256 : 1000 % 256 + 100]
        assert (await s3.get_object("bucket", "other.bin")).data == b"the other object"
        assert s3.stats().bytes_in < 8 * MiB
    sent = [r.body_bytes_sent for r in server.responses if r.request.key == "big.bin"]
    assert len(sent) == 2 and all(n < 8 * MiB for n in sent), sent
    assert server.connections_opened == 3  # each stopped read closed its connection


# ------------------------------------------------------------------------- item 5: unsolicited bytes


def _raw_response(body: bytes) -> bytes:
    return b'HTTP/1.1 200 OK\r\nETag: "evil"\r\nContent-Length: %d\r\n\r\n' % len(body) + body


@pytest.mark.parametrize("delay", [0.0, 0.2], ids=["with-the-answer", "while-idle"])
async def test_a_pooled_connection_holding_an_unsolicited_answer_is_never_reused(
    server: ScriptedS3, delay: float
) -> None:
    """Bytes that arrive on a kept-alive connection with no request outstanding answer nothing: the next request
    goes out on a fresh connection and gets its own answer, never those bytes."""
    evil = _raw_response(b"EVIL")

    def script(request: Request) -> Reply | None:
        if request.key == "obj.bin":
            return Reply(200, {"ETag": etag_of(DATA)}, DATA, after=evil, after_delay=delay)
        return None

    server.script = script
    async with client(server) as s3:
        assert (await s3.get_object("bucket", "obj.bin")).data == DATA
        for _ in range(500):  # the server has put the extra answer on the wire (bounded wait)
            if server.after_written.is_set():
                break
            await asyncio.sleep(0.01)
        assert server.after_written.is_set()
        await asyncio.sleep(0.05)  # the loop takes the bytes off the socket (they are already in its buffer)
        assert (await s3.get_object("bucket", "other.bin")).data == b"the other object"
        assert (await s3.get_object("bucket", "other.bin")).data == b"the other object"
    assert server.connections_opened == 2


# ---------------------------------------------------------------------- item 8: floods of non-data bytes


def _huge_error(size: int) -> Reply:
    head = b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>InternalError</Code><Message>'
    tail = b"</Message><RequestId>r</RequestId></Error>"
    chunks = repeated(b"We encountered an internal error. ", size)

    def body() -> Iterator[bytes]:
        yield head
        yield from chunks()
        yield tail

    return Reply(
        500, {"Content-Type": "application/xml"}, body_chunks=body, content_length=len(head) + size + len(tail)
    )


async def test_a_huge_error_body_is_capped_and_its_message_truncated(
    server: ScriptedS3, caplog: pytest.LogCaptureFixture
) -> None:
    server.script = lambda request: _huge_error(48 * MiB)
    caplog.set_level(logging.DEBUG, logger="s3io")
    async with client(server) as s3:
        with pytest.raises(errors.ServerError, match="InternalError") as info:
            await s3.get_object("bucket", "obj.bin")
        assert s3.stats().bytes_in < QUICK.max_attempts * (ERROR_BODY_LIMIT + 1 * MiB)
    assert len(str(info.value)) < 2000
    assert caplog.records and all(len(record.getMessage()) < 4000 for record in caplog.records)
    assert all(r.body_bytes_sent < 8 * MiB for r in server.responses)  # each connection closed past the cap


async def test_an_oversized_listing_page_is_a_protocol_error(server: ScriptedS3) -> None:
    filler = "k" * 1000
    keys = [f"{filler}{i:06d}" for i in range(XML_BODY_LIMIT // 1000 + 100)]
    body = list_body(keys, {}, "", False, False)
    server.script = lambda request: Reply(200, {"Content-Type": "application/xml"}, body)
    async with client(server) as s3:
        with pytest.raises(errors.ProtocolError, match="exceeded"):
            [o async for o in s3.list_objects("bucket", "")]


# ---------------------------------------------------------------------- item 1: listings that loop


def _looping_listing(request: Request) -> Reply | None:
    if request.query.get("list-type") == "2":
        return Reply(200, {}, list_body(["a.bin"], {"a.bin": b"a"}, "", True, False, token="same-token"))
    if "uploads" in request.query:
        body = (
            b'<?xml version="1.0" encoding="UTF-8"?><ListMultipartUploadsResult><Bucket>bucket</Bucket>'
            b"<IsTruncated>true</IsTruncated><NextKeyMarker>k</NextKeyMarker><NextUploadIdMarker>u</NextUploadIdMarker>"
            b"<Upload><Key>k</Key><UploadId>u</UploadId></Upload></ListMultipartUploadsResult>"
        )
        return Reply(200, {}, body)
    return None


async def test_a_listing_that_repeats_its_continuation_token_ends_with_a_typed_error(server: ScriptedS3) -> None:
    server.script = _looping_listing
    async with client(server) as s3:
        with pytest.raises(errors.ListingLoop, match=r"s3://bucket/land/.*continuation token") as info:
            await asyncio.wait_for(_drain(s3.list_objects("bucket", "land/")), 20)
        assert info.value.bucket == "bucket" and info.value.key == "land/"
        with pytest.raises(errors.ListingLoop):
            await asyncio.wait_for(s3.list_prefixes("bucket", "land/"), 20)
        with pytest.raises(errors.ListingLoop, match="marker"):
            await asyncio.wait_for(_drain(s3.list_multipart_uploads("bucket", "land/")), 20)
        assert s3.stats().retry_count == 0
    assert server.count("GET") == 2 + 2 + 2  # the first page, then the one that repeated: no loop, no retry


async def _drain(iterator) -> list:
    return [item async for item in iterator]


# ---------------------------------------------------------------- item 10: keys XML cannot carry


async def test_a_key_with_a_control_character_is_listed_url_encoded_and_decoded(server: ScriptedS3) -> None:
    odd = ["land/a\x01b.bin", "land/tab\there.bin", "land/plus+and space.bin", "land/é.bin"]
    for key in odd:
        server.objects[key] = b"x"
    async with client(server) as s3:
        listed = [o.key async for o in s3.list_objects("bucket", "land/")]
        assert listed == sorted(odd)
        assert [o.key async for o in s3.list_objects("bucket", "land/", start_after="land/a\x01b.bin")] == sorted(odd)[
            1:
        ]
    assert all("encoding-type=url" in r.target for r in server.requests)


async def test_an_unparseable_listing_is_a_typed_error_naming_the_request(server: ScriptedS3) -> None:
    server.script = lambda request: Reply(200, {}, b"<ListBucketResult><Contents><Key>a</Ke")
    async with client(server) as s3:
        with pytest.raises(errors.ProtocolError, match="ListObjectsV2 answer is not well-formed XML") as info:
            await _drain(s3.list_objects("bucket", "land/"))
    assert info.value.url == "s3://bucket/land/" and info.value.operation == "list"


# ------------------------------------------------------------------------- item 6: empty keys


async def test_an_empty_key_is_refused_by_every_object_operation_before_any_request(server: ScriptedS3) -> None:
    async with client(server) as s3:
        calls = [
            s3.get_object("bucket", ""),
            s3.head_object("bucket", ""),
            s3.put_object("bucket", "", b"x"),
            s3.delete_object("bucket", ""),
            s3.delete_objects("bucket", ["a", ""]),
            s3.copy_object("bucket", "", "bucket", "b"),
            s3.copy_object("bucket", "a", "bucket", ""),
            s3.create_multipart_upload("bucket", ""),
            s3.upload_part("bucket", "", "id", 1, b"x"),
            s3.complete_multipart_upload("bucket", "", "id", [(1, '"e"')]),
            s3.abort_multipart_upload("bucket", "", "id"),
        ]
        for call in calls:
            with pytest.raises(errors.InvalidConfig, match="empty object key addresses the bucket"):
                await call
        with pytest.raises(errors.InvalidConfig, match="empty object key"):
            s3.multipart_writer("bucket", "")
    assert server.requests == []


# ------------------------------------------------------------------------- item 12: secrets


def test_a_credentials_string_is_never_echoed() -> None:
    secret = "AKIAIOSFODNN7EXAMPLE:wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
    with pytest.raises(errors.InvalidConfig, match="not shown") as info:
        S3Client(credentials=secret)
    assert secret not in str(info.value) and "wJalr" not in repr(info.value)


# ---------------------------------------------------------------- answers that leave out what they must say


def _chunked(data: bytes, step: int = 1000, *, break_after: int | None = None) -> Callable[[], Iterator[bytes]]:
    """A chunked body of ``data``; with ``break_after``, the connection dies after that many bytes (no last chunk)."""

    def chunks() -> Iterator[bytes]:
        end = len(data) if break_after is None else break_after
        for start in range(0, end, step):
            part = data[start : min(start + step, end)]
            yield f"{len(part):x}\r\n".encode() + part + b"\r\n"
        if break_after is None:
            yield b"0\r\n\r\n"
        else:
            yield b"1000\r\n" + data[end : end + 100]  # a chunk that never ends, then the server closes

    return chunks


@pytest.mark.parametrize("end", [5_000, None], ids=["bounded", "to-the-end"])
async def test_a_200_of_unstated_length_that_breaks_is_never_resumed_onto_what_it_gave(
    server: ScriptedS3, end: int | None
) -> None:
    """A proxy ignores Range and sends the whole object chunked, which breaks after 3,000 bytes; the retry gets an
    honest 206. The bytes kept from the unsized answer are dropped, not glued in front of the 206's."""
    lie_once(
        server,
        Reply(
            200, {"ETag": etag_of(DATA), "Transfer-Encoding": "chunked"}, body_chunks=_chunked(DATA, break_after=3_000)
        ),
    )
    async with client(server) as s3:
        got = await s3.get_object("bucket", "obj.bin", 1_000, end)
    assert got.data == DATA[1_000:end]
    assert [r.range for r in server.requests] == [f"bytes=1000-{'' if end is None else end - 1}"] * 2


async def test_an_answer_without_an_etag_is_never_resumed_unpinned(server: ScriptedS3) -> None:
    """The first answer names no ETag and breaks after 4,000 bytes; the object is replaced meanwhile. A resume could
    not be pinned, so the range is asked again whole: the result is one version, never old bytes then new ones."""
    new = bytes(255 - b for b in DATA)
    answers: list[Request] = []

    def script(request: Request) -> Reply | None:
        if request.method != "GET":
            return None
        answers.append(request)
        if len(answers) == 1:
            return Reply(
                206, {"Content-Range": f"bytes 0-{SIZE - 1}/{SIZE}"}, DATA[:4_000], content_length=SIZE, close=True
            )
        first, last = (int(x) for x in request.range.removeprefix("bytes=").split("-"))
        return Reply(
            206, {"Content-Range": f"bytes {first}-{last}/{SIZE}", "ETag": etag_of(new)}, new[first : last + 1]
        )

    server.script = script
    async with client(server) as s3:
        got = await s3.get_object("bucket", "obj.bin", 0, SIZE)
    assert got.data == new and got.etag == etag_of(new)
    assert [(r.range, r.headers.get("if-match")) for r in answers] == [(f"bytes=0-{SIZE - 1}", None)] * 2


async def test_whole_object_reads_do_not_take_an_unsized_first_part_for_the_whole_object(
    server: ScriptedS3, tmp_path
) -> None:
    """A proxy ignores Range and answers every GET with the whole object, chunked (no size). Reads that learn the
    size from their first part (the engine's unknown-size read, s3fs's cat_file and get_file) read on until the
    object ends, instead of returning the first part as if it were all."""
    big = bytes((i * 13) % 251 for i in range(300_000))
    server.objects["big.bin"] = big
    server.script = lambda r: (
        Reply(200, {"ETag": etag_of(big), "Transfer-Encoding": "chunked"}, body_chunks=_chunked(big, 10_000))
        if r.method == "GET" and "list-type" not in r.query
        else None
    )
    async with client(server) as s3:
        engine = RangeEngine(s3, EngineConfig(part_size=64 * 1024))
        assert await engine.fetch_object(s3io.ObjectInfo("bucket", "big.bin", UNKNOWN_SIZE, None, None)) == big
    fs = fs_on(server, default_block_size=64 * 1024)
    assert fs.cat_file("bucket/big.bin") == big
    fs.get_file("bucket/big.bin", str(tmp_path / "big.bin"))
    assert (tmp_path / "big.bin").read_bytes() == big


async def test_a_truncated_listing_without_a_continuation_token_is_a_protocol_error(server: ScriptedS3) -> None:
    """IsTruncated says there is more, but no NextContinuationToken says how to ask for it: taking the page for
    the last would silently miss objects."""
    objects = {f"k{i:03d}": b"x" for i in range(10)}

    def script(request: Request) -> Reply | None:
        if request.query.get("list-type") == "2":
            body = list_body(sorted(objects)[:3], objects, "", True, True)
            return Reply(200, {}, body.replace(b"<NextContinuationToken>k002</NextContinuationToken>", b""))
        return None

    server.script = script
    async with client(server) as s3:
        with pytest.raises(errors.ProtocolError, match="truncated but gives no NextContinuationToken"):
            await _drain(s3.list_objects("bucket"))
        with pytest.raises(errors.ProtocolError, match="truncated"):
            await s3.list_prefixes("bucket")


async def test_garbage_in_a_head_or_a_listing_is_a_protocol_error_naming_the_object(server: ScriptedS3) -> None:
    answers = {
        "a Last-Modified of 'yesterday'": Reply(200, {"ETag": '"x"', "Last-Modified": "yesterday"}, content_length=10),
        "no Content-Length": Reply(200, {"ETag": '"x"'}, body_chunks=lambda: iter(())),  # sent without one
    }
    for what, reply in answers.items():
        server.script = lambda r, reply=reply: reply if r.method == "HEAD" else None
        async with client(server) as s3:
            with pytest.raises(errors.ProtocolError, match=f"a HEAD answer with {what}") as info:
                await s3.head_object("bucket", "obj.bin")
        assert info.value.key == "obj.bin"

    def listing(request: Request) -> Reply | None:
        if request.query.get("list-type") == "2":
            body = list_body(["obj.bin"], server.objects, "", False, True)
            return Reply(200, {}, body.replace(f"<Size>{SIZE}</Size>".encode(), b"<Size>big</Size>"))
        return None

    server.script = listing
    async with client(server) as s3:
        with pytest.raises(errors.ProtocolError, match="<Size> that is not a number of bytes: 'big'"):
            await _drain(s3.list_objects("bucket"))


def test_the_command_line_listing_stops_when_the_server_loops(server: ScriptedS3, capsys, monkeypatch) -> None:
    """``s3io ls`` (not recursive) pages through the same loop check as every listing."""
    from s3io.cli import main

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    server.script = _looping_listing
    code = main(["ls", "s3://bucket/land/", "--endpoint-url", server.url, "--max-attempts", "2"])
    assert code != 0
    assert "ListingLoop" in capsys.readouterr().err
    assert server.count("GET") == 2


# ---------------------------------------------------------------- writes whose 200 does not say they were done

_PADDED_ERROR = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n'
    + b" " * 600  # S3's keep-alive spaces while a slow copy or complete runs
    + b"<Error><Code>InternalError</Code><Message>We encountered an internal error. Please try again.</Message></Error>"
)
_PART = '"' + "ab" * 16 + '"'


def _writes(server: ScriptedS3, body: bytes) -> None:
    server.script = lambda r: (
        Reply(200, {"Content-Type": "application/xml"}, body) if r.method in ("PUT", "POST") else None
    )


@pytest.mark.parametrize(
    "body, error, message",
    [
        (_PADDED_ERROR, errors.ServerError, "internal error"),
        (b'<?xml version="1.0" encoding="UTF-8"?><Nothing/>', errors.ProtocolError, "root <Nothing>"),
        (b"<CopyObjectResult><LastModified>x</LastModified></CopyObjectResult>", errors.ProtocolError, "with an ETag"),
    ],
    ids=["error-after-keep-alive-spaces", "other-document", "no-etag"],
)
async def test_a_copy_or_complete_whose_200_is_not_a_result_with_an_etag_is_an_error_and_retried(
    server: ScriptedS3, body: bytes, error: type, message: str
) -> None:
    _writes(server, body)
    async with client(server) as s3:
        with pytest.raises(error, match=message):
            await s3.copy_object("bucket", "obj.bin", "bucket", "copy.bin")
        with pytest.raises(error, match=message):
            await s3.complete_multipart_upload("bucket", "big.bin", "upload", [(1, _PART)])
    assert server.count("PUT") == server.count("POST") == QUICK.max_attempts


@pytest.mark.parametrize(
    "body, error, message",
    [
        (
            b"<Error><Code>InternalError</Code><Message>We encountered an internal error.</Message></Error>",
            errors.ServerError,
            "internal error",
        ),
        (
            b'<DeleteResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"></DeleteResult>',
            errors.ProtocolError,
            "nothing of 2 of the 2 keys",
        ),
        (
            b"<DeleteResult><Deleted><Key>a</Key></Deleted></DeleteResult>",
            errors.ProtocolError,
            "nothing of 1 of the 2 keys .*'b'",
        ),
    ],
    ids=["error-in-200", "empty-result", "one-key-missing"],
)
async def test_a_delete_objects_answer_must_account_for_every_key(
    server: ScriptedS3, body: bytes, error: type, message: str
) -> None:
    """A DeleteObjects 200 that is an error, or says nothing of some keys sent, is not an empty success."""
    _writes(server, body)
    async with client(server) as s3:
        with pytest.raises(error, match=message):
            await s3.delete_objects("bucket", ["a", "b"])
    assert server.count("POST") == QUICK.max_attempts


async def test_a_lost_complete_answer_is_looked_up_outside_the_attempt_even_with_one_connection(
    server: ScriptedS3,
) -> None:
    """The upload completes but its answer is lost; the retry finds NoSuchUpload, and the object is looked up with a
    HEAD. With one connection, a HEAD sent from inside the attempt would wait for the slot that attempt holds."""
    posts: list[int] = []

    def script(request: Request) -> Reply | None:
        if request.method == "POST":
            posts.append(request.seq)
            if len(posts) == 1:
                return Reply(200, {}, b"", content_length=500, close=True)  # done, but the answer is lost
            return error_reply(404, "NoSuchUpload", "The specified upload does not exist.")
        if request.method == "HEAD":
            return Reply(200, {"ETag": multipart_etag([_PART])}, content_length=123)
        return None

    server.script = script
    one = QUICK.replace(max_connections=1, stall_timeout=20, first_byte_timeout=20)
    async with client(server, one) as s3:
        result = await asyncio.wait_for(s3.complete_multipart_upload("bucket", "big.bin", "upload", [(1, _PART)]), 15)
    assert result.etag == multipart_etag([_PART])
    assert [r.method for r in server.requests] == ["POST", "POST", "HEAD"]


async def test_a_listing_that_goes_back_with_fresh_tokens_ends_with_a_typed_error(server: ScriptedS3) -> None:
    """A server that loops with a new continuation token every page (a counter in it) never repeats a token: the
    keys going back is what shows the loop. No page that goes back reaches the caller."""
    objects = {f"land/k{i}": b"x" for i in range(3)}
    pages: list[int] = []

    def script(request: Request) -> Reply | None:
        if request.query.get("list-type") == "2":
            pages.append(request.seq)
            body = list_body(sorted(objects), objects, "land/", True, True, token=f"token-{len(pages)}")
            return Reply(200, {}, body)
        return None

    server.script = script
    async with client(server) as s3:
        seen: list[str] = []
        with pytest.raises(errors.ListingLoop, match=r"went back to 'land/k0' on page 2.*continuation token"):
            async for obj in s3.list_objects("bucket", "land/"):
                seen.append(obj.key)
        assert seen == sorted(objects)
    assert len(pages) == 2


async def test_a_read_that_joins_another_reads_unpinned_get_never_gets_that_reads_conflict(
    server: ScriptedS3,
) -> None:
    """Read A (no ETag known) gets part 1 from version 1, then part 2 from version 2: A's conflict. Read B asks for
    part 2 meanwhile. An unpinned GET is pinned and checked by the read that started it, so B does not join it
    (it used to, and got ObjectChanged for a version it never saw); B reads version 2 on its own."""
    part = 1024
    v1, v2 = bytes([1]) * (2 * part), bytes([2]) * (2 * part)

    def script(request: Request) -> Reply | None:
        if request.method != "GET" or not request.range:
            return None
        first, last = (int(x) for x in request.range.removeprefix("bytes=").split("-"))
        data = v1 if first == 0 else v2  # replaced between A's two GETs
        headers = {"ETag": etag_of(data), "Content-Range": f"bytes {first}-{last}/{2 * part}"}
        return Reply(206, headers, data[first : last + 1])

    class SecondPartLate:
        """The real client, with the GET of part 2 held back so that part 1 answers first."""

        def __init__(self, real: S3Client) -> None:
            self.real, self.metrics, self.started = real, real.metrics, asyncio.Event()

        def stats(self) -> s3io.MetricsSnapshot:
            return self.real.stats()

        async def get_range(
            self, bucket: str, key: str, want: s3io.GetRange, *, if_match: str | None = None, into=None
        ):
            if want.start == part:
                self.started.set()
                await asyncio.sleep(0.3)
            return await self.real.get_range(bucket, key, want, if_match=if_match, into=into)

    server.script = script
    async with client(server) as real:
        source = SecondPartLate(real)
        config = EngineConfig(part_size=part, whole_object_threshold=0, coalesce_gap=0, max_concurrency=4)
        engine = RangeEngine(source, config)  # type: ignore[arg-type]
        obj = s3io.ObjectInfo("bucket", "obj.bin", 2 * part, None)
        read_a = asyncio.ensure_future(engine.fetch_object(obj))
        await asyncio.wait_for(source.started.wait(), 10)
        read_b = asyncio.ensure_future(engine.fetch_ranges(obj, [(part, 2 * part)]))
        with pytest.raises(errors.ObjectChanged):
            await read_a
        assert (await read_b) == [v2[part:]]


async def test_a_first_answer_claiming_a_petabyte_fails_at_the_next_part_not_after_a_part_per_byte_range(
    server: ScriptedS3, tmp_path
) -> None:
    """The first part of a whole-object read says the object is a petabyte (Content-Range total); it is 10,000
    bytes. The engine, cat_file and get_file learn the size from that answer. They used to list every part of a
    petabyte first (the engine: gigabytes and a held event loop), and cat_file and get_file took each empty
    answer past the real end as a part, a GET per part of the petabyte. Now the next parts show the lie: an error
    naming the object, after a handful of requests."""
    petabyte = 10**15
    part = 1024

    def script(request: Request) -> Reply | None:
        if request.method == "GET" and request.range == f"bytes=0-{part - 1}":
            return Reply(206, {"Content-Range": f"bytes 0-{part - 1}/{petabyte}", "ETag": etag_of(DATA)}, DATA[:part])
        return None

    server.script = script
    async with client(server) as s3:
        engine = RangeEngine(s3, EngineConfig(part_size=part, max_concurrency=4))
        with pytest.raises(errors.ObjectChanged, match=f"expected {petabyte}"):
            await asyncio.wait_for(engine.fetch_object(s3io.ObjectInfo("bucket", "obj.bin", UNKNOWN_SIZE, None)), 60)
        assert s3.stats().request_count <= 1 + 4 * QUICK.max_attempts
    fs = fs_on(server, default_block_size=part, max_concurrency=4)
    # each read has a key of its own: a GET that a failed read cancelled may still reach the server afterwards
    reads = {
        "cat.bin": lambda: fs.cat_file("bucket/cat.bin"),
        "get.bin": lambda: fs.get_file("bucket/get.bin", str(tmp_path / "o")),
    }
    for key, read in reads.items():
        server.objects[key] = DATA
        with pytest.raises(FileExpired) as caught:
            await asyncio.wait_for(asyncio.to_thread(read), 60)
        assert f"the object is {petabyte} bytes" in str(caught.value.__cause__)
        assert sum(1 for r in server.requests if r.key == key) <= 1 + 4 * 3
    assert not (tmp_path / "o").exists()


def _read_in_tens(fs: s3io.S3FileSystem, path: str) -> bytes:
    with fs.open(path, "rb", block_size=10, cache_type="none") as f:
        return f.read(10) + f.read(10) + f.read(10)


@pytest.mark.parametrize("local_expiry_check", [False, True])
def test_an_object_that_shrinks_mid_read_on_a_store_ignoring_if_match_is_never_returned_short(
    server: ScriptedS3, tmp_path, local_expiry_check: bool
) -> None:
    """The scripted server ignores If-Match (as the stores ``local_expiry_check`` is for). After the first chunk,
    the 30-byte object becomes 5 bytes: the later chunks get 416. That used to read as "past the end", and
    cat_file, get_file and open().read(10) x 3 returned 10 bytes silently; now each raises FileExpired. Each read
    has a key of its own: a read that failed may leave a sibling GET on the wire, and that straggler, reaching the
    server after the next read's script is set, must not count as the next read's first GET."""
    original = b"0123456789" * 3
    reads = {
        "cat_file": lambda fs, path: fs.cat_file(path, chunksize=10),
        "get_file": lambda fs, path: fs.get_file(path, str(tmp_path / "out"), chunksize=10),
        "open().read()": _read_in_tens,
    }
    for number, (name, read) in enumerate(reads.items()):
        key = f"k{number}"
        server.objects[key] = original
        gets: list[int] = []

        def script(request: Request, gets: list[int] = gets, key: str = key) -> Reply | None:
            if request.method == "GET" and request.range and request.key == key:
                gets.append(request.seq)
                if len(gets) == 2:
                    server.objects[key] = b"abcde"
            return None

        server.script = script
        fs = fs_on(server, max_attempts=1, local_expiry_check=local_expiry_check)
        try:
            with pytest.raises(FileExpired):
                read(fs, f"bucket/{key}")
        finally:
            fs.close()
        assert not (tmp_path / "out").exists(), name


@pytest.mark.parametrize(
    ("status", "code"), [(400, "ExpiredToken"), (403, "InvalidAccessKeyId"), (501, "NotImplemented"), (409, "Odd")]
)
def test_a_failed_read_raises_the_class_and_errno_s3fs_raises_for_the_same_answer(
    server: ScriptedS3, status: int, code: str
) -> None:
    """Reads go through s3io's own client, so no botocore answer stands behind their errors: they used to be
    OSError(EINVAL) whatever S3 said, and an expired token was a PermissionError from ls but not from a read.
    s3fs is the oracle: the same answer to its GET gives the same class (or a subclass) and errno."""
    server.script = lambda r: (
        error_reply(status, code, "scripted") if r.method == "GET" and r.key == "obj.bin" else None
    )
    options = {"key": "AKIDEXAMPLE", "secret": "secret", "skip_instance_cache": True}
    ours = s3io.S3FileSystem(endpoint_url=server.url, client_kwargs={"region_name": "us-east-1"}, **options)
    peer = s3fs.S3FileSystem(client_kwargs={"endpoint_url": server.url, "region_name": "us-east-1"}, **options)
    try:
        for read in (lambda fs: fs.cat_file("bucket/obj.bin"), lambda fs: fs.open("bucket/obj.bin").read()):
            outcomes = []
            for fs in (ours, peer):
                with pytest.raises(OSError) as caught:
                    read(fs)
                outcomes.append((type(caught.value), caught.value.errno))
            (ours_type, ours_errno), (peer_type, peer_errno) = outcomes
            assert issubclass(ours_type, peer_type) and ours_errno == peer_errno  # AccessDenied is a PermissionError
    finally:
        ours.close()


def _cause_of(exc: BaseException, kind: type[BaseException]) -> BaseException | None:
    while exc is not None and not isinstance(exc, kind):
        exc = exc.__cause__
    return exc


def test_the_filesystems_listings_stop_a_looping_server_as_the_clients_do(server: ScriptedS3) -> None:
    """ls and find page through botocore (s3fs's own pager followed every token): a repeated token, keys going
    back, and IsTruncated without a token end in an OSError caused by the typed error after a page or two, not an
    endless listing (12,911 LISTs in 15 s in the review) or a KeyError."""
    fs = fs_on(server)
    try:
        server.script = _looping_listing
        for listing in (lambda: fs.ls("bucket/land", detail=False), lambda: fs.find("bucket/land")):
            before = server.count("GET")
            with pytest.raises(OSError) as caught:
                listing()
            assert isinstance(_cause_of(caught.value, errors.ListingLoop), errors.ListingLoop)
            assert server.count("GET") - before == 2
        server.script = lambda r: (
            Reply(
                200, {}, list_body(["a.bin"], {"a.bin": b"a"}, "", True, False).replace(b"NextContinuationToken", b"X")
            )
            if r.query.get("list-type") == "2"
            else None
        )
        with pytest.raises(OSError) as caught:
            fs.ls("bucket/land", detail=False)
        assert "no continuation token" in str(caught.value)
    finally:
        fs.close()


async def test_a_listing_of_endless_empty_pages_with_fresh_tokens_ends_with_a_typed_error(
    server: ScriptedS3, monkeypatch
) -> None:
    """Every page holds nothing, says more follows, and gives a token never seen: neither a repeated token nor keys
    going back show the loop. ``MAX_EMPTY_PAGES`` such pages in a row do (read_parquet listed 24,208 pages in 6 s
    in the review); the filesystem's listing stops the same way. The threshold is 10,000 (S3 sends empty pages
    while it skips delete markers); it is lowered here so the test sends hundreds of requests, not 20,000."""
    monkeypatch.setattr(paging, "MAX_EMPTY_PAGES", 300)
    pages = iter(range(10**9))
    server.script = lambda r: (
        Reply(200, {}, list_body([], {}, "", True, False, token=f"t{next(pages)}"))
        if r.query.get("list-type") == "2"
        else None
    )
    async with client(server) as s3:
        with pytest.raises(errors.ListingLoop, match="300 pages in a row holding no key"):
            await asyncio.wait_for(_drain(s3.list_objects("bucket", "land/")), 60)
    assert server.count("GET") == 300
    fs = fs_on(server)
    try:
        with pytest.raises(OSError, match="pages in a row holding no key"):
            await asyncio.wait_for(asyncio.to_thread(fs.ls, "bucket/land", detail=False), 60)
    finally:
        fs.close()


EXPRESS_SESSION = (
    b'<?xml version="1.0" encoding="UTF-8"?><CreateSessionResult><Credentials><SessionToken>token</SessionToken>'
    b"<SecretAccessKey>secret</SecretAccessKey><AccessKeyId>AKIDEXAMPLE</AccessKeyId>"
    b"<Expiration>2999-01-01T00:00:00Z</Expiration></Credentials></CreateSessionResult>"
)


async def test_a_directory_buckets_listing_out_of_key_order_is_not_taken_for_a_loop() -> None:
    """S3 Express directory buckets (``--x-s3``) do not list in key order: pages that go back are honest there.
    The client and the filesystem list them whole, as s3fs does; other loop checks still apply."""
    bucket = "data--usw2-az1--x-s3"
    pages = {None: (["d/c", "d/d"], "t1"), "t1": (["d/a", "d/b"], None)}
    with ScriptedS3({}, bucket=bucket) as directory:

        def script(request: Request) -> Reply | None:
            if "session" in request.query:  # botocore's CreateSession for directory buckets
                return Reply(200, {}, EXPRESS_SESSION)
            if request.query.get("list-type") != "2":
                return None
            keys, token = pages[request.query.get("continuation-token")]
            body = list_body(keys, {}, "d/", token is not None, False, token=token)
            return Reply(200, {}, body.replace(b"<Name>bucket</Name>", f"<Name>{bucket}</Name>".encode()))

        directory.script = script
        async with client(directory) as s3:
            assert [o.key async for o in s3.list_objects(bucket, "d/")] == ["d/c", "d/d", "d/a", "d/b"]
        fs = fs_on(directory)
        try:
            assert sorted(fs.find(f"{bucket}/d")) == [f"{bucket}/d/{k}" for k in "abcd"]
        finally:
            fs.close()


def test_a_server_that_never_states_the_size_is_read_to_the_size_a_head_states(server: ScriptedS3, tmp_path) -> None:
    """Every ranged GET gets a full 206 of total "*", past the object's end too: whole-object reads used to ask for
    part after part forever (8,515 GETs and 2 GiB in 4 s in the review). Now one HEAD, pinned to the first answer's
    ETag, sizes the read: the engine, cat_file and get_file give exactly the object; ``s3io cat``, whose first
    part is larger than the object, refuses that answer instead of printing what lies past the end."""
    big = bytes((i * 31) % 251 for i in range(300_000))
    server.objects["big.bin"] = big

    def endless(request: Request) -> Reply | None:
        if request.method != "GET" or not request.range:
            return None
        first, last = (int(x) for x in request.range.removeprefix("bytes=").split("-"))
        body = (big + b"z" * (last + 1))[first : last + 1]
        return Reply(206, {"ETag": etag_of(big), "Content-Range": f"bytes {first}-{last}/*"}, body)

    server.script = endless
    part = 64 * 1024
    reads = 0

    async def engine_read() -> bytes:
        async with client(server) as s3:
            engine = RangeEngine(s3, EngineConfig(part_size=part))
            return await engine.fetch_object(s3io.ObjectInfo("bucket", "big.bin", UNKNOWN_SIZE, None, None))

    fs = fs_on(server)
    try:
        for name, read in {
            "engine": lambda: asyncio.run(engine_read()),
            "cat_file": lambda: fs.cat_file("bucket/big.bin", chunksize=part),
            "get_file": lambda: (
                fs.get_file("bucket/big.bin", str(tmp_path / "big.bin"), chunksize=part)
                or (tmp_path / "big.bin").read_bytes()
            ),
        }.items():
            before = len(server.requests)
            assert read() == big, name
            # each part once, one HEAD for the size (and, for the engine's whole read, one for the checksum)
            assert len(server.requests) - before <= 1 + 300_000 // part + 2, name
            reads += 1
    finally:
        fs.close()
    cat = subprocess.run(
        [sys.executable, "-m", "s3io", "cat", "s3://bucket/big.bin", "--anonymous", "--endpoint-url", server.url],
        capture_output=True,
        timeout=60,
        check=False,
    )
    # its first 8 MiB part, full of bytes past the end, is refused before a byte is written
    assert cat.returncode == 1 and not cat.stdout and b"HEAD says the object is 300000 bytes" in cat.stderr
    assert reads == 3


async def test_a_key_deleted_on_its_own_reports_only_s3s_refusal_and_a_dead_server_fails_the_call(
    server: ScriptedS3,
) -> None:
    """Keys DeleteObjects' XML cannot carry take a DELETE each. S3's refusal of one key (403) is that key's
    DeleteError, as DeleteObjects reports it; a failure that is not about the key (503 past the retries, a deadline)
    used to become a DeleteError too, and the next key then waited out its own deadline (5 keys x the operation
    timeout against a silent server in the review). Now it fails the call, and later keys are not tried."""
    refused, throttled, later = "k\x01refused", "k\x01throttled", "k\x01later"

    def script(request: Request) -> Reply | None:
        if request.method != "DELETE":
            return None
        if request.key == refused:
            return error_reply(403, "AccessDenied", "no")
        return error_reply(503, "SlowDown", "slow down")

    server.script = script
    async with client(server) as s3:
        result = await s3.delete_objects("bucket", [refused])
        assert [(e.key, e.code) for e in result.errors] == [(refused, "AccessDenied")] and not result.deleted
        with pytest.raises(errors.Throttled):
            await s3.delete_objects("bucket", [refused, throttled, later])
    deletes = [r.key for r in server.requests if r.method == "DELETE"]
    assert deletes == [refused, refused] + [throttled] * QUICK.max_attempts
