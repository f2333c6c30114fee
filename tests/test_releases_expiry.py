"""Releases: moving by hand a canary no Guard serves or moves for 30 days (forgotten: its
keys' TTL passed) says that no canary is under way, not that other processes moved it."""

from __future__ import annotations

import time

import pytest

from llmguard_sdk.cli import main
from llmguard_sdk.errors import CanaryNotFoundError, LLMGuardError, ReleaseConflictError
from llmguard_sdk.testing import FakeProvider

from .conftest import RawRedis
from .test_releases import _canary_guard

_MONTH = 30 * 86400  # a canary lives this long after its last serving exchange or move


@pytest.mark.parametrize("action", ["promote", "rollback"])
def test_moving_a_canary_whose_keys_expired_says_none_is_under_way(
    redis_url: str, redis_prefix: str, action: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Moving by hand a canary whose Redis keys had expired raised a bare ``LookupError``
    through ``guard.releases`` (outside the SDK's error tree, no word of expiry); a
    :class:`CanaryNotFoundError` (an ``LLMGuardError``, still a ``LookupError``) says that no
    canary is under way there, and nothing is stored by the move."""
    import redis

    client: RawRedis = redis.Redis.from_url(redis_url)
    where = ["bot", "--store", redis_url, "--prefix", redis_prefix]
    with FakeProvider(name="a") as a, FakeProvider(name="b") as b:
        guard = _canary_guard(a, b, store=redis_url, key_prefix=redis_prefix)
        try:
            controls = guard.releases
            assert controls is not None
            assert controls.flush() is not None  # stored (no background exchange started)
            keys = list(client.scan_iter(match=f"{redis_prefix}:rel:*"))
            assert keys
            for key in keys:  # the canary's TTL passes
                client.pexpire(key, 1)
            deadline = time.monotonic() + 10.0
            while client.exists(*keys) and time.monotonic() < deadline:
                time.sleep(0.01)
            assert not client.exists(*keys)
            with pytest.raises(CanaryNotFoundError, match="no canary is under way") as raised:
                getattr(controls, action)()
            error = raised.value
            assert isinstance(error, LLMGuardError)
            assert isinstance(error, LookupError)  # what callers caught before
            assert not isinstance(error, ReleaseConflictError)
            assert (error.key, error.action) == ("bot", action)
            assert "expired" in str(error)
            assert controls.status()["canary"] is None
            assert main(["release", action, *where]) == 1
            printed = capsys.readouterr().err
            assert "no canary is under way" in printed
            assert "other processes" not in printed
            assert not client.exists(*keys)  # neither move stored anything
        finally:
            guard.close()
            client.close()
