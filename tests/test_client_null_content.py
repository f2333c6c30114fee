"""A drop-in client's ``message.content`` is ``None`` where the route's was ``null`` (an
answer with only tool calls, OpenAI's audio answers, a content filter's stop) and ``""``
where it was ``""``, as openai's own client gives them: frameworks check ``content is
None``. The Guard's text is ``""`` for both; the drop-ins said ``""`` for an audio answer
and ``None`` for ``""`` beside tool calls. Real loopback routes: FakeProvider, and a raw
server for the shapes FakeProvider does not send."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from llmguard_sdk import Guard, GuardedClient, OpenAICompatibleProvider
from llmguard_sdk.testing import FakeProvider

from .conftest import USER, require_module
from .rawserver import RawServer, http_response

_TOOL = {
    "type": "function",
    "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}},
}
_CALL = {"id": "call_1", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}
_AUDIO = {"id": "audio_1", "data": "UklGRg==", "expires_at": 2**31, "transcript": "Hi"}


def _clients(guard: Guard) -> Iterator[Any]:
    """openai's own client, and the look-alike."""
    require_module("openai", "openai is a dev dependency")
    yield guard.client()
    yield GuardedClient(guard)


def _contents(guard: Guard, **options: Any) -> list[Any]:
    return [
        client.chat.completions.create(model="m", messages=USER, **options)
        .choices[0]
        .message.content
        for client in _clients(guard)
    ]


def test_fake_provider_tool_calls_with_null_content_and_an_empty_text() -> None:
    forced = {"type": "function", "function": {"name": "get_time"}}
    with FakeProvider(reply=lambda body: "") as api:
        route = OpenAICompatibleProvider(api.base_url, model="m")
        with Guard(route, environ={}) as guard:
            assert _contents(guard, tools=[_TOOL], tool_choice=forced) == [None, None]
            assert _contents(guard) == ["", ""]


RAW: dict[str, tuple[dict[str, Any], str, str | None]] = {
    "null beside audio": ({"content": None, "audio": _AUDIO}, "stop", None),
    "null alone": ({"content": None}, "content_filter", None),
    "null beside tool calls": ({"content": None, "tool_calls": [_CALL]}, "tool_calls", None),
    "empty beside tool calls": ({"content": "", "tool_calls": [_CALL]}, "tool_calls", ""),
    "empty alone": ({"content": ""}, "stop", ""),
    "text": ({"content": "Hi"}, "stop", "Hi"),
}


@pytest.mark.parametrize("case", list(RAW))
def test_the_content_is_none_where_the_route_s_was_null(case: str) -> None:
    fields, finish, content = RAW[case]
    message = {"role": "assistant", **fields}
    choice = {"index": 0, "message": message, "finish_reason": finish}
    body = {"id": "c-1", "object": "chat.completion", "model": "m", "choices": [choice]}
    with RawServer(http_response(json.dumps(body).encode())) as raw:
        route = OpenAICompatibleProvider(raw.base_url, model="m")
        with Guard(route, retry=None, environ={}) as guard:
            assert _contents(guard) == [content, content]
