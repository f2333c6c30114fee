"""When a route's breaker opens during a call's own retries, the call reports the provider's
error that opened it, not the breaker's refusal of the retry: the first call of an outage
said only ``circuit open for route 'primary'`` and lost the 503 behind it."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from llmguard_sdk import (
    AllRoutesFailedError,
    BreakerPolicy,
    Guard,
    ProviderUnavailableError,
    RateLimitedError,
)
from llmguard_sdk.retry import RetryPolicy
from llmguard_sdk.testing import FakeProvider, Fault

from .conftest import MODES, chat_in_mode

MakeGuard = Callable[..., Guard]
OPENS_AFTER_TWO = BreakerPolicy(minimum_calls=2, window=2, probe_every=None)
RETRIES = RetryPolicy(attempts=3, base=0.01, cap=1.0)


@pytest.mark.parametrize("mode", MODES)
def test_the_error_that_opened_the_breaker_is_the_routes_error(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard, mode: str
) -> None:
    guard = make_guard(fake, fake2, breaker=OPENS_AFTER_TWO, retry=RETRIES, timeout=5)
    fake.always(Fault(status=503))
    fake2.always(Fault(status=429))
    with pytest.raises(AllRoutesFailedError) as raised:
        chat_in_mode(guard, mode)
    assert fake.stats.requests == 2  # the third attempt was refused by the open breaker
    primary = raised.value.errors["primary"]
    assert isinstance(primary, ProviderUnavailableError)
    assert primary.status_code == 503
    assert any("CircuitOpenError" in note for note in getattr(primary, "__notes__", []))
    assert isinstance(raised.value.errors["backup"], RateLimitedError)
    assert "HTTP 503" in str(raised.value)


def test_a_single_route_raises_the_error_that_opened_its_breaker(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    guard = make_guard(fake, breaker=OPENS_AFTER_TWO, retry=RETRIES, timeout=5)
    fake.always(Fault(status=503))
    with pytest.raises(ProviderUnavailableError) as raised:
        guard.chat([{"role": "user", "content": "hi"}])
    assert raised.value.status_code == 503
