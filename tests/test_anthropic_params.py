"""What an Anthropic route is sent of an OpenAI-shaped request: every chat-completions
parameter (and every Responses parameter the seam takes) at once, and the body Claude gets
holds only fields its Messages API takes (anthropic's own ``MessageCreateParams``), with
values it takes: OpenAI's service tiers other than ``auto`` are left out."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from anthropic.types.message_create_params import MessageCreateParamsBase
from openai.types.chat.completion_create_params import CompletionCreateParamsBase
from openai.types.responses.response_create_params import ResponseCreateParamsBase

from llmguard_sdk.testing import FakeProvider

from .routekinds import guard_over

# the sampling parameters: Claude's models that sample take them (newer ones refuse them, and
# anthropic's SDK dropped them from its types), the provider sends what the caller asked until
# the model refuses one (tests/test_anthropic_sampling.py)
_SAMPLING = frozenset({"temperature", "top_p", "top_k"})
_CLAUDE_FIELDS = frozenset(MessageCreateParamsBase.__annotations__) | {"stream"} | _SAMPLING
_CLAUDE_TIERS = ("auto", "standard_only")  # MessageCreateParamsBase's service_tier
_TOOL: Any = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}

# a value for every parameter of openai's chat-completions create(), but messages and model
_EVERY_CHAT: dict[str, Any] = {
    "audio": {"voice": "alloy", "format": "wav"},
    "frequency_penalty": 0.1,
    "function_call": "auto",
    "functions": [{"name": "old_style", "parameters": {"type": "object"}}],
    "logit_bias": {"50256": -100},
    "logprobs": True,
    "max_completion_tokens": 50,
    "max_tokens": 50,
    "metadata": {"ticket": "42"},
    "modalities": ["text"],
    "moderation": {"model": "omni-moderation-latest", "policy": {"input": {"mode": "block"}}},
    "n": 1,
    "parallel_tool_calls": False,
    "prediction": {"type": "content", "content": "the answer"},
    "presence_penalty": 0.1,
    "prompt_cache_key": "tenant-7",
    "prompt_cache_options": {"mode": "implicit", "ttl": "30m"},
    "prompt_cache_retention": "24h",
    "reasoning_effort": "low",
    "response_format": {"type": "json_object"},
    "safety_identifier": "user-hash-1",
    "seed": 7,
    "service_tier": "flex",
    "stop": ["END"],
    "store": True,
    "stream_options": {"include_usage": True},
    "temperature": 0.5,
    "tool_choice": "auto",
    "tools": [_TOOL],
    "top_logprobs": 2,
    "top_p": 0.9,
    "user": "user-1",
    "verbosity": "low",
    "web_search_options": {"search_context_size": "low"},
}
# a value for every parameter of openai's responses.create() the seam serves (the rest, such
# as previous_response_id or a stored prompt, are a 400), but input and model
_EVERY_RESPONSES: dict[str, Any] = {
    "access_programs": {"cyber": "standard"},
    "background": False,
    "background_options": {"continuation_id": "job-1"},
    "context_management": [{"type": "compaction", "compact_threshold": 1000}],
    "image": {"context_compression": "auto"},
    "include": ["reasoning.encrypted_content", "message.output_text.logprobs"],
    "instructions": "be brief",
    "max_output_tokens": 50,
    "max_tool_calls": 3,
    "metadata": {"ticket": "42"},
    "moderation": {"model": "omni-moderation-latest"},
    "parallel_tool_calls": False,
    "prompt_cache_key": "tenant-7",
    "prompt_cache_options": {"mode": "implicit"},
    "prompt_cache_retention": "24h",
    "reasoning": {"effort": "low", "summary": "auto"},
    "safety_identifier": "user-hash-1",
    "service_tier": "priority",
    "store": False,
    "stream_options": {"include_obfuscation": False},
    "temperature": 0.5,
    "text": {"format": {"type": "text"}, "verbosity": "low"},
    "tool_choice": "auto",
    "tools": [{"type": "function", "name": "lookup", "parameters": {"type": "object"}}],
    "top_logprobs": 2,
    "top_p": 0.9,
    "truncation": "auto",
    "user": "user-1",
}
_REFUSED = {"conversation", "previous_response_id", "prompt"}  # state the Guard does not keep


def _sent(fake: FakeProvider) -> dict[str, Any]:
    return fake.requests[-1].body or {}


def test_the_lists_name_every_parameter_of_openai_s_types() -> None:
    """(A parameter openai adds fails this test: decide what an Anthropic route gets of it.)"""
    chat = set(_EVERY_CHAT) | {"messages", "model"}
    assert chat == set(CompletionCreateParamsBase.__annotations__)
    responses = set(_EVERY_RESPONSES) | {"input", "model"} | _REFUSED
    assert responses == set(ResponseCreateParamsBase.__annotations__)


@pytest.mark.parametrize("streaming", [False, True], ids=["plain", "stream"])
def test_every_chat_parameter_reaches_claude_only_as_its_api_takes_it(
    fake: FakeProvider, streaming: bool
) -> None:
    """``moderation`` and ``service_tier: "flex"`` went on to Claude, which answers 400 to
    each (an unknown field; a tier it does not have)."""
    with guard_over(fake, "anthropic") as guard:
        create = guard.client().chat.completions.create
        answer = create(
            model="fake-model",
            messages=[{"role": "user", "content": "hi"}],
            stream=streaming,
            **_EVERY_CHAT,
        )
        if streaming:
            list(answer)
    sent = _sent(fake)
    assert set(sent) <= _CLAUDE_FIELDS, set(sent) - _CLAUDE_FIELDS
    assert sent["metadata"] == {"user_id": "user-1"}
    assert sent["tool_choice"] == {"type": "auto", "disable_parallel_tool_use": True}
    assert sent["stop_sequences"] == ["END"]
    assert "service_tier" not in sent


def test_every_responses_parameter_reaches_claude_only_as_its_api_takes_it(
    fake: FakeProvider,
) -> None:
    with guard_over(fake, "anthropic") as guard:
        guard.client().responses.create(model="fake-model", input="hi", **_EVERY_RESPONSES)
    sent = _sent(fake)
    assert set(sent) <= _CLAUDE_FIELDS, set(sent) - _CLAUDE_FIELDS
    assert sent["max_tokens"] == 50
    assert "service_tier" not in sent


@pytest.mark.parametrize(
    ("tier", "sent_as"),
    [
        ("auto", "auto"),
        ("standard_only", "standard_only"),  # Claude's own (extra_body, the Anthropic seam)
        ("default", None),
        ("flex", None),
        ("scale", None),
        ("priority", None),
        ("fast", None),
    ],
)
def test_a_service_tier_claude_does_not_have_is_left_out(
    fake: FakeProvider, tier: str, sent_as: str | None, caplog: pytest.LogCaptureFixture
) -> None:
    """OpenAI's tiers (``default``, ``flex``, ``scale``, ``priority``, ``fast``) have no
    counterpart in Claude's ``auto`` / ``standard_only``: left out (Claude's default,
    ``auto``), with a debug log naming the tier; the ones Claude has go on."""
    with caplog.at_level(logging.DEBUG, logger="llmguard_sdk"), guard_over(fake, "anthropic") as g:
        g.chat([{"role": "user", "content": "hi"}], extra_body={"service_tier": tier})
    assert _sent(fake).get("service_tier") == sent_as
    assert sent_as in _CLAUDE_TIERS or sent_as is None
    logged = [r.getMessage() for r in caplog.records if "service_tier" in r.getMessage()]
    assert bool(logged) == (sent_as is None)
    assert all(repr(tier) in message for message in logged)


_BREAKPOINT = {"mode": "explicit", "ttl": "30m"}
_IMAGE = "data:image/png;base64,iVBORw0KGgo="


def _part(text: str, breakpoint: bool = True) -> dict[str, Any]:
    part: dict[str, Any] = {"type": "text", "text": text}
    return {**part, "prompt_cache_breakpoint": _BREAKPOINT} if breakpoint else part


def test_a_prompt_cache_breakpoint_reaches_claude_as_its_cache_control(
    fake: FakeProvider,
) -> None:
    """openai's content parts may end a reusable prefix (``prompt_cache_breakpoint``), as
    Claude's blocks do (``cache_control``); the part went to Claude as it was, and Claude
    answers 400 to the field it does not know."""
    image: dict[str, Any] = {
        "type": "image_url",
        "image_url": {"url": _IMAGE},
        "prompt_cache_breakpoint": _BREAKPOINT,
    }
    messages: Any = [
        {"role": "system", "content": [_part("the handbook")]},
        {"role": "user", "content": [_part("question one", breakpoint=False), image]},
        {"role": "assistant", "content": "answer one"},
        {"role": "user", "content": [_part("question two")]},
    ]
    with guard_over(fake, "anthropic") as guard:
        guard.client().chat.completions.create(model="fake-model", messages=messages)
    sent = _sent(fake)
    assert "prompt_cache_breakpoint" not in str(sent)
    ephemeral = {"type": "ephemeral"}  # Claude's (its lifetime: Claude's default)
    assert sent["system"] == [{"type": "text", "text": "the handbook", "cache_control": ephemeral}]
    assert sent["messages"][0]["content"][0] == {"type": "text", "text": "question one"}
    assert sent["messages"][0]["content"][1]["type"] == "image"
    assert sent["messages"][0]["content"][1]["cache_control"] == ephemeral
    assert sent["messages"][2]["content"] == [
        {"type": "text", "text": "question two", "cache_control": ephemeral}
    ]


def test_claude_is_sent_no_more_breakpoints_than_it_takes(fake: FakeProvider) -> None:
    """Claude takes four blocks with ``cache_control`` at most (400 beyond); openai's
    breakpoints may be more (OpenAI writes the latest four): the latest are kept, as many as
    the request's own ``cache_control`` leaves room for."""
    own = {"type": "text", "text": "rules", "cache_control": {"type": "ephemeral"}}
    turns: Any = [{"role": "system", "content": [own]}]
    for n in range(6):
        turns += [
            {"role": "user", "content": [_part(f"question {n}")]},
            {"role": "assistant", "content": f"answer {n}"},
        ]
    turns.append({"role": "user", "content": "last"})
    with guard_over(fake, "anthropic") as guard:
        guard.client().chat.completions.create(model="fake-model", messages=turns)
    sent = _sent(fake)
    assert "prompt_cache_breakpoint" not in str(sent)
    assert sent["system"] == [own]
    marked = [
        n
        for n, turn in enumerate(sent["messages"])
        if isinstance(turn["content"], list) and "cache_control" in turn["content"][-1]
    ]
    assert marked == [6, 8, 10]  # questions 3, 4 and 5
    assert sent["messages"][0]["content"] == "question 0"  # a plain text turn again


_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
    "additionalProperties": False,
}
_JSON_SCHEMA: Any = {"type": "json_schema", "json_schema": {"name": "city", "schema": _SCHEMA}}


def test_a_json_schema_response_format_reaches_claude_as_its_output_format(
    fake: FakeProvider,
) -> None:
    """A chat caller's ``response_format`` JSON schema is Claude's structured output,
    ``output_config.format`` (anthropic's ``JSONOutputFormatParam``: its type and schema); it
    was left out, and Claude answered free text. A ``json_object`` format has no counterpart
    (Claude takes a schema only): none is sent. The caller's own ``output_config`` (its
    ``effort``) is kept beside it."""
    output_format = {"type": "json_schema", "schema": _SCHEMA}
    with guard_over(fake, "anthropic") as guard:
        guard.client().chat.completions.create(
            model="fake-model",
            messages=[{"role": "user", "content": "hi"}],
            response_format=_JSON_SCHEMA,
        )
        assert _sent(fake)["output_config"] == {"format": output_format}
        assert "response_format" not in _sent(fake)
        guard.chat(
            [{"role": "user", "content": "hi"}],
            response_format=_JSON_SCHEMA,
            extra_body={"output_config": {"effort": "low"}},
        )
        assert _sent(fake)["output_config"] == {"effort": "low", "format": output_format}
        guard.chat([{"role": "user", "content": "hi"}], response_format={"type": "json_object"})
        assert "output_config" not in _sent(fake)
        # a Responses caller's text.format, the same
        guard.client().responses.create(
            model="fake-model",
            input="hi",
            text={"format": {"type": "json_schema", "name": "city", "schema": _SCHEMA}},
        )
        assert _sent(fake)["output_config"] == {"format": output_format}
