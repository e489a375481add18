"""Whether an endpoint has ever answered this process: what ``Policy.first_contact_attempts`` is judged by.

An endpoint counts as answered once any attempt got an answer's headers (any status: a 404 or a 503 is an answer).
The set is process-wide on purpose: a second client of the same endpoint (the next ``s3io.read_parquet``, the
planning step after the listing) is not a first contact. A process that never talked to the endpoint but works for
one that did (a Spark task planned by a driver that listed) is told so by its policy (``StoreConfig.after_contact``).
"""

from __future__ import annotations

import threading

_answered: set[str] = set()
_lock = threading.Lock()


class EndpointContact:
    """One client's view of its endpoint (``scheme://host:port``): answered yet, in this process?"""

    __slots__ = ("_answered", "endpoint")

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self._answered = endpoint in _answered

    @property
    def answered(self) -> bool:
        if not self._answered and self.endpoint in _answered:  # another client of this process got an answer
            self._answered = True
        return self._answered

    def mark_answered(self) -> None:
        """Called when an attempt got an answer's headers (cheap after the first call)."""
        if not self._answered:
            self._answered = True
            with _lock:
                _answered.add(self.endpoint)


def answered_endpoints() -> frozenset[str]:
    """The endpoints (``scheme://host:port``) that have answered this process."""
    with _lock:
        return frozenset(_answered)


def forget(endpoint: str) -> None:
    """Forget one endpoint's answers: its port may serve another server later (a test's own servers)."""
    with _lock:
        _answered.discard(endpoint)


def forget_all() -> None:
    """Forget every endpoint's answers (for tests of a first contact)."""
    with _lock:
        _answered.clear()
