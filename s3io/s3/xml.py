"""Parse S3's XML bodies into plain values (namespaces stripped); build the few request bodies we send."""

from __future__ import annotations

import calendar
import time
import xml.etree.ElementTree as ET
from xml.sax.saxutils import escape

from s3io.s3.types import DeleteError, MultipartUpload, ObjectInfo


def _strip(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def parse(body: bytes) -> ET.Element:
    root = ET.fromstring(body)
    for element in root.iter():
        element.tag = _strip(element.tag)
    return root


def error_fields(body: bytes) -> tuple[str | None, str | None]:
    """(Code, Message) of an <Error> body; (None, None) if the body is not one."""
    if not body or b"<Error" not in body[:512]:
        return None, None
    try:
        root = parse(body)
    except ET.ParseError:
        return None, None
    if root.tag != "Error":
        return None, None
    return root.findtext("Code"), root.findtext("Message")


def parse_timestamp(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return float(calendar.timegm(time.strptime(text[:19], "%Y-%m-%dT%H:%M:%S")))
    except ValueError:
        return None


def parse_list_page(bucket: str, body: bytes) -> tuple[list[ObjectInfo], list[str], str | None]:
    """(objects, common prefixes, next continuation token or None) of a ListObjectsV2 page."""
    root = parse(body)
    objects = [
        ObjectInfo(
            bucket=bucket,
            key=item.findtext("Key") or "",
            size=int(item.findtext("Size") or 0),
            etag=item.findtext("ETag"),
            last_modified=parse_timestamp(item.findtext("LastModified")),
        )
        for item in root.iterfind("Contents")
    ]
    prefixes = [p.findtext("Prefix") or "" for p in root.iterfind("CommonPrefixes")]
    truncated = (root.findtext("IsTruncated") or "false").lower() == "true"
    token = root.findtext("NextContinuationToken") if truncated else None
    return objects, prefixes, token


def parse_uploads_page(bucket: str, body: bytes) -> tuple[list[MultipartUpload], tuple[str, str] | None]:
    """(uploads, next (key marker, upload-id marker) or None) of a ListMultipartUploads page."""
    root = parse(body)
    uploads = [
        MultipartUpload(
            bucket=bucket,
            key=item.findtext("Key") or "",
            upload_id=item.findtext("UploadId") or "",
            initiated=parse_timestamp(item.findtext("Initiated")),
        )
        for item in root.iterfind("Upload")
    ]
    truncated = (root.findtext("IsTruncated") or "false").lower() == "true"
    if not truncated:
        return uploads, None
    return uploads, (root.findtext("NextKeyMarker") or "", root.findtext("NextUploadIdMarker") or "")


def parse_delete_result(body: bytes) -> tuple[list[str], list[DeleteError]]:
    root = parse(body)
    deleted = [d.findtext("Key") or "" for d in root.iterfind("Deleted")]
    failed = [
        DeleteError(e.findtext("Key") or "", e.findtext("Code") or "", e.findtext("Message") or "")
        for e in root.iterfind("Error")
    ]
    return deleted, failed


def delete_request(keys: list[str]) -> bytes:
    objects = "".join(f"<Object><Key>{escape(k)}</Key></Object>" for k in keys)
    return f'<?xml version="1.0" encoding="UTF-8"?><Delete><Quiet>false</Quiet>{objects}</Delete>'.encode()


def complete_multipart_request(parts: list[tuple[int, str]]) -> bytes:
    body = "".join(f"<Part><PartNumber>{n}</PartNumber><ETag>{escape(etag)}</ETag></Part>" for n, etag in parts)
    return f'<?xml version="1.0" encoding="UTF-8"?><CompleteMultipartUpload>{body}</CompleteMultipartUpload>'.encode()
