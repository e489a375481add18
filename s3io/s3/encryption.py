"""Server-side encryption as one value: what a write asks S3 to encrypt with, and the customer key every request of
an SSE-C object carries.

S3's four kinds, by the value of ``sse`` (botocore's ``ServerSideEncryption``; S3A's ``fs.s3a.encryption.algorithm``
names in brackets):

- ``AES256`` (SSE-S3): S3's own keys. Writes carry ``x-amz-server-side-encryption: AES256``; reads need nothing.
- ``aws:kms`` (SSE-KMS) and ``aws:kms:dsse`` (DSSE-KMS): a KMS key, the bucket's default one unless ``kms_key_id``
  names another; ``bucket_key`` asks for an S3 Bucket Key (fewer KMS calls; not with DSSE). Writes carry the
  algorithm, the key id and the bucket-key flag; reads need nothing (S3 decrypts a signed GET).
- ``SSE-C``: the customer's 256-bit key, which S3 never stores: writes, and every GET, HEAD, UploadPart and
  CompleteMultipartUpload of such an object, carry the key and its MD5; a copy carries it for the source as well.
  Every object read with SSE-C configured must have been written with the key (S3 refuses the key for an object
  stored without it, as S3A does not mix them either). The key travels only over https (S3 refuses it otherwise).

"Writes" are PUT, CreateMultipartUpload and CopyObject's destination: outputs and control objects alike (journal,
lock, probe, manifests, leases). The customer key is a secret: never in a repr, a log line or an error.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from dataclasses import dataclass, field
from typing import Any

from s3io.errors import InvalidConfig

SSE_S3 = "AES256"
SSE_KMS = "aws:kms"
DSSE_KMS = "aws:kms:dsse"
SSE_C = "SSE-C"
ALGORITHMS = (SSE_S3, SSE_KMS, DSSE_KMS, SSE_C)
_SPELLINGS = {  # every accepted spelling (lower case) -> the algorithm; S3A's names and botocore's
    "aes256": SSE_S3,
    "sse-s3": SSE_S3,
    "aws:kms": SSE_KMS,
    "sse-kms": SSE_KMS,
    "aws:kms:dsse": DSSE_KMS,
    "dsse-kms": DSSE_KMS,
    "sse-c": SSE_C,
}
_NONE = ("", "none")
KEY_BYTES = 32  # SSE-C keys are AES-256 keys

ALGORITHM_HEADER = "x-amz-server-side-encryption"
KMS_KEY_HEADER = "x-amz-server-side-encryption-aws-kms-key-id"
BUCKET_KEY_HEADER = "x-amz-server-side-encryption-bucket-key-enabled"
CUSTOMER_PREFIX = "x-amz-server-side-encryption-customer-"
COPY_SOURCE_CUSTOMER_PREFIX = "x-amz-copy-source-server-side-encryption-customer-"
SETTING_NAMES = "sse (option sse, S3IO_SSE, --sse; S3A fs.s3a.encryption.algorithm; boto3 ServerSideEncryption)"


def parse_algorithm(value: Any, name: str) -> str | None:
    """``AES256`` / ``SSE-S3``, ``aws:kms`` / ``SSE-KMS``, ``aws:kms:dsse`` / ``DSSE-KMS``, ``SSE-C``, or none."""
    text = str(value).strip()
    if text.lower() in _NONE:
        return None
    found = _SPELLINGS.get(text.lower())
    if found is None:
        raise InvalidConfig(
            f"{name}: expected AES256 (SSE-S3), aws:kms (SSE-KMS), aws:kms:dsse (DSSE-KMS), SSE-C or none, got "
            f"{text[:40]!r}"
        )
    return found


def parse_customer_key(value: Any, name: str) -> str:
    """An SSE-C key as S3 takes it (base64 of 32 bytes): given as those 32 bytes, or as their base64 (44
    characters, S3A's ``fs.s3a.encryption.key`` form). The value is never echoed."""
    raw: bytes | None = None
    if isinstance(value, bytes | bytearray | memoryview):
        raw = bytes(value)
    else:
        text = str(value).strip()
        try:
            raw = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            raw = None
        if raw is None or len(raw) != KEY_BYTES:
            raw = text.encode("utf-8")  # boto3's SSECustomerKey: the key itself
    if len(raw) != KEY_BYTES:
        raise InvalidConfig(
            f"{name}: an SSE-C key is {KEY_BYTES} bytes (AES-256): give those bytes, or their base64 (44 characters, "
            "as S3A's fs.s3a.encryption.key); the value given is neither (not shown: it is a secret)"
        )
    return base64.b64encode(raw).decode("ascii")


def parse_kms_key_id(value: Any, name: str) -> str:
    """A KMS key id, alias or ARN: anything but empty, without whitespace inside."""
    text = str(value).strip()
    if not text or any(c.isspace() for c in text):
        raise InvalidConfig(f"{name}: expected a KMS key id, alias (alias/...) or ARN, got {text[:80]!r}")
    return text


@dataclass(frozen=True, slots=True)
class Encryption:
    """What writes ask S3 to encrypt with, and the SSE-C key reads of such objects need (see the module doc).

    Built by ``Encryption.of``, which settles what was left implied (a KMS key id means SSE-KMS, a customer key
    SSE-C) and refuses combinations S3 would."""

    algorithm: str | None = None
    kms_key_id: str | None = None
    bucket_key: bool = False
    customer_key: str | None = field(default=None, repr=False)  # base64 of the 32 key bytes

    @classmethod
    def of(
        cls,
        algorithm: str | None = None,
        kms_key_id: str | None = None,
        bucket_key: bool = False,
        customer_key: str | None = None,
    ) -> Encryption:
        """The settings (StoreConfig's ``sse``, ``sse_kms_key_id``, ``sse_bucket_key``, ``sse_customer_key``) as one
        value; InvalidConfig names the options that do not go together and how to fix them."""
        if algorithm is None:
            if customer_key is not None:
                algorithm = SSE_C
            elif kms_key_id is not None or bucket_key:
                algorithm = SSE_KMS
        if algorithm is not None and algorithm not in ALGORITHMS:
            raise InvalidConfig(f"sse: expected one of {', '.join(ALGORITHMS)}, got {algorithm!r}")
        if algorithm == SSE_C and customer_key is None:
            raise InvalidConfig("sse: SSE-C needs the customer key: give sseCustomerKey (S3IO_SSE_CUSTOMER_KEY)")
        if customer_key is not None and algorithm != SSE_C:
            raise InvalidConfig(f"sseCustomerKey: an SSE-C key goes with sse=SSE-C, not sse={algorithm}; give one")
        if kms_key_id is not None and algorithm not in (SSE_KMS, DSSE_KMS):
            raise InvalidConfig(f"sseKmsKeyId: a KMS key goes with sse=aws:kms or aws:kms:dsse, not sse={algorithm}")
        if bucket_key and algorithm != SSE_KMS:
            raise InvalidConfig(f"sseBucketKey: S3 Bucket Keys go with sse=aws:kms, not sse={algorithm}")
        return cls(algorithm, kms_key_id, bucket_key, customer_key)

    @property
    def enabled(self) -> bool:
        return self.algorithm is not None

    @property
    def etags_are_digests(self) -> bool:
        """Whether S3 gives objects MD5 ETags (none, SSE-S3); SSE-KMS's and SSE-C's are not their data's MD5."""
        return self.algorithm in (None, SSE_S3)

    def write_headers(self) -> dict[str, str]:
        """The headers of a PUT, a CreateMultipartUpload and a CopyObject (for its destination)."""
        if self.algorithm is None:
            return {}
        if self.algorithm == SSE_C:
            return self._customer_headers(CUSTOMER_PREFIX)
        headers = {ALGORITHM_HEADER: self.algorithm}
        if self.kms_key_id is not None:
            headers[KMS_KEY_HEADER] = self.kms_key_id
        if self.bucket_key:
            headers[BUCKET_KEY_HEADER] = "true"
        return headers

    def read_headers(self) -> dict[str, str]:
        """The headers of every other request naming an object: GET, HEAD, UploadPart, CompleteMultipartUpload (SSE-C
        only: S3 refuses the other kinds' headers there)."""
        return self._customer_headers(CUSTOMER_PREFIX) if self.algorithm == SSE_C else {}

    def copy_source_headers(self) -> dict[str, str]:
        """The headers that let CopyObject read an SSE-C source (written with the same key)."""
        return self._customer_headers(COPY_SOURCE_CUSTOMER_PREFIX) if self.algorithm == SSE_C else {}

    def _customer_headers(self, prefix: str) -> dict[str, str]:
        assert self.customer_key is not None
        digest = hashlib.md5(base64.b64decode(self.customer_key)).digest()
        return {
            prefix + "algorithm": SSE_S3,
            prefix + "key": self.customer_key,
            prefix + "key-md5": base64.b64encode(digest).decode("ascii"),
        }

    def describe(self) -> str:
        """For logs and errors: the algorithm and KMS key id, never the customer key."""
        if self.algorithm is None:
            return "none"
        if self.algorithm == SSE_C:
            return "SSE-C (customer key)"
        extra = f", key {self.kms_key_id}" if self.kms_key_id else ""
        return f"{self.algorithm}{extra}{', bucket key' if self.bucket_key else ''}"

    def refused_write_hint(self) -> str:
        """What to say after a write was refused with AccessDenied: a bucket policy that demands encryption refuses
        writes without it (or with another kind), and the 403 alone does not say so."""
        if self.algorithm is None:
            return (
                "; this write asked for no server-side encryption: if the bucket's policy requires it (a Deny of "
                "s3:PutObject without x-amz-server-side-encryption), set " + SETTING_NAMES + " to what it requires, "
                "e.g. sse=aws:kms with sseKmsKeyId (S3A fs.s3a.encryption.key; boto3 SSEKMSKeyId), or sse=AES256"
            )
        return (
            f"; this write asked for server-side encryption {self.describe()}: if the bucket's policy requires "
            "another kind or key, change " + SETTING_NAMES + " or sseKmsKeyId to match it"
        )


NO_ENCRYPTION = Encryption()


def s3a_options(algorithm: str | None, key: str | None) -> dict[str, str]:
    """StoreConfig options for S3A's ``fs.s3a.encryption.algorithm`` and ``fs.s3a.encryption.key`` (or the older
    ``fs.s3a.server-side-encryption-algorithm`` / ``.key``): the key is the KMS key id for SSE-KMS and DSSE-KMS,
    the base64 customer key for SSE-C. CSE-KMS (client-side encryption) is refused: s3io does not encrypt."""
    if algorithm is not None and str(algorithm).strip().upper() == "CSE-KMS":
        raise InvalidConfig(
            "fs.s3a.encryption.algorithm: CSE-KMS is client-side encryption, which s3io does not do; use SSE-KMS"
        )
    chosen = parse_algorithm(algorithm, "fs.s3a.encryption.algorithm") if algorithm is not None else None
    options: dict[str, str] = {} if chosen is None else {"sse": chosen}
    if key is not None and str(key).strip():
        if chosen == SSE_C:
            options["sseCustomerKey"] = str(key).strip()
        elif chosen in (SSE_KMS, DSSE_KMS):
            options["sseKmsKeyId"] = str(key).strip()
        else:
            raise InvalidConfig(
                "fs.s3a.encryption.key: a key goes with fs.s3a.encryption.algorithm SSE-KMS, DSSE-KMS or SSE-C, not "
                f"{chosen or 'none'}"
            )
    return options
