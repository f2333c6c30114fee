"""What a Responses route does with what its API cannot take: ``max_output_tokens`` under 16
(a 400 at OpenAI, where chat completions take ``max_tokens=5``) and ``seed`` or ``stop``
(no such parameters)."""

from __future__ import annotations

import warnings

import httpx
import pytest

from llmguard_sdk import (
    DroppedParameterWarning,
    Guard,
    UnsupportedRequestError,
)
from llmguard_sdk.testing import FakeProvider

from .conftest import USER
from .routekinds import route_to


def test_fake_refuses_max_output_tokens_under_16_as_openai_does(fake: FakeProvider) -> None:
    body = {"model": "m", "input": "hello there", "max_output_tokens": 5}
    answer = httpx.post(fake.base_url + "/responses", json=body, timeout=10)
    assert answer.status_code == 400
    assert answer.json() == {
        "error": {
            "message": "Invalid 'max_output_tokens': integer below minimum value. "
            "Expected a value >= 16, but got 5 instead.",
            "type": "invalid_request_error",
            "param": "max_output_tokens",
            "code": "integer_below_min_value",
        }
    }
    body["max_output_tokens"] = 16
    assert httpx.post(fake.base_url + "/responses", json=body, timeout=10).status_code == 200


def test_a_limit_under_16_moves_the_chain_on_to_a_chat_route(
    fake: FakeProvider, fake2: FakeProvider
) -> None:
    chat = route_to(fake2)
    with Guard([route_to(fake, "responses"), chat], environ={}) as guard:
        answer = guard.chat(USER, max_tokens=5)
        with guard.chat(USER, max_completion_tokens=15, stream=True) as stream:
            streamed = "".join(chunk.text for chunk in stream)
    assert (answer.route, answer.text) == ("backup", "Echo: hello there")
    assert stream.response.route == "backup"
    assert streamed == "Echo: hello there"
    assert fake.requests == []  # refused before any request: nothing billed, no 400


def test_a_lone_responses_route_refuses_a_limit_under_16_before_sending(
    fake: FakeProvider,
) -> None:
    with Guard(route_to(fake, "responses"), environ={}, retry=None) as guard:
        with pytest.raises(UnsupportedRequestError, match=r"max_output_tokens.*16") as caught:
            guard.chat(USER, max_tokens=5)
        assert guard.chat(USER, max_tokens=16).text == "Echo: hello there"
    assert caught.value.route == "primary"
    assert [r.body["max_output_tokens"] for r in fake.requests if r.body] == [16]


def test_seed_and_stop_are_not_sent_and_said_once_per_route(fake: FakeProvider) -> None:
    with (
        Guard(route_to(fake, "responses"), environ={}) as guard,
        warnings.catch_warnings(record=True) as said,
    ):
        warnings.simplefilter("always")
        guard.chat(USER, seed=7)
        guard.chat(USER, seed=8, stop=["\n"])
        guard.chat(USER, seed=9, stop="x")
    dropped = [w for w in said if issubclass(w.category, DroppedParameterWarning)]
    assert [str(w.message).split(":")[0] for w in dropped] == ["primary", "primary"]
    assert "'seed'" in str(dropped[0].message)
    assert "'stop'" in str(dropped[1].message)
    assert all(w.filename == __file__ for w in dropped)  # (the caller's line)
    bodies = [r.body for r in fake.requests if r.body]
    assert len(bodies) == 3
    assert not any("seed" in body or "stop" in body for body in bodies)
