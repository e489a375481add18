"""What an S3Client sends with each upload body, by its policy's ``checksums`` mode, and the fallback for stores that
refuse checksum headers.

``when_supported``: a PUT and every part carry ``x-amz-checksum-crc64nvme`` (S3 checks the body against it and keeps
it: readers can then verify what they read); a multipart upload is created with ``x-amz-checksum-type:
FULL_OBJECT``, and its completion states the CRC of the whole object, combined from the parts' CRCs (``combine``:
no byte is read twice), which S3 checks against the parts it assembled. No Content-MD5 is sent then (as the AWS
SDKs since 2025): the CRC does its job, and MD5 costs ~20 times the CPU. ``required`` sends the Content-MD5 alone
(as before flexible checksums), ``off`` neither. A store that refuses the headers is learnt once per endpoint
(``checksum_refusals``) and its uploads go on with the Content-MD5.
"""

from __future__ import annotations

import base64
import hashlib
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import TypeVar

from s3io import errors
from s3io.policy import OFF, WHEN_SUPPORTED
from s3io.s3.checksum_refusals import REFUSALS, ChecksumRefusals, Feature, is_refusal
from s3io.s3.checksums import (
    ALGORITHM_HEADER,
    CHECKSUM_TYPE_HEADER,
    FULL_OBJECT,
    SDK_ALGORITHM_HEADER,
    UPLOAD_ALGORITHM,
    PartChecksums,
    StoredChecksum,
)

T = TypeVar("T")
MAX_TRACKED_UPLOADS = 1024  # multipart uploads of one client whose part CRCs are kept until completed or aborted


class UploadChecksums:
    """The checksum headers of one client's uploads, and the part CRCs of its multipart uploads in progress."""

    def __init__(self, mode: str, endpoint: str, refusals: ChecksumRefusals = REFUSALS) -> None:
        self.mode = mode
        self.endpoint = endpoint
        self.refusals = refusals
        self._uploads: OrderedDict[str, PartChecksums] = OrderedDict()

    def offered(self, feature: Feature) -> bool:
        """Whether to send ``feature``'s headers: the policy asks for them and the store has not refused them."""
        return self.mode == WHEN_SUPPORTED and not self.refusals.refused(self.endpoint, feature)

    def body_headers(self, data: bytes, *, crc: bool) -> dict[str, str]:
        """The integrity headers of one upload body: its CRC (``crc``), else its Content-MD5 (unless checksums are
        off)."""
        if crc:
            return {UPLOAD_ALGORITHM.header: UPLOAD_ALGORITHM.value(data), SDK_ALGORITHM_HEADER: UPLOAD_ALGORITHM.name}
        if self.mode == OFF:
            return {}
        return {"content-md5": base64.b64encode(hashlib.md5(data).digest()).decode()}

    async def send(self, feature: Feature, request: Callable[[bool], Awaitable[T]]) -> T:
        """``request(True)`` (with ``feature``'s headers) where they are offered; a refusal that ``request(False)``
        (the same request without them) does not get is learnt for the endpoint, and that answer returned."""
        if not self.offered(feature):
            return await request(False)
        try:
            return await request(True)
        except errors.RequestError as exc:
            if not is_refusal(exc):
                raise
            result = await request(False)
            self.refusals.remember(self.endpoint, feature, f"HTTP {exc.status} {exc.code}: {exc.message}")
            return result

    # ----------------------------------------------------------------- multipart

    @staticmethod
    def create_headers(full_object: bool) -> dict[str, str]:
        """CreateMultipartUpload's headers: every part carries the upload algorithm, the object a full-object CRC."""
        if not full_object:
            return {}
        return {ALGORITHM_HEADER: UPLOAD_ALGORITHM.name, CHECKSUM_TYPE_HEADER: FULL_OBJECT}

    def created(self, upload_id: str) -> None:
        """An upload was created with a full-object checksum: its parts' CRCs are kept until it completes."""
        self._uploads[upload_id] = PartChecksums(UPLOAD_ALGORITHM)
        while len(self._uploads) > MAX_TRACKED_UPLOADS:
            self._uploads.popitem(last=False)

    def part_headers(self, upload_id: str, number: int, data: bytes) -> dict[str, str]:
        """UploadPart's integrity headers: the part's CRC for an upload created with a checksum; the parts of one
        created without (a store that refused the declaration) get the Content-MD5, unless checksums are off, as S3
        expects no part checksum of an upload declared without an algorithm."""
        parts = self._uploads.get(upload_id)
        if parts is None:
            return self.body_headers(data, crc=False)
        return {UPLOAD_ALGORITHM.header: parts.add(number, data), SDK_ALGORITHM_HEADER: UPLOAD_ALGORITHM.name}

    def completion(self, upload_id: str, numbers: list[int]) -> tuple[dict[int, str], dict[str, str]]:
        """CompleteMultipartUpload's checksums: each part's CRC (for its XML) and the headers stating the whole
        object's CRC; nothing for an upload created without a checksum."""
        parts = self._uploads.get(upload_id)
        if parts is None:
            return {}, {}
        values = {n: v for n in numbers if (v := parts.part_value(n)) is not None}
        full = parts.full_object(numbers)
        headers = {} if full is None else {UPLOAD_ALGORITHM.header: full, CHECKSUM_TYPE_HEADER: FULL_OBJECT}
        return values, headers

    @staticmethod
    def stated(headers: dict[str, str]) -> StoredChecksum | None:
        """The whole object's checksum that ``headers`` state (a PUT's, or a completion's full-object one)."""
        value = headers.get(UPLOAD_ALGORITHM.header)
        if value is None or (CHECKSUM_TYPE_HEADER in headers and headers[CHECKSUM_TYPE_HEADER] != FULL_OBJECT):
            return None
        return StoredChecksum(UPLOAD_ALGORITHM, value, FULL_OBJECT)

    def element(self) -> str:
        return UPLOAD_ALGORITHM.element

    def finished(self, upload_id: str) -> None:
        """The upload completed or was aborted: its part CRCs are no longer needed."""
        self._uploads.pop(upload_id, None)
