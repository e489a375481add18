"""Credentials: explicit keys, anonymous access, or botocore's provider chain (env, profile, container, IMDS).

Resolution and refresh may touch the network (metadata services), so they run in a worker thread and the
caller's attempt deadline bounds them. Nothing here prints a secret: reprs are redacted.
"""

from __future__ import annotations

import asyncio
import threading
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
# botocore's refreshable credentials refresh themselves; ``refresh()`` resolves the chain again.
_chain_lock = threading.Lock()
_chain: object | None = None


def _refresh_needed(creds: object | None) -> bool:
    check = getattr(creds, "refresh_needed", None)
    return bool(check and check())


def _provider_chain(fresh: bool = False) -> object | None:
    global _chain
    with _chain_lock:
        if _chain is None or fresh:
            import botocore.session

            _chain = botocore.session.get_session().get_credentials()
        return _chain


class CredentialProvider:
    """Hands out a Signer for the current credentials (None when anonymous) and refreshes on demand."""

    def __init__(self, credentials: Credentials | str | None, region: str) -> None:
        if isinstance(credentials, str) and credentials != ANONYMOUS:
            raise InvalidConfig(f"credentials: expected a Credentials value, None or 'anonymous', got {credentials!r}")
        self._explicit = credentials
        self._region = region
        self._botocore_creds = None
        self._signer: Signer | None = None
        self._frozen_key: tuple | None = None
        self._lock = asyncio.Lock()
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
        async with self._lock:
            if self._signer is None or self._needs_refresh():
                if _chain is not None and not _refresh_needed(_chain):
                    self._resolve()  # the process already resolved the chain: no I/O, no thread
                else:
                    await asyncio.to_thread(self._resolve)
        return self._signer

    async def refresh(self) -> None:
        """Force a fresh resolution (after S3 said ExpiredToken)."""
        if self.anonymous or isinstance(self._explicit, Credentials):
            return
        async with self._lock:
            self._botocore_creds = None
            await asyncio.to_thread(self._resolve, True)

    def _needs_refresh(self) -> bool:
        return _refresh_needed(self._botocore_creds)

    def _resolve(self, fresh: bool = False) -> None:
        if self._botocore_creds is None:
            self._botocore_creds = _provider_chain(fresh)
        if self._botocore_creds is None:
            raise InvalidConfig(
                "no AWS credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, configure a profile, "
                "or use anonymous access (credentials='anonymous', CLI --anonymous) for public buckets"
            )
        frozen = self._botocore_creds.get_frozen_credentials()
        key = (frozen.access_key, frozen.secret_key, frozen.token)
        if key != self._frozen_key:
            self._frozen_key = key
            self._signer = Signer(frozen.access_key, frozen.secret_key, frozen.token, self._region)
