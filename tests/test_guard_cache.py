"""The response cache as a Guard stage: hits skip the providers, misses are stored, streams
replay, tenants stay apart, and a stale answer comes before the degraded one."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import anyio
import pytest

from llmguard_sdk import CallEvent, Guard, OpenAICompatibleProvider, ProviderError
from llmguard_sdk.cache import HashingEmbedder, OpenAIEmbedder, ResponseCache
from llmguard_sdk.errors import ProviderUnavailableError
from llmguard_sdk.retry import waits_off
from llmguard_sdk.testing import FakeProvider, Fault
from tests.embeddings import Embeddings, serve_embeddings

MakeGuard = Callable[..., Guard]
QUESTION = [{"role": "user", "content": "How do I reset my password on the mobile app?"}]
PARAPHRASE = [{"role": "user", "content": "How can I reset my password in the mobile app?"}]
UNAVAILABLE = "llmguard_sdk.errors.ProviderUnavailableError"  # (named as error.type names it)


def test_a_repeated_question_is_answered_from_the_cache(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    events: list[CallEvent] = []
    guard = make_guard(fake, cache=True, hooks=[events.append])
    first = guard.chat(QUESTION)
    assert first.route == "primary"
    again = guard.chat(QUESTION)
    similar = guard.chat(PARAPHRASE)
    assert fake.stats.requests == 1
    assert (again.route, again.metadata["cache"]) == ("cache", "exact")
    assert (similar.route, similar.metadata["cache"]) == ("cache", "semantic")
    assert again.text == similar.text == first.text
    assert again.usage is not None
    assert again.usage.total_tokens == 0
    assert again.cost_usd == 0.0
    assert again.attempts == 0
    assert again.metadata["cached_route"] == "primary"
    assert [e.route for e in events] == ["primary", "cache", "cache"]


def test_tenants_and_opt_outs_reach_the_provider(fake: FakeProvider, make_guard: MakeGuard) -> None:
    guard = make_guard(fake, cache=ResponseCache())
    guard.chat(QUESTION, tenant="acme")
    assert guard.chat(QUESTION, tenant="acme").route == "cache"
    assert guard.chat(QUESTION, tenant="globex").route == "primary"
    assert guard.chat(QUESTION, tenant="acme", cacheable=False).route == "primary"
    assert guard.chat(QUESTION, tenant="acme", cache_tags=["admin"]).route == "primary"
    assert guard.chat(QUESTION, tenant="acme", temperature=0.9).route == "primary"
    assert fake.stats.requests == 5


def test_streams_are_stored_and_replayed(fake: FakeProvider, make_guard: MakeGuard) -> None:
    guard = make_guard(fake, cache=True)
    with guard.chat(QUESTION, stream=True) as stream:
        streamed = "".join(chunk.text for chunk in stream)
    assert stream.response.route == "primary"
    with guard.chat(PARAPHRASE, stream=True) as replay:
        chunks = list(replay)
    assert "".join(c.text for c in chunks) == streamed
    assert replay.response.route == "cache"
    assert replay.response.metadata["cache"] == "semantic"
    assert fake.stats.requests == 1


def test_async_calls_and_streams_use_the_cache(fake: FakeProvider, make_guard: MakeGuard) -> None:
    guard = make_guard(fake, cache=True)

    async def main() -> None:
        first = await guard.achat(QUESTION)
        hit = await guard.achat(PARAPHRASE)
        assert hit.route == "cache"
        assert hit.text == first.text
        stream = await guard.achat(QUESTION, stream=True)
        async with stream:
            text = "".join([chunk.text async for chunk in stream])
        assert text == first.text
        assert stream.response.route == "cache"

    anyio.run(main)
    assert fake.stats.requests == 1


def test_a_stale_answer_comes_before_the_degraded_one(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    import time

    cache = ResponseCache(ttl=0.2, stale_ttl=60)
    guard = make_guard(fake, cache=cache, degraded="Try again later.", breaker=None)
    fresh = guard.chat(QUESTION)
    time.sleep(0.3)
    fake.always(Fault(status=503))
    with waits_off():
        stale = guard.chat(QUESTION)
        other = guard.chat([{"role": "user", "content": "Where is my parcel?"}])
        with guard.chat(PARAPHRASE, stream=True) as stream:
            streamed = "".join(chunk.text for chunk in stream)
    assert (stale.route, stale.metadata["cache"], stale.text) == ("cache", "stale", fresh.text)
    assert stale.metadata["route_errors"] == {"primary": UNAVAILABLE}
    assert streamed == fresh.text
    assert stream.response.metadata["cache"] == "stale"
    assert other.route == "degraded"


def test_an_async_call_looks_for_a_stale_answer_off_the_event_loop(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    """The stale lookup after every route failed reads the store and checks the match (here
    with the verifier) in a worker thread, as the opening lookup does: a blocking Redis read
    or an embedding on the event loop would stall every other task."""
    import asyncio
    import time

    on_loop: list[bool] = []

    def verifier(query: str, cached: str) -> bool:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            on_loop.append(False)
        else:
            on_loop.append(True)
        return True

    cache = ResponseCache(ttl=0.2, stale_ttl=60, verifier=verifier, verify_band=2.0)
    guard = make_guard(fake, cache=cache, breaker=None, retry=None)
    fresh = guard.chat(QUESTION)
    time.sleep(0.3)
    fake.always(Fault(status=503))

    async def main() -> None:
        stale = await guard.achat(PARAPHRASE)
        assert (stale.route, stale.metadata["cache"], stale.text) == ("cache", "stale", fresh.text)

    anyio.run(main)
    assert on_loop == [False]


def test_a_scope_id_that_is_not_a_string_is_a_request_validation_error(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    from llmguard_sdk.errors import RequestValidationError

    guard = make_guard(fake, cache=True)
    for scope in ({"tenant": 5}, {"feature": ["a"]}, {"user": 7}):
        with pytest.raises(RequestValidationError, match="must be a string"):
            guard.chat(QUESTION, **scope)
    assert fake.stats.requests == 0


def test_without_a_degraded_answer_a_failed_call_still_raises(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    guard = make_guard(fake, cache=True, breaker=None, retry=None)
    fake.always(Fault(status=503))
    with pytest.raises(ProviderError):
        guard.chat(QUESTION)
    fake.reset_faults()
    guard.chat(QUESTION)
    assert guard.chat(QUESTION).route == "cache"


def test_failed_and_tool_call_answers_are_not_stored(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    guard = make_guard(fake, cache=True, retry=None, breaker=None)
    fake.script(Fault(status=500))
    with pytest.raises(ProviderError):
        guard.chat(QUESTION)
    assert guard.chat(QUESTION).route == "primary"
    assert guard.chat(QUESTION).route == "cache"


def test_redis_cache_is_shared_between_guards(
    fake: FakeProvider, make_guard: MakeGuard, redis_url: str, redis_prefix: str
) -> None:
    one = make_guard(fake, store=redis_url, key_prefix=redis_prefix, cache=True)
    two = make_guard(
        fake,
        store=redis_url,
        key_prefix=redis_prefix,
        cache=ResponseCache(redis_url, key_prefix=redis_prefix, sync_interval=0.0),
    )
    one.chat(QUESTION, tenant="acme")
    assert two.chat(QUESTION, tenant="acme").route == "cache"
    assert two.chat(PARAPHRASE, tenant="acme").route == "cache"
    assert two.chat(PARAPHRASE, tenant="globex").route == "primary"


class _FlakyEmbedder(HashingEmbedder):
    """The hashing embedder, behind an endpoint that can go down."""

    down = False

    def embed(self, texts: Sequence[str]) -> Any:
        if self.down:
            raise ProviderUnavailableError("embeddings endpoint down", route="embeddings")
        return super().embed(texts)


def test_a_failing_embedder_means_semantic_misses_not_failed_calls(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    embedder = _FlakyEmbedder()
    guard = make_guard(fake, cache=ResponseCache(embedder=embedder), degraded="Later.", retry=None)
    first = guard.chat(QUESTION)
    embedder.down = True
    assert guard.chat(QUESTION).route == "cache"  # exact: no embedding needed
    assert guard.chat(PARAPHRASE).route == "primary"  # a miss, answered by the provider
    fake.always(Fault(status=503))
    assert guard.chat(PARAPHRASE).route == "degraded"  # no stale match, but the degraded one
    embedder.down = False
    hit = guard.chat(PARAPHRASE)
    assert (hit.route, hit.metadata["cache"], hit.text) == ("cache", "semantic", first.text)


def test_an_answer_served_by_similarity_can_be_reported_as_a_false_hit(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    """``report_false_hit`` took the CacheHit, which a Guard's caller never sees: the answer
    now names its entry and how it was found, and the Guard takes the report."""
    cache = ResponseCache()
    guard = make_guard(fake, cache=cache)
    first = guard.chat(QUESTION)
    similar = guard.chat(PARAPHRASE)
    again = guard.chat(QUESTION)
    assert similar.metadata["cache_matched"] == "semantic"
    assert again.metadata["cache_matched"] == "exact"
    assert similar.metadata["cache_entry"] == again.metadata["cache_entry"]  # one entry
    assert guard.report_false_hit(similar)
    assert not guard.report_false_hit(again)  # the very same request
    assert not guard.report_false_hit(first)  # the provider's own answer
    assert (cache.stats.false_hits, cache.stats.false_hit_rate) == (1, 1.0)
    assert not make_guard(fake).report_false_hit(similar)  # a Guard without a cache


@pytest.fixture
def held_embeddings() -> Iterator[str]:
    with serve_embeddings() as url:
        yield url


def test_the_embedding_waits_no_longer_than_the_calls_deadline_allows(
    fake: FakeProvider, make_guard: MakeGuard, held_embeddings: str
) -> None:
    """The opening lookup's embedding waited the embedder's own timeout (here a minute)
    whatever the call's deadline: a call with 4 s waited up to a minute. It now waits half of
    what is left (2 s), and a timed-out embedding is a miss: the provider answers."""
    embedder = OpenAIEmbedder(held_embeddings, "embed-small", 64, timeout=60)
    guard = make_guard(fake, cache=ResponseCache(embedder=embedder, threshold=0.5), retry=None)
    guard.chat(QUESTION)  # stored with its embedding (the endpoint answers at once)
    Embeddings.holding.set()
    answers: list[Any] = []

    def calls() -> None:
        answers.append(guard.chat(PARAPHRASE, timeout=4.0))

        async def main() -> None:
            answers.append(await guard.achat(PARAPHRASE, timeout=4.0))

        anyio.run(main)

    caller = threading.Thread(target=calls, daemon=True)
    caller.start()
    caller.join(40)  # (a bound for the test, not a timing: the calls wait 2 s each)
    finished = not caller.is_alive()
    Embeddings.released.set()
    caller.join(120)
    assert finished, "the lookup waited on the embedder past the call's deadline"
    assert [answer.route for answer in answers] == ["primary", "primary"]
    embedder.close()


def test_the_stale_lookup_after_every_route_failed_keeps_to_the_deadline(
    fake: FakeProvider, make_guard: MakeGuard, held_embeddings: str
) -> None:
    """When every route failed, the stale lookup embedded the request again (the opening
    lookup's embedding had timed out) with the embedder's own timeout (a minute): it now
    waits half of what is left of the call's deadline, and the degraded answer comes."""
    embedder = OpenAIEmbedder(held_embeddings, "embed-small", 64, timeout=60)
    cache = ResponseCache(embedder=embedder, threshold=0.5, stale_ttl=60)
    guard = make_guard(fake, cache=cache, retry=None, breaker=None, degraded="Later.")
    guard.chat(QUESTION)  # stored with its embedding (the endpoint answers at once)
    Embeddings.holding.set()
    fake.always(Fault(status=503))
    answers: list[Any] = []
    caller = threading.Thread(
        target=lambda: answers.append(guard.chat(PARAPHRASE, timeout=4.0)), daemon=True
    )
    caller.start()
    caller.join(40)  # (a bound for the test, not a timing: the call waits 3 s or so)
    finished = not caller.is_alive()
    Embeddings.released.set()
    caller.join(120)
    assert finished, "the stale lookup waited on the embedder past the call's deadline"
    assert [answer.route for answer in answers] == ["degraded"]
    embedder.close()


def _chain(
    primary: FakeProvider, fallback: FakeProvider, cache: ResponseCache, **declared: bool
) -> Guard:
    """A Guard over ``primary`` then ``fallback``, the fallback declaring ``declared``."""
    first = OpenAICompatibleProvider(primary.base_url, model=primary.model, name=primary.name)
    second = OpenAICompatibleProvider(fallback.base_url, model=fallback.model, name=fallback.name)
    for capability, value in declared.items():
        setattr(second, capability, value)
    return Guard([first, second], cache=cache, breaker=None, environ={})


@pytest.mark.parametrize(
    ("declared", "kept"),
    [
        ({}, True),  # a remote fallback's answer is as good as the primary's
        ({"is_local": True}, False),  # the local model stood in during an outage
        ({"is_local": True, "cache_answers": True}, True),
        ({"cache_answers": False}, False),
    ],
)
def test_a_fallbacks_answer_is_cached_as_the_route_declares(
    declared: dict[str, bool], kept: bool
) -> None:
    with FakeProvider(name="primary") as primary, FakeProvider(name="fallback") as fallback:
        cache = ResponseCache()
        guard = _chain(primary, fallback, cache, **declared)
        primary.always(Fault(status=503))
        with waits_off():
            during = guard.chat(QUESTION)
        primary.always(None)
        after = guard.chat(QUESTION)
        guard.close()
    assert during.route == "fallback"
    assert after.route == ("cache" if kept else "primary")


def test_a_local_routes_own_answers_are_cached_when_it_comes_first() -> None:
    with FakeProvider(name="local") as local, FakeProvider(name="remote") as remote:
        first = OpenAICompatibleProvider(local.base_url, model=local.model, name="local")
        first.is_local = True  # type: ignore[attr-defined]
        second = OpenAICompatibleProvider(remote.base_url, model=remote.model, name="remote")
        guard = Guard([first, second], cache=ResponseCache(), environ={})
        guard.chat(QUESTION)
        again = guard.chat(QUESTION)
        guard.close()
    assert (again.route, again.metadata["cached_route"]) == ("cache", "local")


@pytest.mark.parametrize(
    ("declared", "served_by"),
    [
        ({}, "fallback"),  # a remote fallback answers as well as the primary: it is called
        ({"is_local": True}, "cache"),  # the primary's expired answer beats the local model's
        ({"cache_answers": False}, "cache"),
        ({"is_local": True, "cache_answers": True}, "fallback"),
    ],
)
def test_a_stale_answer_comes_before_a_route_standing_in_for_the_primary(
    declared: dict[str, bool], served_by: str
) -> None:
    import time

    with FakeProvider(name="primary") as primary, FakeProvider(name="fallback") as fallback:
        guard = _chain(primary, fallback, ResponseCache(ttl=0.2, stale_ttl=60), **declared)
        fresh = guard.chat(QUESTION)
        time.sleep(0.3)  # (the entry expires: only a stale-if-error read finds it)
        primary.always(Fault(status=503))
        with waits_off():
            during = guard.chat(QUESTION)
            with guard.chat(PARAPHRASE, stream=True) as stream:
                streamed = "".join(chunk.text for chunk in stream)
            unknown = guard.chat([{"role": "user", "content": "Where is my parcel?"}])
        guard.close()
    assert during.route == served_by
    if served_by == "cache":
        assert stream.response.route == "cache"
        assert (during.metadata["cache"], during.text) == ("stale", fresh.text)
        assert during.metadata["route_errors"] == {"primary": UNAVAILABLE}
        assert streamed == fresh.text
        assert fallback.stats.requests == 1  # only the question the cache did not know
    assert unknown.route == "fallback"


def test_an_async_call_is_served_the_stale_answer_before_the_local_route() -> None:
    import time

    with FakeProvider(name="primary") as primary, FakeProvider(name="fallback") as fallback:
        guard = _chain(primary, fallback, ResponseCache(ttl=0.2, stale_ttl=60), is_local=True)
        fresh = guard.chat(QUESTION)
        time.sleep(0.3)
        primary.always(Fault(status=503))

        async def main() -> list[Any]:
            with waits_off():
                answer = await guard.achat(QUESTION)
                stream = await guard.achat(PARAPHRASE, stream=True)
                async with stream:
                    text = "".join([chunk.text async for chunk in stream])
            return [answer.route, answer.metadata.get("cache"), stream.response.route, text]

        found = anyio.run(main)
        guard.close()
    assert found == ["cache", "stale", "cache", fresh.text]
    assert fallback.stats.requests == 0


def test_a_local_route_first_in_the_chain_is_called_though_a_stale_answer_is_kept() -> None:
    import time

    with FakeProvider(name="local") as local, FakeProvider(name="remote") as remote:
        first = OpenAICompatibleProvider(local.base_url, model=local.model, name="local")
        first.is_local = True  # type: ignore[attr-defined]
        second = OpenAICompatibleProvider(remote.base_url, model=remote.model, name="remote")
        guard = Guard([first, second], cache=ResponseCache(ttl=0.2, stale_ttl=60), environ={})
        guard.chat(QUESTION)
        time.sleep(0.3)
        again = guard.chat(QUESTION)
        guard.close()
    assert again.route == "local"
    assert local.stats.requests == 2
