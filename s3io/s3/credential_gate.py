"""Credentials an endpoint has not yet accepted in this process are tried with one request before any other is sent.

A store refuses wrong credentials (an unknown access key, a wrong secret or session token, a clock it will not take)
alike for every request. Requests sent side by side before the first refusal comes back (the journal roots a read
lists first, the directories of a listing) are already on the wire: the caller's first error cancels them, but a
cancel cannot unsend a request, so the store still gets and refuses each one after the caller has its error. Hence,
until an answer shows an endpoint accepting a set of credentials, a client sends the requests signed with them one at
a time: the first takes the turn (``CredentialGate.turn``), the others wait for its answer before sending a byte:

- accepted (a 2xx or 304 answer, or an error S3 gives only to a request it authenticated: AccessDenied, NoSuchKey, a
  failed precondition): the others go, and every request after them, for every client of the process with these
  credentials and endpoint; the wait costs a process one round trip per endpoint and credentials;
- refused for the credentials (``REFUSALS``): each waiting request fails with the same refusal, never sent;
- anything else (no answer: a refused connection, a timeout; an answer that says nothing about the credentials; a
  cancel): the waiting requests go at once, as they would have without the gate (a silent endpoint's timeouts are not
  queued one after another), and the next request to come tries alone again.

Credentials are known by a digest of key, secret and token (``Signer.identity``). Anonymous requests are not gated.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import dataclass

from multidict import CIMultiDictProxy

from s3io.errors import S3IOError
from s3io.resilience.retryable import CLOCK_SKEW_CODES

# Error codes that refuse the credentials themselves, whatever the request (S3 authenticates before anything else).
REFUSALS = frozenset({"InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken", *CLOCK_SKEW_CODES})
# Answers S3 gives only to a request it authenticated: the credentials are good.
AUTHENTICATED_CODES = frozenset({"AccessDenied", "NoSuchKey", "NoSuchUpload", "PreconditionFailed", "InvalidRange"})
AUTHENTICATED_STATUS = frozenset({304, 412, 416})

ErrorFor = Callable[[str, str | None], S3IOError]  # (bucket, key) -> the refusal, naming that object

_accepted: set[tuple[str, bytes]] = set()  # (endpoint, credentials' identity) accepted in this process
_lock = threading.Lock()


def verdict(status: int, code: str | None) -> bool | None:
    """What an answer says of the credentials that signed its request: True accepted, False refused, None nothing."""
    if code in REFUSALS:
        return False
    if status < 300 or status in AUTHENTICATED_STATUS or code in AUTHENTICATED_CODES:
        return True
    return None


@dataclass(frozen=True, slots=True)
class _Outcome:
    identity: bytes
    refusal: ErrorFor | None  # None: go


class Turn:
    """One request's right to go first, alone, while its credentials are unproven; settled once, by what its answer
    said (``headers``, ``answered``) or, when it ends with neither, by ``release`` (always call it last)."""

    __slots__ = ("_gate", "_identity", "_settled")

    def __init__(self, gate: CredentialGate, identity: bytes) -> None:
        self._gate = gate
        self._identity = identity
        self._settled = False

    def headers(self, status: int, _headers: CIMultiDictProxy[str]) -> None:
        """An answer's headers arrived: a 2xx settles it at once (the others need not wait for its body)."""
        if status < 300:
            self._settle(_Outcome(self._identity, None), accepted=True)

    def answered(self, status: int, code: str | None, refusal: ErrorFor) -> None:
        """An error answer, its code read: settles the turn as ``verdict`` says (``refusal`` builds the others')."""
        said = verdict(status, code)
        if said is not None:
            self._settle(_Outcome(self._identity, None if said else refusal), accepted=said)

    def release(self) -> None:
        """The request ended (or its answer said nothing): the others go as they are, if nothing settled it."""
        self._settle(_Outcome(self._identity, None), accepted=False)

    def _settle(self, outcome: _Outcome, *, accepted: bool) -> None:
        if not self._settled:
            self._settled = True
            self._gate._settle(outcome, accepted)


class CredentialGate:
    """One client's gate on one endpoint (see the module doc); bound to the client's event loop."""

    __slots__ = ("_endpoint", "_held", "_open_to", "_waiters")

    def __init__(self, endpoint: str) -> None:
        self._endpoint = endpoint
        self._held = False
        self._waiters: list[asyncio.Future[_Outcome]] = []
        self._open_to: object | None = None  # the signer last found accepted (the hot path compares identity only)

    def open_to(self, signer: object, identity: Callable[[], bytes]) -> bool:
        """Whether requests signed by ``signer`` go without a turn (its credentials were accepted here)."""
        if signer is self._open_to:
            return True
        if (self._endpoint, identity()) in _accepted:
            self._open_to = signer
            return True
        return False

    async def turn(self, identity: bytes, bucket: str, key: str | None) -> Turn | None:
        """A Turn to go first (settle it), or None to go now; raises the refusal of the request that went first when
        it refused these credentials (naming ``bucket``/``key``)."""
        while True:
            if (self._endpoint, identity) in _accepted:
                return None
            if not self._held:
                self._held = True
                return Turn(self, identity)
            waiter: asyncio.Future[_Outcome] = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                outcome = await waiter
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
            if outcome.identity != identity:  # the credentials changed meanwhile: the answer was not about these
                continue
            if outcome.refusal is not None:
                raise outcome.refusal(bucket, key)
            return None

    def _settle(self, outcome: _Outcome, accepted: bool) -> None:
        if accepted:
            with _lock:
                _accepted.add((self._endpoint, outcome.identity))
        self._held = False
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(outcome)


def forget_all() -> None:
    """Forget every acceptance (for tests of a first request)."""
    with _lock:
        _accepted.clear()
