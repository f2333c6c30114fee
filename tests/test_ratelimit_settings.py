"""Rate limits as configured: what a bad value's error says."""

from __future__ import annotations

import re
from typing import Any

import pytest

from llmguard_sdk import ConfigurationError
from llmguard_sdk.ratelimit import RateLimit

# -- a bad value's error says what was given --------------------------------------------------


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ({"rpm": 0}, "RateLimit.rpm must be a positive number, got 0"),
        ({"tpm": -5.5}, "RateLimit.tpm must be a positive number, got -5.5"),
        ({"rpm": float("nan")}, "got nan"),
        ({"rpm": "100"}, "got '100'"),
        ({"concurrency": 1.5}, "RateLimit.concurrency must be a whole number >= 1, got 1.5"),
        ({"rpm": 10, "period": 0}, "RateLimit.period must be a positive number of seconds, got 0"),
        ({"rpm": 10, "burst": 1.5}, "RateLimit.burst must be in (0, 1], got 1.5"),
        ({"rpm": 10, "max_wait": -1}, "got -1"),
        ({"rpm": 10, "batch_headroom": 1}, "got 1"),
        ({"rpm": 10, "max_queue": -1}, "got -1"),
        ({"rpm": 10, "reserve_output_tokens": 10.5}, "got 10.5"),
        ({"rpm": 10, "per_tenant": "yes"}, "got 'yes'"),
        ({"rpm": 10, "lease_seconds": 0}, "got 0"),
        ({"rpm": 10, "max_wait": True}, "got True"),
    ],
)
def test_a_bad_value_is_named_in_its_error(given: dict[str, Any], says: str) -> None:
    with pytest.raises(ConfigurationError, match=re.escape(says) + "$"):
        RateLimit(**given)
