"""Parse S3's XML bodies into plain values (namespaces stripped); build the few request bodies we send.

Listings are requested with ``encoding-type=url`` (a key may hold characters XML 1.0 cannot carry, such as
control characters) and decoded here as botocore decodes them. A body that does not parse is a ProtocolError
naming what was asked; an error's message is cut to ``MAX_MESSAGE_CHARS`` before it reaches any exception or log.
"""

from __future__ import annotations

import gc
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from xml.sax.saxutils import escape

from s3io.errors import ProtocolError
from s3io.s3.checksums import ALGORITHMS, StoredChecksum
from s3io.s3.list_page import NotFastPath, parse_fast
from s3io.s3.types import DeleteError, MultipartUpload, ObjectInfo
from s3io.s3.xml_values import parse_timestamp, url_decoded

__all__ = ["parse_timestamp"]  # re-exported: the listing's timestamp rule, for callers that parse one

MAX_MESSAGE_CHARS = 512
_CODE = re.compile(rb"<Code>([A-Za-z0-9.]{1,128})</Code>")
_MESSAGE = re.compile(rb"<Message>([^<]{0,2048})")
_PROLOG = re.compile(rb"\s*(?:<\?xml[^>]{0,256}\?>)?\s*")  # before the root: declaration, keep-alive spaces


def _strip(tag: str) -> str:
    return tag[tag.find("}") + 1 :] if tag[:1] == "{" else tag


# Control characters XML 1.0 cannot carry. S3 (and moto) echo keys in answers that have no ``encoding-type``
# (CreateMultipartUpload, CompleteMultipartUpload, DeleteObjects), raw or as character references; such an answer
# is parsed with each one stood in for by a private-use character, and mapped back in the values read.
_CONTROL = bytes(c for c in range(32) if c not in (9, 10, 13))
_STAND_IN = 0xE000
_CONTROL_BYTES = re.compile(b"[" + re.escape(_CONTROL) + b"]")
_CONTROL_REFS = re.compile(rb"&#(x[0-9a-fA-F]+|[0-9]+);")
_BACK = {_STAND_IN + c: chr(c) for c in _CONTROL}


def _stand_in(match: re.Match[bytes]) -> bytes:
    return chr(_STAND_IN + match.group(0)[0]).encode()


def _stand_in_ref(match: re.Match[bytes]) -> bytes:
    text = match.group(1).decode()
    code = int(text[1:], 16) if text.startswith("x") else int(text)
    return f"&#{_STAND_IN + code};".encode() if code < 32 and code not in (9, 10, 13) else match.group(0)


def parse(body: bytes, what: str = "answer") -> ET.Element:
    """The root element, tags without namespaces; ProtocolError (naming ``what``) if the body is not XML.

    Leading whitespace (S3's keep-alive spaces before a slow answer's document) is skipped."""
    body = body.lstrip()
    try:
        root = ET.fromstring(body)
    except ET.ParseError as exc:
        try:
            root = ET.fromstring(_CONTROL_REFS.sub(_stand_in_ref, _CONTROL_BYTES.sub(_stand_in, body)))
        except ET.ParseError:
            raise ProtocolError(f"the {what} is not well-formed XML ({exc}; {len(body)} bytes)") from None
        for element in root.iter():
            if element.text:
                element.text = element.text.translate(_BACK)
    for element in root.iter():
        element.tag = _strip(element.tag)
    return root


def shorten(text: str | None, limit: int = MAX_MESSAGE_CHARS) -> str | None:
    """``text`` cut to ``limit`` characters (a server may send megabytes of message)."""
    if text is None or len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text) - limit} more characters)"


def error_fields(body: bytes) -> tuple[str | None, str | None]:
    """(Code, Message) of an <Error> body, the message shortened; (None, None) if the body is not one.

    A body cut at the transport's cap does not parse: its Code and the start of its Message are still found.
    Leading whitespace is skipped: S3 sends spaces to keep a slow CopyObject or CompleteMultipartUpload alive
    before the document that says how it ended.
    """
    body = body.lstrip()
    prolog = _PROLOG.match(body)
    start = prolog.end() if prolog else 0
    if not body or b"<Error" not in body[start : start + 512]:
        return None, None
    try:
        root = ET.fromstring(body)
    except ET.ParseError:
        code, message = _CODE.search(body, start, start + 4096), _MESSAGE.search(body, start)
        if code is None:
            return None, None
        text = message.group(1).decode("utf-8", "replace") if message else None
        return code.group(1).decode(), shorten(text)
    for element in root.iter():
        element.tag = _strip(element.tag)
    if root.tag != "Error":
        return None, None
    return root.findtext("Code"), shorten(root.findtext("Message"))


def _decoder(root: ET.Element, ns: str = "") -> Callable[[str], str]:
    """How this answer's keys and prefixes are decoded: url-encoded if it says so, else as they are."""
    return url_decoded if (root.findtext(ns + "EncodingType") or "").lower() == "url" else str


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector held off while a page's thousand objects are made (a few ms, no await).

    The collector runs after every 700 new container objects, and after every 70,000 or so walks every object the
    process holds: a listing keeping its 200,000 ObjectInfo spent ~0.2 of its 0.97 CPU-s here in 330 collections,
    two of them whole; paused for each page, ~0.09 s in 200, one whole. None of the objects a page makes can be part
    of a cycle, so nothing is left for longer. A collector that was off stays off."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def parse_list_page(bucket: str, body: bytes) -> tuple[list[ObjectInfo], list[str], str | None]:
    """(objects, common prefixes, next continuation token or None) of a ListObjectsV2 page (keys decoded).

    Read by ``list_page``'s regular expressions when the page has the shape every S3 store sends, else by
    ElementTree; either way an object <Size> that is not a number, or a truncated page without a token, is a
    ProtocolError."""
    with collector_paused():
        try:
            objects, prefixes, truncated, token, bad_sizes = parse_fast(bucket, body)
        except NotFastPath:
            objects, prefixes, truncated, token, bad_sizes = _parse_list_tree(bucket, body)
    if bad_sizes:
        raise ProtocolError(
            "a ListObjectsV2 answer with an object <Size> that is not a number of bytes: "
            f"{shorten(bad_sizes[0][1], 64)!r}",
            bucket=bucket,
        )
    if truncated and not token:
        raise ProtocolError(
            "a ListObjectsV2 answer says it is truncated but gives no NextContinuationToken: the rest of the listing "
            "cannot be asked for, and taking this page for the last would miss objects",
            bucket=bucket,
        )
    return objects, prefixes, token if truncated else None


def _parse_list_tree(
    bucket: str, body: bytes
) -> tuple[list[ObjectInfo], list[str], bool, str | None, list[tuple[str, str]]]:
    """``list_page.parse_fast``'s answer, by ElementTree: any well-formed page (else ProtocolError)."""
    root, ns = _parse_named(body, "ListObjectsV2 answer")
    decode = _decoder(root, ns)
    key, size, etag, modified = ns + "Key", ns + "Size", ns + "ETag", ns + "LastModified"
    objects: list[ObjectInfo] = []
    bad_sizes: list[tuple[str, str]] = []
    for item in root.iterfind(ns + "Contents"):
        name = decode(item.findtext(key) or "")
        text = item.findtext(size)  # a missing <Size> is 0, as an empty object's
        whole = text is None or (text.isdigit() and text.isascii())
        if not whole:
            bad_sizes.append((name, text))
        number = int(text) if text is not None and whole else 0
        objects.append(
            ObjectInfo(
                bucket,
                name,
                number,
                item.findtext(etag) or None,  # an empty <ETag/> is no ETag, never a pin to ""
                parse_timestamp(item.findtext(modified)),
            )
        )
    prefixes = [decode(p.findtext(ns + "Prefix") or "") for p in root.iterfind(ns + "CommonPrefixes")]
    truncated = (root.findtext(ns + "IsTruncated") or "false").lower() == "true"
    return objects, prefixes, truncated, root.findtext(ns + "NextContinuationToken"), bad_sizes


def _parse_named(body: bytes, what: str) -> tuple[ET.Element, str]:
    """The root and the ``{namespace}`` its children's tags carry ("" when stripped): ``parse`` without renaming
    every element, for the listing pages a million-file read parses (the slow path when it needs stand-ins)."""
    try:
        root = ET.fromstring(body)
    except ET.ParseError:
        return parse(body, what), ""
    tag = root.tag
    return root, tag[: tag.find("}") + 1] if tag[:1] == "{" else ""


def parse_uploads_page(bucket: str, body: bytes) -> tuple[list[MultipartUpload], tuple[str, str] | None]:
    """(uploads, next (key marker, upload-id marker) or None) of a ListMultipartUploads page (keys decoded)."""
    root = parse(body, "ListMultipartUploads answer")
    decode = _decoder(root)
    uploads = [
        MultipartUpload(
            bucket=bucket,
            key=decode(item.findtext("Key") or ""),
            upload_id=item.findtext("UploadId") or "",
            initiated=parse_timestamp(item.findtext("Initiated")),
        )
        for item in root.iterfind("Upload")
    ]
    truncated = (root.findtext("IsTruncated") or "false").lower() == "true"
    if not truncated:
        return uploads, None
    markers = (decode(root.findtext("NextKeyMarker") or ""), root.findtext("NextUploadIdMarker") or "")
    if not any(markers):
        raise ProtocolError(
            "a ListMultipartUploads answer says it is truncated but gives no NextKeyMarker or NextUploadIdMarker: the "
            "rest of the listing cannot be asked for",
            bucket=bucket,
        )
    return uploads, markers


def parse_delete_result(body: bytes) -> tuple[list[str], list[DeleteError]]:
    root = parse(body, "DeleteObjects answer")
    deleted = [d.findtext("Key") or "" for d in root.iterfind("Deleted")]
    failed = [
        DeleteError(e.findtext("Key") or "", e.findtext("Code") or "", shorten(e.findtext("Message")) or "")
        for e in root.iterfind("Error")
    ]
    return deleted, failed


_XML_UNSAFE = re.compile(r"[\x00-\x08\x0b-\x1f]")  # C0 controls but tab (09) and LF (0a)


def xml_safe(text: str) -> bool:
    """Whether ``text`` comes through an XML 1.0 body as sent: no control character but tab and LF (a CR is read
    back as LF by every XML parser, so a DeleteObjects for ``a\rb`` would delete ``a\nb``)."""
    return _XML_UNSAFE.search(text) is None


def delete_request(keys: list[str], etags: Mapping[str, str] | None = None) -> bytes:
    """A DeleteObjects body; a key with an ETag in ``etags`` is deleted only if it still has it (S3's per-object
    condition: the store answers PreconditionFailed for that key otherwise)."""
    etags = etags or {}
    objects = "".join(
        f"<Object><Key>{escape(k)}</Key>" + (f"<ETag>{escape(etags[k])}</ETag>" if k in etags else "") + "</Object>"
        for k in keys
    )
    return f'<?xml version="1.0" encoding="UTF-8"?><Delete><Quiet>false</Quiet>{objects}</Delete>'.encode()


def stated_checksum(element: ET.Element) -> StoredChecksum | None:
    """The whole object's checksum an answer's body states (a CopyObjectResult's ``<ChecksumCRC64NVME>`` ...), or None
    (none stated, or a composite one)."""
    for algorithm in ALGORITHMS:
        value = element.findtext(algorithm.element)
        if value:
            stated = StoredChecksum(algorithm, value.strip(), element.findtext("ChecksumType"))
            return stated if stated.covers_object else None
    return None


def complete_multipart_request(
    parts: list[tuple[int, str]], checksums: Mapping[int, str] | None = None, element: str = ""
) -> bytes:
    """CompleteMultipartUpload's body; ``checksums``: a part's checksum by part number, in an ``element``."""
    checksums = checksums or {}
    body = "".join(
        f"<Part><PartNumber>{n}</PartNumber><ETag>{escape(etag)}</ETag>"
        + (f"<{element}>{escape(checksums[n])}</{element}>" if n in checksums else "")
        + "</Part>"
        for n, etag in parts
    )
    return f'<?xml version="1.0" encoding="UTF-8"?><CompleteMultipartUpload>{body}</CompleteMultipartUpload>'.encode()
