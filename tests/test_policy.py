"""Policy: parsed from strings and the environment, validated together, bad values named."""

from __future__ import annotations

import pytest

from s3io import errors
from s3io.policy import Policy
from s3io.units import parse_duration, parse_size

pytestmark = pytest.mark.timeout(30)


def test_policy_parses_strings_env_and_rejects_bad_values() -> None:
    policy = Policy.from_mapping({"connecttimeout": "250ms", "MAX_ATTEMPTS": "3", "attemptTimeout": "none"})
    assert (policy.connect_timeout, policy.max_attempts, policy.attempt_timeout) == (0.25, 3, None)
    env = Policy.from_env({"S3IO_STALL_TIMEOUT": "2m", "S3IO_OPERATION_TIMEOUT": "90"})
    assert (env.stall_timeout, env.operation_timeout) == (120.0, 90.0)
    with pytest.raises(errors.InvalidConfig, match=r"unknown policy option 'bogus'.*connectTimeout"):
        Policy.from_mapping({"bogus": "1"})
    with pytest.raises(errors.InvalidConfig, match=r"stallTimeout.*e\.g\. \"250ms\""):
        Policy.from_mapping({"stallTimeout": "5 parsecs"})
    with pytest.raises(errors.InvalidConfig, match="S3IO_MAX_ATTEMPTS"):
        Policy.from_env({"S3IO_MAX_ATTEMPTS": "0"})
    with pytest.raises(errors.InvalidConfig, match="connectTimeout"):
        Policy(connect_timeout=0)
    assert parse_duration("1.5s", name="x") == 1.5 and parse_size("128MB", name="x") == 128 * 1024 * 1024


def test_policy_changes_are_validated_together() -> None:
    policy = Policy.from_mapping({"backoff_base": "1ms", "backoff_cap": "10ms"})
    assert (policy.backoff_base, policy.backoff_cap) == (0.001, 0.01)
    with pytest.raises(errors.InvalidConfig, match=r"^backoffCap: "):
        Policy.from_mapping({"backoffCap": "1ms"})
