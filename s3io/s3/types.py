"""Plain values the S3 operations return: no behaviour, safe to pickle and to pass between layers."""

from __future__ import annotations

from dataclasses import dataclass, field

from s3io.s3.checksums import StoredChecksum
from s3io.scatter import Pieces


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    """One object as a listing or HEAD describes it."""

    bucket: str
    key: str
    size: int
    etag: str | None = None
    last_modified: float | None = None  # seconds since the epoch

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.key}"

    def __reduce__(self) -> tuple[type, tuple[str, str, int, str | None, float | None]]:
        # Planning pickles a million of these: the slotted dataclass default looks up fields() per object.
        return ObjectInfo, (self.bucket, self.key, self.size, self.etag, self.last_modified)


_new = object.__new__
_SETTERS = tuple(ObjectInfo.__dict__[name].__set__ for name in ("bucket", "key", "size", "etag", "last_modified"))


def object_info(bucket: str, key: str, size: int, etag: str | None, last_modified: float | None) -> ObjectInfo:
    """``ObjectInfo(...)`` for a listing's millions: the frozen dataclass's ``__init__`` sets each field through
    ``object.__setattr__`` (0.63 us here), the slots' own setters take 0.37 us."""
    info = _new(ObjectInfo)
    set_bucket, set_key, set_size, set_etag, set_modified = _SETTERS
    set_bucket(info, bucket)
    set_key(info, key)
    set_size(info, size)
    set_etag(info, etag)
    set_modified(info, last_modified)
    return info


@dataclass(frozen=True, slots=True)
class GetResult:
    """Bytes of a GET (whole object or a range) and the identity of the object they came from."""

    # bytes, or a view of the buffer the caller gave (``get_range(..., into=...)``), or the ``Pieces`` it gave
    data: bytes | memoryview | Pieces
    etag: str | None
    # total size of the object, from Content-Range or Content-Length; None when the answer did not say (a 206 of
    # total "*", a 200 of unstated length cut once the range was in): the object may go on past ``data``
    object_size: int | None
    start: int  # offset of data[0] in the object


@dataclass(frozen=True, slots=True)
class PutResult:
    etag: str | None
    # the whole object's checksum this write stated and the store checked (a PUT's CRC64NVME, a multipart upload's
    # full-object one, combined from its parts'); None when none was sent (Policy.checksums, a store refusing them)
    checksum: StoredChecksum | None = None


@dataclass(frozen=True, slots=True)
class DeleteError:
    key: str
    code: str
    message: str


@dataclass(frozen=True, slots=True)
class DeleteResult:
    deleted: tuple[str, ...] = ()
    errors: tuple[DeleteError, ...] = field(default=())


@dataclass(frozen=True, slots=True)
class MultipartUpload:
    """An upload that was started and neither completed nor aborted (its parts are stored, and billed)."""

    bucket: str
    key: str
    upload_id: str
    initiated: float | None = None  # seconds since the epoch
