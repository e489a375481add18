"""Policy: every timeout, retry and socket setting of an s3io client, as one immutable value made of three small
ones, as object_store's ClientOptions holds a RetryConfig (with its BackoffConfig) and httpx a Timeout: ``Timeouts``
(connect, first byte, stall, attempt, operation), ``Retry`` (attempts, backoff, retry budget) and ``Sockets`` (TCP
timers, keepalive, the pool). Their settings keep their flat names everywhere (``Policy(stall_timeout=2)``,
``policy.stall_timeout``, the option ``stallTimeout``, ``S3IO_STALL_TIMEOUT``, ``--stall-timeout``); each is
declared once below (s3io.settings).

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

from typing import ClassVar

from s3io.errors import InvalidConfig
from s3io.settings import (
    BOOL,
    DURATION,
    INTEGER,
    OPTIONAL_DURATION,
    Settings,
    above,
    at_least,
    choice,
    group,
    optional_count,
    setting,
    settings,
)

ENV_PREFIX = "S3IO_"
WHEN_SUPPORTED = "when_supported"
REQUIRED = "required"
OFF = "off"
CHECKSUM_MODES = (WHEN_SUPPORTED, REQUIRED, OFF)
_CHECKSUM_ALIASES = {"when_required": REQUIRED}  # botocore's spelling


@settings
class Timeouts(Settings):
    """How long each phase of a request may take (httpx's Timeout, with a stall timer and an operation deadline)."""

    KIND: ClassVar[str] = "policy option"

    connect: float = setting(
        "connectTimeout",
        DURATION,
        default=3.0,
        unit="s",
        range=above(0),
        flag="--connect-timeout",
        help="time to acquire a connection and connect (e.g. 3s)",
    )
    first_byte: float = setting(
        "firstByteTimeout",
        DURATION,
        default=10.0,
        unit="s",
        range=above(0),
        flag="--first-byte-timeout",
        help="time from sending a request to its response headers",
    )
    stall: float = setting(
        "stallTimeout",
        DURATION,
        default=5.0,
        unit="s",
        range=above(0),
        flag="--stall-timeout",
        help="fail an attempt whose body makes no progress for this long",
    )
    attempt: float | None = setting(
        "attemptTimeout",
        OPTIONAL_DURATION,
        default=None,
        unit="s",
        range=above(0),
        flag="--attempt-timeout",
        help="cap on one attempt ('none' for no cap)",
    )
    operation: float = setting(
        "operationTimeout",
        DURATION,
        default=180.0,
        unit="s",
        range=above(0),
        flag="--operation-timeout",
        help="cap on one operation across all its retries",
    )


@settings
class Retry(Settings):
    """How often and how soon to try again (object_store's RetryConfig and BackoffConfig, with the AWS SDKs' retry
    quota)."""

    KIND: ClassVar[str] = "policy option"

    max_attempts: int = setting(
        "maxAttempts",
        INTEGER,
        default=10,
        range=at_least(1),
        flag="--max-attempts",
        help="attempts per operation, including the first",
    )
    first_contact_attempts: int | None = setting(
        "firstContactAttempts",
        optional_count(),
        default=2,
        range=at_least(1),
        flag="--first-contact-attempts",
        help="attempts before an endpoint that never answered is reported unreached ('none': off)",
    )
    backoff_base: float = setting(
        "backoffBase", DURATION, default=0.1, unit="s", range=at_least(0), help="the first retry's delay (full jitter)"
    )
    backoff_cap: float = setting(
        "backoffCap", DURATION, default=15.0, unit="s", range=">= backoffBase", help="the longest delay (doubling)"
    )
    budget: int = setting(
        "retryBudget", INTEGER, default=500, unit="tokens", range=at_least(0), help="a client's retry quota (AWS SDKs')"
    )
    cost: int = setting(
        "retryCost", INTEGER, default=5, unit="tokens", range=at_least(0), help="what a retry takes from it"
    )
    timeout_cost: int = setting(
        "timeoutRetryCost",
        INTEGER,
        default=10,
        unit="tokens",
        range=at_least(0),
        help="what a retry after a timeout takes",
    )

    def __post_init__(self) -> None:
        """backoffCap's range relates it to backoffBase, which a declared range (one setting's) cannot express."""
        if self.backoff_cap < self.backoff_base:
            raise InvalidConfig(
                f"backoffCap: must be >= backoffBase, got backoffBase={self.backoff_base!r} "
                f"backoffCap={self.backoff_cap!r}"
            )


@settings
class Sockets(Settings):
    """What each connection's socket is told (TCP_USER_TIMEOUT, keepalive) and how many the pool holds."""

    KIND: ClassVar[str] = "policy option"

    tcp_user_timeout: float = setting(
        "tcpUserTimeout",
        DURATION,
        default=20.0,
        unit="s",
        range=at_least(0),
        flag="--tcp-user-timeout",
        help="TCP_USER_TIMEOUT: how long sent data may stay unacknowledged",
    )
    keepalive_idle: float = setting(
        "keepaliveIdle",
        DURATION,
        default=10.0,
        unit="s",
        range=at_least(0),
        help="TCP keepalive: idle time before probes",
    )
    keepalive_interval: float = setting(
        "keepaliveInterval",
        DURATION,
        default=5.0,
        unit="s",
        range=at_least(0),
        help="TCP keepalive: time between probes",
    )
    keepalive_count: int = setting(
        "keepaliveCount",
        INTEGER,
        default=3,
        unit="probes",
        range=at_least(0),
        help="TCP keepalive: probes before failing",
    )
    max_connections: int = setting(
        "maxConnections",
        INTEGER,
        default=64,
        unit="connections",
        range=at_least(1),
        s3a="fs.s3a.connection.maximum",
        flag="--max-connections",
        help="connection pool size",
    )


@settings
class Policy(Settings):
    """Deadlines, retries and socket options; pass it down, never mutate it (use ``replace``).

    Build it from keywords (``Policy(stall_timeout=2.0)``, or ``Policy(timeouts=Timeouts(stall=2.0))``),
    ``from_options({"stallTimeout": "2s"})``, ``from_env()`` (``S3IO_STALL_TIMEOUT=2s``) or ``resolve(value)`` (None,
    a Policy or a mapping: see s3io.settings).
    """

    KIND: ClassVar[str] = "policy option"
    ENV_PREFIX: ClassVar[str | None] = ENV_PREFIX

    timeouts: Timeouts = group(Timeouts, flat=True)
    retry: Retry = group(Retry, flat=True)
    sockets: Sockets = group(Sockets, flat=True)
    correct_clock_skew: bool = setting(
        "correctClockSkew",
        BOOL,
        default=True,
        help="sign a request refused for this machine's clock again with the server's time",
    )
    checksums: str = setting(
        "checksums",
        choice(*CHECKSUM_MODES, aliases=_CHECKSUM_ALIASES),
        default=WHEN_SUPPORTED,
        flag="--checksums",
        help="S3 checksums: when_supported (send and verify), required (Content-MD5 only) or off",
    )

    # the flat keywords, read-only (made by @settings; named here for readers and linters)
    connect_timeout: ClassVar[float]
    first_byte_timeout: ClassVar[float]
    stall_timeout: ClassVar[float]
    attempt_timeout: ClassVar[float | None]
    operation_timeout: ClassVar[float]
    max_attempts: ClassVar[int]
    first_contact_attempts: ClassVar[int | None]
    backoff_base: ClassVar[float]
    backoff_cap: ClassVar[float]
    retry_budget: ClassVar[int]
    retry_cost: ClassVar[int]
    timeout_retry_cost: ClassVar[int]
    tcp_user_timeout: ClassVar[float]
    keepalive_idle: ClassVar[float]
    keepalive_interval: ClassVar[float]
    keepalive_count: ClassVar[int]
    max_connections: ClassVar[int]
