"""The listing page parser: the fast path (regular expressions over the text) reads every page of the common shape
exactly as ElementTree does, real moto pages included, and hands every other page to ElementTree, so a malformed or
unusual page reads the same (or fails the same) as before; boto3's listing is the oracle for the keys."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import pytest

from s3io import Credentials, S3Client, errors
from s3io.s3 import xml
from s3io.s3.list_page import NotFastPath, parse_fast
from s3io.s3.types import ObjectInfo, object_info
from s3io.s3.xml import collector_paused, parse_list_page
from s3io.transport.transport import AiohttpTransport, HttpRequest

NS = "http://s3.amazonaws.com/doc/2006-03-01/"
KEYS = [
    "plain/a.parquet",
    "hive/day=2026-11-01/part 1.parquet",
    "odd/a&b+c%d<e>'\"f.bin",
    "odd/ünïcødé/файл.bin",
    "odd/tab\there",
    "odd/ctrl\x01char",
    "odd/]]>bracket",
]


class RecordingTransport(AiohttpTransport):
    """The real transport; keeps the body of every listing answer (what parse_list_page was handed)."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.pages: list[bytes] = []

    async def send(self, request: HttpRequest, watchdog: Any) -> Any:
        response = await super().send(request, watchdog)
        if "list-type=2" in request.target:
            self.pages.append(response.body)
        return response


def _both(body: bytes) -> tuple[Any, Any]:
    """(what parse_list_page gives, what the ElementTree path alone gives): a value or the error's type."""

    def outcome(parse: Any) -> Any:
        try:
            return parse()
        except errors.ProtocolError as exc:
            return type(exc)

    def tree() -> Any:
        objects, prefixes, truncated, token, bad = xml._parse_list_tree("b", body)
        if bad or (truncated and not token):
            raise errors.ProtocolError("refused")
        return objects, prefixes, token if truncated else None

    return outcome(lambda: xml.parse_list_page("b", body)), outcome(tree)


def test_real_moto_pages_take_the_fast_path_and_read_as_elementtree_and_boto3_read_them(
    s3_endpoint: Any, bucket: str, s3_client: Any
) -> None:
    for i, key in enumerate(KEYS * 3):
        s3_client.put_object(Bucket=bucket, Key=f"{i:02d}/{key}", Body=b"x" * i)
    expected = sorted(o["Key"] for o in s3_client.list_objects_v2(Bucket=bucket, MaxKeys=1000)["Contents"])

    async def pages() -> tuple[list[str], list[str], list[bytes]]:
        transport = RecordingTransport(S3Client(endpoint_url=s3_endpoint.url).policy)
        async with S3Client(
            endpoint_url=s3_endpoint.url, credentials=Credentials("testing", "testing"), transport=transport
        ) as s3:
            keys = [o.key async for objects, _ in s3.list_pages(bucket) for o in objects]
            prefixes = await s3.list_prefixes(bucket, "")
        return keys, prefixes, transport.pages

    keys, prefixes, bodies = asyncio.run(pages())
    assert keys == expected and prefixes == sorted({k.split("/")[0] + "/" for k in expected})
    for body in bodies:
        parse_fast(bucket, body)  # moto's shape is the common one: no fallback
        fast, tree = _both(body)
        assert fast == tree


def _page(contents: str, *, head: str = "", tail: str = "", declaration: str = "") -> bytes:
    return (
        f'{declaration}<ListBucketResult xmlns="{NS}"><Name>b</Name><EncodingType>url</EncodingType>'
        f"<IsTruncated>false</IsTruncated>{head}{contents}{tail}</ListBucketResult>"
    ).encode()


ITEM = (
    "<Contents><Key>{key}</Key><LastModified>2026-11-24T08:16:14.000Z</LastModified>"
    "<ETag>&quot;abc&quot;</ETag><Size>{size}</Size><StorageClass>STANDARD</StorageClass></Contents>"
)
HOSTILE = {
    "common": _page(ITEM.format(key="d%3D1/a+b", size=5)),
    "pretty-printed": _page("\n  " + ITEM.format(key="k", size=1).replace("><", ">\n    <") + "\n"),
    "declaration": _page(ITEM.format(key="k", size=1), declaration='<?xml version="1.0" encoding="UTF-8"?>\n'),
    "other encoding": _page(ITEM.format(key="k\xe9", size=1), declaration='<?xml version="1.0" encoding="ISO-8859-1"?>')
    .decode()
    .encode("latin-1"),
    "not utf-8": _page(ITEM.format(key="k", size=1)).replace(b"<Key>k", b"<Key>k\xff"),
    "bare ampersand": _page(ITEM.format(key="a&b", size=1)),
    "unknown entity": _page(ITEM.format(key="a&nbsp;b", size=1)),
    "references": _page(ITEM.format(key="a&amp;b&#60;c&#x3E;&apos;", size=1)),
    "control reference": _page(ITEM.format(key="a&#1;b", size=1)),
    "cdata": _page(ITEM.format(key="<![CDATA[x]]>", size=1)),
    "close of cdata": _page(ITEM.format(key="x]]>y", size=1)),
    "comment": _page(ITEM.format(key="k", size=1) + "<!-- hi -->"),
    "namespace prefix": _page(ITEM.format(key="k", size=1)).replace(b"<Contents>", b"<s3:Contents>"),
    "size before etag": _page(
        "<Contents><Key>k</Key><LastModified>2026-11-24T08:16:14.000Z</LastModified><Size>3</Size>"
        "<ETag>&quot;e&quot;</ETag></Contents>"
    ),
    "no size": _page("<Contents><Key>k</Key><LastModified>x</LastModified><ETag>e</ETag></Contents>"),
    "size not a number": _page(ITEM.format(key="k", size="12x")),
    "size in unicode digits": _page(ITEM.format(key="k", size="١٢")),
    "truncated without token": _page(ITEM.format(key="k", size=1)).replace(b">false<", b">true<"),
    "truncation between items": _page(
        ITEM.format(key="a", size=1) + "<IsTruncated>true</IsTruncated>" + ITEM.format(key="b", size=1)
    ).replace(b"<IsTruncated>false</IsTruncated>", b""),
    "token at the end": _page(
        ITEM.format(key="k", size=1), tail="<NextContinuationToken>t+/=</NextContinuationToken>"
    ).replace(b">false<", b">true<"),
    "owner inside": _page(
        ITEM.format(key="k", size=1).replace("<StorageClass>", "<Owner><ID>1</ID></Owner><StorageClass>")
    ),
    "empty etag": _page(ITEM.format(key="k", size=1).replace("&quot;abc&quot;", "")),
    "quoted empty etag": _page(ITEM.format(key="k", size=1).replace("&quot;abc&quot;", "&quot;&quot;")),
    "etag with a reference inside its quotes": _page(
        ITEM.format(key="k", size=1).replace("&quot;abc&quot;", "&quot;a&amp;b&quot;")
    ),
    "etag quoted on one side": _page(ITEM.format(key="k", size=1).replace("&quot;abc&quot;", "&quot;abc")),
    "etag in literal quotes": _page(ITEM.format(key="k", size=1).replace("&quot;abc&quot;", '"abc"')),
    "etag of three quotes": _page(ITEM.format(key="k", size=1).replace("&quot;abc&quot;", "&quot;&quot;&quot;")),
    "prefixes": _page(
        "<CommonPrefixes><Prefix>d%3D1/</Prefix></CommonPrefixes><CommonPrefixes><Prefix>x/</Prefix></CommonPrefixes>"
    ),
    "prefix with two children": _page("<CommonPrefixes><Prefix>a/</Prefix><Prefix>b/</Prefix></CommonPrefixes>"),
    "unclosed": _page(ITEM.format(key="k", size=1))[:-10],
    "garbage": b"<html><body>502 Bad Gateway</body></html>",
    "empty": b"",
    "deeply nested": _page("<Contents><Key>k</Key><A><B><C>x</C></B></A></Contents>"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_every_page_reads_as_elementtree_reads_it(case: str) -> None:
    fast, tree = _both(HOSTILE[case])
    assert fast == tree


@pytest.mark.parametrize(
    "case",
    [
        "common",
        "pretty-printed",
        "declaration",
        "references",
        "token at the end",
        "quoted empty etag",
        "etag with a reference inside its quotes",
        "etag quoted on one side",
        "etag in literal quotes",
        "etag of three quotes",
    ],
)
def test_pages_of_the_common_shape_take_the_fast_path(case: str) -> None:
    parse_fast("b", HOSTILE[case])


@pytest.mark.parametrize(
    "case",
    [
        "other encoding",
        "not utf-8",
        "bare ampersand",
        "unknown entity",
        "cdata",
        "close of cdata",
        "comment",
        "namespace prefix",
        "size before etag",
        "no size",
        "unclosed",
        "garbage",
        "prefix with two children",
    ],
)
def test_pages_of_any_other_shape_go_to_elementtree(case: str) -> None:
    with pytest.raises(NotFastPath):
        parse_fast("b", HOSTILE[case])


def test_a_page_is_parsed_with_the_collector_paused_and_a_collector_that_was_off_stays_off() -> None:
    runs: list[int] = []
    gc.callbacks.append(lambda phase, info: runs.append(info["generation"]) if phase == "start" else None)
    try:
        gc.enable()
        with collector_paused():
            assert not gc.isenabled()
            for _ in range(20_000):  # far past the 700 new objects that start a collection
                [[]]  # noqa: B018
            assert runs == []
        assert gc.isenabled()
        parse_list_page("b", HOSTILE["common"])
        with pytest.raises(errors.ProtocolError):
            parse_list_page("b", HOSTILE["truncated without token"])
        assert gc.isenabled()  # on again after a page, and after a page that failed
        gc.disable()
        parse_list_page("b", HOSTILE["common"])
        assert not gc.isenabled()  # off stays off
    finally:
        gc.callbacks.pop()
        gc.enable()


def test_a_listed_object_is_the_object_info_the_dataclass_makes() -> None:
    made = object_info("b", "k", 3, '"e"', 1.5)
    assert made == ObjectInfo("b", "k", 3, '"e"', 1.5) and type(made) is ObjectInfo
    assert hash(made) == hash(ObjectInfo("b", "k", 3, '"e"', 1.5))
    with pytest.raises(AttributeError):
        made.key = "other"  # type: ignore[misc]
