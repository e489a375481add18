"""S3Client: every S3 operation as one method, each run through the attempt runner (deadlines + retries).

The client is its generic request core (s3io.s3.request_core: addressing, signing, sending, typed errors, lifetime)
with the operation families on it, each a module of its own: reads (s3io.s3.object_reads: GET, ranged GET, HEAD,
the stored checksum), listings (s3io.s3.object_listing), writes and deletes (s3io.s3.object_writes: conditional
PUT and DELETE, DeleteObjects, CopyObject) and multipart uploads (s3io.s3.multipart_uploads). A new operation is a
method of its family's class.
"""

from __future__ import annotations

from s3io.s3.multipart_uploads import MultipartUploads
from s3io.s3.object_listing import ObjectListing
from s3io.s3.object_reads import ObjectReads
from s3io.s3.object_writes import ObjectWrites

__all__ = ["S3Client"]


class S3Client(ObjectReads, ObjectListing, ObjectWrites, MultipartUploads):
    """An S3 client bound to one event loop. Use ``async with S3Client(...) as s3`` or call ``close()``.

    Constructed as ``RequestCore`` is (its ``__init__`` says what each argument means); made from settings by
    ``s3io.store.StoreConfig.client()``."""
