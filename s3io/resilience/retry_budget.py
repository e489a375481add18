"""A client-wide token bucket for retries, so a storm of 503s does not multiply the load (AWS SDK "standard" mode)."""

from __future__ import annotations


class RetryBudget:
    """Each retry spends tokens (more for timeouts); each success puts one back, up to the capacity."""

    __slots__ = ("capacity", "tokens")

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.tokens = capacity

    def try_spend(self, cost: int) -> bool:
        if cost > self.tokens:
            return False
        self.tokens -= cost
        return True

    def refund(self, amount: int = 1) -> None:
        self.tokens = min(self.capacity, self.tokens + amount)
