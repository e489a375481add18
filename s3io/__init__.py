"""s3io: a resilient S3 range-read engine on aiohttp: every operation under timer-backed deadlines and retries."""

__version__ = "0.1.0"  # the one place the version is written: the distribution (s3io-spark) reads it from here

from s3io.errors import (
    AccessDenied,
    CorruptFile,
    DeadlineExceeded,
    InvalidConfig,
    ListingLoop,
    LoopStopped,
    NotFound,
    ObjectChanged,
    PreconditionFailed,
    ProtocolError,
    RequestError,
    RetryBudgetExhausted,
    S3IOError,
    SchemaMismatch,
    ServerError,
    Throttled,
    TransportError,
    Truncated,
)
from s3io.metrics import MetricsSnapshot
from s3io.policy import Policy
from s3io.s3.client import S3Client
from s3io.s3.get_range import GetRange
from s3io.s3.types import DeleteResult, GetResult, MultipartUpload, ObjectInfo, PutResult
from s3io.store import StoreConfig
from s3io.transport.credentials import Credentials

# The parquet API needs pyarrow: imported on first use, so `import s3io` (the CLI, the core client) stays light.
_API_NAMES = ("Progress", "iter_batches", "iter_batches_async", "read_parquet", "read_parquet_async", "write_parquet")
_WRITE_NAMES = ("WriteOptions", "WriteReport", "write_parquet_async")


def __getattr__(name: str) -> object:
    """``s3io.S3FileSystem`` is imported on first use: it loads s3fs and aiobotocore, which most users never need."""
    if name in _API_NAMES:
        from s3io import api

        return getattr(api, name)
    if name in _WRITE_NAMES:
        from s3io import write

        return getattr(write, name)
    if name == "S3FileSystem":
        try:
            from s3io.fs import S3FileSystem
        except ModuleNotFoundError as exc:
            if exc.name not in ("s3fs", "fsspec", "aiobotocore"):
                raise
            raise ModuleNotFoundError(
                f"s3io.S3FileSystem needs {exc.name}, which is not installed: pip install 's3io-spark[fsspec]'",
                name=exc.name,
            ) from exc
        return S3FileSystem
    raise AttributeError(f"module 's3io' has no attribute {name!r}")


__all__ = [
    "AccessDenied",
    "CorruptFile",
    "Credentials",
    "DeadlineExceeded",
    "DeleteResult",
    "GetRange",
    "GetResult",
    "InvalidConfig",
    "ListingLoop",
    "LoopStopped",
    "MetricsSnapshot",
    "MultipartUpload",
    "NotFound",
    "ObjectChanged",
    "ObjectInfo",
    "Policy",
    "PreconditionFailed",
    "Progress",
    "ProtocolError",
    "PutResult",
    "RequestError",
    "RetryBudgetExhausted",
    "S3Client",
    "S3FileSystem",
    "S3IOError",
    "SchemaMismatch",
    "ServerError",
    "StoreConfig",
    "Throttled",
    "TransportError",
    "Truncated",
    "WriteOptions",
    "WriteReport",
    "iter_batches",
    "iter_batches_async",
    "read_parquet",
    "read_parquet_async",
    "write_parquet",
    "write_parquet_async",
]
