"""s3io: a resilient S3 range-read engine on aiohttp: every operation under timer-backed deadlines and retries."""

__version__ = "0.1.0"  # the one place the version is written: the distribution (s3io-spark) reads it from here

from typing import TYPE_CHECKING

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

if TYPE_CHECKING:  # the lazy names below, for type checkers and editors
    from s3io.api import Progress, iter_batches, iter_batches_async, read_parquet, read_parquet_async, write_parquet
    from s3io.fs import S3FileSystem
    from s3io.metrics import MetricsSnapshot
    from s3io.policy import Policy
    from s3io.s3.client import S3Client
    from s3io.s3.get_range import GetRange
    from s3io.s3.types import DeleteResult, GetResult, MultipartUpload, ObjectInfo, PutResult
    from s3io.store import StoreConfig
    from s3io.transport.credentials import Credentials
    from s3io.write import WriteOptions, WriteReport, write_parquet_async

# Everything but the errors is imported on first use (``from s3io import S3Client`` as before): ``import s3io.errors``,
# which every layer does, runs this file first and must not load the client, the store or pyarrow with it.
_LAZY = {
    "MetricsSnapshot": "s3io.metrics",
    "Policy": "s3io.policy",
    "S3Client": "s3io.s3.client",
    "GetRange": "s3io.s3.get_range",
    "DeleteResult": "s3io.s3.types",
    "GetResult": "s3io.s3.types",
    "MultipartUpload": "s3io.s3.types",
    "ObjectInfo": "s3io.s3.types",
    "PutResult": "s3io.s3.types",
    "StoreConfig": "s3io.store",
    "Credentials": "s3io.transport.credentials",
    # the parquet API needs pyarrow, so `import s3io` (the CLI, the core client) stays light
    "Progress": "s3io.api",
    "iter_batches": "s3io.api",
    "iter_batches_async": "s3io.api",
    "read_parquet": "s3io.api",
    "read_parquet_async": "s3io.api",
    "write_parquet": "s3io.api",
    "WriteOptions": "s3io.write",
    "WriteReport": "s3io.write",
    "write_parquet_async": "s3io.write",
}


def __getattr__(name: str) -> object:
    """A public name imported on first use; ``s3io.S3FileSystem`` loads s3fs and aiobotocore, which most users never
    need, and names the extra to install when they are missing."""
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
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


def __dir__() -> list[str]:
    """The public names, the lazy ones included (for completion and ``dir(s3io)``)."""
    return sorted({*globals(), *__all__})


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
