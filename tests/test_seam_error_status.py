"""A provider's own 5xx reaches the SDK behind the seam with its status: openai's
``InternalServerError`` with ``status_code`` 500 for a 500, anthropic's ``OverloadedError`` for
Claude's 529, as they would pointed straight at the provider; statusless failures (connection
refused, an open circuit) stay 503."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import openai
import pytest

from llmguard_sdk import Guard
from llmguard_sdk.client import anthropic_client
from llmguard_sdk.testing import FakeProvider, Fault
from llmguard_sdk.transport import http_client

from .conftest import USER, require_module

MakeGuard = Callable[..., Guard]


def _sdk(guard: Guard) -> openai.OpenAI:
    return openai.OpenAI(
        api_key="sk-x", base_url="http://guard.test/v1", http_client=http_client(guard)
    )


@pytest.mark.parametrize("status", [500, 502, 503, 529])
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_a_provider_s_5xx_keeps_its_status(
    fake: FakeProvider, make_guard: MakeGuard, status: int, stream: bool
) -> None:
    # every 5xx was answered 503: a framework (or an SDK: anthropic's tells 529 overloaded
    # from 503) saw another status than the provider's
    fake.always(Fault(status=status))
    seam = _sdk(make_guard(fake, retry=None, breaker=None))
    with pytest.raises(openai.InternalServerError) as caught:
        seam.chat.completions.create(model="m", messages=USER, stream=stream)
    assert caught.value.status_code == status
    assert caught.value.response.headers["x-llmguard-error"] == "ProviderUnavailableError"
    with pytest.raises(openai.InternalServerError) as caught:
        seam.responses.create(model="m", input="hello there", stream=stream)
    assert caught.value.status_code == status


def test_the_last_route_s_5xx_speaks_for_a_failed_chain(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard
) -> None:
    fake.always(Fault(status=503))
    fake2.always(Fault(status=500))
    seam = _sdk(make_guard(fake, fake2, retry=None, breaker=None))
    with pytest.raises(openai.InternalServerError) as caught:
        seam.chat.completions.create(model="m", messages=USER)
    assert caught.value.status_code == 500
    assert caught.value.response.headers["x-llmguard-error"] == "AllRoutesFailedError"


def test_claude_s_overload_is_anthropic_s_overloaded_error(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    anthropic: Any = require_module("anthropic", "anthropic is a dev dependency")
    fake.always(Fault(status=529))
    client = anthropic_client(make_guard(fake, retry=None, breaker=None))
    with pytest.raises(anthropic.OverloadedError) as caught:
        client.messages.create(model="m", max_tokens=20, messages=USER)
    assert caught.value.body["error"]["type"] == "overloaded_error"
    fake.always(Fault(status=500))
    with pytest.raises(anthropic.InternalServerError) as failed:
        client.messages.create(model="m", max_tokens=20, messages=USER)
    assert failed.value.status_code == 500
    assert failed.value.body["error"]["type"] == "api_error"
