"""Output guardrails on every answer served: a provider's, the cache's (fresh or stale: kept
as served, filtered again as a hit) and the degraded one, and a whole answer replayed on a
stream as the one chunk the filters let through."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from llmguard_sdk import (
    Cascade,
    ChatResponse,
    ConfigurationError,
    Guard,
    GuardrailRejectedError,
    OpenAICompatibleProvider,
    TaskRouter,
)
from llmguard_sdk.cache import ResponseCache
from llmguard_sdk.retry import waits_off
from llmguard_sdk.router import not_empty
from llmguard_sdk.testing import FakeProvider, Fault
from tests.conftest import USER

MakeGuard = Callable[..., Guard]


def signed(response: ChatResponse) -> ChatResponse:
    """A filter that is not idempotent: run twice on one answer, it signs it twice."""
    return response.model_copy(update={"text": response.text + " [AI]"})


def _answer(guard: Guard, stream: bool) -> tuple[str, ChatResponse]:
    """What the caller read (a stream's chunks joined) and the call's response."""
    if not stream:
        response = guard.chat(USER)
        return response.text, response
    with guard.chat(USER, stream=True) as chunks:
        text = "".join(chunk.text for chunk in chunks)
    return text, chunks.response


def signed_once(response: ChatResponse) -> ChatResponse | None:
    """:func:`signed`, leaving a cached answer (signed as it was served) as it is."""
    return None if response.route == "cache" else signed(response)


@pytest.mark.parametrize("stream", [False, True])
def test_a_cached_answer_is_kept_as_served(
    fake: FakeProvider, make_guard: MakeGuard, stream: bool
) -> None:
    """The cache keeps what the filters left (a redacting filter's words never reach it);
    a hit passes the filters again, as ``route == "cache"``; a replayed stream's chunk is
    the answer the filters left (it was the stored text)."""
    seen: list[str] = []

    def watch(response: ChatResponse) -> None:
        seen.append(f"{response.route}: {response.text}")

    guard = make_guard(fake, cache=True, output_filters=[signed_once, watch])
    first = _answer(guard, stream=False)[1]
    read, hit = _answer(guard, stream)
    assert first.text == "Echo: hello there [AI]"
    assert (hit.route, hit.text, read) == ("cache", first.text, first.text)
    assert seen == [f"primary: {first.text}", f"cache: {first.text}"]
    assert fake.stats.requests == 1


def test_a_stale_answer_is_served_as_it_was_stored(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    guard = make_guard(
        fake, cache=ResponseCache(ttl=0.1, stale_ttl=60), output_filters=[signed_once]
    )
    fresh = guard.chat(USER)
    time.sleep(0.2)
    fake.always(Fault(status=503))
    with waits_off():
        stale = guard.chat(USER)
    assert (stale.metadata["cache"], stale.text) == ("stale", fresh.text)


def test_a_filter_of_the_guard_reading_the_cache_refuses_what_another_stored(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    """The cache holds answers, not verdicts: a Guard whose filters refuse an answer that a
    Guard without them stored (or a filter added since) refuses the hit too."""

    def no_echo(response: ChatResponse) -> None:
        if response.text.startswith("Echo"):
            raise GuardrailRejectedError("echoes")

    cache = ResponseCache()
    make_guard(fake, cache=cache).chat(USER)
    strict = make_guard(fake, cache=cache, output_filters=[no_echo])
    with pytest.raises(GuardrailRejectedError) as info:
        strict.chat(USER)
    assert info.value.stage == "output"
    assert fake.stats.requests == 1


@pytest.mark.parametrize("stream", [False, True])
def test_a_degraded_answer_is_served_as_the_output_filters_left_it(
    fake: FakeProvider, make_guard: MakeGuard, stream: bool
) -> None:
    fake.always(Fault(status=503))
    guard = make_guard(fake, degraded="Try again later.", retry=None, output_filters=[signed])
    read, response = _answer(guard, stream)
    assert response.route == "degraded"
    assert read == response.text == "Try again later. [AI]"  # (the chunk was unfiltered)


def _wrong_kind(response: ChatResponse) -> object:
    return "oops"


def _no_text(response: ChatResponse) -> ChatResponse:
    return response.model_copy(update={"text": None})  # (model_copy does not validate)


@pytest.mark.parametrize(
    ("output_filter", "said"), [(_wrong_kind, "returned str"), (_no_text, "invalid response")]
)
def test_a_cascades_tier_checks_what_an_output_filter_returned(
    fake: FakeProvider, fake2: FakeProvider, output_filter: Callable[..., Any], said: str
) -> None:
    """A filter's answer of the wrong kind is the ConfigurationError naming the filter that
    a Guard without a cascade raises, not an AttributeError from the cascade's checks."""
    router = TaskRouter(
        {"small": ["primary"], "large": ["backup"]},
        cascades={"auto": Cascade(["small", "large"], checks=[not_empty()])},
        default="auto",
    )
    routes = [
        OpenAICompatibleProvider(f.base_url, model=f.model, name=f.name) for f in (fake, fake2)
    ]
    guard = Guard(routes, tasks=router, output_filters=[output_filter], environ={})
    named = f"output filter .*{output_filter.__name__}.* {said}"
    with guard, pytest.raises(ConfigurationError, match=named):
        guard.chat(USER)
