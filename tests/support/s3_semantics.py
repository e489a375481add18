"""Where moto is kinder than S3, a WSGI middleware that answers as S3 does, so tests see S3's behaviour.

- A multipart upload that was completed is gone: any later request naming its upload ID (a retried
  CompleteMultipartUpload whose first answer was lost, an UploadPart, an abort) gets 404 NoSuchUpload. moto
  answers a second CompleteMultipartUpload with 200 and so hides the lost-answer case.
"""

from __future__ import annotations

import threading
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

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        upload_id = (parse_qs(environ.get("QUERY_STRING", ""), keep_blank_values=True).get("uploadId") or [None])[0]
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
        completing = environ["REQUEST_METHOD"] == "POST"

        def recording_start_response(status: str, headers: list[tuple[str, str]], *args: Any) -> Any:
            if completing and status.startswith("200"):
                with self._lock:
                    self.completed_uploads.add(upload_id)
            return start_response(status, headers, *args)

        return self._app(environ, recording_start_response)
