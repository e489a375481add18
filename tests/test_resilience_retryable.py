"""The retry table (s3io/resilience/retryable.py): the one place that decides what is retried."""

from __future__ import annotations

import pytest

from s3io import errors
from s3io.resilience.retryable import classify, error_for_status

pytestmark = pytest.mark.timeout(30)


def test_retry_table_is_one_place() -> None:
    retried = [
        error_for_status(503, "SlowDown", "slow"),
        error_for_status(500, "InternalError", "oops"),
        error_for_status(200, "InternalError", "error inside a 200"),
        error_for_status(429, None, "too many"),
        error_for_status(400, "RequestTimeout", "idle"),
        errors.DeadlineExceeded("x", phase="stall"),
        errors.Truncated("short"),
        errors.TransportError("reset"),
        error_for_status(409, "ConditionalRequestConflict", "a conflicting operation occurred"),
    ]
    for exc in retried:
        assert classify(exc).retry, exc
    for status, code in (
        (400, "InvalidArgument"),
        (403, "AccessDenied"),
        (404, "NoSuchKey"),
        (412, None),
        (409, "BucketNotEmpty"),
    ):
        assert not classify(error_for_status(status, code, "no")).retry
    assert not classify(errors.DeadlineExceeded("x", phase="operation")).retry
    assert classify(error_for_status(400, "ExpiredToken", "expired")).refresh_credentials
    unexplained = error_for_status(400, "400", None)  # a HEAD's 400: no body, so no code
    assert classify(unexplained).refresh_credentials and "ExpiredToken" in str(unexplained)
