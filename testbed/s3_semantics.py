"""Where moto is kinder than S3, a WSGI middleware that answers as S3 does, so tests see S3's behaviour.

- A multipart upload that was completed is gone: any later request naming its upload ID (a retried
  CompleteMultipartUpload whose first answer was lost, an UploadPart, an abort) gets 404 NoSuchUpload. moto
  answers a second CompleteMultipartUpload with 200 and so hides the lost-answer case.
- So is an aborted one: moto answers a CompleteMultipartUpload of an aborted upload with 500 (a KeyError inside).
- ListMultipartUploads says when each upload was initiated: moto answers one fixed date (2010-11-10) for all, which
  would make every upload look abandoned to a rule that judges them by age.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import parse_qs

Environ = dict[str, Any]
StartResponse = Callable[..., Any]

NO_SUCH_UPLOAD = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>NoSuchUpload</Code><Message>The specified upload does '
    b"not exist. The upload ID may be invalid, or the upload may have been aborted or completed.</Message>"
    b"<RequestId>s3semantics</RequestId></Error>"
)


class S3SemanticsApp:
    """Wraps moto's WSGI app; ``completed_uploads`` holds the IDs S3 would no longer know."""

    def __init__(self, app: Callable[[Environ, StartResponse], Iterable[bytes]]) -> None:
        self._app = app
        self._lock = threading.Lock()
        self.completed_uploads: set[str] = set()
        self.initiated: dict[str, float] = {}  # upload ID -> when it was created (seconds since the epoch)

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        query = parse_qs(environ.get("QUERY_STRING", ""), keep_blank_values=True)
        upload_id = (query.get("uploadId") or [None])[0]
        if upload_id is None and "uploads" in query:
            return self._uploads(environ, start_response)
        if upload_id is None:
            return self._app(environ, start_response)
        with self._lock:
            gone = upload_id in self.completed_uploads
        if gone:
            head = environ["REQUEST_METHOD"] == "HEAD"
            start_response(
                "404 Not Found",
                [("Content-Type", "application/xml"), ("Content-Length", str(0 if head else len(NO_SUCH_UPLOAD)))],
            )
            return [b""] if head else [NO_SUCH_UPLOAD]
        ending = environ["REQUEST_METHOD"] in ("POST", "DELETE")  # a completion or an abort

        def recording_start_response(status: str, headers: list[tuple[str, str]], *args: Any) -> Any:
            if ending and status[:1] == "2":
                with self._lock:
                    self.completed_uploads.add(upload_id)
            return start_response(status, headers, *args)

        return self._app(environ, recording_start_response)

    def _uploads(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        """CreateMultipartUpload (``POST ?uploads``): note when; ListMultipartUploads (``GET ?uploads``): say it."""
        body = b"".join(self._app(environ, start_response))
        if environ["REQUEST_METHOD"] == "POST":
            created = re.search(rb"<UploadId>([^<]+)</UploadId>", body)
            if created:
                with self._lock:
                    self.initiated[created.group(1).decode()] = time.time()
            return [body]
        if environ["REQUEST_METHOD"] != "GET":
            return [body]

        def dated(upload: re.Match[bytes]) -> bytes:
            found = re.search(rb"<UploadId>([^<]+)</UploadId>", upload.group(0))
            with self._lock:
                when = self.initiated.get(found.group(1).decode()) if found else None
            if when is None:
                return upload.group(0)
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(when)).encode()
            return re.sub(rb"<Initiated>[^<]*</Initiated>", b"<Initiated>" + stamp + b"</Initiated>", upload.group(0))

        return [re.sub(rb"<Upload>.*?</Upload>", dated, body, flags=re.DOTALL)]
