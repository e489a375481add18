"""Credentials: explicit keys, anonymous access, or botocore's provider chain (env, profile, container, IMDS).

Resolution and refresh may touch the network (metadata services) or run a program (credential_process), so
they run in a thread of their own and the caller's deadline bounds the wait. Nothing here prints a secret:
reprs are redacted, and errors never echo a credential value.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from s3io.errors import InvalidConfig
from s3io.transport.sigv4 import Signer


@dataclass(frozen=True, slots=True)
class Credentials:
    """Static AWS credentials."""

    access_key: str
    secret_key: str = field(repr=False)
    token: str | None = field(default=None, repr=False)

    def __repr__(self) -> str:
        return f"Credentials(access_key={self.access_key[:4]}***)"


ANONYMOUS = "anonymous"

# The provider chain resolved once per process (8-11 ms each time: a botocore session, files, environment);
# Spark reuses Python workers across tasks, so every task after the first starts with credentials in hand.
# botocore's refreshable credentials refresh themselves; ``refresh()`` resolves the chain again. The chain is kept
# with the variables that select it: a client made after one of them changed (a key fixed, another AWS_PROFILE)
# resolves anew, as boto3 does per session.
SELECTING_VARIABLES = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_CONFIG_FILE",
    "AWS_SHARED_CREDENTIALS_FILE",
)
_chain_lock = threading.Lock()
# by the providers the chain is made of (None: botocore's whole chain): (selection, resolved chain), replaced whole
_chains: dict[tuple[str, ...] | None, tuple[tuple[str | None, ...], object | None]] = {}
# botocore's providers, by the names its credential resolver gives them (their METHOD)
PROVIDER_NAMES = (
    "env",
    "assume-role",
    "assume-role-with-web-identity",
    "sso",
    "shared-credentials-file",
    "custom-process",
    "config-file",
    "ec2-credentials-file",
    "boto-config",
    "container-role",
    "iam-role",
    "login",
)


def _chain_selection() -> tuple[str | None, ...]:
    """The values of the variables that select credentials and profile now: the key the resolved chain is kept by."""
    return tuple(os.environ.get(name) for name in SELECTING_VARIABLES)


def _refresh_needed(creds: object | None) -> bool:
    check = getattr(creds, "refresh_needed", None)
    return bool(check and check())


def _current_chain(providers: tuple[str, ...] | None = None) -> object | None:
    """The chain resolved for the current environment, or None (unresolved, or resolved for other variables)."""
    entry = _chains.get(providers)  # read without the lock: one reference to a tuple that is never changed in place
    return entry[1] if entry is not None and entry[0] == _chain_selection() else None


def _provider_chain(fresh: bool = False, providers: tuple[str, ...] | None = None) -> object | None:
    """The chain for the current environment; resolves it (blocking: call from a worker thread) when absent, resolved
    for other selecting variables, or ``fresh``. ``providers``: only these of botocore's (None: all, in its order)."""
    with _chain_lock:
        selection = _chain_selection()
        entry = _chains.get(providers)
        if entry is None or entry[0] != selection or fresh:
            import botocore.session

            session = botocore.session.get_session()
            if providers is None:
                entry = (selection, session.get_credentials())
            else:
                from botocore.credentials import CredentialResolver

                chosen = [p for p in session.get_component("credential_provider").providers if p.METHOD in providers]
                entry = (selection, CredentialResolver(chosen).load_credentials())
            _chains[providers] = entry
        return entry[1]


def _in_thread(fn: Callable[[], None]) -> asyncio.Future[None]:
    """Run ``fn`` in a daemon thread of its own; the future resolves on the caller's loop.

    Not the loop's default executor: a credential source that hangs (a credential_process, SSO, a metadata
    endpoint) would occupy one of its few threads for good, and aiohttp resolves DNS on that executor.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[None] = loop.create_future()

    def settle(exc: BaseException | None) -> None:
        if not future.done():
            if exc is None:
                future.set_result(None)
            else:
                future.set_exception(exc)

    def run() -> None:
        outcome: BaseException | None = None
        try:
            fn()
        except BaseException as exc:
            outcome = exc
        try:
            loop.call_soon_threadsafe(settle, outcome)
        except RuntimeError:
            pass  # the loop closed while the source hung: nobody waits any more

    threading.Thread(target=run, name="s3io-credentials", daemon=True).start()
    return future


class CredentialProvider:
    """Hands out a Signer for the current credentials (None when anonymous) and refreshes on demand.

    Resolution that may block (a first resolution, a refresh) runs in a thread of its own and is shared: callers
    that need it at the same time await one resolution, and a caller cancelled by its deadline does not cancel it
    for the others. The event loop never waits on a lock: the process-wide chain is read without one.
    """

    def __init__(
        self, credentials: Credentials | str | None, region: str, *, providers: tuple[str, ...] | None = None
    ) -> None:
        """``providers``: with ``credentials`` None, which of botocore's providers the chain is made of (None: all)."""
        if isinstance(credentials, str) and credentials != ANONYMOUS:
            raise InvalidConfig(
                f"credentials: expected an s3io.Credentials value, None (the provider chain) or 'anonymous', got a "
                f"string of {len(credentials)} characters (not shown: it may be a secret)"
            )
        if credentials is not None and not isinstance(credentials, str | Credentials):
            raise InvalidConfig(
                "credentials: expected an s3io.Credentials value, None (the provider chain) or 'anonymous', got "
                f"a {type(credentials).__name__}"
            )
        self._explicit = credentials
        self._providers = providers
        self._region = region
        self._botocore_creds = None
        self._signer: Signer | None = None
        self._frozen_key: tuple | None = None
        self._resolving: asyncio.Future[None] | None = None
        if isinstance(credentials, Credentials):
            self._signer = Signer(credentials.access_key, credentials.secret_key, credentials.token, region)

    def __repr__(self) -> str:
        kind = "anonymous" if self.anonymous else ("explicit" if self._explicit else "provider-chain")
        return f"CredentialProvider({kind}, region={self._region!r})"

    @property
    def anonymous(self) -> bool:
        return self._explicit == ANONYMOUS

    @property
    def refreshable(self) -> bool:
        """Whether ``refresh()`` can change anything: only credentials from the provider chain can."""
        return not self.anonymous and not isinstance(self._explicit, Credentials)

    def ready_signer(self) -> Signer | None:
        """The current signer if it needs no resolution or refresh (a plain call on the hot path), else None."""
        creds = self._botocore_creds
        if creds is None or not _refresh_needed(creds):
            return self._signer
        return None

    async def signer(self) -> Signer | None:
        """The signer to use now; resolves or refreshes credentials when needed."""
        if self.anonymous:
            return None
        if self._signer is not None and not self._needs_refresh():
            return self._signer
        chain = _current_chain(self._providers)  # without the lock: the loop must never wait on it
        if self._resolving is None and chain is not None and not _refresh_needed(chain):
            self._use(chain)  # the process already resolved the chain: no I/O, no thread
        else:
            await self._resolution(fresh=False)
        return self._signer

    async def refresh(self) -> None:
        """Force a fresh resolution (after S3 said ExpiredToken); shared with concurrent callers."""
        if self.anonymous or isinstance(self._explicit, Credentials):
            return
        await self._resolution(fresh=True)

    async def _resolution(self, fresh: bool) -> None:
        if self._resolving is None or self._resolving.done():
            if fresh:
                self._botocore_creds = None
            resolving = self._resolving = _in_thread(lambda: self._resolve(fresh))
            resolving.add_done_callback(self._resolved)
        await asyncio.shield(self._resolving)

    def _resolved(self, future: asyncio.Future[None]) -> None:
        if self._resolving is future:
            self._resolving = None
        if not future.cancelled():
            future.exception()  # retrieved: an error reaches every waiter, none is left unobserved

    def _needs_refresh(self) -> bool:
        return _refresh_needed(self._botocore_creds)

    def _resolve(self, fresh: bool = False) -> None:
        """Blocking: resolve (or re-resolve) the chain and take its current credentials. Runs in a worker thread."""
        try:
            creds = (
                self._botocore_creds
                if self._botocore_creds is not None and not fresh
                else _provider_chain(fresh, self._providers)
            )
            self._use(creds)
        except InvalidConfig:
            raise
        except Exception as exc:  # a profile, a credential_process or an STS call that failed: say which
            raise InvalidConfig(
                f"AWS credentials could not be resolved from the provider chain ({type(exc).__name__}: {exc}); "
                "check the profile, AWS_* variables and the credential source it names"
            ) from exc

    def _use(self, creds: object | None) -> None:
        if creds is None and self._providers is not None:
            raise InvalidConfig(
                f"no AWS credentials found by the providers {', '.join(self._providers)} (credentialProviders, or "
                "fs.s3a.aws.credentials.provider): check the source they read, or name other providers"
            )
        if creds is None:
            raise InvalidConfig(
                "no AWS credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, configure a profile, "
                "or use anonymous access (credentials='anonymous', CLI --anonymous) for public buckets"
            )
        self._botocore_creds = creds
        frozen = creds.get_frozen_credentials()
        key = (frozen.access_key, frozen.secret_key, frozen.token)
        if key != self._frozen_key:
            self._frozen_key = key
            self._signer = Signer(frozen.access_key, frozen.secret_key, frozen.token, self._region)
