"""A ListObjectsV2 page read by regular expressions over its text, for the shape every S3 store sends; anything else
goes to ElementTree (``xml.parse_list_page``), so a page reads the same either way and a malformed one is still a
ProtocolError.

Why: building an ElementTree of a 1,000-key page and walking it cost ~8 ms here, most of a 200,000-key listing's
CPU. The fast path accepts only a document made of ``<ListBucketResult ...>`` and, under it, simple elements of text
(no markup inside), ``<Contents>`` blocks of simple elements (one level of nesting: ``<Owner>``, ``<RestoreStatus>``)
and ``<CommonPrefixes><Prefix>``; text is UTF-8 with only XML's five named and numeric character references, and a
declaration, if any, says UTF-8. Every ``<Contents>`` must show Key, LastModified, ETag, Size in that order (S3's,
MinIO's, Ceph's and moto's), with anything else around them. Whatever does not fit falls back, never guesses.
"""

from __future__ import annotations

import re

from s3io.s3.types import ObjectInfo, object_info
from s3io.s3.xml_values import parse_timestamp, url_decoded


class NotFastPath(Exception):
    """The page is not of the shape the fast path reads: parse it with ElementTree."""


_WS = r"[ \t\r\n]*"
_NAME = r"[A-Za-z][A-Za-z0-9]*"
_LEAF = rf"<(?P<leaf>{_NAME})(?:/>|>[^<]*</(?P=leaf)>)"
_INNER = rf"<(?P<inner>{_NAME})(?:/>|>(?:[^<]*|(?:{_WS}{_LEAF})+{_WS})</(?P=inner)>)"
_ELEMENT = rf"<(?P<tag>{_NAME})(?:/>|>(?:[^<]*|(?:{_WS}{_INNER})+{_WS})</(?P=tag)>)"  # at most three levels deep
_DOCUMENT = re.compile(
    rf"{_WS}(?:<\?xml(?P<declaration>[^>]*)\?>)?{_WS}<ListBucketResult(?:[ \t\r\n][^>]*)?>"
    rf"(?:{_WS}{_ELEMENT})*+{_WS}</ListBucketResult>{_WS}"
)
_OTHER = r"(?:{ws}<(?!{name}[/>])(?P<{group}>{any})(?:/>|>[^<]*</(?P={group})>))*"  # text elements but ``name``
_CONTENTS = re.compile(
    "<Contents>"
    + _OTHER.format(ws=_WS, name="Key", group="pre", any=_NAME)
    + rf"{_WS}<Key>(?P<key>[^<]*)</Key>{_WS}<LastModified>(?P<modified>[^<]*)</LastModified>"
    + rf"{_WS}<ETag(?:/>|>(?:(?P<quoted>&quot;)(?P<inside>[^<&]*)&quot;|(?P<etag>[^<]*))</ETag>)"
    + _OTHER.format(ws=_WS, name="Size", group="mid", any=_NAME)
    + rf"{_WS}<Size>(?P<size>[^<]*)</Size>"
)
_PREFIX = re.compile(rf"<CommonPrefixes>{_WS}<Prefix(?:/>|>([^<]*)</Prefix>){_WS}</CommonPrefixes>")
_TOP = re.compile(r"<(IsTruncated|NextContinuationToken|EncodingType)(?:/>|>([^<]*)</\1>)")
_REFERENCE = re.compile(r"&(?:(lt|gt|amp|quot|apos)|#([0-9]{1,7})|#x([0-9a-fA-F]{1,6}));")
_NAMED = {"lt": "<", "gt": ">", "amp": "&", "quot": '"', "apos": "'"}


def _reference(match: re.Match[str]) -> str:
    name, decimal, hexadecimal = match.groups()
    if name:
        return _NAMED[name]
    code = int(decimal) if decimal else int(hexadecimal, 16)
    if code > 0x10FFFF or 0xD800 <= code <= 0xDFFF:
        raise NotFastPath("a character reference outside Unicode")
    return chr(code)


def _text(raw: str) -> str:
    """Character data with its references resolved; a bare ``&`` (not well-formed) leaves the fast path."""
    if "&" not in raw:
        return raw
    if raw.startswith("&quot;") and raw.endswith("&quot;") and raw.count("&") == 2:  # an ETag, as S3 sends it
        return f'"{raw[6:-6]}"'
    if "&" in _REFERENCE.sub("", raw):
        raise NotFastPath("an '&' that starts no character reference")
    return _REFERENCE.sub(_reference, raw)


def parse_fast(bucket: str, body: bytes) -> tuple[list[ObjectInfo], list[str], bool, str | None, list[tuple[str, str]]]:
    """(objects, prefixes, truncated, token, bad sizes) of a page of the common shape, else NotFastPath.

    Sizes that are not whole numbers come back in ``bad sizes`` as (key, text) for the caller's error."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise NotFastPath("not UTF-8") from None
    document = _DOCUMENT.fullmatch(text)
    if document is None or ("]" in text and "]]>" in text):  # "]]>" may not stand in character data
        raise NotFastPath("not the common shape")
    declaration = document.group("declaration")
    if declaration and "encoding" in declaration and not re.search(r"encoding=[\"']utf-?8[\"']", declaration, re.I):
        raise NotFastPath("a declared encoding other than UTF-8")
    top: dict[str, str] = {}
    for match in _TOP.finditer(text):
        if match.group(1) in top:
            raise NotFastPath(f"two <{match.group(1)}> elements")
        top[match.group(1)] = _text(match.group(2))
    decoding = top.get("EncodingType", "").lower() == "url"
    decode = url_decoded if decoding else str
    objects: list[ObjectInfo] = []
    bad: list[tuple[str, str]] = []
    append = objects.append
    listed = object_info
    # The loop runs once per key (a million for a million keys): the common case is tested inline, the rest called.
    for _, key, modified, quoted, inside, etag, _, size in _CONTENTS.findall(text):
        if "&" in key:
            key = _text(key)
        if decoding and ("%" in key or "+" in key):
            key = decode(key)
        if quoted:
            etag = f'"{inside}"'  # S3's quoted ETag, escaped as &quot;
        elif "&" in etag:
            etag = _text(etag)
        if "&" in modified:
            modified = _text(modified)
        if size.isdigit() and size.isascii():
            number = int(size)
        else:
            bad.append((key, size))
            number = 0
        append(listed(bucket, key, number, etag or None, parse_timestamp(modified)))
    if len(objects) != text.count("<Contents>"):
        raise NotFastPath("a <Contents> without Key, LastModified, ETag, Size in that order")
    prefixes = [decode(_text(p)) for p in _PREFIX.findall(text)]
    if len(prefixes) != text.count("<CommonPrefixes>"):
        raise NotFastPath("a <CommonPrefixes> that is not one <Prefix>")
    truncated = top.get("IsTruncated", "false").lower() == "true"
    return objects, prefixes, truncated, top.get("NextContinuationToken"), bad
