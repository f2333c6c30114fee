"""The Responses API's own parameters through ``guard.client()``: what chat completions has
too goes on under its name, what no chat route can serve is a 400 naming it, what only a
Responses route serves (``store``, ``truncation``, ``reasoning`` whole) reaches Responses
routes alone, what changes nothing through a chat route is left out (never sent to a route
that would refuse it as unknown); and logprobs asked of a Responses route by a
chat-completions caller. Every body a
route receives is checked against openai's own parameter types."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.chat.completion_create_params import CompletionCreateParamsBase
from openai.types.responses.response_create_params import ResponseCreateParamsBase

from llmguard_sdk import Guard
from llmguard_sdk.providers.responses import OpenAIResponsesProvider
from llmguard_sdk.testing import FakeProvider

from .rawserver import RawServer, http_response, sse_head
from .routekinds import guard_over

_CHAT_FIELDS = frozenset(CompletionCreateParamsBase.__annotations__) | {"stream"}
_RESPONSES_FIELDS = frozenset(ResponseCreateParamsBase.__annotations__) | {"stream"}

# the Responses API's parameters chat completions has under the same name and meaning
_SHARED: dict[str, Any] = {
    "prompt_cache_key": "tenant-7",
    "prompt_cache_retention": "24h",
    "safety_identifier": "user-hash-1",
    "service_tier": "flex",
}
# what changes nothing through the Guard (see the README's paragraph on the Responses API)
_HARMLESS: dict[str, Any] = {
    "max_tool_calls": 3,
    "stream_options": {"include_obfuscation": False},
    "background": False,
    "background_options": {"continuation_id": "job-1"},
    "context_management": [{"type": "compaction", "compact_threshold": 1000}],
    "image": {"context_compression": "auto"},
    "access_programs": {"cyber": "standard"},
    "include": [
        "message.input_image.image_url",
        "web_search_call.action.sources",
        "web_search_call.results",
        "code_interpreter_call.outputs",
        "file_search_call.results",
        "computer_call_output.output.image_url",
    ],
}
# what Responses routes alone are sent, as asked
_RESPONSES_ROUTES: dict[str, Any] = {
    "store": False,
    "truncation": "auto",
    "reasoning": {"effort": "low", "summary": "auto"},
}


def _sent(fake: FakeProvider) -> dict[str, Any]:
    return fake.requests[-1].body or {}


def _bad_request(client: openai.OpenAI, **request: Any) -> str:
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model="fake-model", input="hello there", **request)
    body = info.value.body
    assert isinstance(body, dict)
    assert body.get("type") == "invalid_request_error"
    return str(body.get("message"))


@pytest.mark.parametrize("route", ["chat", "responses"])
def test_responses_only_parameters_reach_a_route_only_as_its_api_takes_them(
    fake: FakeProvider, route: str
) -> None:
    """``max_tool_calls``, ``background_options``, ``context_management``, ``image``,
    ``access_programs`` and ``prompt_cache_options``' Responses-only keys went on to a chat
    route as body fields, which OpenAI's chat API refuses as unknown; a Responses route was
    sent chat's ``logprobs: true``, which the Responses API refuses, and no ``include``, so
    no logprobs came back."""
    cache_options = {"mode": "explicit", "ttl": "30m", "comparison_response_id": "resp_1"}
    request: dict[str, Any] = {**_SHARED, **_HARMLESS, **_RESPONSES_ROUTES, "top_logprobs": 2}
    request["include"] = [*_HARMLESS["include"], "message.output_text.logprobs"]
    with guard_over(fake, route) as guard:
        guard.client().responses.create(
            model="fake-model",
            input="hello there",
            extra_body={"prompt_cache_options": cache_options},
            **request,
        )
    sent = _sent(fake)
    allowed = _CHAT_FIELDS if route == "chat" else _RESPONSES_FIELDS
    assert set(sent) <= allowed, set(sent) - allowed
    assert {k: sent.get(k) for k in _SHARED} == _SHARED
    assert sent["prompt_cache_options"] == {"mode": "explicit", "ttl": "30m"}
    assert sent["top_logprobs"] == 2
    if route == "chat":
        assert sent["logprobs"] is True
        assert "include" not in sent
        assert not set(_RESPONSES_ROUTES) & set(sent)
        assert sent["reasoning_effort"] == "low"
    else:
        # (store false and reasoning: its items sealed, to be sent back next turn)
        assert sent["include"] == ["message.output_text.logprobs", "reasoning.encrypted_content"]
        assert {k: sent.get(k) for k in _RESPONSES_ROUTES} == _RESPONSES_ROUTES


@pytest.mark.parametrize(
    ("request_", "named"),
    [
        ({"prompt": {"id": "pmpt_1", "variables": {"city": "Oslo"}}}, "prompt"),
        ({"background": True}, "background"),
        ({"extra_body": {"prompt_cache_options": {"prewarm": True}}}, "prewarm"),
        ({"include": ["message.output_text.everything"]}, "message.output_text.everything"),
    ],
    ids=["prompt", "background", "prewarm", "unknown-include"],
)
def test_what_a_chat_route_cannot_serve_is_a_400_naming_it(
    fake: FakeProvider, request_: dict[str, Any], named: str
) -> None:
    """A stored prompt (``prompt`` by id) went on to a chat route as a body field, answered
    without the prompt's text; ``prompt_cache_options.prewarm`` (no output) too."""
    with guard_over(fake, "chat") as guard:
        message = _bad_request(guard.client(), **request_)
    assert named in message
    assert fake.requests == []


def test_reasoning_encrypted_content_is_asked_of_responses_routes_only(fake: FakeProvider) -> None:
    """``include: ["reasoning.encrypted_content"]`` (which a stateless caller needs to send a
    reasoning model's items back) was dropped for every route; it goes to a Responses route,
    never to a chat or Anthropic route, which have no ``include``."""
    include: Any = ["reasoning.encrypted_content"]
    for route in ("responses", "chat", "anthropic"):
        with guard_over(fake, route) as guard:
            guard.client().responses.create(
                model="fake-model", input="hi", include=include, metadata={"ticket": "42"}
            )
        sent = _sent(fake)
        assert sent.get("include") == (include if route == "responses" else None), route
        if route != "anthropic":  # (whose metadata takes only a user_id)
            assert sent.get("metadata") == {"ticket": "42"}, route


def test_an_anthropic_route_is_not_sent_prompt_cache_options(fake: FakeProvider) -> None:
    """Chat's ``prompt_cache_options`` went on to an Anthropic route (which answers 400 "Extra
    inputs are not permitted"), as its other OpenAI-only parameters do not."""
    with guard_over(fake, "anthropic") as guard:
        guard.client().responses.create(
            model="fake-model",
            input="hi",
            extra_body={"prompt_cache_options": {"mode": "implicit"}},
            prompt_cache_key="k",
        )
    sent = _sent(fake)
    assert "prompt_cache_options" not in sent
    assert "prompt_cache_key" not in sent


# -- reasoning and truncation: whole to Responses routes ------------------------------------

_ALLOWED = {"chat": _CHAT_FIELDS, "responses": _RESPONSES_FIELDS}


@pytest.mark.parametrize("route", ["responses", "chat", "anthropic"])
def test_reasoning_reaches_a_responses_route_whole(fake: FakeProvider, route: str) -> None:
    """``reasoning.summary`` (and all of ``reasoning`` but its ``effort``) was dropped: a
    Responses route was sent ``{"effort": ...}`` alone, so the summaries the caller asked for
    were never requested. A Responses route gets ``reasoning`` as asked; a chat route its
    ``effort`` as ``reasoning_effort``; an Anthropic route neither."""
    reasoning: Any = {"effort": "low", "summary": "detailed"}
    with guard_over(fake, route) as guard:
        guard.client().responses.create(model="fake-model", input="hi", reasoning=reasoning)
    sent = _sent(fake)
    assert set(sent) <= _ALLOWED.get(route, set(sent)), set(sent)
    if route == "responses":
        assert sent["reasoning"] == reasoning
        assert "reasoning_effort" not in sent
    else:
        assert "reasoning" not in sent
        assert sent.get("reasoning_effort") == ("low" if route == "chat" else None)


def test_a_summary_alone_is_asked_of_a_responses_route_alone(fake: FakeProvider) -> None:
    """(No effort: a chat route gets no ``reasoning_effort``; a Responses route the summary.)"""
    reasoning: Any = {"summary": "auto"}
    for route in ("responses", "chat"):
        with guard_over(fake, route) as guard:
            guard.client().responses.create(model="fake-model", input="hi", reasoning=reasoning)
        sent = _sent(fake)
        assert sent.get("reasoning") == (reasoning if route == "responses" else None), route
        assert "reasoning_effort" not in sent, route


@pytest.mark.parametrize("route", ["responses", "chat", "anthropic"])
@pytest.mark.parametrize("truncation", ["auto", "disabled"])
def test_truncation_reaches_a_responses_route(
    fake: FakeProvider, route: str, truncation: Any
) -> None:
    """``truncation: "auto"`` was dropped: a long input got a context-length error where
    OpenAI would have truncated it. A Responses route gets it; chat and Anthropic routes
    have no such parameter, and are not sent it (an input too long for them is their
    explicit overflow error, see the README)."""
    with guard_over(fake, route) as guard:
        guard.client().responses.create(model="fake-model", input="hi", truncation=truncation)
    sent = _sent(fake)
    assert sent.get("truncation") == (truncation if route == "responses" else None)


# -- a chat-completions caller's logprobs from a Responses route ------------------------------

_TOKENS = [
    {
        "token": "Hi",
        "logprob": -0.25,
        "bytes": [72, 105],
        "top_logprobs": [
            {"token": "Hi", "logprob": -0.25, "bytes": [72, 105]},
            {"token": "Hey", "logprob": -1.5, "bytes": [72, 101, 121]},
        ],
    },
    {"token": "!", "logprob": -0.5, "bytes": [33], "top_logprobs": []},
]


def _responses_answer(streaming: bool) -> tuple[bytes, tuple[bytes, ...]]:
    """A Responses route's answer "Hi!" with its tokens' logprobs, whole or as events."""
    part = {"type": "output_text", "text": "Hi!", "annotations": [], "logprobs": _TOKENS}
    message = {
        "type": "message",
        "id": "msg_1",
        "role": "assistant",
        "status": "completed",
        "content": [part],
    }
    body = {"id": "resp_1", "object": "response", "status": "completed", "model": "m"}
    usage = {"input_tokens": 3, "output_tokens": 2, "total_tokens": 5}
    if not streaming:
        whole = {**body, "output": [message], "usage": usage}
        return http_response(json.dumps(whole).encode()), ()
    events = [
        {"type": "response.created", "response": {**body, "status": "in_progress", "output": []}},
        {"type": "response.output_text.delta", "delta": "Hi", "logprobs": _TOKENS[:1]},
        {"type": "response.output_text.delta", "delta": "!", "logprobs": _TOKENS[1:]},
        {"type": "response.completed", "response": {**body, "output": [message], "usage": usage}},
    ]
    data = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
    return sse_head(), (data,)


@pytest.mark.parametrize("streaming", [False, True], ids=["plain", "stream"])
def test_a_responses_route_s_logprobs_reach_a_chat_caller_in_chat_s_shape(streaming: bool) -> None:
    head, parts = _responses_answer(streaming)
    with RawServer(head, parts) as raw:
        route = OpenAIResponsesProvider(raw.base_url, model="m")
        with Guard(route, environ={}, retry=None) as guard:
            chat = guard.client().chat.completions.with_raw_response
            ask: Any = [{"role": "user", "content": "hi"}]
            raw_answer = chat.create(
                model="m", messages=ask, logprobs=True, top_logprobs=2, stream=streaming
            )
            if streaming:
                lines = raw_answer.http_response.iter_lines()
                data = [line[6:] for line in lines if line.startswith("data: {")]
                chunks = [ChatCompletionChunk.model_validate_json(d) for d in data]
                tokens = [
                    t.model_dump(mode="json")
                    for c in chunks
                    for choice in c.choices
                    if choice.logprobs is not None
                    for t in choice.logprobs.content or ()
                ]
            else:
                body = ChatCompletion.model_validate(raw_answer.http_response.json())
                logprobs = body.choices[0].logprobs
                assert logprobs is not None
                tokens = [t.model_dump(mode="json") for t in logprobs.content or ()]
    assert tokens == _TOKENS


def test_a_chat_caller_s_logprobs_are_asked_of_a_responses_route_as_it_asks_them(
    fake: FakeProvider,
) -> None:
    """``logprobs=True`` went to a Responses route as ``logprobs: true``, a parameter the
    Responses API does not have (a 400 from OpenAI): it is ``include``'s
    ``message.output_text.logprobs``, beside ``top_logprobs``."""
    with guard_over(fake, "responses") as guard:
        ask: Any = [{"role": "user", "content": "hi"}]
        guard.client().chat.completions.create(
            model="fake-model", messages=ask, logprobs=True, top_logprobs=3
        )
        guard.chat([{"role": "user", "content": "hi"}], extra_body={"logprobs": False})
    first, second = (r.body or {} for r in fake.requests[-2:])
    assert set(first) <= _RESPONSES_FIELDS
    assert (first.get("include"), first.get("top_logprobs")) == (
        ["message.output_text.logprobs"],
        3,
    )
    assert "logprobs" not in second
    assert "include" not in second


_BREAKPOINT = {"mode": "explicit", "ttl": "30m"}


def test_a_prompt_cache_breakpoint_reaches_a_responses_route(fake: FakeProvider) -> None:
    """openai's ``prompt_cache_breakpoint`` on a chat content part (the end of a reusable
    prefix) is the Responses API's too, on its ``input_text`` and ``input_image`` parts
    (openai's ``ResponseInputTextParam``, ``ResponseInputImageParam``): it was dropped, and
    the route cached at its own implicit breakpoint only."""
    image = {"url": "data:image/png;base64,iVBORw0KGgo=", "detail": "low"}
    messages: Any = [
        {
            "role": "system",
            "content": [
                {"type": "text", "text": "the handbook", "prompt_cache_breakpoint": _BREAKPOINT}
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "question"},
                {"type": "image_url", "image_url": image, "prompt_cache_breakpoint": _BREAKPOINT},
            ],
        },
    ]
    with guard_over(fake, "responses") as guard:
        guard.client().chat.completions.create(model="fake-model", messages=messages)
    system, user = _sent(fake)["input"]
    assert system["content"] == [
        {"type": "input_text", "text": "the handbook", "prompt_cache_breakpoint": _BREAKPOINT}
    ]
    assert user["content"] == [
        {"type": "input_text", "text": "question"},
        {
            "type": "input_image",
            "image_url": image["url"],
            "detail": "low",
            "prompt_cache_breakpoint": _BREAKPOINT,
        },
    ]
