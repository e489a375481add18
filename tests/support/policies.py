"""Policies the fault tests share."""

from __future__ import annotations

from s3io import Policy

# Short deadlines and backoff for a body broken by the fault proxy: a stall is noticed in a second, a retry follows
# within half a second, and an operation still has room for several attempts on a loaded machine.
MID_BODY_FAULTS = Policy(
    connect_timeout=2,
    first_byte_timeout=2,
    stall_timeout=1,
    operation_timeout=20,
    max_attempts=6,
    backoff_base=0.05,
    backoff_cap=0.5,
)
