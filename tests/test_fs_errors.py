"""How botocore failures become typed s3io errors (so the one retry table decides) and then s3fs's errors."""

from __future__ import annotations

import errno

import aiohttp
import pytest
from botocore.exceptions import (
    ClientError,
    ConnectTimeoutError,
    EndpointConnectionError,
    HTTPClientError,
    ParamValidationError,
    ReadTimeoutError,
)
from s3fs.utils import FileExpired

from s3io import errors
from s3io.fs import _fsspec_error, _typed_boto_error
from s3io.resilience.retryable import classify

pytestmark = pytest.mark.timeout(60)


def client_error(status: int, code: str, message: str = "msg") -> ClientError:
    response = {"Error": {"Code": code, "Message": message}, "ResponseMetadata": {"HTTPStatusCode": status}}
    return ClientError(response, "HeadObject")


@pytest.mark.parametrize(
    ("exc", "kind", "retried"),
    [
        (client_error(503, "SlowDown"), errors.Throttled, True),
        (client_error(500, "InternalError"), errors.ServerError, True),
        (client_error(404, "404"), errors.NotFound, False),
        (client_error(404, "NoSuchKey"), errors.NotFound, False),
        (client_error(403, "AccessDenied"), errors.AccessDenied, False),
        (client_error(412, "PreconditionFailed"), errors.PreconditionFailed, False),
        (client_error(400, "InvalidArgument"), errors.RequestError, False),
        (ConnectTimeoutError(endpoint_url="http://x"), errors.DeadlineExceeded, True),
        (ReadTimeoutError(endpoint_url="http://x"), errors.DeadlineExceeded, True),
        (EndpointConnectionError(endpoint_url="http://x"), errors.TransportError, True),
        (HTTPClientError(error=aiohttp.ClientPayloadError("cut")), errors.Truncated, True),
        (HTTPClientError(error=aiohttp.ServerDisconnectedError()), errors.TransportError, True),
        (HTTPClientError(error=ValueError("unknown")), errors.TransportError, True),
    ],
)
def test_botocore_failures_become_typed_errors_the_retry_table_understands(
    exc: Exception, kind: type, retried: bool
) -> None:
    typed = _typed_boto_error(exc, "head_object", "bucket", "key")
    assert isinstance(typed, kind)
    assert classify(typed).retry is retried
    assert typed.bucket == "bucket"
    assert typed.key == "key"


def test_timeouts_name_their_phase() -> None:
    assert _typed_boto_error(ConnectTimeoutError(endpoint_url="u"), "x", None, None).phase == "connect"
    assert _typed_boto_error(ReadTimeoutError(endpoint_url="u"), "x", None, None).phase == "stall"


def test_errors_that_are_not_from_the_wire_pass_through_unretried() -> None:
    exc = ParamValidationError(report="bad")
    assert _typed_boto_error(exc, "x", None, None) is exc
    assert not classify(exc).retry


def test_s3_answers_are_raised_as_s3fs_raises_them() -> None:
    boto = client_error(404, "NoSuchKey", "The specified key does not exist.")
    typed = _typed_boto_error(boto, "get_object", "b", "k")
    typed.__cause__ = boto
    out = _fsspec_error(typed, "b/k")
    assert type(out) is FileNotFoundError

    boto = client_error(503, "SlowDown")
    typed = _typed_boto_error(boto, "get_object", "b", "k")
    typed.__cause__ = boto
    out = _fsspec_error(typed, "b/k")
    assert isinstance(out, OSError)
    assert out.errno == errno.EBUSY


def test_s3io_errors_without_a_botocore_answer_keep_their_type_or_become_oserrors() -> None:
    deadline = errors.DeadlineExceeded("late", phase="stall")
    assert _fsspec_error(deadline, "b/k") is deadline  # already a TimeoutError
    changed = _fsspec_error(errors.ObjectChanged("replaced"), "b/k", '"etag"')
    assert isinstance(changed, FileExpired)
    budget = _fsspec_error(errors.RetryBudgetExhausted("empty"), "b/k")
    assert isinstance(budget, OSError)
    assert budget.errno == errno.EBUSY
