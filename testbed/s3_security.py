"""Where moto does not do what S3 does with a company bucket's security, a WSGI middleware that does, so tests see S3's
behaviour: bucket policies on encryption, SSE-C, requester pays.

- **Bucket policies on encryption.** moto stores a bucket policy but does not evaluate its conditions (a Deny with a
  condition denies every PUT, encrypted or not) and never checks CreateMultipartUpload against it. Here a bucket's
  policy (PutBucketPolicy / GetBucketPolicy / DeleteBucketPolicy, kept here, not in moto) is evaluated as S3 does for
  the writes it judges: PutObject, CopyObject and CreateMultipartUpload, all three the action ``s3:PutObject`` (the
  parts of an upload are judged by the encryption it was created with, as S3 does). A Deny statement whose
  Action and Resource match and whose conditions all hold refuses the write: 403 AccessDenied "... with an explicit
  deny in a resource-based policy". Conditions: StringEquals, StringNotEquals, their IfExists forms and Null, on the
  encryption keys (``s3:x-amz-server-side-encryption``, ``...-aws-kms-key-id``, ``...-customer-algorithm``); a
  policy with anything else is refused when it is put (400 MalformedPolicy), so a test cannot rely on what is not
  evaluated.
- **SSE-C.** moto ignores the customer-key headers. Here the key is checked (AES256, 32 bytes, its MD5) and
  remembered, by its MD5, for each object written with it (PUT, CopyObject, a completed multipart upload created with
  it): a GET or HEAD of such an object without the key is refused (400 InvalidRequest), with another key too (403
  AccessDenied); the key given for an object stored without one is refused (400); an UploadPart of such an upload
  needs the key; a CopyObject needs it for the source (``x-amz-copy-source-server-side-encryption-customer-*``).
  Answers of such objects carry ``x-amz-server-side-encryption-customer-algorithm`` and ``-key-MD5``. The bytes are
  stored as they came (this checks the protocol, not the cipher).
- **Requester pays.** A bucket the test marks (``requester_pays(bucket)``) refuses every request without
  ``x-amz-request-payer: requester`` with 403 AccessDenied, as S3 refuses a requester that is not the owner.
"""

from __future__ import annotations

import base64
import contextlib
import fnmatch
import hashlib
import io
import json
import re
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any
from urllib.parse import parse_qs, unquote
from xml.etree import ElementTree

Environ = dict[str, Any]
StartResponse = Callable[..., Any]

SSE_KEY = "s3:x-amz-server-side-encryption"
KMS_KEY = "s3:x-amz-server-side-encryption-aws-kms-key-id"
CUSTOMER_ALGORITHM_KEY = "s3:x-amz-server-side-encryption-customer-algorithm"
CONDITION_KEYS = {
    SSE_KEY: "x-amz-server-side-encryption",
    KMS_KEY: "x-amz-server-side-encryption-aws-kms-key-id",
    CUSTOMER_ALGORITHM_KEY: "x-amz-server-side-encryption-customer-algorithm",
}
OPERATORS = ("StringEquals", "StringNotEquals", "StringEqualsIfExists", "StringNotEqualsIfExists", "Null")
CUSTOMER = "x-amz-server-side-encryption-customer-"
COPY_SOURCE_CUSTOMER = "x-amz-copy-source-server-side-encryption-customer-"
_NAMESPACE = re.compile(r"^\{[^}]*\}")


class S3SecurityApp:
    """Wraps moto's WSGI app (see the module doc); ``policies``, ``customer_keys`` and ``requester_pays_buckets``
    hold what S3 would know."""

    def __init__(self, app: Callable[[Environ, StartResponse], Iterable[bytes]]) -> None:
        self._app = app
        self._lock = threading.Lock()
        self.policies: dict[str, dict[str, Any]] = {}
        self.customer_keys: dict[tuple[str, str], str] = {}  # (bucket, key) -> MD5 of the SSE-C key it was written with
        self._uploads: dict[str, str | None] = {}  # upload id -> MD5 of its SSE-C key (None: none)
        self.requester_pays_buckets: set[str] = set()

    @contextlib.contextmanager
    def requester_pays(self, bucket: str) -> Iterator[None]:
        """Make ``bucket`` refuse requests that do not say the requester pays, until the block ends."""
        with self._lock:
            self.requester_pays_buckets.add(bucket)
        try:
            yield
        finally:
            with self._lock:
                self.requester_pays_buckets.discard(bucket)

    # ------------------------------------------------------------------ the request

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        bucket, key = _target(environ)
        if bucket is None:
            return self._app(environ, start_response)
        method = environ["REQUEST_METHOD"]
        query = parse_qs(environ.get("QUERY_STRING", ""), keep_blank_values=True)
        headers = _headers(environ)
        with self._lock:
            pays = bucket in self.requester_pays_buckets
        if pays and headers.get("x-amz-request-payer") != "requester":
            return _answer(
                environ, start_response, 403, "AccessDenied", "Access Denied (requester pays: no x-amz-request-payer)"
            )
        if not key:
            if "policy" in query:
                return self._bucket_policy(environ, start_response, method, bucket)
            if method == "POST" and "delete" in query:
                return self._delete_many(environ, start_response, bucket)
            if method == "DELETE" and not query:  # the bucket goes: so does what was kept of it here
                with self._lock:
                    self.policies.pop(bucket, None)
            return self._app(environ, start_response)
        try:
            return self._object(environ, start_response, method, bucket, key, query, headers)
        except Refused as refused:
            return _answer(environ, start_response, refused.status, refused.code, refused.message)

    def _object(
        self,
        environ: Environ,
        start_response: StartResponse,
        method: str,
        bucket: str,
        key: str,
        query: dict[str, list[str]],
        headers: dict[str, str],
    ) -> Iterable[bytes]:
        given = _customer_key(headers, CUSTOMER)
        upload_id = (query.get("uploadId") or [None])[0]
        creating = method == "POST" and "uploads" in query
        putting = method == "PUT" and upload_id is None
        if creating or putting:
            self._judge_write(bucket, key, headers)
        if putting and "x-amz-copy-source" in headers:
            self._check_copy_source(headers)
        stored = self._stored_key(bucket, key)
        reading = method in ("GET", "HEAD")
        if reading and stored is not None:
            self._check_read(bucket, key, given)
        if upload_id is not None and method in ("PUT", "POST"):
            with self._lock:
                expected = self._uploads.get(upload_id)
            if expected is not None and given != expected:
                raise Refused(
                    400,
                    "InvalidRequest",
                    "The multipart upload initiate requested encryption. Subsequent part requests must include the "
                    "appropriate encryption parameters.",
                )
        # a key for an object stored without one is refused once the object is found (a missing one is a 404)
        key_not_applicable = reading and stored is None and given is not None
        answered: list[int] = []
        captured: list[bytes] = []

        def watch(status: str, response_headers: list[tuple[str, str]], *args: Any) -> Any:
            code = int(status.split(" ", 1)[0])
            answered.append(code)
            if key_not_applicable and code < 300:
                return lambda data: None
            if code < 300 and reading and stored is not None:
                response_headers = [*response_headers, *_customer_answer(stored)]
            return start_response(status, response_headers, *args)

        body = self._app(environ, watch)
        if key_not_applicable and answered and answered[0] < 300:
            close = getattr(body, "close", None)
            if close is not None:
                close()
            raise Refused(400, "InvalidRequest", "The encryption parameters are not applicable to this object.")
        if creating:  # the upload id is in the answer's body
            captured = list(body)
            body = captured
        ok = bool(answered) and answered[0] < 300
        with self._lock:
            if ok and creating:
                upload = _text_of(b"".join(captured), "UploadId")
                if upload:
                    self._uploads[upload] = given
            elif ok and putting:
                self._remember(bucket, key, given)
            elif ok and method == "POST" and upload_id is not None:
                self._remember(bucket, key, self._uploads.pop(upload_id, None))
            elif ok and method == "DELETE" and upload_id is None:
                self.customer_keys.pop((bucket, key), None)
            elif method == "DELETE" and upload_id is not None:
                self._uploads.pop(upload_id, None)
        return body

    # ------------------------------------------------------------------ SSE-C

    def _stored_key(self, bucket: str, key: str) -> str | None:
        with self._lock:
            return self.customer_keys.get((bucket, key))

    def _remember(self, bucket: str, key: str, md5: str | None) -> None:
        if md5 is None:
            self.customer_keys.pop((bucket, key), None)
        else:
            self.customer_keys[(bucket, key)] = md5

    def _check_read(self, bucket: str, key: str, given: str | None) -> None:
        """Refuse a read of an SSE-C object without its key, or with another one."""
        stored = self._stored_key(bucket, key)
        if stored is not None and given is None:
            raise Refused(
                400,
                "InvalidRequest",
                "The object was stored using a form of Server Side Encryption. The correct parameters must be "
                "provided to retrieve the object.",
            )
        if stored is not None and given != stored:
            raise Refused(403, "AccessDenied", "The SSE-C key given is not the key the object was stored with.")

    def _check_copy_source(self, headers: dict[str, str]) -> None:
        source = unquote(headers["x-amz-copy-source"]).lstrip("/")
        bucket, _, key = source.partition("/")
        key = key.split("?versionId=")[0]
        given = _customer_key(headers, COPY_SOURCE_CUSTOMER)
        if given is not None and self._stored_key(bucket, key) is None:
            raise Refused(400, "InvalidRequest", "The encryption parameters are not applicable to this object.")
        self._check_read(bucket, key, given)

    # ------------------------------------------------------------------ bucket policies

    def _bucket_policy(
        self, environ: Environ, start_response: StartResponse, method: str, bucket: str
    ) -> Iterable[bytes]:
        if method == "PUT":
            try:
                policy = json.loads(_body(environ) or b"{}")
                _check_policy(policy)
            except (ValueError, KeyError, TypeError) as exc:
                return _answer(environ, start_response, 400, "MalformedPolicy", str(exc))
            with self._lock:
                self.policies[bucket] = policy
            start_response("204 No Content", [])
            return [b""]
        if method == "DELETE":
            with self._lock:
                self.policies.pop(bucket, None)
            start_response("204 No Content", [])
            return [b""]
        with self._lock:
            policy = self.policies.get(bucket)
        if policy is None:
            return _answer(environ, start_response, 404, "NoSuchBucketPolicy", "The bucket policy does not exist")
        text = json.dumps(policy).encode()
        start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(text)))])
        return [text]

    def _judge_write(self, bucket: str, key: str, headers: dict[str, str]) -> None:
        """Refuse a write (s3:PutObject) that a Deny statement of the bucket's policy matches."""
        with self._lock:
            policy = self.policies.get(bucket)
        if policy is None:
            return
        resource = f"arn:aws:s3:::{bucket}/{key}"
        values = {name: headers.get(header) for name, header in CONDITION_KEYS.items()}
        for statement in _statements(policy):
            if statement.get("Effect") != "Deny":
                continue
            if not _matches(statement.get("Action"), "s3:PutObject"):
                continue
            if not _matches(statement.get("Resource"), resource):
                continue
            conditions = statement.get("Condition", {})
            if all(_holds(op, k, v, values) for op, pairs in conditions.items() for k, v in pairs.items()):
                raise Refused(
                    403,
                    "AccessDenied",
                    "User: arn:aws:iam::123456789012:user/test is not authorized to perform: s3:PutObject on "
                    f'resource: "{resource}" with an explicit deny in a resource-based policy',
                )

    def _delete_many(self, environ: Environ, start_response: StartResponse, bucket: str) -> Iterable[bytes]:
        body = _body(environ)
        keys: list[str] = []
        try:
            root = ElementTree.fromstring(body)
            keys = [e.text or "" for e in root.iter() if _NAMESPACE.sub("", e.tag) == "Key"]
        except ElementTree.ParseError:
            pass
        answer = b"".join(self._app(environ, start_response))
        refused: set[str] = set()
        try:  # an object the store refused to delete (a per-object ETag that did not match) keeps its key
            refused = {
                child.text or ""
                for element in ElementTree.fromstring(answer).iter()
                if _NAMESPACE.sub("", element.tag) == "Error"
                for child in element
                if _NAMESPACE.sub("", child.tag) == "Key"
            }
        except ElementTree.ParseError:
            pass
        with self._lock:
            for key in keys:
                if key not in refused:
                    self.customer_keys.pop((bucket, key), None)
        return [answer]


def deny_unencrypted_policy(bucket: str, algorithm: str = "aws:kms") -> str:
    """The common bucket policy "deny s3:PutObject unless x-amz-server-side-encryption is ``algorithm``" (JSON)."""
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Sid": "DenyUnencryptedWrites",
                    "Effect": "Deny",
                    "Principal": "*",
                    "Action": "s3:PutObject",
                    "Resource": f"arn:aws:s3:::{bucket}/*",
                    "Condition": {"StringNotEquals": {SSE_KEY: algorithm}},
                }
            ],
        }
    )


class Refused(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


# ----------------------------------------------------------------------------------------- pieces


def _customer_key(headers: dict[str, str], prefix: str) -> str | None:
    """The MD5 of the SSE-C key the headers with ``prefix`` give (checked as S3 checks it), or None."""
    algorithm, key, md5 = (headers.get(prefix + n) for n in ("algorithm", "key", "key-md5"))
    if algorithm is None and key is None and md5 is None:
        return None
    if algorithm != "AES256":
        raise Refused(400, "InvalidEncryptionAlgorithmError", "The encryption request you specified is not valid.")
    try:
        raw = base64.b64decode(key or "", validate=True)
    except ValueError:
        raw = b""
    if len(raw) != 32:
        raise Refused(400, "InvalidArgument", "The secret key was invalid for the specified algorithm.")
    digest = base64.b64encode(hashlib.md5(raw).digest()).decode()
    if md5 != digest:
        raise Refused(
            400, "InvalidArgument", "The calculated MD5 hash of the key did not match the hash that was provided."
        )
    return digest


def _customer_answer(md5: str) -> list[tuple[str, str]]:
    return [(CUSTOMER + "algorithm", "AES256"), (CUSTOMER + "key-MD5", md5)]


def _statements(policy: dict[str, Any]) -> list[dict[str, Any]]:
    statements = policy.get("Statement", [])
    return statements if isinstance(statements, list) else [statements]


def _check_policy(policy: dict[str, Any]) -> None:
    """Refuse a policy this front would not evaluate faithfully (see the module doc)."""
    for statement in _statements(policy):
        if statement.get("Effect") not in ("Allow", "Deny"):
            raise ValueError(f"Effect must be Allow or Deny: {statement.get('Effect')!r}")
        for operator, pairs in statement.get("Condition", {}).items():
            if operator not in OPERATORS:
                raise ValueError(f"the test front does not evaluate the condition operator {operator}")
            for key in pairs:
                if key not in CONDITION_KEYS:
                    raise ValueError(f"the test front does not evaluate the condition key {key}")


def _matches(patterns: Any, value: str) -> bool:
    listed = patterns if isinstance(patterns, list) else [patterns]
    return any(isinstance(p, str) and fnmatch.fnmatchcase(value, p) for p in listed)


def _holds(operator: str, key: str, expected: Any, values: dict[str, str | None]) -> bool:
    """Whether one condition holds for the request's ``values`` (IAM's rules for a key the request lacks)."""
    actual = values.get(key)
    wanted = [str(v) for v in (expected if isinstance(expected, list) else [expected])]
    if operator == "Null":
        return (actual is None) == (wanted[0].lower() == "true")
    if actual is None:
        return operator in ("StringNotEquals", "StringEqualsIfExists", "StringNotEqualsIfExists")
    equal = actual in wanted
    return equal if operator.startswith("StringEquals") else not equal


def _target(environ: Environ) -> tuple[str | None, str]:
    """(bucket, key) of a path-style request (the tests address moto path-style)."""
    raw = environ.get("RAW_URI") or environ.get("REQUEST_URI") or environ.get("PATH_INFO", "/")
    path = unquote(raw.split("?", 1)[0])
    bucket, _, key = path.lstrip("/").partition("/")
    return (bucket or None), key


def _headers(environ: Environ) -> dict[str, str]:
    return {k[5:].lower().replace("_", "-"): v for k, v in environ.items() if k.startswith("HTTP_")}


def _body(environ: Environ) -> bytes:
    """The request's body (the SigV4 front already read it into a BytesIO), put back for the app below."""
    stream = environ.get("wsgi.input")
    if stream is None:
        return b""
    body = stream.read(int(environ.get("CONTENT_LENGTH") or 0) or -1)
    environ["wsgi.input"] = io.BytesIO(body)
    return body


def _text_of(body: bytes, tag: str) -> str | None:
    try:
        root = ElementTree.fromstring(body)
    except ElementTree.ParseError:
        return None
    for element in root.iter():
        if _NAMESPACE.sub("", element.tag) == tag:
            return element.text
    return None


def _answer(environ: Environ, start_response: StartResponse, status: int, code: str, message: str) -> Iterable[bytes]:
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>{code}</Code><Message>{_escape(message)}</Message><RequestId>s3security</RequestId></Error>"
    ).encode()
    head = environ["REQUEST_METHOD"] == "HEAD"
    reason = {400: "Bad Request", 403: "Forbidden", 404: "Not Found"}.get(status, "Error")
    start_response(
        f"{status} {reason}", [("Content-Type", "application/xml"), ("Content-Length", str(0 if head else len(body)))]
    )
    return [b""] if head else [body]


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
