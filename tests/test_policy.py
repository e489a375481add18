"""Policy: parsed from strings and the environment, validated together, bad values named."""

from __future__ import annotations

import pickle

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


def test_policy_is_made_of_timeouts_retry_and_sockets_with_its_flat_names_kept() -> None:
    from s3io.policy import Retry, Sockets, Timeouts

    flat = Policy(stall_timeout=2.0, max_attempts=3, retry_budget=7, max_connections=8)
    composed = Policy(
        timeouts=Timeouts(stall=2.0), retry=Retry(max_attempts=3, budget=7), sockets=Sockets(max_connections=8)
    )
    assert flat == composed and hash(flat) == hash(composed)
    assert (flat.stall_timeout, flat.timeouts.stall, flat.retry_budget, flat.retry.budget) == (2.0, 2.0, 7, 7)
    assert flat.replace(max_attempts=1).retry == Retry(max_attempts=1, budget=7)
    assert Policy(timeouts=Timeouts(stall=2.0), connect_timeout=1.0).timeouts == Timeouts(connect=1.0, stall=2.0)
    assert Policy.from_options({"retryBudget": "7", "stall_timeout": "2s"}, base=Policy()) == Policy(
        stall_timeout=2.0, retry_budget=7
    )
    assert pickle.loads(pickle.dumps(flat)) == flat
    assert "stall_timeout" in Policy.field_names() and "timeouts" not in Policy.field_names()
    with pytest.raises(errors.InvalidConfig, match=r"^stallTimeout: "):
        Timeouts(stall=0)
    with pytest.raises(TypeError):
        Policy(no_such_setting=1)  # type: ignore[call-arg]
