"""A failed call through the drop-in OpenAI clients (``guard.client()``, openai's SDK over
``http_client(guard)``) keeps the provider's error ``code`` and ``param`` where the Guard has
none of its own: OpenAI's 429 ``insufficient_quota`` (a spent quota: top up) and
``rate_limit_exceeded`` (wait) stay apart by ``e.code``, as a direct call's do. Both were
replaced by ``null``; so was the code of an error the provider sent inside a stream (an
error event), whether the stream broke before or after it began. The provider's ``type``
(``insufficient_quota``, ``tokens``) is kept too: the status's (``rate_limit_error``) was
given."""

from __future__ import annotations

import json
from typing import Any

import pytest

from llmguard_sdk import Guard, OpenAICompatibleProvider, RetryPolicy
from llmguard_sdk.testing import FakeProvider, Fault
from llmguard_sdk.transport import http_client

from .conftest import USER, require_module
from .rawserver import RawServer, http_response


def _clients(guard: Guard) -> list[Any]:
    openai = require_module("openai", "openai is a dev dependency")
    seam = openai.OpenAI(
        api_key="unused", base_url="http://guard.test/v1", http_client=http_client(guard)
    )
    return [guard.client(), seam]


@pytest.mark.parametrize("code", ["insufficient_quota", "rate_limit_exceeded"])
def test_a_429_keeps_the_code_that_tells_a_spent_quota_from_a_rate_limit(
    fake: FakeProvider, code: str
) -> None:
    openai = require_module("openai", "openai is a dev dependency")
    route = OpenAICompatibleProvider(fake.base_url, model=fake.model, name="p")
    with Guard(route, environ={}, retry=RetryPolicy(attempts=1)) as guard:
        for client in _clients(guard):
            fake.script(Fault(status=429, error_code=code, error_message="no"))
            with pytest.raises(openai.RateLimitError) as info:
                client.chat.completions.create(model=fake.model, messages=USER)
            assert info.value.code == code
            assert info.value.body["code"] == code


def _raised(error: dict[str, Any], status: str, **params: Any) -> list[Any]:
    """The openai errors both clients raise for a route that answers ``error`` with
    ``status``."""
    openai = require_module("openai", "openai is a dev dependency")
    answer = http_response(json.dumps({"error": error}).encode(), status=status)
    raised = []
    with (
        RawServer(answer) as raw,
        Guard(OpenAICompatibleProvider(raw.base_url, model="m"), environ={}, retry=None) as guard,
    ):
        for client in _clients(guard):
            with pytest.raises(openai.APIStatusError) as info:
                client.chat.completions.create(model="m", messages=USER, **params)
            raised.append(info.value)
    return raised


def test_a_400_keeps_the_providers_code_and_param() -> None:
    openai = require_module("openai", "openai is a dev dependency")
    error = {
        "message": "Invalid value for 'temperature'",
        "type": "invalid_request_error",
        "param": "temperature",
        "code": "invalid_value",
    }
    for raised in _raised(error, "400 Bad Request", temperature=1.5):
        assert isinstance(raised, openai.BadRequestError)
        assert (raised.code, raised.param) == ("invalid_value", "temperature")


@pytest.mark.parametrize("after", [0, 2])
def test_an_error_event_inside_a_stream_keeps_its_code(fake: FakeProvider, after: int) -> None:
    openai = require_module("openai", "openai is a dev dependency")
    route = OpenAICompatibleProvider(fake.base_url, model=fake.model, name="p")
    with Guard(route, environ={}, retry=RetryPolicy(attempts=1)) as guard:
        for client in _clients(guard):
            code = "insufficient_quota"
            fake.script(Fault(status=429, error_code=code, stream_error_after=after))
            with pytest.raises(openai.APIError) as info:
                for _ in client.chat.completions.create(
                    model=fake.model, messages=USER, stream=True
                ):
                    pass
            assert info.value.code == code


def test_a_responses_stream_error_event_keeps_the_providers_code(fake: FakeProvider) -> None:
    """(``guard.client()`` raises openai's error for it, openai's SDK over the seam gives the
    seam's ``error`` event.)"""
    openai = require_module("openai", "openai is a dev dependency")
    route = OpenAICompatibleProvider(fake.base_url, model=fake.model, name="p")
    with Guard(route, environ={}, retry=RetryPolicy(attempts=1)) as guard:
        for client in _clients(guard):
            fake.script(Fault(status=429, error_code="rate_limit_exceeded", stream_error_after=2))
            codes = []
            try:
                for event in client.responses.create(model=fake.model, input="hi", stream=True):
                    codes += [event.code] if event.type == "error" else []
            except openai.APIError as exc:
                codes.append(exc.code)
            assert codes == ["rate_limit_exceeded"]


@pytest.mark.parametrize(
    ("kind", "code"),
    [("insufficient_quota", "insufficient_quota"), ("tokens", "rate_limit_exceeded")],
)
def test_a_429_keeps_the_providers_type(kind: str, code: str) -> None:
    openai = require_module("openai", "openai is a dev dependency")
    error = {"message": "over", "type": kind, "param": None, "code": code}
    for raised in _raised(error, "429 Too Many Requests"):
        assert isinstance(raised, openai.RateLimitError)
        assert (raised.type, raised.code, raised.body["type"]) == (kind, code, kind)
