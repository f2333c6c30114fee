"""The call's ``extra_headers`` an OpenAI-compatible route sends (``_extra_headers``): a call
without any sends the route's headers alone (and reads no metadata: it returns early), one
with some sends them after the route's, the caller's mapping read as it is (not copied, never
changed); Claude's own (``anthropic-beta`` ...), where the request names them Anthropic's,
never reach the route."""

from __future__ import annotations

import pytest

from llmguard_sdk import ChatRequest, OpenAICompatibleProvider
from llmguard_sdk.providers._anthropic_only import CLAUDE_HEADERS
from llmguard_sdk.providers.wire import ANTHROPIC_ONLY_KEY, RESPONSES_ONLY_KEY, named_keys
from llmguard_sdk.testing import FakeProvider

from .providercalls import LIBRARIES, send_calls

_CLAUDE_S = {
    "anthropic-beta": "context-1m-2025-08-07",
    "Anthropic-Workspace-Id": "wrkspc_1",  # (any case)
    "anthropic-user-profile-id": "profile-1",
}


def _request(headers: dict[str, str] | None, metadata: dict[str, str] | None = None) -> ChatRequest:
    return ChatRequest.model_validate(
        {
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 8,
            "extra_headers": headers,
            "metadata": metadata,
        }
    )


@pytest.mark.parametrize("library", LIBRARIES)
@pytest.mark.parametrize("stream", [False, True])
def test_a_call_without_extra_headers_sends_the_same_headers_as_ever(
    fake: FakeProvider, library: str, stream: bool
) -> None:
    """None, ``{}`` and headers that name nothing Anthropic's: the same headers on the wire,
    in the same order, the call's own after the route's; the caller's mapping unchanged."""
    provider = OpenAICompatibleProvider(
        fake.base_url, api_key="sk-test", name="p", headers={"x-team": "search"}
    )
    some = {"x-trace": "t1", "Idempotency-Key": "llmguard-1"}
    requests = [_request(None), _request({}), _request(dict(some))]
    # metadata that names nothing Anthropic's (named_keys returns at once): the same headers
    requests += [
        _request(dict(some), {"tags": "a"}),
        _request(dict(some), {ANTHROPIC_ONLY_KEY: ""}),
    ]
    send_calls(provider, library, requests, stream)
    provider.close()
    none, empty, given, tagged, unnamed = (list(r.headers.items()) for r in fake.requests[-5:])
    assert none == empty
    assert tagged == unnamed == given
    assert {name for name, _ in none} >= {"host", "accept", "authorization", "x-team"}
    assert not {"x-trace", "idempotency-key"} & {name for name, _ in none}
    assert given == [*none, ("x-trace", "t1"), ("idempotency-key", "llmguard-1")]
    assert requests[2].extra_headers == requests[3].extra_headers == some


@pytest.mark.parametrize("library", LIBRARIES)
@pytest.mark.parametrize("stream", [False, True])
def test_claude_s_own_headers_named_anthropic_s_never_reach_an_openai_route(
    fake: FakeProvider, library: str, stream: bool
) -> None:
    provider = OpenAICompatibleProvider(fake.base_url, name="p")
    headers = {**_CLAUDE_S, "x-trace": "t1"}
    named = _request(dict(headers), {ANTHROPIC_ONLY_KEY: f"top_k,{CLAUDE_HEADERS}"})
    only_claude_s = _request(dict(_CLAUDE_S), {ANTHROPIC_ONLY_KEY: CLAUDE_HEADERS})
    send_calls(provider, library, [named, only_claude_s], stream)
    provider.close()
    first, second = (r.headers for r in fake.requests[-2:])
    assert first["x-trace"] == "t1"
    for sent in (first, second):
        assert not {name.lower() for name in _CLAUDE_S} & set(sent)
    assert named.extra_headers == headers  # (an Anthropic route of the chain still gets them)
    assert only_claude_s.extra_headers == _CLAUDE_S


def test_headers_with_nothing_to_leave_out_are_the_caller_s_own_not_a_copy() -> None:
    provider = OpenAICompatibleProvider("http://127.0.0.1:9/v1", name="p")
    assert provider._extra_headers(_request(None)) is None
    assert provider._extra_headers(_request({})) is None
    assert provider._extra_headers(_request({}, {ANTHROPIC_ONLY_KEY: CLAUDE_HEADERS})) is None
    plain = _request({"x-trace": "t1"}, {ANTHROPIC_ONLY_KEY: "top_k"})
    assert provider._extra_headers(plain) is plain.extra_headers
    unnamed = _request({**_CLAUDE_S})  # not named Anthropic's: the caller's to send
    assert provider._extra_headers(unnamed) is unnamed.extra_headers
    named = _request({**_CLAUDE_S, "x-trace": "t1"}, {ANTHROPIC_ONLY_KEY: CLAUDE_HEADERS})
    assert provider._extra_headers(named) == {"x-trace": "t1"}
    assert named.extra_headers == {**_CLAUDE_S, "x-trace": "t1"}
    only = _request(dict(_CLAUDE_S), {ANTHROPIC_ONLY_KEY: CLAUDE_HEADERS})
    assert provider._extra_headers(only) is None


def test_named_keys_are_a_new_list_each_time_empty_where_the_metadata_names_none() -> None:
    """Its callers extend the list they get (``dropped += ...``): never a shared one."""
    for metadata in (None, {}, {"tags": "a"}, {ANTHROPIC_ONLY_KEY: ""}, {ANTHROPIC_ONLY_KEY: ","}):
        request = _request(None, metadata)
        first = named_keys(request, ANTHROPIC_ONLY_KEY)
        assert first == []
        assert first is not named_keys(request, ANTHROPIC_ONLY_KEY)
    both = _request(None, {ANTHROPIC_ONLY_KEY: "top_k,,thinking", RESPONSES_ONLY_KEY: "store"})
    assert named_keys(both, ANTHROPIC_ONLY_KEY) == ["top_k", "thinking"]
    assert named_keys(both, RESPONSES_ONLY_KEY) == ["store"]
