"""Policy: every timeout, retry and socket setting of an s3io client, as one immutable value.

Defaults, and the anchors they come from:
- connect_timeout 3 s: AWS guidance for latency-sensitive apps (~3 s); object_store uses 5 s.
- first_byte_timeout 10 s and stall_timeout 5 s: OpenDAL's io_timeout is 10 s; a body that makes no
  progress for 5 s on S3 is a dead connection, not a slow one (slow drips keep making progress).
- attempt_timeout off: a large range may legitimately take long; the stall timer catches dead bodies.
- operation_timeout 180 s and max_attempts 10: object_store's retry defaults (10 retries, 3 min).
- first_contact_attempts 2: an endpoint this process has never had an answer from (refused, no such host, no first
  byte) is reported as never reached after 2 attempts (~0.1 s when refused, ~2 x (connect + first byte) timeouts when
  silent), not after max_attempts and 3 minutes: a wrong URL or port is the likely cause. Once the endpoint has
  answered (in this process, or on the driver that planned a Spark task: ``StoreConfig.after_contact``), every
  operation keeps max_attempts, so an outage mid-job is ridden out. None: no first-contact limit.
- backoff 100 ms doubling to 15 s with full jitter: object_store's BackoffConfig.
- retry budget 500 tokens, 5 per retry, 10 per timeout retry, 1 back per success: the AWS SDKs' "standard"
  retry quota, so a storm of 503s does not multiply load.
- tcp_user_timeout 20 s, keepalive 10 s idle + 3 probes 5 s apart: the kernel alone retransmits into a
  dead peer for ~15 minutes; these make a socket fail in ~20-25 s even when no timer is armed.
- correct_clock_skew on: a request refused because this machine's clock is off the server's by more than 4
  minutes is signed again with the server's time, as the AWS SDKs for Java, JavaScript, Go and Rust do (boto3
  does not), and later requests keep that correction.
- checksums "when_supported": the AWS SDKs' default since 2025 (botocore's request_checksum_calculation and
  response_checksum_validation): every upload carries a CRC64NVME that the store keeps, and every whole-object read
  is checked against the checksum the store states (docs/integrity.md). "required" (the SDKs' "when_required",
  also accepted by that name): only what an operation requires, and the Content-MD5 every S3-compatible store takes
  with each upload body, as before flexible checksums; nothing is verified on reads. "off": no Content-MD5 on
  uploads either (DeleteObjects still sends the one S3 requires; SigV4's payload hash still guards signed bodies).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from s3io.errors import InvalidConfig
from s3io.settings import Settings
from s3io.settings import option_name as _option
from s3io.units import parse_bool, parse_duration, parse_int, parse_optional_duration

ENV_PREFIX = "S3IO_"
WHEN_SUPPORTED = "when_supported"
REQUIRED = "required"
OFF = "off"
CHECKSUM_MODES = (WHEN_SUPPORTED, REQUIRED, OFF)
_CHECKSUM_ALIASES = {"when_required": REQUIRED}  # botocore's spelling


@dataclass(frozen=True, slots=True)
class Policy(Settings):
    """Deadlines, retries and socket options; pass it down, never mutate it (use ``replace``).

    Build it from keywords, ``from_mapping({"stallTimeout": "2s"})``, ``from_env()`` (``S3IO_STALL_TIMEOUT=2s``)
    or ``resolve(value)`` (None, a Policy or a mapping: see s3io.settings).
    """

    KIND: ClassVar[str] = "policy"
    ENV_PREFIX: ClassVar[str | None] = ENV_PREFIX

    connect_timeout: float = 3.0
    first_byte_timeout: float = 10.0
    stall_timeout: float = 5.0
    attempt_timeout: float | None = None
    operation_timeout: float = 180.0
    max_attempts: int = 10
    first_contact_attempts: int | None = 2
    backoff_base: float = 0.1
    backoff_cap: float = 15.0
    retry_budget: int = 500
    retry_cost: int = 5
    timeout_retry_cost: int = 10
    tcp_user_timeout: float = 20.0
    keepalive_idle: float = 10.0
    keepalive_interval: float = 5.0
    keepalive_count: int = 3
    max_connections: int = 64
    correct_clock_skew: bool = True
    checksums: str = WHEN_SUPPORTED

    def __post_init__(self) -> None:
        for name in ("connect_timeout", "first_byte_timeout", "stall_timeout", "operation_timeout"):
            if not getattr(self, name) > 0:
                raise InvalidConfig(f"{_option(name)}: must be a positive duration, got {getattr(self, name)!r}")
        if self.attempt_timeout is not None and not self.attempt_timeout > 0:
            raise InvalidConfig(
                f"{_option('attempt_timeout')}: must be positive or 'none', got {self.attempt_timeout!r}"
            )
        if self.max_attempts < 1:
            raise InvalidConfig(f"{_option('max_attempts')}: must be at least 1, got {self.max_attempts!r}")
        if self.first_contact_attempts is not None and self.first_contact_attempts < 1:
            raise InvalidConfig(
                f"{_option('first_contact_attempts')}: must be at least 1 or 'none', "
                f"got {self.first_contact_attempts!r}"
            )
        if self.backoff_base < 0 or self.backoff_cap < self.backoff_base:
            raise InvalidConfig(
                f"{_option('backoff_cap')}: must be >= {_option('backoff_base')} >= 0, "
                f"got base={self.backoff_base!r} cap={self.backoff_cap!r}"
            )
        for name in ("retry_budget", "retry_cost", "timeout_retry_cost", "keepalive_count"):
            if getattr(self, name) < 0:
                raise InvalidConfig(f"{_option(name)}: must not be negative, got {getattr(self, name)!r}")
        for name in ("tcp_user_timeout", "keepalive_idle", "keepalive_interval"):
            if getattr(self, name) < 0:
                raise InvalidConfig(f"{_option(name)}: must not be negative, got {getattr(self, name)!r}")
        if self.checksums in _CHECKSUM_ALIASES:
            object.__setattr__(self, "checksums", _CHECKSUM_ALIASES[self.checksums])
        if self.checksums not in CHECKSUM_MODES:
            raise InvalidConfig(
                f"{_option('checksums')}: expected one of {', '.join(CHECKSUM_MODES)}, got {self.checksums!r}"
            )
        if self.max_connections < 1:
            raise InvalidConfig(f"{_option('max_connections')}: must be at least 1, got {self.max_connections!r}")

    @classmethod
    def parse_option(cls, name: str, value: object, *, label: str) -> object:
        if name == "first_contact_attempts":
            text = str(value).strip().lower()
            return None if text in ("none", "off") else parse_int(value, name=label)  # type: ignore[arg-type]
        if name in _INT_FIELDS:
            return parse_int(value, name=label)  # type: ignore[arg-type]
        if name == "checksums":
            text = str(value).strip().lower().replace("-", "_")
            return _CHECKSUM_ALIASES.get(text, text)
        if name == "correct_clock_skew":
            return parse_bool(value, name=label)  # type: ignore[arg-type]
        if name == "attempt_timeout":
            return parse_optional_duration(value, name=label)  # type: ignore[arg-type]
        return parse_duration(value, name=label)  # type: ignore[arg-type]


_INT_FIELDS = {"max_attempts", "retry_budget", "retry_cost", "timeout_retry_cost", "keepalive_count", "max_connections"}
