"""StoreConfig: where the store is, who we are to it, and how we talk to it, as one value, and the one way to make
an S3Client from it (``StoreConfig.client``).

Every entry point builds one from its own source, each field parsed once and by one rule:
- keyword arguments (``s3io.read_parquet(endpoint_url=..., credentials=..., policy=...)``): ``from_kwargs``;
- a mapping of options as Spark gives them (``{"endpoint": ..., "accesskeyid": ..., "stalltimeout": "2s"}``):
  ``from_options`` / ``take_options`` (those a Spark read does not know are left for it);
- the session's or a Hadoop configuration's S3A settings: ``from_s3a`` (s3io.s3a's table);
- command-line flags (``--endpoint-url``, ``--region``, ``--anonymous``, ``--addressing``, the policy flags):
  ``StoreConfig.add_arguments`` and ``from_args``;
- the environment: ``from_env``: ``S3IO_*`` for the policy and for the fields that declare a variable
  (``S3IO_SSE``, ``S3IO_PROXY``, ...: under every other source); the endpoint, the region, credentials, the proxy
  and the CA bundle left unset here are the AWS environment's and the profile's (``AWS_ENDPOINT_URL``,
  ``AWS_REGION``, ``HTTPS_PROXY``, ``AWS_CA_BUNDLE``, ...), resolved as boto3 resolves them
  (s3io.transport.endpoint, .proxy, .trust, botocore's provider chain) when a client is made; ``pinned()``
  resolves them in this process, for clients in other processes (Spark executors, workers).

Where option names meet fields: each field of StoreConfig declares its option name, aliases, flag and variable
(``s3io.settings.setting``); Policy's and EngineConfig's settings are the store's too (``group``). To add a setting, add
a field here with its ``setting(...)`` and pass it on in ``client``; a secret one is declared ``secret=True`` and stays
out of repr, logs and plans (the SSE-C key, the proxy URL, which may hold its credentials). docs/security.md lists the
encryption, requester-pays, proxy and CA settings with their S3A and boto3 names.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, ClassVar

from s3io.engine.config import EngineConfig
from s3io.errors import InvalidConfig
from s3io.policy import Policy
from s3io.s3.client import S3Client
from s3io.s3.encryption import Encryption, parse_algorithm, parse_customer_key, parse_kms_key_id
from s3io.s3a import Row, s3a_table, store_options
from s3io.settings import BOOL, Kind, Settings, declared, find, group, setting, settings
from s3io.transport.credentials import ANONYMOUS, PROVIDER_NAMES, Credentials
from s3io.transport.endpoint import ADDRESSING_STYLES, resolve_endpoint, resolved_location
from s3io.transport.proxy import DIRECT, parse_proxy_setting, resolved_proxy_setting
from s3io.transport.transport import Transport
from s3io.transport.trust import parse_ca_bundle, resolve_ca_bundle
from s3io.units import parse_bool
from s3io.urls import mask_userinfo

_ENDPOINT = re.compile(r"https?://[^\s/@?#]+/?", re.IGNORECASE)
_REGION = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


def parse_endpoint(value: Any, name: str) -> str:
    """An http(s) URL of a host (and port): no credentials, path, query or fragment; a trailing "/" dropped."""
    text = str(value).strip()
    if not _ENDPOINT.fullmatch(text):
        shown = mask_userinfo(str(value))
        raise InvalidConfig(
            f"{name}: expected an http:// or https:// URL such as 'https://s3.eu-west-1.amazonaws.com' or "
            f"'http://localhost:9000' (no credentials, path, query or fragment), got {shown!r}"
        )
    return text.rstrip("/")


def parse_region(value: Any, name: str) -> str:
    text = str(value).strip()
    if not _REGION.fullmatch(text):
        raise InvalidConfig(f"{name}: expected a region name such as 'us-east-1', got {value!r}")
    return text


def parse_addressing(value: Any, name: str) -> str:
    """ "auto", "path" or "virtual"; a boolean (Spark's ``pathStyle``) means path-style or virtual-hosted."""
    text = str(value).strip().lower()
    if text in ADDRESSING_STYLES:
        return text
    try:
        return "path" if parse_bool(value, name=name) else "virtual"
    except InvalidConfig:
        raise InvalidConfig(
            f"{name}: expected auto, path or virtual (or true / false for path-style or virtual-hosted), got {value!r}"
        ) from None


def parse_providers(value: Any, name: str) -> tuple[str, ...]:
    """Comma-separated names of botocore's credential providers (``env``, ``iam-role``, ``container-role``, ...)."""
    names = tuple(dict.fromkeys(part.strip().lower() for part in str(value).split(",") if part.strip()))
    unknown = [n for n in names if n not in PROVIDER_NAMES]
    if not names or unknown:
        raise InvalidConfig(
            f"{name}: expected comma-separated names of botocore's credential providers ({', '.join(PROVIDER_NAMES)})"
            f", got {value!r}"
        )
    return names


def parse_secret(value: Any, name: str) -> str:
    """A credential: anything but empty (never echoed)."""
    if not str(value).strip():
        raise InvalidConfig(f"{name}: must not be empty")
    return str(value).strip()


SECRET = Kind("secret", parse_secret)


@settings
class StoreConfig(Settings):
    """Endpoint, region, addressing and credentials, with the Policy and the EngineConfig: everything a client of
    the store and its range engine are made from. Never mutated (``replace``); secrets never in its repr. Its
    options are its own settings', its policy's and its engine's (s3io.settings: ``from_options``, ``take_options``,
    ``from_env``, ``from_args``; ``from_kwargs`` and ``from_s3a`` below)."""

    KIND: ClassVar[str] = "store option"

    endpoint: str | None = setting(
        "endpoint",
        Kind("http(s) URL", parse_endpoint),
        default=None,
        aliases=("endpointUrl",),
        flag="--endpoint-url",
        help="S3 endpoint (default: $AWS_ENDPOINT_URL, else the profile's, else AWS)",
    )
    region: str | None = setting(
        "region",
        Kind("region", parse_region),
        default=None,
        s3a="fs.s3a.endpoint.region",
        flag="--region",
        help="region (default: $AWS_REGION / $AWS_DEFAULT_REGION, else the profile's, else us-east-1)",
    )
    addressing: str = setting(
        "addressing",
        Kind("auto | path | virtual", parse_addressing),
        default="auto",
        aliases=("pathStyle",),
        flag="--addressing",
        help="bucket addressing: auto (path-style for custom endpoints), path or virtual",
    )
    anonymous: bool = setting(
        "anonymous", BOOL, default=False, flag="--anonymous", help="send unsigned requests (public buckets)"
    )
    access_key_id: str | None = setting(
        "accessKeyId",
        SECRET,
        default=None,
        aliases=("accessKey",),
        s3a="fs.s3a.access.key",
        secret=True,
        help="explicit credentials (redacted from plans and logs; default: botocore's provider chain)",
    )
    secret_access_key: str | None = setting(
        "secretAccessKey",
        SECRET,
        default=None,
        aliases=("secretKey",),
        s3a="fs.s3a.secret.key",
        secret=True,
        help="its secret",
    )
    session_token: str | None = setting(
        "sessionToken",
        SECRET,
        default=None,
        s3a="fs.s3a.session.token",
        secret=True,
        help="its session token, for temporary credentials",
    )
    sse: str | None = setting(
        "sse",
        Kind("AES256 | aws:kms | aws:kms:dsse | SSE-C", parse_algorithm),
        default=None,
        aliases=("serverSideEncryption",),
        flag="--sse",
        env="S3IO_SSE",
        help="server-side encryption of every write: AES256 (SSE-S3), aws:kms (SSE-KMS), aws:kms:dsse or SSE-C",
    )
    sse_kms_key_id: str | None = setting(
        "sseKmsKeyId",
        Kind("KMS key id, alias or ARN", parse_kms_key_id),
        default=None,
        flag="--sse-kms-key-id",
        env="S3IO_SSE_KMS_KEY_ID",
        help="the KMS key (id, alias or ARN) of SSE-KMS writes (default: the bucket's)",
    )
    sse_bucket_key: bool = setting(
        "sseBucketKey",
        BOOL,
        default=False,
        flag="--sse-bucket-key",
        env="S3IO_SSE_BUCKET_KEY",
        help="ask for an S3 Bucket Key on SSE-KMS writes",
    )
    sse_customer_key: str | None = setting(
        "sseCustomerKey",
        Kind("base64 of 32 bytes", parse_customer_key),
        default=None,
        flag="--sse-customer-key",
        env="S3IO_SSE_CUSTOMER_KEY",
        secret=True,
        help="the SSE-C key (base64 of 32 bytes), sent on every request of an object; prefer $S3IO_SSE_CUSTOMER_KEY",
    )
    requester_pays: bool = setting(
        "requesterPays",
        BOOL,
        default=False,
        flag="--requester-pays",
        env="S3IO_REQUESTER_PAYS",
        s3a="fs.s3a.requester.pays.enabled",
        help="say on every request that the requester pays (x-amz-request-payer)",
    )
    proxy: str | None = setting(
        "proxy",
        Kind("proxy URL or direct", parse_proxy_setting),
        default=None,
        aliases=("proxyUrl",),
        flag="--proxy",
        env="S3IO_PROXY",
        secret=True,
        help="forward proxy http://[user:password@]host:port, or direct (default: $HTTPS_PROXY/$HTTP_PROXY/$NO_PROXY)",
    )
    ca_bundle: str | None = setting(
        "caBundle",
        Kind("PEM file", parse_ca_bundle),
        default=None,
        flag="--ca-bundle",
        env="S3IO_CA_BUNDLE",
        help="PEM file of the CAs TLS trusts (default: $AWS_CA_BUNDLE, the profile's ca_bundle, the system's)",
    )
    credential_providers: tuple[str, ...] | None = setting(
        "credentialProviders",
        Kind("provider names", parse_providers),
        default=None,
        help="which of botocore's credential providers to ask",
    )
    require_atomic_deletes: bool = setting(
        "requireAtomicDeletes",
        BOOL,
        default=False,
        flag="--require-atomic-deletes",
        env="S3IO_REQUIRE_ATOMIC_DELETES",
        help="refuse writes and compaction (nothing written) on a store whose only guard of a data file's delete is "
        "a HEAD If-Match before it (not atomic): demand a conditional DELETE or x-amz-delete-if-unmodified-since",
    )
    policy: Policy = group(Policy)
    engine: EngineConfig = group(EngineConfig)

    def __post_init__(self) -> None:
        if self.addressing not in ADDRESSING_STYLES:
            raise InvalidConfig(f"addressing: expected one of {', '.join(ADDRESSING_STYLES)}, got {self.addressing!r}")
        if (self.access_key_id is None) != (self.secret_access_key is None):
            raise InvalidConfig("accessKeyId and secretAccessKey: give both or neither")
        if self.session_token is not None and self.access_key_id is None:
            raise InvalidConfig("sessionToken: needs accessKeyId and secretAccessKey as well")
        if self.anonymous and self.access_key_id is not None:
            raise InvalidConfig("anonymous: 'true' conflicts with accessKeyId/secretAccessKey; give one or the other")
        implied = self.encryption.algorithm  # the settings go together, or InvalidConfig says how they do not
        if implied != self.sse:  # a KMS key id means aws:kms, a customer key SSE-C: said in the field too
            object.__setattr__(self, "sse", implied)
        if self.credential_providers is not None and (self.anonymous or self.access_key_id is not None):
            raise InvalidConfig(
                "credentialProviders: names where credentials come from, which conflicts with anonymous or "
                "accessKeyId/secretAccessKey; give one or the other"
            )

    # ------------------------------------------------------------------ what it makes

    def client(self, *, transport: Transport | None = None) -> S3Client:
        """The one way the project makes an S3Client from settings (``transport``: for unit tests)."""
        return S3Client(
            self.policy,
            endpoint_url=self.endpoint,
            region=self.region,
            credentials=self.credentials,
            addressing=self.addressing,
            encryption=self.encryption,
            requester_pays=self.requester_pays,
            proxy=self.proxy,
            ca_bundle=self.ca_bundle,
            transport=transport,
            credential_providers=self.credential_providers,
            require_atomic_deletes=self.require_atomic_deletes,
        )

    @property
    def encryption(self) -> Encryption:
        """The encryption settings as S3Client takes them (what a KMS key id or a customer key implies settled)."""
        return Encryption.of(self.sse, self.sse_kms_key_id, self.sse_bucket_key, self.sse_customer_key)

    @property
    def credentials(self) -> Credentials | str | None:
        """S3Client's ``credentials``: explicit keys, "anonymous", or None for botocore's provider chain."""
        if self.anonymous:
            return ANONYMOUS
        if self.access_key_id is None or self.secret_access_key is None:
            return None
        return Credentials(self.access_key_id, self.secret_access_key, self.session_token)

    def pinned(self) -> StoreConfig:
        """This value with the endpoint, region, proxy and CA bundle this process resolves (the fields, else its
        environment and profile), so that clients made in other processes (executors, workers) talk to the store
        this one saw, the way this one reaches it."""
        endpoint, region = resolved_location(self.endpoint, self.region)
        located = resolve_endpoint(endpoint, region, self.addressing)
        bundle = resolve_ca_bundle(self.ca_bundle)
        return self.replace(
            endpoint=endpoint,
            region=region,
            proxy=resolved_proxy_setting(self.proxy, located.scheme, located.host),
            ca_bundle=bundle[0] if bundle is not None else None,
        )

    def after_contact(self) -> StoreConfig:
        """This value for work planned after the endpoint answered (a Spark task, a planning step after the listing):
        every operation keeps ``policy.max_attempts``, even in a process that never talked to the endpoint itself
        (``Policy.first_contact_attempts`` is for a first contact only)."""
        if self.policy.first_contact_attempts is None:
            return self
        return self.replace(policy=self.policy.replace(first_contact_attempts=None))

    def describe(self) -> str:
        """Where and as whom, for logs: never a secret."""
        who = "anonymous" if self.anonymous else "explicit keys" if self.access_key_id else "provider chain"
        where = f"endpoint={self.endpoint or 'AWS'}, region={self.region or 'default'}"
        text = f"{where}, addressing={self.addressing}, credentials: {who}"
        if self.encryption.enabled:
            text += f", encryption: {self.encryption.describe()}"
        if self.requester_pays:
            text += ", requester pays"
        if self.proxy is not None:
            text += f", proxy: {self.proxy if self.proxy == DIRECT else mask_userinfo(self.proxy)}"
        if self.ca_bundle is not None:
            text += f", CA bundle: {self.ca_bundle}"
        return text

    # ------------------------------------------------------------------ its sources

    @classmethod
    def from_kwargs(
        cls,
        store: StoreConfig | None = None,
        *,
        endpoint_url: str | None = None,
        region: str | None = None,
        credentials: Credentials | str | None = None,
        addressing: str | None = None,
        policy: Policy | Mapping[str, object] | None = None,
        engine: EngineConfig | Mapping[str, object] | None = None,
        **settings: Any,
    ) -> StoreConfig:
        """The Python API's keywords, over ``store`` (default: the ``S3IO_*`` variables over the defaults).
        ``policy`` / ``engine``: a value or a mapping of options (see s3io.settings); ``credentials``: Credentials,
        "anonymous" or None (the chain); ``settings``: other fields by name (``sse="aws:kms"``,
        ``sse_customer_key=b"..."``, ``requester_pays=True``, ``proxy=...``, ``ca_bundle=...``; None leaves one
        unchanged), each parsed as its option is."""
        base = store if store is not None else cls.from_env()
        changes: dict[str, Any] = _parsed_fields(settings)
        if endpoint_url is not None:
            changes["endpoint"] = endpoint_url
        if region is not None:
            changes["region"] = region
        if addressing is not None:
            changes["addressing"] = addressing
        if credentials is not None:
            changes.update(_credential_fields(credentials))
        changes["policy"] = Policy.resolve(policy) if policy is not None or store is None else base.policy
        changes["engine"] = EngineConfig.resolve(engine) if engine is not None or store is None else base.engine
        return base.replace(**changes)

    @classmethod
    def from_s3a(
        cls, settings: Mapping[str, str], *, bucket: str | None = None, base: StoreConfig | None = None
    ) -> StoreConfig:
        """The store a Hadoop/Spark configuration's S3A settings describe for ``bucket`` (``fs.s3a.*`` and
        ``spark.hadoop.fs.s3a.*`` keys, per-bucket ones included: see s3io.s3a), over ``base``'s fields (default:
        the defaults and the S3IO_* variables); other keys are ignored, S3A keys s3io cannot honour are warned about."""
        return cls.from_options(s3a_store_options(settings, bucket), base=base)


S3A_ROWS: dict[str, Row] = s3a_table(declared(StoreConfig))  # S3A's keys: the fields' own (s3a=...), s3io.s3a's


def s3a_store_options(settings: Mapping[str, str], bucket: str | None) -> dict[str, str]:
    """The store options the S3A settings among ``settings`` give for ``bucket`` (s3io.s3a.store_options over
    ``S3A_ROWS``); every key s3io cannot honour is named in a warning."""
    return store_options(settings, bucket, S3A_ROWS)


_CREDENTIAL_FIELDS = frozenset(
    {"anonymous", "access_key_id", "secret_access_key", "session_token", "credential_providers"}
)
# StoreConfig's own settings the Python API takes as keywords, beside the endpoint, region, addressing, credentials,
# policy and engine (from_kwargs' own arguments): every other one its declaration makes
KEYWORD_FIELDS = tuple(
    d.keyword
    for d in declared(StoreConfig)
    if len(d.path) == 1 and d.keyword not in {"endpoint", "region", "addressing", *_CREDENTIAL_FIELDS}
)


def _parsed_fields(settings: Mapping[str, Any]) -> dict[str, Any]:
    """StoreConfig fields given as keywords (``from_kwargs``), parsed by their options' parsers; None: not given."""
    unknown = sorted(set(settings) - set(KEYWORD_FIELDS))
    if unknown:
        raise TypeError(f"unexpected keyword argument {unknown[0]!r}; store settings: {', '.join(KEYWORD_FIELDS)}")
    return {name: _declared(name).spec.parse(value, name) for name, value in settings.items() if value is not None}


def _declared(field_name: str) -> Any:
    return next(d for d in declared(StoreConfig) if d.path == (field_name,))


def store_field(key: str) -> str | None:
    """The field a store option sets ("endpoint", "policy.timeouts.stall", "engine.max_concurrency"; the credential
    options are one field, "credentials"), or None for an option that is not a store's."""
    hit = find(StoreConfig, key)
    if hit is None:
        return None
    return "credentials" if hit.path[0] in _CREDENTIAL_FIELDS else ".".join(hit.path)


def layered_options(*layers: Mapping[str, Any]) -> dict[str, Any]:
    """Options from several sources, weakest first (the environment's, a session's, a read's own): a stronger source
    replaces a weaker one's store setting field by field (an option and its aliases are one field; so are all the
    credential options, so keys never mix with another source's anonymous access); other options pass through."""
    chosen: dict[str, dict[str, Any]] = {}
    out: dict[str, Any] = {}
    for layer in layers:
        given: dict[str, dict[str, Any]] = {}
        for key, value in layer.items():
            name = store_field(key)
            if name is None:
                out[key] = value
            else:
                given.setdefault(name, {})[key] = value
        chosen.update(given)
    for entries in chosen.values():
        out.update(entries)
    return out


def _credential_fields(credentials: Credentials | str) -> dict[str, Any]:
    if credentials == ANONYMOUS:
        return {"anonymous": True, "access_key_id": None, "secret_access_key": None, "session_token": None}
    if isinstance(credentials, Credentials):
        return {
            "anonymous": False,
            "access_key_id": credentials.access_key,
            "secret_access_key": credentials.secret_key,
            "session_token": credentials.token,
        }
    kind = type(credentials).__name__
    raise InvalidConfig(f"credentials: expected s3io.Credentials, 'anonymous' or None (the provider chain), got {kind}")
