"""A call's cache controls through the drop-in clients: ``x-llmguard-cache`` (``no-cache``:
``cache_refresh=True``, ``no-store``: ``cacheable=False``), ``x-llmguard-cache-ttl``,
``x-llmguard-cache-max-age`` and ``x-llmguard-cache-tags`` say what ``Guard.chat``'s keywords
say, for openai's and anthropic's clients, which can only add headers; none reaches the
provider."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import openai
import pytest

from llmguard_sdk import AsyncGuardedClient, Guard, GuardedClient
from llmguard_sdk.cache import ResponseCache
from llmguard_sdk.client import anthropic_client
from llmguard_sdk.errors import RequestValidationError
from llmguard_sdk.testing import FakeProvider

from .conftest import require_module

MakeGuard = Callable[..., Guard]
ASK = [{"role": "user", "content": "What are your opening hours on Sunday?"}]
REFRESH = {"x-llmguard-cache": "no-cache"}
NO_STORE = {"x-llmguard-cache": "no-store"}


@pytest.fixture
def counting() -> Iterator[FakeProvider]:
    """A provider whose every answer is new: "answer 1", "answer 2" ..."""
    numbers = itertools.count(1)
    with FakeProvider(name="primary", reply=lambda body: f"answer {next(numbers)}") as fake:
        yield fake


def _ask(guard: Guard, headers: dict[str, str] | None = None) -> tuple[str, str]:
    """The route and text of one call through ``guard.client()`` with ``headers``."""
    client: Any = guard.client()
    completion = client.chat.completions.create(model="m", messages=ASK, extra_headers=headers)
    return completion.llmguard.route, str(completion.choices[0].message.content)


def test_no_cache_refreshes_the_entry(counting: FakeProvider, make_guard: MakeGuard) -> None:
    """Through ``guard.client()`` a call could not ask for a new answer in place of a cached
    one: ``x-llmguard-cache: no-cache`` reads nothing and stores what the provider says."""
    guard = make_guard(counting, cache=True)
    assert _ask(guard) == ("primary", "answer 1")
    assert _ask(guard) == ("cache", "answer 1")
    assert _ask(guard, REFRESH) == ("primary", "answer 2")
    assert _ask(guard) == ("cache", "answer 2")
    assert counting.stats.requests == 2
    sent = {name.lower() for request in counting.requests for name in request.headers}
    assert not any(name.startswith("x-llmguard-") for name in sent)


def test_no_store_leaves_nothing_stored(counting: FakeProvider, make_guard: MakeGuard) -> None:
    guard = make_guard(counting, cache=True)
    assert _ask(guard, NO_STORE) == ("primary", "answer 1")
    assert _ask(guard, {"x-llmguard-cache": "No-Store, no-cache"}) == ("primary", "answer 2")
    assert _ask(guard) == ("primary", "answer 3")
    assert _ask(guard, NO_STORE) == ("primary", "answer 4")  # (read nothing either)
    assert _ask(guard) == ("cache", "answer 3")
    assert counting.stats.requests == 4


def test_ttl_and_max_age(counting: FakeProvider, make_guard: MakeGuard) -> None:
    """The answer lives the call's ``ttl`` (not the cache's hour); a call is served only an
    entry younger than its ``max-age`` (waits longer than the values: no timing races)."""
    guard = make_guard(counting, cache=ResponseCache(ttl=3600))
    assert _ask(guard, {"x-llmguard-cache-ttl": "0.2"}) == ("primary", "answer 1")
    time.sleep(0.3)
    assert _ask(guard) == ("primary", "answer 2")  # expired; stored for an hour
    time.sleep(0.3)
    assert _ask(guard, {"x-llmguard-cache-max-age": "60"}) == ("cache", "answer 2")
    assert _ask(guard, {"x-llmguard-cache-max-age": "0.2"}) == ("primary", "answer 3")
    assert _ask(guard, {"x-llmguard-cache-max-age": "0"}) == ("primary", "answer 4")
    assert _ask(guard) == ("cache", "answer 4")
    assert counting.stats.requests == 4


def test_tags_partition_the_cache(counting: FakeProvider, make_guard: MakeGuard) -> None:
    guard = make_guard(counting, cache=True)
    tagged = {"x-llmguard-cache-tags": "team-a, eu"}
    assert _ask(guard, tagged) == ("primary", "answer 1")
    assert _ask(guard) == ("primary", "answer 2")  # (untagged: not team-a's entry)
    assert _ask(guard, tagged) == ("cache", "answer 1")
    assert _ask(guard, {"x-llmguard-cache-tags": "team-b"}) == ("primary", "answer 3")
    assert _ask(guard, {"x-llmguard-cache-tags": ""}) == ("cache", "answer 2")  # (no tags)


@pytest.mark.parametrize(
    ("header", "value"),
    [
        ("x-llmguard-cache", "no-caching"),
        ("x-llmguard-cache", "max-age=60"),
        ("x-llmguard-cache-ttl", "0"),
        ("x-llmguard-cache-ttl", "-5"),
        ("x-llmguard-cache-ttl", "60s"),
        ("x-llmguard-cache-ttl", "nan"),
        ("x-llmguard-cache-ttl", "inf"),
        ("x-llmguard-cache-ttl", "1e99"),
        ("x-llmguard-cache-max-age", "-1"),
        ("x-llmguard-cache-max-age", "soon"),
        ("x-llmguard-cache-tags", "a,,b"),
    ],
)
def test_a_bad_value_is_a_400_naming_the_header(
    counting: FakeProvider, make_guard: MakeGuard, header: str, value: str
) -> None:
    guard = make_guard(counting, cache=True)
    with pytest.raises(openai.BadRequestError) as caught:
        _ask(guard, {header: value})
    assert caught.value.status_code == 400
    assert isinstance(caught.value, RequestValidationError)
    assert str(caught.value).startswith(f"{header} ")
    assert counting.stats.requests == 0


def test_the_async_client(counting: FakeProvider, make_guard: MakeGuard) -> None:
    guard = make_guard(counting, cache=True)

    async def main() -> list[str]:
        client: Any = guard.aclient()
        texts = []
        for headers in (None, REFRESH, None, NO_STORE):
            completion = await client.chat.completions.create(
                model="m", messages=ASK, extra_headers=headers
            )
            texts.append(f"{completion.llmguard.route} {completion.choices[0].message.content}")
        stream = await client.chat.completions.create(
            model="m", messages=ASK, stream=True, extra_headers=REFRESH
        )
        texts.append("".join([c.choices[0].delta.content or "" async for c in stream if c.choices]))
        await guard.aclose()
        return texts

    assert anyio.run(main) == [
        "primary answer 1",
        "primary answer 2",
        "cache answer 2",
        "primary answer 3",
        "answer 4",
    ]
    assert _ask(guard) == ("cache", "answer 4")


def test_the_anthropic_client(counting: FakeProvider, make_guard: MakeGuard) -> None:
    require_module("anthropic", "anthropic is a dev dependency")
    guard = make_guard(counting, cache=True)
    client: Any = anthropic_client(guard)

    def ask(headers: dict[str, str] | None = None) -> str:
        message = client.messages.create(
            model="m", max_tokens=20, messages=ASK, extra_headers=headers
        )
        return f"{message.llmguard.route} {message.content[0].text}"

    assert [ask(), ask(), ask(REFRESH), ask(), ask(NO_STORE)] == [
        "primary answer 1",
        "cache answer 1",
        "primary answer 2",
        "cache answer 2",
        "primary answer 3",
    ]
    assert counting.stats.requests == 3


# plain, plain, no-cache, plain, no-store, plain: what each call is answered, by whom
REFRESHED_THEN_NOT_STORED = [
    "primary answer 1",
    "cache answer 1",
    "primary answer 2",
    "cache answer 2",
    "primary answer 3",
    "cache answer 2",
]


def _sent_no_own_headers(fake: FakeProvider) -> None:
    sent = {name.lower() for request in fake.requests for name in request.headers}
    assert not any(name.startswith("x-llmguard-") for name in sent)


def test_the_look_alike_client(
    counting: FakeProvider, make_guard: MakeGuard, redis_url: str, redis_prefix: str
) -> None:
    """``GuardedClient``, what ``guard.client()`` is without openai, took the headers as the
    provider's: ``x-llmguard-cache*`` went to the provider and the call was cached as any
    (a refresh served the cached answer, ``no-store`` stored it). It reads them as the seam
    does, and sends none of them."""
    cache = ResponseCache(redis_url, key_prefix=redis_prefix)
    guard = make_guard(counting, cache=cache)
    client = GuardedClient(guard)

    def ask(headers: dict[str, str] | None = None, **options: Any) -> str:
        completion = client.chat.completions.create(
            model="m", messages=ASK, extra_headers=headers, **options
        )
        return f"{completion.llmguard.route} {completion.choices[0].message.content}"

    async def aask(headers: dict[str, str]) -> str:
        aclient = AsyncGuardedClient(guard)
        stream = await aclient.chat.completions.create(
            model="m", messages=ASK, stream=True, extra_headers=headers
        )
        text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
        await guard.aclose()
        return text

    tagged = {"x-llmguard-cache-tags": "team-a", "X-LLMGuard-Cache-TTL": "60"}
    assert [ask(), ask(), ask(REFRESH), ask(), ask(NO_STORE), ask()] == REFRESHED_THEN_NOT_STORED
    assert [ask(tagged), ask(tagged), ask({"x-llmguard-cache-max-age": "0"})] == [
        "primary answer 4",
        "cache answer 4",
        "primary answer 5",
    ]
    assert anyio.run(aask, REFRESH) == "answer 6"
    assert ask() == "cache answer 6"
    with pytest.raises(RequestValidationError, match=r"^x-llmguard-cache-ttl "):
        ask({"x-llmguard-cache-ttl": "soon"})
    assert counting.stats.requests == 6
    _sent_no_own_headers(counting)
    cache.clear()


def test_the_responses_api(
    counting: FakeProvider, make_guard: MakeGuard, redis_url: str, redis_prefix: str
) -> None:
    """``client.responses.create`` takes the same headers (its requests go through the same
    seam as chat's), plain and streamed."""
    cache = ResponseCache(redis_url, key_prefix=redis_prefix)
    guard = make_guard(counting, cache=cache)
    client: Any = guard.client()
    question = ASK[0]["content"]

    def ask(headers: dict[str, str] | None = None) -> str:
        response = client.responses.create(model="m", input=question, extra_headers=headers)
        return f"{response.llmguard.route} {response.output_text}"

    def streamed(headers: dict[str, str]) -> str:
        events = client.responses.create(
            model="m", input=question, stream=True, extra_headers=headers
        )
        return "".join(e.delta for e in events if e.type == "response.output_text.delta")

    assert [ask(), ask(), ask(REFRESH), ask(), ask(NO_STORE), ask()] == REFRESHED_THEN_NOT_STORED
    assert streamed({"x-llmguard-cache-tags": "team-a"}) == "answer 4"
    assert ask({"x-llmguard-cache-tags": "team-a"}) == "cache answer 4"
    assert ask({"x-llmguard-cache-max-age": "0"}) == "primary answer 5"
    assert streamed(REFRESH) == "answer 6"
    assert ask() == "cache answer 6"
    with pytest.raises(openai.BadRequestError, match="x-llmguard-cache-tags"):
        ask({"x-llmguard-cache-tags": "a,,b"})
    assert counting.stats.requests == 6
    _sent_no_own_headers(counting)
    cache.clear()
