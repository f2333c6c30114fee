"""A cached answer with audio (gpt-4o-audio's ``message.audio``) is never served after its
audio id expired (``audio.expires_at``: a later turn refers to the audio by that id, which
the provider no longer knows after). An entry is kept fresh (and stale) no longer than
the audio id lives, and an answer whose audio id has already expired is not stored. The
cache served one for the whole ``ttl`` with its ``expires_at`` in the past."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from llmguard_sdk import ChatRequest, Guard, OpenAICompatibleProvider
from llmguard_sdk.cache import ResponseCache

from .conftest import USER, RedisTarget, require_module
from .rawserver import RawServer, http_response

_HOUR = 3600.0


def _answer(expires_at: int, content: str | None = "Hi.") -> bytes:
    audio = {"id": "audio_1", "data": "UklGRg==", "expires_at": expires_at, "transcript": "Hi"}
    message = {"role": "assistant", "content": content, "audio": audio}
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "m",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
    }
    return http_response(json.dumps(body).encode())


@pytest.fixture(params=["memory", "redis"])
def cache(request: pytest.FixtureRequest, redis_target: RedisTarget) -> Iterator[ResponseCache]:
    options: dict[str, Any] = {"semantic": False, "ttl": _HOUR}
    if request.param == "redis":
        url, prefix = redis_target("redis")
        options.update(key_prefix=prefix, sync_interval=0.0)
        made = ResponseCache(url, **options)
    else:
        made = ResponseCache(**options)
    yield made
    made.close()


def _served(cache: ResponseCache, expires_at: int, content: str | None = "Hi.") -> list[Any]:
    """The ``audio`` of two answers to the same call through ``guard.client()``, and
    whether each came from the cache (each with the route's ``content``)."""
    require_module("openai", "openai is a dev dependency")
    with (
        RawServer(_answer(expires_at, content)) as raw,
        Guard(OpenAICompatibleProvider(raw.base_url, model="m"), environ={}, cache=cache) as guard,
    ):
        client = guard.client()
        served = []
        for _ in range(2):
            answer = client.chat.completions.create(model="m", messages=USER)
            audio = answer.choices[0].message.audio
            assert audio is not None
            assert answer.choices[0].message.content == content  # (a hit's None too: not "")
            view = answer.llmguard  # type: ignore[attr-defined]
            served.append((audio.expires_at, view.metadata.get("cache")))
        return served


def test_an_answer_whose_audio_id_has_expired_is_not_served_from_the_cache(
    cache: ResponseCache,
) -> None:
    expired = int(time.time()) - 60  # (as when the route's clock is ahead, or a slow call)
    assert _served(cache, expired) == [(expired, None), (expired, None)]


def test_an_entry_lives_no_longer_than_its_audio_id(cache: ResponseCache) -> None:
    expires_at = int(time.time() + _HOUR / 2)  # before the cache's ttl ends
    assert _served(cache, expires_at) == [(expires_at, None), (expires_at, "exact")]
    request = ChatRequest.model_validate({"messages": USER})
    with (
        RawServer(_answer(expires_at)) as raw,
        Guard(OpenAICompatibleProvider(raw.base_url, model="m"), environ={}) as guard,
    ):
        response = guard.chat(USER)
    entry = cache.entry_for(request, response)
    assert entry is not None
    assert (entry.fresh_until, entry.stale_until) == (expires_at, expires_at)
    later = cache.entry_for(request, response.model_copy(update={"metadata": {}}))
    assert later is not None
    assert later.fresh_until > expires_at  # (without audio: the ttl)


def test_an_audio_answer_without_text_is_cached(cache: ResponseCache) -> None:
    """gpt-4o-audio's answers come with ``content: null``: the audio is the answer (its
    transcript in ``audio.transcript``). Taken for a blank answer, it was never cached."""
    expires_at = int(time.time() + _HOUR / 2)
    assert _served(cache, expires_at, None) == [(expires_at, None), (expires_at, "exact")]
    request = ChatRequest.model_validate({"messages": USER})
    with (
        RawServer(_answer(expires_at, None)) as raw,
        Guard(OpenAICompatibleProvider(raw.base_url, model="m"), environ={}) as guard,
    ):
        response = guard.chat(USER)
    entry = cache.entry_for(request, response)
    assert entry is not None
    assert (entry.fresh_until, entry.stale_until) == (expires_at, expires_at)  # (the rule)
    blank = response.model_copy(update={"metadata": {}})  # no audio, no text: blank
    assert cache.entry_for(request, blank) is None
