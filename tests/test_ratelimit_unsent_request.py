"""An attempt whose request never left (the route refused the connection) gives its request
back to the route's rate limit, as its tokens: the provider never saw it. It kept it, so a
route that was down (a local server restarting) came back with its requests per minute spent
on calls that never reached it, and its first calls were refused by the SDK's own limit."""

from __future__ import annotations

import pytest

from llmguard_sdk import (
    Guard,
    OpenAICompatibleProvider,
    ProviderUnavailableError,
    RateLimit,
)
from llmguard_sdk.retry import RetryPolicy
from llmguard_sdk.testing import FakeProvider

from .conftest import MODES, chat_in_mode

TWO_A_MINUTE = {"primary": RateLimit(rpm=2, batch_headroom=0)}


@pytest.fixture
def dead_url() -> str:
    """The base URL of a loopback server that is gone: its port refuses connections."""
    dead = FakeProvider()
    dead.start()
    dead.stop()
    return dead.base_url


def _guard(url: str, **options: object) -> Guard:
    return Guard(
        OpenAICompatibleProvider(url, model="m", name="primary"),
        retry=RetryPolicy(attempts=1),
        breaker=None,
        rate_limits=TWO_A_MINUTE,
        environ={},
        **options,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("mode", MODES)
def test_a_refused_connection_gives_its_request_back(dead_url: str, mode: str) -> None:
    with _guard(dead_url) as guard:
        for _ in range(4):  # more calls than the limit allows a minute: none was sent
            with pytest.raises(ProviderUnavailableError) as raised:
                chat_in_mode(guard, mode)
            assert not raised.value.request_sent


def test_a_refused_connection_gives_its_request_back_in_redis(
    dead_url: str, redis_url: str, redis_prefix: str
) -> None:
    with _guard(dead_url, store=redis_url, key_prefix=redis_prefix) as guard:
        for _ in range(4):
            with pytest.raises(ProviderUnavailableError) as raised:
                guard.chat([{"role": "user", "content": "hi"}])
            assert not raised.value.request_sent
