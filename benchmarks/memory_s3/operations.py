"""The S3 operations of the in-memory endpoint: a request in, S3's status, headers and body out, counted.

Path-style addressing only (``/bucket/key``); signatures are not checked (moto does not check them either).
Status codes, error codes and conditional semantics follow S3's documentation: If-Match / If-None-Match (and
the date conditions) on GET and HEAD give 412 / 304, on PUT and CompleteMultipartUpload 412 (If-Match on a
missing key 404), on DELETE 412 / 404; ``x-amz-copy-source-if-*`` give 412. A malformed or multi-part Range
is ignored (a 200 of the whole object) and an unsatisfiable one is a 416, as S3 does. Operations S3 has and
this endpoint lacks answer 501 NotImplemented naming the operation, so a benchmark never reads a wrong answer.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import time
import xml.etree.ElementTree as ET
import zlib
from collections import Counter
from collections.abc import Callable
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import parse_qsl, quote, unquote

from benchmarks.memory_s3 import documents
from benchmarks.memory_s3.store import MAX_KEYS, Bucket, Part, Store, StoredObject, Upload

MIN_PART_SIZE = 5 * 1024 * 1024  # every part but the last, as S3 requires
MAX_PARTS = 10_000
MAX_DELETE_KEYS = 1000
_RANGE = re.compile(r"bytes=(\d*)-(\d*)$")
_BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
XML = "application/xml"
# Query parameters naming sub-resources S3 has and this endpoint does not: answered 501, never ignored.
UNSUPPORTED = frozenset(
    (
        "accelerate", "acl", "analytics", "attributes", "cors", "encryption", "intelligent-tiering", "inventory",
        "legal-hold", "lifecycle", "logging", "metrics", "notification", "object-lock", "ownershipControls",
        "policy", "policyStatus", "publicAccessBlock", "replication", "requestPayment", "restore", "retention",
        "select", "tagging", "torrent", "versioning", "versionId", "versions", "website",
    )
)  # fmt: skip
MALFORMED_XML = "The XML you provided was not well-formed or did not validate against our published schema"
PRECONDITION_FAILED = "At least one of the pre-conditions you specified did not hold"
NO_SUCH_UPLOAD = (
    "The specified upload does not exist. The upload ID may be invalid, or the upload may have been aborted or "
    "completed."
)
INVALID_PART = (
    "One or more of the specified parts could not be found. The part may not have been uploaded, or the "
    "specified entity tag may not match the part's entity tag."
)
INVALID_PART_ORDER = (
    "The list of parts was not in ascending order. The parts list must be specified in order by part number."
)


class S3Error(Exception):
    """An S3 error answer: status, code, message, extra XML fields and extra headers."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        fields: tuple[tuple[str, str], ...] = (),
        headers: tuple[tuple[str, str], ...] = (),
    ) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.fields = fields
        self.headers = headers


class Response:
    """What the wire layer sends: a status, header lines and a body (`length` overrides it for HEAD)."""

    __slots__ = ("body", "headers", "length", "status")

    def __init__(
        self, status: int, headers: list[tuple[str, str]], body: bytes | memoryview = b"", length: int | None = None
    ) -> None:
        self.status = status
        self.headers = headers
        self.body = body
        self.length = length


def _no_such_key(key: str) -> S3Error:
    return S3Error(404, "NoSuchKey", "The specified key does not exist.", (("Key", key),))


def _no_such_upload(upload_id: str) -> S3Error:
    return S3Error(404, "NoSuchUpload", NO_SUCH_UPLOAD, (("UploadId", upload_id),))


def _precondition_failed(condition: str) -> S3Error:
    return S3Error(412, "PreconditionFailed", PRECONDITION_FAILED, (("Condition", condition),))


def _not_implemented(what: str) -> S3Error:
    return S3Error(501, "NotImplemented", f"{what} is not implemented by the benchmark endpoint")


def _bare(etag: str) -> str:
    return etag.strip().removeprefix("W/").strip('"')


def etag_matches(header: str, etag: str) -> bool:
    """Whether an If-Match / If-None-Match list (``"a", "b"`` or ``*``) names `etag`."""
    bare = _bare(etag)
    return any(c.strip() == "*" or _bare(c) == bare for c in header.split(","))


def _seconds(date: str) -> float | None:
    """An HTTP date as epoch seconds; None if unparsable (S3 then ignores the condition)."""
    try:
        return parsedate_to_datetime(date).timestamp()
    except (TypeError, ValueError, IndexError):
        return None


def read_condition(headers: dict[str, str], obj: StoredObject, names: tuple[str, str, str, str]) -> str | None:
    """RFC 7232's order, as S3 documents it: the failing condition's name with "412:" or "304:", or None.

    `names` are the header names for if-match, if-unmodified-since, if-none-match, if-modified-since (plain for
    GET and HEAD, ``x-amz-copy-source-if-...`` for a copy's source).
    """
    if_match, if_unmodified, if_none_match, if_modified = names
    value = headers.get(if_match)
    if value is not None:
        if not etag_matches(value, obj.etag):
            return "412:If-Match"
    elif (value := headers.get(if_unmodified)) is not None:
        limit = _seconds(value)
        if limit is not None and obj.last_modified > limit:
            return "412:If-Unmodified-Since"
    value = headers.get(if_none_match)
    if value is not None:
        if etag_matches(value, obj.etag):
            return "304:If-None-Match"
    elif (value := headers.get(if_modified)) is not None:
        limit = _seconds(value)
        if limit is not None and obj.last_modified <= limit:
            return "304:If-Modified-Since"
    return None


READ_CONDITIONS = ("if-match", "if-unmodified-since", "if-none-match", "if-modified-since")
COPY_SOURCE_CONDITIONS = tuple(f"x-amz-copy-source-{name}" for name in READ_CONDITIONS)


def write_condition(headers: dict[str, str], key: str, existing: StoredObject | None) -> None:
    """If-None-Match: * (create only) and If-Match (replace only that version) on a write."""
    if_none_match = headers.get("if-none-match")
    if if_none_match is not None:
        if if_none_match.strip() != "*":
            raise S3Error(
                501,
                "NotImplemented",
                "A header you provided implies functionality that is not implemented",
                (("Header", "If-None-Match"),),
            )
        if existing is not None:
            raise _precondition_failed("If-None-Match")
    if_match = headers.get("if-match")
    if if_match is not None:
        if existing is None:
            raise _no_such_key(key)
        if not etag_matches(if_match, existing.etag):
            raise _precondition_failed("If-Match")


def quoted_md5(data: bytes | memoryview) -> str:
    return f'"{hashlib.md5(data, usedforsecurity=False).hexdigest()}"'


def check_integrity(headers: dict[str, str], data: bytes, etag: str) -> None:
    """Content-MD5 and the x-amz-checksum-* S3 would verify (CRC32, SHA1, SHA256; CRC32C/CRC64NVME are trusted)."""
    content_md5 = headers.get("content-md5")
    if content_md5 is not None:
        try:
            digest = base64.b64decode(content_md5, validate=True)
        except binascii.Error:
            digest = b""
        if len(digest) != 16:
            raise S3Error(400, "InvalidDigest", "The Content-MD5 you specified was invalid.")
        if digest.hex() != etag.strip('"'):
            raise S3Error(400, "BadDigest", "The Content-MD5 you specified did not match what we received.")
    expected = headers.get("x-amz-checksum-crc32")
    if expected is not None and expected != base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode():
        raise S3Error(400, "BadDigest", "The CRC32 you specified did not match the calculated checksum.")
    for algorithm in ("sha1", "sha256"):
        expected = headers.get(f"x-amz-checksum-{algorithm}")
        if expected is not None and expected != base64.b64encode(hashlib.new(algorithm, data).digest()).decode():
            message = f"The {algorithm.upper()} you specified did not match the calculated checksum."
            raise S3Error(400, "BadDigest", message)


def decode_aws_chunked(body: bytes) -> bytes:
    """The payload of an ``aws-chunked`` body (``size[;chunk-signature=...]\\r\\ndata\\r\\n`` ... ``0\\r\\n``)."""
    out = []
    position = 0
    while True:
        line_end = body.find(b"\r\n", position)
        if line_end < 0:
            raise S3Error(400, "IncompleteBody", "The aws-chunked body ended before its last chunk")
        try:
            size = int(body[position:line_end].split(b";", 1)[0], 16)
        except ValueError:
            raise S3Error(400, "InvalidRequest", "Malformed aws-chunked chunk size") from None
        if size == 0:
            return b"".join(out)
        start = line_end + 2
        out.append(body[start : start + size])
        position = start + size + 2
        if position > len(body):
            raise S3Error(400, "IncompleteBody", "The aws-chunked body ended inside a chunk")


def _metadata(headers: dict[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple((name, value) for name, value in headers.items() if name.startswith("x-amz-meta-"))


def _parse_xml(body: bytes) -> ET.Element:
    """A request's XML body, namespaces stripped; MalformedXML if it does not parse."""
    try:
        root = ET.fromstring(body)
    except ET.ParseError:
        raise S3Error(400, "MalformedXML", MALFORMED_XML) from None
    for element in root.iter():
        element.tag = element.tag.rsplit("}", 1)[-1]
    return root


def _int_argument(query: dict[str, str], name: str, default: int, low: int, high: int | None = None) -> int:
    text = query.get(name)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < low or (high is not None and value > high):
        raise S3Error(
            400, "InvalidArgument", f"Provided {name} not an integer or within integer range", (("ArgumentName", name),)
        )
    return value


def _encode_token(marker: tuple[str, bool]) -> str:
    value, is_prefix = marker
    return base64.urlsafe_b64encode(("P" if is_prefix else "K").encode() + value.encode()).decode()


def _decode_token(token: str) -> tuple[str, bool]:
    try:
        raw = base64.urlsafe_b64decode(token.encode())
        kind, value = raw[:1], raw[1:].decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        kind, value = b"", ""
    if kind not in (b"P", b"K"):
        raise S3Error(
            400,
            "InvalidArgument",
            "The continuation token provided is incorrect",
            (("ArgumentName", "continuation-token"),),
        )
    return value, kind == b"P"


Handler = Callable[["Call"], Response]


class Call:
    """One request as the handlers see it: method, bucket, key (decoded), query, headers, body."""

    __slots__ = ("body", "bucket", "headers", "key", "method", "query")

    def __init__(
        self, method: str, bucket: str, key: str, query: dict[str, str], headers: dict[str, str], body: bytes
    ) -> None:
        self.method = method
        self.bucket = bucket
        self.key = key
        self.query = query
        self.headers = headers
        self.body = body


class Endpoint:
    """The S3 operations over a `Store`, with request ids and counts (by HTTP kind, as the proxy counts them,
    and by S3 operation)."""

    def __init__(self, store: Store | None = None, region: str = "us-east-1") -> None:
        self.store = store if store is not None else Store()
        self.region = region
        self.kinds: Counter[str] = Counter()
        self.operations: Counter[str] = Counter()
        self.statuses: Counter[str] = Counter()
        self.body_bytes_sent = 0
        self.connections_opened = 0
        self._request_serial = 0
        self._date_second = 0
        self._date = ""

    # ------------------------------------------------------------------ counts

    def counts(self) -> dict[str, Any]:
        return {
            "total": sum(self.statuses.values()),
            **self.kinds,
            "operations": dict(self.operations),
            "statuses": dict(self.statuses),
            "incomplete": 0,
            "body_bytes_sent": self.body_bytes_sent,
            "connections_opened": self.connections_opened,
        }

    def reset(self) -> None:
        self.kinds.clear()
        self.operations.clear()
        self.statuses.clear()
        self.body_bytes_sent = 0

    # ------------------------------------------------------------------ entry

    def answer(self, method: str, target: str, headers: dict[str, str], body: bytes) -> Response:
        """The response to one request (never raises: a bug in a handler answers 500 InternalError)."""
        path, _, query_text = target.partition("?")
        query = dict(parse_qsl(query_text, keep_blank_values=True)) if query_text else {}
        if method == "GET":  # counted as the proxy counts them
            if "list-type" in query:
                self.kinds["list"] += 1
            else:
                self.kinds["get"] += 1
                self.kinds["ranged_get" if "range" in headers else "whole_get"] += 1
        else:
            self.kinds[method.lower()] += 1
        bucket, _, key = path[1:].partition("/")
        if "%" in bucket:
            bucket = unquote(bucket)
        if "%" in key:
            key = unquote(key)
        self._request_serial += 1
        request_id = f"{self._request_serial:016X}"
        operation, handler = self._route(method, bucket, key, query, headers)
        self.operations[operation] += 1
        try:
            response = handler(Call(method, bucket, key, query, headers, body))
        except S3Error as exc:
            response = self._error(method, exc, request_id)
        except Exception as exc:  # a bug here must not hang the client: answer 500 and log it
            import traceback

            traceback.print_exc()
            response = self._error(method, S3Error(500, "InternalError", f"{type(exc).__name__}: {exc}"), request_id)
        response.headers += self._common_headers(request_id)
        self.statuses[str(response.status)] += 1
        if method != "HEAD":
            self.body_bytes_sent += len(response.body)
        return response

    def _common_headers(self, request_id: str) -> list[tuple[str, str]]:
        """The headers real S3 sends with every answer, so clients parse as much as they would there."""
        now = int(time.time())
        if now != self._date_second:
            self._date_second, self._date = now, documents.http_date(now)
        host_id = base64.b64encode(hashlib.sha256(request_id.encode()).digest() * 2).decode()
        return [
            ("x-amz-id-2", host_id),
            ("x-amz-request-id", request_id),
            ("Date", self._date),
            ("Server", "AmazonS3"),
        ]

    def _error(self, method: str, exc: S3Error, request_id: str) -> Response:
        headers = [("Content-Type", XML), *exc.headers]
        if method == "HEAD" or exc.status == 304:
            return Response(exc.status, headers, b"", 0)
        host_id = base64.b64encode(hashlib.sha256(request_id.encode()).digest() * 2).decode()
        return Response(exc.status, headers, documents.error(exc.code, exc.message, request_id, host_id, exc.fields))

    def _route(
        self, method: str, bucket: str, key: str, query: dict[str, str], headers: dict[str, str]
    ) -> tuple[str, Handler]:
        """(S3 operation name, handler) for a request; unknown ones get a handler that answers the error."""
        if query:
            unsupported = next((name for name in query if name in UNSUPPORTED), None)
            if unsupported is not None:
                return f"Unsupported({unsupported})", _raiser(_not_implemented(f"The ?{unsupported} sub-resource"))
        if not bucket:
            if method == "GET":
                return "ListBuckets", self.list_buckets
        elif not key:
            if method == "GET":
                if "list-type" in query:
                    return "ListObjectsV2", self.list_objects_v2
                if "uploads" in query:
                    return "ListMultipartUploads", self.list_multipart_uploads
                if "location" in query:
                    return "GetBucketLocation", self.get_bucket_location
                return "ListObjects", _raiser(_not_implemented("ListObjects (version 1; use list-type=2)"))
            if method == "HEAD":
                return "HeadBucket", self.head_bucket
            if method == "PUT":
                return "CreateBucket", self.create_bucket
            if method == "DELETE":
                return "DeleteBucket", self.delete_bucket
            if method == "POST" and "delete" in query:
                return "DeleteObjects", self.delete_objects
        elif method == "GET":
            if "uploadId" in query:
                return "ListParts", self.list_parts
            if "partNumber" in query:
                return "GetObject(partNumber)", _raiser(_not_implemented("GetObject with partNumber"))
            return "GetObject", self.get_object
        elif method == "HEAD":
            if "partNumber" in query:
                return "HeadObject(partNumber)", _raiser(_not_implemented("HeadObject with partNumber"))
            return "HeadObject", self.get_object
        elif method == "PUT":
            if "uploadId" in query or "partNumber" in query:
                if "x-amz-copy-source" in headers:
                    return "UploadPartCopy", _raiser(_not_implemented("UploadPartCopy"))
                return "UploadPart", self.upload_part
            if "x-amz-copy-source" in headers:
                return "CopyObject", self.copy_object
            return "PutObject", self.put_object
        elif method == "POST":
            if "uploads" in query:
                return "CreateMultipartUpload", self.create_multipart_upload
            if "uploadId" in query:
                return "CompleteMultipartUpload", self.complete_multipart_upload
        elif method == "DELETE":
            if "uploadId" in query:
                return "AbortMultipartUpload", self.abort_multipart_upload
            return "DeleteObject", self.delete_object
        resource = "object" if key else "bucket" if bucket else "service"
        message = f"The specified method is not allowed against this resource ({method} on the {resource})"
        return "MethodNotAllowed", _raiser(S3Error(405, "MethodNotAllowed", message))

    def _bucket(self, name: str) -> Bucket:
        bucket = self.store.buckets.get(name)
        if bucket is None:
            raise S3Error(404, "NoSuchBucket", "The specified bucket does not exist", (("BucketName", name),))
        return bucket

    # ------------------------------------------------------------------ buckets

    def list_buckets(self, call: Call) -> Response:
        buckets = sorted((b.name, b.created) for b in self.store.buckets.values())
        return Response(200, [("Content-Type", XML)], documents.list_buckets(buckets))

    def create_bucket(self, call: Call) -> Response:
        if not _BUCKET_NAME.match(call.bucket) or ".." in call.bucket:
            fields = (("BucketName", call.bucket),)
            raise S3Error(400, "InvalidBucketName", "The specified bucket is not valid.", fields)
        if call.bucket in self.store.buckets:
            if self.region != "us-east-1":  # us-east-1 answers 200 to its owner, for compatibility (as S3 does)
                message = "Your previous request to create the named bucket succeeded and you already own it."
                raise S3Error(409, "BucketAlreadyOwnedByYou", message, (("BucketName", call.bucket),))
            return Response(200, [("Location", f"/{call.bucket}")])
        self.store.buckets[call.bucket] = Bucket(call.bucket)
        return Response(200, [("Location", f"/{call.bucket}")])

    def head_bucket(self, call: Call) -> Response:
        self._bucket(call.bucket)
        return Response(200, [("x-amz-bucket-region", self.region), ("Content-Type", XML)])

    def delete_bucket(self, call: Call) -> Response:
        bucket = self._bucket(call.bucket)
        if len(bucket):
            message = "The bucket you tried to delete is not empty"
            raise S3Error(409, "BucketNotEmpty", message, (("BucketName", call.bucket),))
        del self.store.buckets[call.bucket]
        return Response(204, [])

    def get_bucket_location(self, call: Call) -> Response:
        self._bucket(call.bucket)
        return Response(200, [("Content-Type", XML)], documents.location(self.region))

    # ------------------------------------------------------------------ reads

    def get_object(self, call: Call) -> Response:
        """GetObject and HeadObject: conditions, then the Range (whole, ``a-b``, ``a-``, suffix ``-n``)."""
        obj = self._bucket(call.bucket).get(call.key)
        if obj is None:
            raise _no_such_key(call.key)
        headers = call.headers
        condition = read_condition(headers, obj, READ_CONDITIONS)
        if condition is not None:
            if condition.startswith("304"):
                not_modified = (("ETag", obj.etag), ("Last-Modified", documents.http_date(obj.last_modified)))
                raise S3Error(304, "NotModified", "Not Modified", headers=not_modified)
            raise _precondition_failed(condition[4:])
        out = [
            ("Last-Modified", documents.http_date(obj.last_modified)),
            ("ETag", obj.etag),
            ("x-amz-server-side-encryption", "AES256"),
            ("Accept-Ranges", "bytes"),
            ("Content-Type", obj.content_type),
            *obj.metadata,
        ]
        data = obj.data
        size = len(data)
        wanted = headers.get("range")
        match = _RANGE.match(wanted.strip()) if wanted is not None else None
        if match is None or match.group(1) == match.group(2) == "":
            return Response(200, out, data if call.method == "GET" else b"", size)
        first_text, last_text = match.groups()
        if first_text == "":  # suffix: the last n bytes
            first, last = max(0, size - int(last_text)), size - 1
            unsatisfiable = int(last_text) == 0 or size == 0
        else:
            first = int(first_text)
            last = min(int(last_text), size - 1) if last_text else size - 1
            if last_text and int(last_text) < first:  # syntactically invalid: S3 ignores the header
                return Response(200, out, data if call.method == "GET" else b"", size)
            unsatisfiable = first >= size
        if unsatisfiable:
            raise S3Error(
                416,
                "InvalidRange",
                "The requested range is not satisfiable",
                (("RangeRequested", wanted.strip()), ("ActualObjectSize", str(size))),
                (("Content-Range", f"bytes */{size}"),),
            )
        out.append(("Content-Range", f"bytes {first}-{last}/{size}"))
        body = memoryview(data)[first : last + 1] if call.method == "GET" else b""
        return Response(206, out, body, last + 1 - first)

    def list_objects_v2(self, call: Call) -> Response:
        bucket = self._bucket(call.bucket)
        query = call.query
        if query.get("list-type") != "2":
            raise _not_implemented(f"list-type={query.get('list-type')}")
        encoding = query.get("encoding-type")
        if encoding not in (None, "url"):
            fields = (("ArgumentName", "encoding-type"),)
            raise S3Error(400, "InvalidArgument", "Invalid Encoding Method specified in Request", fields)
        max_keys = min(_int_argument(query, "max-keys", MAX_KEYS, 0), MAX_KEYS)
        prefix = query.get("prefix", "")
        delimiter = query.get("delimiter", "")
        token = query.get("continuation-token")
        start_after = query.get("start-after")
        marker: tuple[str, bool] | None = None
        if token is not None:
            marker = _decode_token(token)
        elif start_after:
            marker = (start_after, False)
        page, truncated = bucket.list_page(prefix, delimiter, marker, max_keys)
        next_token = _encode_token(page.next_marker) if truncated and page.next_marker is not None else None
        body = documents.list_objects_v2(
            call.bucket,
            page,
            truncated and next_token is not None,
            prefix=prefix,
            delimiter=delimiter,
            max_keys=max_keys,
            url=encoding == "url",
            continuation_token=token,
            next_token=next_token,
            start_after=start_after,
        )
        return Response(200, [("Content-Type", XML)], body)

    def list_multipart_uploads(self, call: Call) -> Response:
        bucket = self._bucket(call.bucket)
        query = call.query
        if query.get("delimiter"):
            raise _not_implemented("ListMultipartUploads with a delimiter")
        max_uploads = min(_int_argument(query, "max-uploads", MAX_KEYS, 1), MAX_KEYS)
        prefix = query.get("prefix", "")
        key_marker = query.get("key-marker", "")
        upload_id_marker = query.get("upload-id-marker", "")
        uploads, truncated = bucket.uploads_page(prefix, key_marker, upload_id_marker, max_uploads)
        body = documents.list_uploads(
            call.bucket,
            uploads,
            truncated,
            prefix=prefix,
            key_marker=key_marker,
            upload_id_marker=upload_id_marker,
            max_uploads=max_uploads,
        )
        return Response(200, [("Content-Type", XML)], body)

    # ------------------------------------------------------------------ writes

    def _payload(self, call: Call) -> bytes:
        """The request's payload (aws-chunked decoded), checked against the digests the client sent."""
        body = call.body
        encoding = call.headers.get("content-encoding", "")
        if "aws-chunked" in encoding:
            body = decode_aws_chunked(body)
            declared = call.headers.get("x-amz-decoded-content-length")
            if declared is not None and declared.isdigit() and int(declared) != len(body):
                message = "You did not provide the number of bytes specified by the x-amz-decoded-content-length"
                raise S3Error(400, "IncompleteBody", message)
        return body

    def put_object(self, call: Call) -> Response:
        bucket = self._bucket(call.bucket)
        data = self._payload(call)
        etag = quoted_md5(data)
        check_integrity(call.headers, data, etag)
        write_condition(call.headers, call.key, bucket.get(call.key))
        content_type = call.headers.get("content-type", "binary/octet-stream")
        bucket.put(call.key, StoredObject(data, etag, int(time.time()), content_type, _metadata(call.headers)))
        return Response(200, [("ETag", etag), ("x-amz-server-side-encryption", "AES256")])

    def copy_object(self, call: Call) -> Response:
        destination = self._bucket(call.bucket)
        source_text = call.headers["x-amz-copy-source"]
        path, _, version = source_text.partition("?")
        if version and version != "versionId=null":
            raise _not_implemented("Copying a version (versionId)")
        source_bucket, _, source_key = unquote(path).lstrip("/").partition("/")
        if not source_key:
            message = "Copy Source must mention the source bucket and key: sourcebucket/sourcekey"
            raise S3Error(400, "InvalidArgument", message)
        source = self._bucket(source_bucket).get(source_key)
        if source is None:
            raise _no_such_key(source_key)
        condition = read_condition(call.headers, source, COPY_SOURCE_CONDITIONS)
        if condition is not None:
            raise _precondition_failed(f"x-amz-copy-source-{condition[4:]}")
        directive = call.headers.get("x-amz-metadata-directive", "COPY").upper()
        if directive not in ("COPY", "REPLACE"):
            raise S3Error(400, "InvalidArgument", f"Unknown metadata directive: {directive}")
        if (source_bucket, source_key) == (call.bucket, call.key) and directive == "COPY":
            raise S3Error(
                400,
                "InvalidRequest",
                "This copy request is illegal because it is trying to copy an object to itself without changing "
                "the object's metadata, storage class, website redirect location or encryption attributes.",
            )
        write_condition(call.headers, call.key, destination.get(call.key))
        if directive == "COPY":
            content_type, metadata = source.content_type, source.metadata
        else:
            content_type = call.headers.get("content-type", "binary/octet-stream")
            metadata = _metadata(call.headers)
        etag = source.etag if "-" not in source.etag else quoted_md5(source.data)  # a copy is one part
        now = int(time.time())
        destination.put(call.key, StoredObject(source.data, etag, now, content_type, metadata))
        body = documents.copy_result(now, etag)
        return Response(200, [("Content-Type", XML), ("x-amz-server-side-encryption", "AES256")], body)

    def delete_object(self, call: Call) -> Response:
        bucket = self._bucket(call.bucket)
        if_match = call.headers.get("if-match")
        if if_match is not None:
            existing = bucket.get(call.key)
            if existing is None:
                raise _no_such_key(call.key)
            if not etag_matches(if_match, existing.etag):
                raise _precondition_failed("If-Match")
        bucket.delete(call.key)
        return Response(204, [])

    def delete_objects(self, call: Call) -> Response:
        """DeleteObjects: up to 1000 keys, each optionally pinned by <ETag>; per-key errors in the answer."""
        bucket = self._bucket(call.bucket)
        headers = call.headers
        if "content-md5" not in headers and not any(name.startswith("x-amz-checksum-") for name in headers):
            message = "Missing required header for this request: Content-MD5 OR x-amz-checksum-*"
            raise S3Error(400, "InvalidRequest", message)
        data = self._payload(call)
        check_integrity(headers, data, quoted_md5(data))
        root = _parse_xml(data)
        objects = root.findall("Object")
        if root.tag != "Delete" or not objects or len(objects) > MAX_DELETE_KEYS:
            raise S3Error(400, "MalformedXML", MALFORMED_XML)
        quiet = (root.findtext("Quiet") or "false").strip().lower() == "true"
        deleted: list[str] = []
        failed: list[tuple[str, str, str]] = []
        for entry in objects:
            key = entry.findtext("Key") or ""
            etag = entry.findtext("ETag")
            if etag is not None:
                existing = bucket.get(key)
                if existing is None:
                    failed.append((key, "NoSuchKey", "The specified key does not exist."))
                    continue
                if not etag_matches(etag, existing.etag):
                    failed.append((key, "PreconditionFailed", PRECONDITION_FAILED))
                    continue
            bucket.delete(key)
            deleted.append(key)
        body = documents.delete_result(() if quiet else deleted, failed)
        return Response(200, [("Content-Type", XML)], body)

    # ------------------------------------------------------------------ multipart

    def create_multipart_upload(self, call: Call) -> Response:
        bucket = self._bucket(call.bucket)
        content_type = call.headers.get("content-type", "binary/octet-stream")
        upload = bucket.start_upload(call.key, content_type, _metadata(call.headers))
        body = documents.initiate_multipart(call.bucket, call.key, upload.upload_id)
        return Response(200, [("Content-Type", XML), ("x-amz-server-side-encryption", "AES256")], body)

    def _upload(self, bucket: Bucket, call: Call) -> Upload:
        upload_id = call.query.get("uploadId", "")
        upload = bucket.uploads.get(upload_id)
        if upload is None or upload.key != call.key:
            raise _no_such_upload(upload_id)
        return upload

    def upload_part(self, call: Call) -> Response:
        bucket = self._bucket(call.bucket)
        number = _int_argument(call.query, "partNumber", 0, 1, MAX_PARTS)
        upload = self._upload(bucket, call)
        data = self._payload(call)
        etag = quoted_md5(data)
        check_integrity(call.headers, data, etag)
        upload.parts[number] = Part(data, etag, int(time.time()))
        return Response(200, [("ETag", etag), ("x-amz-server-side-encryption", "AES256")])

    def complete_multipart_upload(self, call: Call) -> Response:
        """Assemble the listed parts: ascending numbers, matching ETags, all but the last at least 5 MiB; the
        ETag is the md5 of the parts' binary md5s followed by ``-N``."""
        bucket = self._bucket(call.bucket)
        upload = self._upload(bucket, call)
        root = _parse_xml(call.body)
        listed: list[tuple[int, str]] = []
        for entry in root.findall("Part"):
            try:
                listed.append((int(entry.findtext("PartNumber") or ""), entry.findtext("ETag") or ""))
            except ValueError:
                raise S3Error(400, "MalformedXML", "A PartNumber is not an integer") from None
        if root.tag != "CompleteMultipartUpload" or not listed:
            raise S3Error(400, "MalformedXML", MALFORMED_XML)
        numbers = [number for number, _ in listed]
        if numbers != sorted(set(numbers)):
            raise S3Error(400, "InvalidPartOrder", INVALID_PART_ORDER)
        parts: list[Part] = []
        for number, etag in listed:
            part = upload.parts.get(number)
            if part is None or _bare(part.etag) != _bare(etag):
                fields = (("UploadId", upload.upload_id), ("PartNumber", str(number)))
                raise S3Error(400, "InvalidPart", INVALID_PART, fields)
            parts.append(part)
        for number, part in zip(numbers[:-1], parts[:-1], strict=True):
            if len(part.data) < MIN_PART_SIZE:
                message = "Your proposed upload is smaller than the minimum allowed size"
                fields = (
                    ("ProposedSize", str(len(part.data))),
                    ("MinSizeAllowed", str(MIN_PART_SIZE)),
                    ("PartNumber", str(number)),
                )
                raise S3Error(400, "EntityTooSmall", message, fields)
        write_condition(call.headers, call.key, bucket.get(call.key))
        digests = b"".join(bytes.fromhex(_bare(part.etag)) for part in parts)
        etag = f'"{hashlib.md5(digests, usedforsecurity=False).hexdigest()}-{len(parts)}"'
        data = b"".join(part.data for part in parts)
        bucket.put(call.key, StoredObject(data, etag, int(time.time()), upload.content_type, upload.metadata))
        del bucket.uploads[upload.upload_id]
        host = call.headers.get("host", "localhost")
        location_url = f"http://{host}/{call.bucket}/{quote(call.key, safe='/~')}"
        body = documents.complete_multipart(location_url, call.bucket, call.key, etag)
        return Response(200, [("Content-Type", XML), ("x-amz-server-side-encryption", "AES256")], body)

    def list_parts(self, call: Call) -> Response:
        """The upload's parts, ``max-parts`` at most (a write's commit asks whether its uploads are still open)."""
        bucket = self._bucket(call.bucket)
        upload = self._upload(bucket, call)
        max_parts = _int_argument(call.query, "max-parts", MAX_PARTS, 1, MAX_PARTS)
        numbers = sorted(upload.parts)
        body = documents.list_parts(call.bucket, call.key, upload, numbers[:max_parts], len(numbers) > max_parts)
        return Response(200, [("Content-Type", XML)], body)

    def abort_multipart_upload(self, call: Call) -> Response:
        bucket = self._bucket(call.bucket)
        upload = self._upload(bucket, call)
        del bucket.uploads[upload.upload_id]
        return Response(204, [])


def _raiser(error: S3Error) -> Handler:
    def handler(call: Call) -> Response:
        raise error

    return handler
