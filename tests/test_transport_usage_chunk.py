"""The seam's chat-completions stream: usage (with ``stream_options.include_usage``) comes
on a chunk of its own with no choices, as OpenAI sends it, also when the Guard's stream has
one chunk that finishes and carries usage (a cache hit)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import anyio
import openai
import pytest

from llmguard_sdk import Guard, GuardedClient, OpenAICompatibleProvider
from llmguard_sdk.testing import FakeProvider
from llmguard_sdk.transport import async_http_client, http_client

from .conftest import USER
from .rawserver import RawServer, chat_answer, chat_chunk_event, http_response, sse_head

MakeGuard = Callable[..., Guard]
OPTIONS: dict[str, Any] = {"stream": True, "stream_options": {"include_usage": True}}


def _shape(chunks: list[Any]) -> list[tuple[int, str | None, bool]]:
    """Per chunk: how many choices, its finish reason, whether it carries usage."""
    return [
        (len(c.choices), c.choices[0].finish_reason if c.choices else None, c.usage is not None)
        for c in chunks
    ]


def _text(chunks: list[Any]) -> str:
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def test_a_cache_hit_s_stream_ends_in_a_usage_chunk_without_choices(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    seam = openai.OpenAI(
        api_key="sk-x",
        base_url="http://guard.test/v1",
        http_client=http_client(make_guard(fake, cache=True)),
    )
    miss = list(seam.chat.completions.create(model="m", messages=USER, **OPTIONS))
    raw = seam.chat.completions.with_raw_response.create(model="m", messages=USER, **OPTIONS)
    assert raw.headers["x-llmguard-route"] == "cache"
    hit = list(raw.parse())
    assert _text(hit) == _text(miss) == "Echo: hello there"
    # the finish on a chunk with its choice, then usage alone (it was one chunk with both)
    assert _shape(hit) == [(1, "stop", False), (0, None, True)]
    assert _shape(miss)[-2:] == [(1, "stop", False), (0, None, True)]
    assert hit[-1].usage is not None
    assert len({c.id for c in hit}) == 1
    plain = list(seam.chat.completions.create(model="m", messages=USER, stream=True))
    assert _shape(plain) == [(1, "stop", False)]  # no usage asked for: none sent
    assert len(fake.requests) == 1


def test_the_async_seam_splits_a_cache_hit_s_usage_too(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    guard = make_guard(fake, cache=True)

    async def run() -> list[tuple[int, str | None, bool]]:
        seam = openai.AsyncOpenAI(
            api_key="sk-x", base_url="http://guard.test/v1", http_client=async_http_client(guard)
        )
        for _ in range(2):
            stream = await seam.chat.completions.create(model="m", messages=USER, **OPTIONS)
            chunks = [chunk async for chunk in stream]
        return _shape(chunks)

    assert anyio.run(run) == [(1, "stop", False), (0, None, True)]


def test_the_look_alike_client_splits_a_cache_hit_s_usage_too(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    from llmguard_sdk.client import AsyncGuardedClient, GuardedClient

    guard = make_guard(fake, cache=True)
    client = GuardedClient(guard)
    miss = list(client.chat.completions.create(model="m", messages=USER, **OPTIONS))
    hit = list(client.chat.completions.create(model="m", messages=USER, **OPTIONS))
    assert _text(hit) == _text(miss) == "Echo: hello there"
    assert _shape(hit) == [(1, "stop", False), (0, None, True)]
    plain = list(client.chat.completions.create(model="m", messages=USER, stream=True))
    assert _shape(plain) == [(1, "stop", False)]

    async def run() -> list[tuple[int, str | None, bool]]:
        stream = await AsyncGuardedClient(guard).chat.completions.create(
            model="m", messages=USER, **OPTIONS
        )
        return _shape([chunk async for chunk in stream])

    assert anyio.run(run) == [(1, "stop", False), (0, None, True)]


_WRITTEN = {
    "prompt_tokens": 900,
    "completion_tokens": 2,
    "total_tokens": 902,
    "prompt_tokens_details": {"cached_tokens": 100, "cache_write_tokens": 600},
}


def _writing_server(streaming: bool) -> RawServer:
    """A compatible server whose answer "Done." read 100 input tokens from its cache and
    wrote 600 (a stream's usage on a last chunk of its own)."""
    if not streaming:
        body = json.loads(chat_answer("Done.").partition(b"\r\n\r\n")[2])
        body["usage"] = _WRITTEN
        return RawServer(http_response(json.dumps(body).encode()))
    usage = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "m", "choices": []}
    events = chat_chunk_event({"role": "assistant", "content": "Done."}, "stop")
    events += b"data: " + json.dumps({**usage, "usage": _WRITTEN}).encode() + b"\n\n"
    return RawServer(sse_head(), (events + b"data: [DONE]\n\n",))


@pytest.mark.parametrize("streaming", [False, True])
def test_the_seam_s_usage_carries_the_cache_writes(streaming: bool) -> None:
    """Chat-completions usage through the seam (openai's SDK) and the look-alike client said
    only ``prompt_tokens_details.cached_tokens``: the input tokens written to the cache
    (openai's optional ``cache_write_tokens``, billed above input on OpenAI's newer models)
    were lost to whatever prices the answer from there. The Responses answer carried them."""
    with _writing_server(streaming) as raw:
        route = OpenAICompatibleProvider(raw.base_url, model="m", name="server")
        with Guard(route, retry=None, timeout=10, environ={}) as guard:
            seam = openai.OpenAI(
                api_key="sk-x", base_url="http://guard.test/v1", http_client=http_client(guard)
            )
            if streaming:
                chunks = list(seam.chat.completions.create(model="m", messages=USER, **OPTIONS))
                usage = chunks[-1].usage
            else:
                usage = seam.chat.completions.create(model="m", messages=USER).usage
                alike = GuardedClient(guard).chat.completions.create(model="m", messages=USER)
                assert alike.usage is not None
                details = alike.usage.prompt_tokens_details
                assert details == {"cached_tokens": 100, "cache_write_tokens": 600}
    assert usage is not None
    assert usage.prompt_tokens_details is not None
    assert usage.prompt_tokens == 900
    assert usage.prompt_tokens_details.cached_tokens == 100
    assert usage.prompt_tokens_details.cache_write_tokens == 600
