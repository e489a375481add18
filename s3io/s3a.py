"""S3A's settings (Hadoop's ``fs.s3a.*``, Spark's ``spark.hadoop.fs.s3a.*``) as s3io store options: one table.

The table has one row per S3A key this project knows. A key that sets one store setting to the same value, read by
that setting's own parser, is declared on the setting's field (``setting(..., s3a="fs.s3a.endpoint.region")``) and
its row is derived from that: ``s3a_table(declared(StoreConfig))``, which s3io.store keeps as ``S3A_ROWS``. Only the
keys that convert or combine values have a row written here (``CONVERTED``): the options they set (StoreConfig's, its
Policy's or its EngineConfig's option names), converting the value as S3A reads it (Hadoop durations such as "30s"
or "500ms", a bare number in the unit S3A assumes; S3A's retry count; an endpoint without a scheme), or, for a key
S3A has that s3io cannot honour, the reason. Each says why it cannot be a field's declaration.

``store_options`` applies a table for one bucket: ``fs.s3a.bucket.<bucket>.<key>`` wins over ``fs.s3a.<key>``
(S3A's per-bucket settings; other buckets' are left alone), and every key it cannot honour (a row without options,
or a key in no row) is named in an S3ASettingIgnored warning, once per key and process, never silently dropped.
Precedence between sources is the caller's: a read's own options over the session's S3A settings over the
environment (``spark_ext`` does this for Spark reads; ``StoreConfig.from_s3a`` for anyone holding a Hadoop conf).
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from s3io.errors import InvalidConfig
from s3io.s3.encryption import s3a_options
from s3io.settings import Declared
from s3io.transport.proxy import s3a_proxy_url
from s3io.units import parse_bool

FS_S3A = "fs.s3a."
SPARK_HADOOP = "spark.hadoop."
PER_BUCKET = "bucket."

Conversion = Callable[[str, Mapping[str, str]], dict[str, str]]  # (value, all effective settings) -> store options


class S3ASettingIgnored(UserWarning):
    """An S3A setting was given that s3io cannot honour; the message names it and says why."""


@dataclass(frozen=True, slots=True)
class Row:
    """One S3A key (without ``fs.s3a.``): what it becomes (``to``; None: not honoured), for the docs and the
    warning what it does here or why it cannot, and the store options it can set (``sets``: a ``to(...)``
    conversion's own, unless given), which the docs' table of store settings shows beside each option."""

    key: str
    to: Conversion | None
    doc: str
    sets: tuple[str, ...] = ()

    def options(self) -> tuple[str, ...]:
        """The store options this key can set."""
        return self.sets or tuple(getattr(self.to, "options", ()))


# ----------------------------------------------------------------------------------------- value conversions

_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ns|us|ms|s|m|h|d)?\s*", re.IGNORECASE)
_SECONDS_PER_UNIT = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def hadoop_seconds(value: str, *, bare_unit: str = "ms", name: str = "") -> float:
    """A Hadoop duration (Configuration.getTimeDuration: "30s", "500ms", "5m"; a bare number is in ``bare_unit``)
    in seconds."""
    match = _DURATION.fullmatch(value)
    if not match:
        raise InvalidConfig(
            f"{name}: expected a duration such as '30s', '500ms' or a number of {bare_unit}, got {value!r}"
        )
    return float(match.group(1)) * _SECONDS_PER_UNIT[(match.group(2) or bare_unit).lower()]


def to(*options: str, convert: Callable[[str, str], str] | None = None) -> Conversion:
    """A conversion setting each of ``options`` to the value (``convert(value, key)`` first, if given)."""

    def conversion(value: str, settings: Mapping[str, str]) -> dict[str, str]:
        converted = convert(value, options[0]) if convert is not None else value.strip()
        return dict.fromkeys(options, converted)

    conversion.options = options  # type: ignore[attr-defined]  # what the docs show the key sets
    return conversion


def _duration(bare_unit: str) -> Callable[[str, str], str]:
    def convert(value: str, name: str) -> str:
        return f"{hadoop_seconds(value, bare_unit=bare_unit, name=name):g}s"

    return convert


def _request_timeout(value: str, name: str) -> str:
    """S3A's request timeout: 0 means none."""
    seconds = hadoop_seconds(value, bare_unit="s", name=name)
    return "none" if seconds == 0 else f"{seconds:g}s"


def _retries_to_attempts(value: str, name: str) -> str:
    """S3A counts retries after the first attempt; s3io's maxAttempts counts the first too."""
    try:
        retries = int(value.strip())
    except ValueError:
        raise InvalidConfig(f"{name}: expected a number of retries such as '5', got {value!r}") from None
    return str(max(0, retries) + 1)


def _path_style(value: str, name: str) -> str:
    return "path" if parse_bool(value, name=name) else "virtual"


def _endpoint(value: str, settings: Mapping[str, str]) -> dict[str, str]:
    """A URL as it is; a host (and port) as S3A takes it: https, or http with connection.ssl.enabled=false."""
    text = value.strip()
    if not text:
        return {}
    if "://" not in text:
        secure = parse_bool(settings.get("connection.ssl.enabled", "true"), name="fs.s3a.connection.ssl.enabled")
        text = f"{'https' if secure else 'http'}://{text}"
    return {"endpoint": text}


# S3A's credential providers, by class name (SDK v1 and v2 spellings), as botocore's providers (its METHOD names).
_CHAIN_PROVIDERS = {
    "EnvironmentVariableCredentialsProvider": ("env",),
    "IAMInstanceCredentialsProvider": ("container-role", "iam-role"),
    "InstanceProfileCredentialsProvider": ("iam-role",),
    "ContainerCredentialsProvider": ("container-role",),
    "EC2ContainerCredentialsProviderWrapper": ("container-role", "iam-role"),
    "ProfileCredentialsProvider": ("shared-credentials-file", "config-file"),
    "WebIdentityTokenCredentialsProvider": ("assume-role-with-web-identity",),
    "WebIdentityTokenFileCredentialsProvider": ("assume-role-with-web-identity",),
    "DefaultAWSCredentialsProviderChain": (),  # botocore's whole chain
    "DefaultCredentialsProvider": (),
}
_KEY_PROVIDERS = ("SimpleAWSCredentialsProvider", "TemporaryAWSCredentialsProvider")
_ANONYMOUS_PROVIDER = "AnonymousAWSCredentialsProvider"
_KEYS = ("access.key", "secret.key", "session.token")


def _credentials(value: str, settings: Mapping[str, str]) -> dict[str, str]:
    """S3A's provider list, in order, as s3io's credentials: the first provider that applies wins, as in S3A. Keys
    given (fs.s3a.access.key, ...) are used by their row whatever the list says; a provider s3io has no counterpart
    for is named in a warning and skipped."""
    chain: list[str] = []
    for name in (part.strip().rsplit(".", 1)[-1] for part in value.split(",")):
        if not name:
            continue
        if name in _KEY_PROVIDERS:
            if settings.get("access.key") and settings.get("secret.key"):
                break  # the keys' rows give them
            continue
        if name == _ANONYMOUS_PROVIDER:
            if not chain and not (settings.get("access.key") or settings.get("secret.key")):
                return {"anonymous": "true"}
            break
        if name in _CHAIN_PROVIDERS:
            if not _CHAIN_PROVIDERS[name]:
                return {}  # the whole chain: s3io's default
            chain.extend(m for m in _CHAIN_PROVIDERS[name] if m not in chain)
            continue
        _warn(
            "aws.credentials.provider",
            f"its provider {name} has no counterpart in s3io (botocore's providers: environment, profile, container, "
            "instance metadata, web identity) and is skipped",
        )
    if settings.get("access.key") and settings.get("secret.key"):
        return {}
    return {"credentialProviders": ",".join(chain)} if chain else {}


def _encryption(value: str, settings: Mapping[str, str]) -> dict[str, str]:
    """S3A's encryption algorithm with its key (the newer names, else the older ones) as sse and its key option."""
    key = settings.get("encryption.key", settings.get("server-side-encryption.key"))
    return s3a_options(value, key)


def _encryption_key(value: str, settings: Mapping[str, str]) -> dict[str, str]:
    """A key is taken with its algorithm's row; without an algorithm it says what it lacks."""
    if settings.get("encryption.algorithm") or settings.get("server-side-encryption-algorithm"):
        return {}
    return s3a_options(None, value)


def _proxy(value: str, settings: Mapping[str, str]) -> dict[str, str]:
    """S3A's proxy host, port and credentials as one proxy URL."""
    url = s3a_proxy_url(
        value,
        settings.get("proxy.port"),
        settings.get("proxy.username"),
        settings.get("proxy.password"),
        secured=settings.get("proxy.secured", "false"),
    )
    return {"proxy": url} if url is not None else {}


def _proxy_part(value: str, settings: Mapping[str, str]) -> dict[str, str]:
    """The proxy's port or credentials are taken with fs.s3a.proxy.host's row; without a host they say so."""
    if settings.get("proxy.host"):
        return {}
    s3a_proxy_url(None, settings.get("proxy.port"), settings.get("proxy.username"), settings.get("proxy.password"))
    return {}


# The keys that convert or combine values (each comment says why it is not a field's ``s3a=``), then the ignored ones.
CONVERTED: dict[str, Row] = {
    row.key: row
    for row in (
        # a host without a scheme takes its scheme from connection.ssl.enabled
        Row(
            "endpoint",
            _endpoint,
            "endpoint (a host without a scheme: https, or http with connection.ssl.enabled=false)",
            ("endpoint",),
        ),
        # a list of providers becomes anonymous, keys already given, or botocore's provider names
        Row(
            "aws.credentials.provider",
            _credentials,
            "Simple/TemporaryAWSCredentialsProvider: the keys; AnonymousAWSCredentialsProvider: anonymous; "
            "EnvironmentVariable, IAMInstance/InstanceProfile, Container, Profile, WebIdentityToken providers: "
            "credentialProviders "
            "(botocore's env, iam-role, container-role, shared-credentials-file/config-file, "
            "assume-role-with-web-identity); the default chains: botocore's chain",
            ("anonymous", "credentialProviders"),
        ),
        # a bool becomes an addressing style
        Row("path.style.access", to("addressing", convert=_path_style), "addressing: true = path, false = virtual"),
        # read by endpoint's row: it sets nothing itself
        Row("connection.ssl.enabled", lambda value, settings: {}, "the scheme of an endpoint given without one"),
        # Hadoop durations: a bare number is in milliseconds (s3io's: seconds); one key may set two timeouts; 0 is none
        Row(
            "connection.establish.timeout",
            to("connectTimeout", convert=_duration("ms")),
            "connectTimeout (a bare number: milliseconds)",
        ),
        Row(
            "connection.timeout",
            to("firstByteTimeout", "stallTimeout", convert=_duration("ms")),
            "firstByteTimeout and stallTimeout: the socket read timeout (a bare number: milliseconds)",
        ),
        Row(
            "connection.request.timeout",
            to("attemptTimeout", convert=_request_timeout),
            "attemptTimeout (0: none; a bare number: seconds)",
        ),
        # S3A counts retries, s3io attempts
        Row("attempts.maximum", to("maxAttempts", convert=_retries_to_attempts), "maxAttempts = retries + 1"),
        # a Hadoop duration (a bare number in milliseconds)
        Row("retry.interval", to("backoffBase", convert=_duration("ms")), "backoffBase (first retry delay)"),
        # sets nothing: names the client
        Row("impl", lambda value, settings: {}, "nothing to do: s3io is the client"),
        # S3A's algorithm names, and its key goes to sseKmsKeyId or sseCustomerKey by the algorithm
        Row(
            "encryption.algorithm",
            _encryption,
            "sse (SSE-S3 = AES256, SSE-KMS = aws:kms, DSSE-KMS, SSE-C)",
            ("sse",),
        ),
        Row(
            "server-side-encryption-algorithm",
            _encryption,
            "sse (S3A's older name of encryption.algorithm)",
            ("sse",),
        ),
        Row(
            "encryption.key",
            _encryption_key,
            "sseKmsKeyId (SSE-KMS, DSSE-KMS) or sseCustomerKey (SSE-C)",
            ("sseKmsKeyId", "sseCustomerKey"),
        ),
        Row(
            "server-side-encryption.key",
            _encryption_key,
            "S3A's older name of encryption.key",
            ("sseKmsKeyId", "sseCustomerKey"),
        ),
        # host, port, user and password combine into one proxy URL
        Row("proxy.host", _proxy, "proxy: http://[username:password@]host[:port] from the proxy.* keys", ("proxy",)),
        Row("proxy.port", _proxy_part, "the proxy URL's port", ("proxy",)),
        Row("proxy.username", _proxy_part, "the proxy URL's user", ("proxy",)),
        Row("proxy.password", _proxy_part, "the proxy URL's password", ("proxy",)),
        Row("proxy.secured", _proxy_part, "false only: TLS to the proxy is refused"),
        # S3A keys s3io cannot honour: named in a warning, with the reason
        *(
            Row(key, None, reason)
            for key, reason in (
                ("retry.limit", "S3A's second retry layer; s3io has one, set maxAttempts"),
                ("retry.throttle.limit", "s3io retries throttling within maxAttempts and its retry budget"),
                ("retry.throttle.interval", "s3io backs off from backoffBase with full jitter"),
                ("connection.ttl", "s3io keeps pooled connections until they fail or the client closes"),
                ("connection.idle.time", "s3io keeps pooled connections until they fail or the client closes"),
                ("connection.acquisition.timeout", "a request waits for a connection outside every deadline"),
                ("threads.max", "reads are asyncio tasks, not threads: set maxConcurrency"),
                ("paging.maximum", "s3io lists 1,000 keys a page, S3's maximum"),
                ("readahead.range", "the range engine coalesces column chunks itself"),
                ("experimental.input.fadvise", "the range engine reads exactly the column chunks needed"),
                ("input.fadvise", "the range engine reads exactly the column chunks needed"),
                ("block.size", "partitions are sized by maxPartitionBytes"),
                ("change.detection.mode", "s3io always pins a read to the first answer's ETag (ObjectChanged)"),
                ("change.detection.source", "s3io always pins a read to the first answer's ETag (ObjectChanged)"),
                ("list.version", "s3io lists with ListObjectsV2"),
                ("signing-algorithm", "s3io signs with SigV4"),
                ("assumed.role.arn", "no AssumedRoleCredentialProvider: configure the role in an AWS profile"),
                ("fast.upload", "s3parquet's writer always streams multipart parts from memory"),
                ("fast.upload.buffer", "s3parquet's writer buffers parts in memory, bounded by its slots"),
                ("multipart.size", "s3parquet's writer sizes files by targetFileSize and its parts itself"),
                ("multipart.threshold", "s3parquet's writer sizes files by targetFileSize and its parts itself"),
                ("committer.name", "s3parquet's writer has one committer: multipart uploads completed at job commit"),
                ("buffer.dir", "s3parquet's writer does not stage on local disk"),
            )
        ),
    )
}


def s3a_table(declarations: Iterable[Declared]) -> dict[str, Row]:
    """S3A's whole table: a row for each setting that declares its S3A key (``s3a=``: the value as it is, parsed by
    the setting's own parser), then ``CONVERTED``'s."""
    own = {
        d.spec.s3a.removeprefix(FS_S3A): Row(d.spec.s3a.removeprefix(FS_S3A), to(d.name), d.name)
        for d in declarations
        if d.spec.s3a is not None
    }
    return {**own, **CONVERTED}


# ----------------------------------------------------------------------------------------- applying the table


def s3a_keys(settings: Mapping[str, str]) -> dict[str, str]:
    """The S3A settings among ``settings``, by key without ``fs.s3a.`` (``spark.hadoop.fs.s3a.x``, ``fs.s3a.x``; the
    first wins when both are given: the caller puts the stronger source first)."""
    found: dict[str, str] = {}
    for key, value in settings.items():
        name = str(key).strip()
        lowered = name.lower()
        if lowered.startswith(SPARK_HADOOP):
            name, lowered = name[len(SPARK_HADOOP) :], lowered[len(SPARK_HADOOP) :]
        if lowered.startswith(FS_S3A) and value is not None:
            found.setdefault(name[len(FS_S3A) :], str(value))
    return found


def is_s3a_key(key: str) -> bool:
    """Whether an option or setting name is an S3A one (``fs.s3a.*`` or ``spark.hadoop.fs.s3a.*``)."""
    lowered = str(key).strip().lower()
    return lowered.startswith(FS_S3A) or lowered.startswith(SPARK_HADOOP + FS_S3A)


def for_bucket(keys: Mapping[str, str], bucket: str | None) -> dict[str, str]:
    """S3A's per-bucket rule: ``bucket.<bucket>.<key>`` overrides ``<key>`` for that bucket; other buckets' dropped."""
    effective = {k: v for k, v in keys.items() if not k.lower().startswith(PER_BUCKET)}
    if bucket is not None:
        own = f"{PER_BUCKET}{bucket}.".lower()
        effective.update({k[len(own) :]: v for k, v in keys.items() if k.lower().startswith(own)})
    return effective


def store_options(settings: Mapping[str, str], bucket: str | None, rows: Mapping[str, Row]) -> dict[str, str]:
    """The store options (s3io's names) that the S3A settings among ``settings`` give for reading ``bucket`` by the
    table ``rows`` (s3io.store.S3A_ROWS); every key that cannot be honoured is named in a warning (once per key and
    process)."""
    effective = for_bucket(s3a_keys(settings), bucket)
    options: dict[str, str] = {}
    for key, value in effective.items():
        row = rows.get(key.lower())
        if row is None:
            _warn(key, "s3io has no counterpart for it")
        elif row.to is None:
            _warn(key, row.doc)
        else:
            try:
                options.update(row.to(value, {k.lower(): v for k, v in effective.items()}))
            except InvalidConfig as exc:  # named as the user wrote it, not as the option it becomes
                if exc.message.startswith(FS_S3A):  # the conversion named the S3A key at fault itself
                    raise InvalidConfig(exc.message) from None
                raise InvalidConfig(f"{FS_S3A}{key}: {exc.message.split(': ', 1)[-1]}") from None
    return options


def _warn(key: str, why: str) -> None:
    warnings.warn(S3ASettingIgnored(f"{FS_S3A}{key} is not honoured by s3io: {why}"), stacklevel=3)
