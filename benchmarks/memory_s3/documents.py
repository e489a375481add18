"""S3's XML documents and dates, rendered as S3 renders them (namespace, element order, quoted ETags).

Text is XML-escaped; a control character becomes a numeric reference (``&#x1;``) as S3 writes it, which XML
1.0 parsers reject: that is why clients ask for ``encoding-type=url``, which percent-encodes keys instead
(space as ``+``, ``/`` kept), the form botocore decodes with ``unquote_plus``.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from email.utils import formatdate
from urllib.parse import quote_plus

from benchmarks.memory_s3.store import Page, StoredObject, Upload

NS = "http://s3.amazonaws.com/doc/2006-03-01/"
DECLARATION = '<?xml version="1.0" encoding="UTF-8"?>\n'
OWNER_ID = "75aa57f09aa0c8caeab4f8c24e99d10f8e7faeebf76c078efc7c6caea54ba06a"
_NEEDS_ESCAPE = re.compile(r"[&<>\"'\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&apos;"}


def _replace(match: re.Match[str]) -> str:
    char = match.group()
    return _ENTITIES.get(char) or f"&#x{ord(char):X};"


def escape(text: str) -> str:
    """`text` as XML character data (S3 escapes quotes too: ETags appear as ``&quot;...&quot;``)."""
    return _NEEDS_ESCAPE.sub(_replace, text) if _NEEDS_ESCAPE.search(text) else text


def key_text(key: str, url: bool) -> str:
    """A key as a listing shows it: percent-encoded with ``encoding-type=url``, else escaped."""
    return quote_plus(key, safe="/") if url else escape(key)


def iso8601(seconds: float) -> str:
    """S3's timestamp in XML documents: ``2026-11-21T23:43:07.000Z``."""
    return time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(seconds))


_http_dates: dict[int, str] = {}


def http_date(seconds: int) -> str:
    """``Sat, 21 Nov 2026 23:43:07 GMT`` (memoised: objects share a handful of seconds)."""
    text = _http_dates.get(seconds)
    if text is None:
        if len(_http_dates) > 4096:
            _http_dates.clear()
        text = _http_dates[seconds] = formatdate(seconds, usegmt=True)
    return text


def error(code: str, message: str, request_id: str, host_id: str, fields: Iterable[tuple[str, str]] = ()) -> bytes:
    extra = "".join(f"<{name}>{escape(value)}</{name}>" for name, value in fields)
    return (
        f"{DECLARATION}<Error><Code>{code}</Code><Message>{escape(message)}</Message>{extra}"
        f"<RequestId>{request_id}</RequestId><HostId>{host_id}</HostId></Error>"
    ).encode()


def _contents(key: str, obj: StoredObject, url: bool) -> str:
    entry = obj.listing.get(url)
    if entry is None:
        entry = obj.listing[url] = (
            f"<Contents><Key>{key_text(key, url)}</Key><LastModified>{iso8601(obj.last_modified)}</LastModified>"
            f"<ETag>{escape(obj.etag)}</ETag><Size>{len(obj.data)}</Size><StorageClass>STANDARD</StorageClass>"
            "</Contents>"
        )
    return entry


def list_objects_v2(
    bucket: str,
    page: Page,
    truncated: bool,
    *,
    prefix: str,
    delimiter: str,
    max_keys: int,
    url: bool,
    continuation_token: str | None,
    next_token: str | None,
    start_after: str | None,
) -> bytes:
    parts = [f'{DECLARATION}<ListBucketResult xmlns="{NS}"><Name>{escape(bucket)}</Name>']
    parts.append(f"<Prefix>{key_text(prefix, url)}</Prefix>")
    if next_token is not None:
        parts.append(f"<NextContinuationToken>{next_token}</NextContinuationToken>")
    parts.append(f"<KeyCount>{len(page.contents) + len(page.prefixes)}</KeyCount><MaxKeys>{max_keys}</MaxKeys>")
    if delimiter:
        parts.append(f"<Delimiter>{key_text(delimiter, url)}</Delimiter>")
    if url:
        parts.append("<EncodingType>url</EncodingType>")
    parts.append(f"<IsTruncated>{'true' if truncated else 'false'}</IsTruncated>")
    if continuation_token is not None:
        parts.append(f"<ContinuationToken>{escape(continuation_token)}</ContinuationToken>")
    if start_after is not None:
        parts.append(f"<StartAfter>{key_text(start_after, url)}</StartAfter>")
    parts.extend(_contents(key, obj, url) for key, obj in page.contents)
    parts.extend(f"<CommonPrefixes><Prefix>{key_text(p, url)}</Prefix></CommonPrefixes>" for p in page.prefixes)
    parts.append("</ListBucketResult>")
    return "".join(parts).encode()


def list_buckets(buckets: Iterable[tuple[str, int]]) -> bytes:
    entries = "".join(
        f"<Bucket><Name>{escape(name)}</Name><CreationDate>{iso8601(created)}</CreationDate></Bucket>"
        for name, created in buckets
    )
    return (
        f'{DECLARATION}<ListAllMyBucketsResult xmlns="{NS}"><Owner><ID>{OWNER_ID}</ID>'
        f"<DisplayName>bench</DisplayName></Owner><Buckets>{entries}</Buckets></ListAllMyBucketsResult>"
    ).encode()


def location(region: str) -> bytes:
    if region == "us-east-1":  # S3 answers an empty constraint for us-east-1
        return f'{DECLARATION}<LocationConstraint xmlns="{NS}"/>'.encode()
    return f'{DECLARATION}<LocationConstraint xmlns="{NS}">{region}</LocationConstraint>'.encode()


def initiate_multipart(bucket: str, key: str, upload_id: str) -> bytes:
    return (
        f'{DECLARATION}<InitiateMultipartUploadResult xmlns="{NS}"><Bucket>{escape(bucket)}</Bucket>'
        f"<Key>{escape(key)}</Key><UploadId>{upload_id}</UploadId></InitiateMultipartUploadResult>"
    ).encode()


def complete_multipart(location_url: str, bucket: str, key: str, etag: str) -> bytes:
    return (
        f'{DECLARATION}<CompleteMultipartUploadResult xmlns="{NS}"><Location>{escape(location_url)}</Location>'
        f"<Bucket>{escape(bucket)}</Bucket><Key>{escape(key)}</Key><ETag>{escape(etag)}</ETag>"
        "</CompleteMultipartUploadResult>"
    ).encode()


def copy_result(last_modified: int, etag: str) -> bytes:
    return (
        f'{DECLARATION}<CopyObjectResult xmlns="{NS}"><LastModified>{iso8601(last_modified)}</LastModified>'
        f"<ETag>{escape(etag)}</ETag></CopyObjectResult>"
    ).encode()


def delete_result(deleted: Iterable[str], failed: Iterable[tuple[str, str, str]]) -> bytes:
    """DeleteObjects' answer: a <Deleted> per key (none when quiet) and an <Error> per key that failed."""
    ok = "".join(f"<Deleted><Key>{escape(key)}</Key></Deleted>" for key in deleted)
    bad = "".join(
        f"<Error><Key>{escape(key)}</Key><Code>{code}</Code><Message>{escape(message)}</Message></Error>"
        for key, code, message in failed
    )
    return f'{DECLARATION}<DeleteResult xmlns="{NS}">{ok}{bad}</DeleteResult>'.encode()


def list_parts(bucket: str, key: str, upload: Upload, numbers: list[int], truncated: bool) -> bytes:
    parts = [
        f'{DECLARATION}<ListPartsResult xmlns="{NS}"><Bucket>{escape(bucket)}</Bucket><Key>{escape(key)}</Key>',
        f"<UploadId>{upload.upload_id}</UploadId><IsTruncated>{'true' if truncated else 'false'}</IsTruncated>",
    ]
    parts.extend(
        f"<Part><PartNumber>{n}</PartNumber><ETag>{escape(upload.parts[n].etag)}</ETag>"
        f"<Size>{len(upload.parts[n].data)}</Size></Part>"
        for n in numbers
    )
    parts.append("</ListPartsResult>")
    return "".join(parts).encode()


def list_uploads(
    bucket: str,
    uploads: list[Upload],
    truncated: bool,
    *,
    prefix: str,
    key_marker: str,
    upload_id_marker: str,
    max_uploads: int,
) -> bytes:
    parts = [
        f'{DECLARATION}<ListMultipartUploadsResult xmlns="{NS}"><Bucket>{escape(bucket)}</Bucket>',
        f"<KeyMarker>{escape(key_marker)}</KeyMarker><UploadIdMarker>{escape(upload_id_marker)}</UploadIdMarker>",
    ]
    if truncated and uploads:
        parts.append(
            f"<NextKeyMarker>{escape(uploads[-1].key)}</NextKeyMarker>"
            f"<NextUploadIdMarker>{uploads[-1].upload_id}</NextUploadIdMarker>"
        )
    parts.append(f"<Prefix>{escape(prefix)}</Prefix><MaxUploads>{max_uploads}</MaxUploads>")
    parts.append(f"<IsTruncated>{'true' if truncated else 'false'}</IsTruncated>")
    owner = f"<ID>{OWNER_ID}</ID><DisplayName>bench</DisplayName>"
    parts.extend(
        f"<Upload><Key>{escape(u.key)}</Key><UploadId>{u.upload_id}</UploadId><Initiator>{owner}</Initiator>"
        f"<Owner>{owner}</Owner><StorageClass>STANDARD</StorageClass><Initiated>{iso8601(u.initiated)}</Initiated>"
        "</Upload>"
        for u in uploads
    )
    parts.append("</ListMultipartUploadsResult>")
    return "".join(parts).encode()
