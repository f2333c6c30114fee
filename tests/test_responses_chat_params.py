"""Chat completions' parameters the Responses API lacks, sent by a chat caller (in
``extra_body``) to a Responses route: translated where the API has them under another name,
left out with a warning where they only shape sampling, refused before sending (the chain
moves on) where the caller depends on them. The fake refuses an unknown parameter as
OpenAI's ``/v1/responses`` does, so a key that slipped through is a 400 here."""

from __future__ import annotations

import time
import warnings
from typing import Any

import httpx
import pytest
from openai.types.responses.response_create_params import ResponseCreateParamsBase

from llmguard_sdk import (
    DroppedParameterWarning,
    Guard,
    OpenAICompatibleProvider,
    UnsupportedRequestError,
)
from llmguard_sdk.models import ChatRequest, Message
from llmguard_sdk.testing import FakeProvider

from .conftest import USER
from .routekinds import route_to

_RESPONSES_FIELDS = frozenset(ResponseCreateParamsBase.__annotations__) | {"stream"}


def _bodies(fake: FakeProvider) -> list[dict[str, Any]]:
    return [r.body for r in fake.requests if r.body]


def _said(fake: FakeProvider, extra: dict[str, Any]) -> list[warnings.WarningMessage]:
    """The warnings of a plain and a streamed call with ``extra_body=extra`` through a Guard
    over ``fake``'s Responses route (each call answered)."""
    with (
        Guard(route_to(fake, "responses"), environ={}) as guard,
        warnings.catch_warnings(record=True) as said,
    ):
        warnings.simplefilter("always")
        assert guard.chat(USER, extra_body=extra).route == "primary"
        with guard.chat(USER, stream=True, extra_body=extra) as stream:
            assert "".join(chunk.text for chunk in stream) == "Echo: hello there"
    return said


def _refused(fake: FakeProvider, **extra: Any) -> dict[str, Any]:
    body = {"model": "m", "input": "hello there", **extra}
    answer = httpx.post(fake.base_url + "/responses", json=body, timeout=10)
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert isinstance(error, dict)
    return error


def test_the_fake_refuses_an_unknown_parameter_as_openai_does(fake: FakeProvider) -> None:
    assert _refused(fake, frequency_penalty=0.5) == {
        "message": "Unknown parameter: 'frequency_penalty'.",
        "type": "invalid_request_error",
        "param": "frequency_penalty",
        "code": "unknown_parameter",
    }
    assert _refused(fake, n=2)["message"] == "Unknown parameter: 'n'."
    assert _refused(fake, response_format={"type": "json_object"}) == {
        "message": "Unsupported parameter: 'response_format'. In the Responses API, this "
        "parameter has moved to 'text.format'. Try again with the new parameter.",
        "type": "invalid_request_error",
        "param": None,
        "code": "unsupported_parameter",
    }
    assert _refused(fake, max_completion_tokens=20)["message"].startswith(
        "Unsupported parameter: 'max_completion_tokens'. In the Responses API, this "
        "parameter has moved to 'max_output_tokens'."
    )
    nested = _refused(fake, stream=True, stream_options={"include_usage": True})
    assert (nested["message"], nested["param"]) == (
        "Unknown parameter: 'stream_options.include_usage'.",
        "stream_options.include_usage",
    )
    # every parameter of the API is known (openai's own types list them)
    known = {"model": "m", "input": "hi", "top_logprobs": 2, "safety_identifier": "u1"}
    assert httpx.post(fake.base_url + "/responses", json=known, timeout=10).status_code == 200


def test_the_fake_knows_the_parameters_openai_s_types_list() -> None:
    from llmguard_sdk.providers._responses_params import RESPONSES_PARAMETERS

    assert frozenset(RESPONSES_PARAMETERS) == _RESPONSES_FIELDS


def test_chat_parameters_with_a_responses_name_are_sent_under_it(fake: FakeProvider) -> None:
    extra: dict[str, Any] = {
        "reasoning_effort": "low",
        "verbosity": "low",
        "response_format": {"type": "json_object"},
        "stream_options": {"include_usage": True},
        "n": 1,
        "logprobs": True,
        "top_logprobs": 2,
    }
    said = _said(fake, extra)
    assert not [w for w in said if issubclass(w.category, DroppedParameterWarning)]
    plain, streamed = _bodies(fake)
    for body in (plain, streamed):
        assert set(body) <= _RESPONSES_FIELDS
    assert plain["reasoning"]["effort"] == "low"
    assert plain["text"] == {"format": {"type": "json_object"}, "verbosity": "low"}
    assert plain["include"][0] == "message.output_text.logprobs"
    assert "stream_options" not in plain
    assert "stream_options" not in streamed
    assert "n" not in plain


def _complete(route: OpenAICompatibleProvider, **extra: Any) -> str:
    request = ChatRequest(messages=[Message(role="user", content="hi")], extra_body=extra)
    return route.complete(request, model="fake-model", deadline=time.monotonic() + 10).text


def test_a_route_called_alone_translates_or_refuses_what_a_guard_refuses(
    fake: FakeProvider,
) -> None:
    """The Guard refuses ``n`` but 1 and an output limit in ``extra_body``; a route called
    on its own (a batch, a test) translates the limit and refuses ``n`` before sending."""
    route = route_to(fake, "responses")
    try:
        assert _complete(route, max_completion_tokens=40, max_tokens=30, n=1) == "Echo: hi"
        with pytest.raises(UnsupportedRequestError, match=r"max_output_tokens.*16"):
            _complete(route, max_tokens=5)
        with pytest.raises(UnsupportedRequestError, match=r"one answer.*n=2"):
            _complete(route, n=2)
    finally:
        route.close()
    (body,) = _bodies(fake)
    assert (body["max_output_tokens"], "n" in body) == (40, False)


def test_sampling_parameters_it_cannot_honour_are_left_out_and_said(fake: FakeProvider) -> None:
    extra: dict[str, Any] = {
        "frequency_penalty": 0.5,
        "presence_penalty": 0.2,
        "logit_bias": {"1234": -100},
        "seed": 3,
        "stop": ["\n"],
        "prediction": {"type": "content", "content": "Echo"},
    }
    with (
        Guard(route_to(fake, "responses"), environ={}) as guard,
        warnings.catch_warnings(record=True) as said,
    ):
        warnings.simplefilter("always")
        assert guard.chat(USER, extra_body=extra).text == "Echo: hello there"
        guard.chat(USER, extra_body=extra)
    dropped = [str(w.message) for w in said if issubclass(w.category, DroppedParameterWarning)]
    assert sorted(m.split("'")[1] for m in dropped) == sorted(extra)  # once each
    assert all(m.startswith("primary: ") for m in dropped)
    for body in _bodies(fake):
        assert set(body) <= _RESPONSES_FIELDS
        assert not set(body) & set(extra)


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        ({"functions": [{"name": "f", "parameters": {"type": "object"}}]}, r"functions"),
        ({"function_call": "auto"}, r"function_call"),
        ({"modalities": ["text", "audio"], "audio": {"voice": "alloy"}}, r"audio"),
        ({"web_search_options": {}}, r"web_search"),
    ],
)
def test_what_the_caller_depends_on_moves_the_chain_on(
    fake: FakeProvider, fake2: FakeProvider, extra: dict[str, Any], said: str
) -> None:
    chat = route_to(fake2)
    with Guard([route_to(fake, "responses"), chat], environ={}) as guard:
        assert guard.chat(USER, extra_body=extra).route == "backup"
    with (
        Guard(route_to(fake, "responses"), environ={}, retry=None) as guard,
        pytest.raises(UnsupportedRequestError, match=said) as caught,
    ):
        guard.chat(USER, extra_body=extra)
    assert caught.value.route == "primary"
    assert fake.requests == []  # refused before sending: nothing billed, no 400
    assert [set(extra) <= set(r.body or {}) for r in fake2.requests] == [True]


def test_text_only_modalities_are_served(fake: FakeProvider) -> None:
    with Guard(route_to(fake, "responses"), environ={}) as guard:
        assert guard.chat(USER, extra_body={"modalities": ["text"]}).route == "primary"
    assert "modalities" not in _bodies(fake)[0]


def test_a_vendor_s_parameter_openai_lacks_is_left_out_and_said(
    fake: FakeProvider, fake2: FakeProvider
) -> None:
    """``top_k`` (vLLM's, Anthropic's ...) is no OpenAI parameter: OpenAI answers it with a
    400 that ended the chain. The Responses route leaves it out with a warning (once), and the
    chat route after it still gets it."""
    extra: dict[str, Any] = {"top_k": 40, "min_p": 0.1, "repetition_penalty": 1.1}
    chat = route_to(fake2)
    said = _said(fake, extra)
    dropped = [str(w.message) for w in said if issubclass(w.category, DroppedParameterWarning)]
    assert sorted(m.split("'")[1] for m in dropped) == sorted(extra)  # once each
    assert all("not an OpenAI parameter" in m for m in dropped)
    for body in _bodies(fake):
        assert set(body) <= _RESPONSES_FIELDS
    with Guard([chat], environ={}) as guard:
        guard.chat(USER, extra_body=extra)
    assert set(extra) <= set(_bodies(fake2)[0])


def test_a_key_named_responses_only_is_sent_as_given(fake: FakeProvider) -> None:
    """The caller's word that a key is for Responses routes (a server of the Responses API
    that takes more than OpenAI's) sends it as it is."""
    from llmguard_sdk.providers.wire import RESPONSES_ONLY_KEY

    request = ChatRequest(
        messages=[Message(role="user", content="hi")],
        extra_body={"top_k": 5},
        metadata={RESPONSES_ONLY_KEY: "top_k"},
    )
    route = route_to(fake, "responses")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", DroppedParameterWarning)
            assert route._payload(request, "m", stream=False)["top_k"] == 5
    finally:
        route.close()
