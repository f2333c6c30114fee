"""The response cache: one contract over memory and a real Redis, guards, keys, policy."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmguard_sdk._state.stores import hash_id
from llmguard_sdk.cache import (
    CacheHit,
    HashingEmbedder,
    ResponseCache,
    guard_rejection,
    request_keys,
)
from llmguard_sdk.cache.embedders.hashing import _rarity
from llmguard_sdk.context import Scope, scoped
from llmguard_sdk.errors import ConfigurationError, RequestValidationError
from llmguard_sdk.models import ChatRequest, ChatResponse, Message
from llmguard_sdk.tokens import cl100k_encoding
from tests.conftest import RawRedis, RedisTarget

FAQ = "How do I reset my password on the mobile app?"
PARAPHRASE = "How can I reset my password in the mobile app?"


def ask(text: str, *, system: str | None = None, **fields: Any) -> ChatRequest:
    messages = [Message(role="system", content=system)] if system else []
    messages.append(Message(role="user", content=text))
    return ChatRequest(messages=messages, model=fields.pop("model", "m"), **fields)


def answer(text: str, **fields: Any) -> ChatResponse:
    return ChatResponse(text=text, finish_reason=fields.pop("finish_reason", "stop"), **fields)


def looked_up(stored: str, asked: str, **options: Any) -> CacheHit | None:
    """The answer a fresh in-memory ``ResponseCache(**options)`` that stored one to
    ``stored`` gives ``asked``."""
    cache = ResponseCache(**options)
    assert cache.store(ask(stored), answer("A."))
    return cache.lookup(ask(asked))


@pytest.fixture(params=["memory", "redis", "cluster", "server_search", "server_search_cluster"])
def make_cache(request: pytest.FixtureRequest, redis_target: RedisTarget) -> Iterator[Any]:
    """Caches in memory, in Redis, in a Redis Cluster, and in a Redis 8 (and a cluster of
    them) with the vectors searched on the server (``vector_search="server"``)."""
    caches: list[ResponseCache] = []

    def build(**options: Any) -> ResponseCache:
        if request.param.startswith("server_search"):
            kind = "redis8_cluster" if request.param.endswith("cluster") else "redis8"
            url, prefix = redis_target(kind)
            cache = ResponseCache(url, key_prefix=prefix, vector_search="server", **options)
        elif request.param != "memory":
            url, prefix = redis_target(request.param)
            options.setdefault("sync_interval", 0.0)
            cache = ResponseCache(url, key_prefix=prefix, **options)
        else:
            cache = ResponseCache(**options)
        caches.append(cache)
        return cache

    yield build
    for cache in caches:
        cache.close()


# -- the contract -------------------------------------------------------------------------------


def test_exact_hit_needs_the_whole_request_to_match(make_cache: Any) -> None:
    cache = make_cache(semantic=False)
    assert cache.lookup(ask(FAQ)) is None
    assert cache.store(ask(FAQ), answer("Settings > Account > Reset."))
    hit = cache.lookup(ask(FAQ))
    assert hit is not None
    assert hit.kind == "exact"
    assert hit.similarity == 1.0
    assert hit.response.text == "Settings > Account > Reset."
    assert cache.lookup(ask(FAQ, model="other")) is None
    assert cache.lookup(ask(FAQ, system="Answer in French.")) is None
    assert cache.lookup(ask(FAQ, max_tokens=5)) is None
    assert cache.lookup(ask(FAQ, response_format={"type": "json_object"})) is None
    assert cache.lookup(ask(PARAPHRASE)) is None  # semantic off
    # metadata and extra headers do not shape the answer
    assert cache.lookup(ask(FAQ, metadata={"trace": "x"}, extra_headers={"X-A": "1"})) is not None
    assert (cache.stats.exact_hits, cache.stats.misses) == (2, 6)


def test_tool_schemas_are_keyed_canonically(make_cache: Any) -> None:
    cache = make_cache(semantic=False)
    tool = {"type": "function", "function": {"name": "f", "parameters": {"a": 1, "b": 2}}}
    reordered = {"function": {"parameters": {"b": 2, "a": 1}, "name": "f"}, "type": "function"}
    cache.store(ask(FAQ, tools=[tool]), answer("ok"))
    assert cache.lookup(ask(FAQ, tools=[reordered])) is not None
    assert cache.lookup(ask(FAQ)) is None


def test_semantic_hit_on_a_paraphrase_and_miss_on_another_question(make_cache: Any) -> None:
    cache = make_cache()
    cache.store(ask(FAQ), answer("Settings > Account > Reset."))
    hit = cache.lookup(ask(PARAPHRASE))
    assert hit is not None
    assert hit.kind == "semantic"
    assert cache.threshold <= hit.similarity < 1.0
    assert hit.query == FAQ
    assert cache.lookup(ask("What are your opening hours on public holidays?")) is None
    assert cache.stats.semantic_hits == 1


def test_semantic_hits_need_the_same_context(make_cache: Any) -> None:
    cache = make_cache()
    about_ada = [
        Message(role="user", content="Who was Ada Lovelace?"),
        Message(role="assistant", content="A mathematician."),
        Message(role="user", content="How old was she when she died?"),
    ]
    about_marie = [
        Message(role="user", content="Who was Marie Curie?"),
        Message(role="assistant", content="A physicist and chemist."),
        Message(role="user", content="How old was she when she died?"),
    ]
    cache.store(ChatRequest(messages=about_ada, model="m"), answer("36"))
    assert cache.lookup(ChatRequest(messages=about_marie, model="m")) is None
    again = [*about_ada[:2], Message(role="user", content="how old was she when she died")]
    hit = cache.lookup(ChatRequest(messages=again, model="m"))
    assert hit is not None
    assert hit.response.text == "36"


def test_semantic_hits_need_the_same_images_in_the_last_turn(make_cache: Any) -> None:
    def about(url: str, text: str = "What animal is in this picture?") -> ChatRequest:
        image = {"type": "image_url", "image_url": {"url": url}}
        parts: list[dict[str, Any]] = [{"type": "text", "text": text}, image]
        return ChatRequest(messages=[Message(role="user", content=parts)], model="m")

    cache = make_cache()
    cache.store(about("https://example.com/cat.png"), answer("A cat."))
    assert cache.lookup(about("https://example.com/dog.png")) is None
    hit = cache.lookup(about("https://example.com/cat.png", "what animal is in this picture"))
    assert hit is not None
    assert hit.kind == "semantic"
    assert hit.response.text == "A cat."


def test_guards_refuse_numbers_negation_entities_and_a_swapped_key_term(make_cache: Any) -> None:
    cache = make_cache(threshold=0.3)
    cache.store(ask("What is the refund policy for orders over 50 dollars?"), answer("a"))
    cache.store(ask("Is it safe to run the migration on production?"), answer("b"))
    cache.store(ask("How do I install PyTorch on Windows?"), answer("c"))
    cache.store(ask("cancel my order"), answer("d"))
    assert cache.lookup(ask("What is the refund policy for orders over 500 dollars?")) is None
    assert cache.lookup(ask("Is it not safe to run the migration on production?")) is None
    assert cache.lookup(ask("How do I install TensorFlow on Windows?")) is None
    assert cache.lookup(ask("cancel my subscription")) is None
    assert set(cache.stats.guard_rejections) == {"number", "negation", "entity", "key_term"}
    assert cache.lookup(ask("Is it safe to run this migration on production?")) is not None


def test_a_number_word_that_lower_does_not_spell_is_read_as_a_word() -> None:
    """ "sİx" matches the number words' pattern case-insensitively, but lower() makes it no
    number word: the number guard raised KeyError, failing the lookup (and the call)."""
    cache = ResponseCache(threshold=0.3)  # (low: the candidate reaches the guards)
    cache.store(ask("Reset password after 2 failed attempts"), answer("a"))
    for word in ("s\u0130x", "\u017fix"):
        assert cache.lookup(ask(f"Reset password after 3 failed attempts, {word} now")) is None
    assert cache.stats.guard_rejections == {"number": 2}


def sleep_past(stored: float, ttl: float) -> None:
    """Sleep until ``ttl`` seconds (and a little) after ``stored``, a monotonic time taken
    once the entry was stored."""
    time.sleep(max(0.0, stored + ttl + 0.1 - time.monotonic()))


# TTLs of 1.5 s: the lookups right after a store find the entry fresh even on a loaded
# machine (they take milliseconds once the embedder is warm: its first call can take a
# second, and an entry's TTL starts before its embedding), and the test sleeps only what is
# left of the TTL.
def test_ttl_and_stale_if_error(make_cache: Any) -> None:
    cache = make_cache(ttl=1.5, stale_ttl=30)
    cache.embedder.embed(["warm up the embedder"])
    cache.store(ask(FAQ), answer("fresh"))
    stored = time.monotonic()
    assert cache.lookup(ask(FAQ)) is not None
    sleep_past(stored, 1.5)
    assert cache.lookup(ask(FAQ)) is None
    assert cache.lookup(ask(PARAPHRASE)) is None
    stale = cache.lookup_stale(ask(FAQ))
    assert stale is not None
    assert stale.kind == "stale"
    assert stale.response.text == "fresh"
    gone = make_cache(ttl=1.5, stale_ttl=0.0, namespace="gone")
    gone.store(ask(FAQ), answer("x"))
    stored = time.monotonic()
    assert gone.lookup_stale(ask(FAQ)) is not None  # fresh: a stale lookup finds it too
    sleep_past(stored, 1.5)
    assert gone.lookup_stale(ask(FAQ)) is None


def test_least_recently_used_entry_is_evicted(make_cache: Any) -> None:
    cache = make_cache(max_entries=2)
    cache.store(ask("first question about billing"), answer("1"))
    cache.store(ask("second question about shipping"), answer("2"))
    assert cache.lookup(ask("first question about billing")) is not None  # now most recent
    cache.store(ask("third question about returns"), answer("3"))
    assert cache.lookup(ask("second question about shipping")) is None
    assert cache.lookup(ask("first question about billing")) is not None
    assert cache.lookup(ask("third question about returns")) is not None


def test_version_bump_and_clear_invalidate(make_cache: Any) -> None:
    cache = make_cache(version="1")
    cache.store(ask(FAQ), answer("v1"))
    cache.version = "2"  # a new prompt template: nothing cached before it applies
    assert cache.lookup(ask(FAQ)) is None
    assert cache.lookup(ask(PARAPHRASE)) is None
    cache.version = "1"
    assert cache.lookup(ask(FAQ)) is not None
    cache.clear()
    assert cache.lookup(ask(FAQ)) is None
    assert cache.lookup(ask(PARAPHRASE)) is None


def test_what_is_never_cached(make_cache: Any) -> None:
    cache = make_cache()
    call = [{"id": "1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
    assert not cache.store(ask(FAQ), answer("", tool_calls=call, finish_reason="tool_calls"))
    assert not cache.store(ask(FAQ), answer("cut", finish_reason="length"))
    assert not cache.store(ask(FAQ), answer("sorry", metadata={"degraded": True}))
    assert not cache.store(ask(FAQ, temperature=0.7), answer("x"))
    assert not cache.store(ask(FAQ), answer("x"), cacheable=False)
    assert not cache.store(ask(FAQ), answer("x"), Scope(user="u1"))
    assert cache.lookup(ask(FAQ)) is None
    assert cache.stats.stores == 0
    assert make_cache(cache_sampled=True).store(ask(FAQ, temperature=0.7), answer("x"))


def test_refusals_blank_answers_and_json_that_is_not_json_are_not_stored(
    make_cache: Any,
) -> None:
    cache = make_cache()
    refused = answer("", metadata={"refusal": "I can't help with that."})
    assert not cache.store(ask("How do I pick a lock?"), refused)
    assert not cache.store(ask(FAQ), answer("  \n"))
    wants_json = ask("List three colours as JSON", response_format={"type": "json_object"})
    assert not cache.store(wants_json, answer("Red, green and blue."))
    assert cache.lookup(ask("How do I pick a lock?")) is None
    assert cache.lookup(wants_json) is None
    assert cache.stats.stores == 0
    assert cache.store(wants_json, answer('{"colours": ["red", "green", "blue"]}'))


def test_per_user_partitions_when_opted_in(make_cache: Any) -> None:
    cache = make_cache(per_user=True)
    cache.store(ask(FAQ), answer("for u1"), Scope(tenant="t", user="u1"))
    assert cache.lookup(ask(FAQ), Scope(tenant="t", user="u1")) is not None
    assert cache.lookup(ask(FAQ), Scope(tenant="t", user="u2")) is None
    assert cache.lookup(ask(FAQ), Scope(tenant="t")) is None


def test_tenants_and_permission_tags_never_share(make_cache: Any) -> None:
    cache = make_cache()
    cache.store(ask(FAQ), answer("acme"), Scope(tenant="acme"), tags=["staff"])
    assert cache.lookup(ask(FAQ), Scope(tenant="globex"), tags=["staff"]) is None
    assert cache.lookup(ask(PARAPHRASE), Scope(tenant="globex"), tags=["staff"]) is None
    assert cache.lookup(ask(FAQ), Scope(tenant="acme")) is None
    with scoped(tenant="acme"):
        assert cache.lookup(ask(PARAPHRASE), tags=["staff"]) is not None


def test_a_tag_with_a_comma_is_not_two_tags(make_cache: Any) -> None:
    cache = make_cache()
    cache.store(ask(FAQ), answer("for a and b"), tags=["team:a", "team:b"])
    assert cache.lookup(ask(FAQ), tags=["team:a,team:b"]) is None
    cache.store(ask(FAQ), answer("for one tag"), tags=["x,y"])
    assert cache.lookup(ask(FAQ), tags=["x\\", "y"]) is None  # escaping is not fooled
    hit = cache.lookup(ask(FAQ), tags=["team:b", "team:a"])
    assert hit is not None
    assert hit.response.text == "for a and b"


def test_one_string_of_tags_is_refused_not_split_into_its_characters() -> None:
    cache = ResponseCache()
    cache.store(ask(FAQ), answer("for a and b"), tags=["a", "b"])
    for tags in ("ba", b"ab", ["a", 1]):
        with pytest.raises(RequestValidationError, match="list of strings"):
            cache.lookup(ask(FAQ), tags=tags)  # type: ignore[arg-type]
        with pytest.raises(RequestValidationError):
            cache.store(ask(FAQ), answer("?"), tags=tags)  # type: ignore[arg-type]
    assert cache.lookup(ask(FAQ), tags=iter(["b", "a"])) is not None  # type: ignore[arg-type]


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    ops=st.lists(
        st.tuples(
            st.sampled_from(["store", "lookup"]),
            st.sampled_from(["t1", "t2", "t3", None]),
            st.sampled_from(
                ["reset password", "reset my password", "billing address", "change billing"]
            ),
        ),
        min_size=20,
        max_size=120,
    )
)
def test_scope_isolation_property(ops: list[tuple[str, str | None, str]]) -> None:
    cache = ResponseCache(threshold=0.0, guards=False)
    for op, tenant, text in ops:
        scope = Scope(tenant=tenant)
        if op == "store":
            cache.store(ask(text), answer(f"{tenant}|{text}"), scope)
        else:
            hit = cache.lookup(ask(text), scope)
            assert hit is None or hit.response.text.split("|")[0] == str(tenant)


def test_near_misses_and_false_hits_are_counted(make_cache: Any) -> None:
    cache = make_cache(threshold=0.99)
    cache.store(ask(FAQ), answer("a"))
    assert cache.lookup(ask(PARAPHRASE)) is None
    assert cache.stats.near_misses + cache.stats.misses >= 1
    loose = make_cache(threshold=0.3, namespace="loose")
    loose.store(ask(FAQ), answer("a"))
    hit = loose.lookup(ask(PARAPHRASE))
    assert hit is not None
    loose.report_false_hit(hit)
    assert loose.stats.false_hits == 1
    assert loose.stats.false_hit_rate == 1.0


def test_a_stale_answer_found_by_its_exact_key_is_no_false_hit() -> None:
    """``report_false_hit`` counts answers the similarity search chose; a stale answer served
    during an outage that was found by the request's exact key answered the same request."""
    cache = ResponseCache(threshold=0.3, ttl=0.2, stale_ttl=30)
    cache.store(ask(FAQ), answer("a"))
    stored = time.monotonic()
    sleep_past(stored, 0.2)
    exact = cache.lookup_stale(ask(FAQ))
    assert exact is not None
    assert exact.kind == "stale"
    assert exact.matched == "exact"
    cache.report_false_hit(exact)
    assert cache.stats.false_hits == 0
    similar = cache.lookup_stale(ask(PARAPHRASE))
    assert similar is not None
    assert similar.matched == "semantic"
    cache.report_false_hit(similar)
    assert cache.stats.false_hits == 1


def test_verifier_decides_the_borderline_band(make_cache: Any) -> None:
    seen: list[tuple[str, str]] = []

    def refuse(query: str, cached: str) -> bool:
        seen.append((query, cached))
        return False

    cache = make_cache(threshold=0.3, verifier=refuse, verify_band=0.7)
    cache.store(ask(FAQ), answer("a"))
    assert cache.lookup(ask(PARAPHRASE)) is None
    assert seen == [(PARAPHRASE, FAQ)]
    assert cache.stats.guard_rejections == {"verifier": 1}


def test_ambiguous_matches_are_refused_with_a_margin(make_cache: Any) -> None:
    cache = make_cache(threshold=0.3, margin=0.5, strict=False)  # the margin alone decides
    cache.store(ask("How do I reset my password on the web?"), answer("web"))
    cache.store(ask("How do I reset my password on the phone?"), answer("phone"))
    assert cache.lookup(ask("How do I reset my password?")) is None
    assert cache.stats.guard_rejections.get("ambiguous") == 1


@pytest.mark.anyio
async def test_async_lookups_and_stores(make_cache: Any) -> None:
    cache = make_cache()
    assert await cache.astore(ask(FAQ), answer("a"), Scope(tenant="t"))
    with scoped(tenant="t"):
        hit = await cache.alookup(ask(PARAPHRASE))
    assert hit is not None
    assert hit.response.text == "a"
    assert await cache.alookup_stale(ask(FAQ), Scope(tenant="t")) is not None


# -- pieces -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "cached", "reason"),
    [
        ("refund for 3 items", "refund for 4 items", "number"),
        ("python 3.11 support", "python 3.12 support", "number"),
        ("I can't log in", "I can log in", "negation"),
        ("Is it safe?", "Is it never safe?", "negation"),
        ("Call `load_dataset` with a path", "Call `load_from_disk` with a path", "entity"),
        ("Flights from Paris to Rome", "Flights from Berlin to Rome", "entity"),
        ("cancel my order", "cancel my subscription", "key_term"),
        ("How do I reset my password?", "How can I reset my password?", None),
        ("What does the Datasets library do?", "What is the Datasets library for?", None),
    ],
)
def test_guard_rejection_reasons(query: str, cached: str, reason: str | None) -> None:
    assert guard_rejection(query, cached) == reason


def test_hashing_embedder_is_deterministic_and_unit_length() -> None:
    embedder = HashingEmbedder()
    vectors = embedder.embed([FAQ, PARAPHRASE, "", "completely different topic about cooking"])
    again = HashingEmbedder().embed([FAQ])
    assert (vectors[0] == again[0]).all()
    assert abs(float((vectors[0] ** 2).sum()) - 1.0) < 1e-5
    assert float((vectors[2] ** 2).sum()) == 0.0
    assert vectors[0] @ vectors[1] > 0.6 > vectors[0] @ vectors[3]
    with pytest.raises(ConfigurationError):
        HashingEmbedder(dimension=8)


@pytest.mark.parametrize(
    ("text", "digest"),
    [
        ("How do I reset my password?", "b5aeb077896fef1c"),
        ("Where is my order 4417? It was due on Monday.", "b2a32e252c9abdda"),
        ("Ünïcödé naïve façade, don't", "4ca21f821d87462e"),
        ("rock'n'roll in the 90's, x'1 o'clock", "d44dd502fa238d39"),  # as v1 (ASCII)
        ("x", "bcc45f638e825374"),
        ("東京の人口は何人ですか", "e340c64688bfafba"),  # (particles, hiragana weight)
        ("コンピューターをインストールしてください", "0939934e6c88779d"),
        ("北京今天天气怎么样", "a693d20e8bf743a7"),
        ("Как сбросить пароль?", "7054f7c10977e037"),
    ],
)
def test_hashing_embedder_vectors_stay_the_same_bits(text: str, digest: str) -> None:
    # Entries written by one process (or version) are searched by another under the
    # embedder's name ("hashing-v3-..."): a faster embedding must give the very same floats.
    if cl100k_encoding() is None:
        pytest.skip("word rarity comes from tiktoken's cl100k encoding")
    one = HashingEmbedder().embed([text])[0].astype("<f4")
    assert hashlib.sha256(one.tobytes()).hexdigest()[:16] == digest
    batch = HashingEmbedder().embed(["other words first", text])[1].astype("<f4")
    assert (batch == one).all()


@pytest.mark.parametrize("digits", ["7", "42", "417", "4417", "60311", "880123", "1234567890123"])
def test_a_number_weighs_what_its_tokens_say(digits: str) -> None:
    # numbers are weighed without the encoder (a new order number on every call): as
    # rare as cl100k's count of tokens for them makes them
    encoding = cl100k_encoding()
    if encoding is None:
        pytest.skip("word rarity comes from tiktoken's cl100k encoding")
    tokens = len(encoding.encode(" " + digits, disallowed_special=()))
    assert _rarity(digits) == pytest.approx(1.0 + 0.1 * (tokens - 1), abs=1e-12)


def test_request_keys_split_the_last_user_turn_from_its_context() -> None:
    one = request_keys(ask("question one", system="S"), ("p",))
    two = request_keys(ask("question two", system="S"), ("p",))
    other_system = request_keys(ask("question one", system="T"), ("p",))
    other_partition = request_keys(ask("question one", system="S"), ("q",))
    assert one.context == two.context
    assert one.exact != two.exact
    assert other_system.context != one.context
    assert other_partition.exact != one.exact
    assert other_partition.partition != one.partition
    assert one.query == "question one"


def test_bad_configuration_is_refused() -> None:
    for options in (
        {"ttl": 0},
        {"ttl": float("inf")},  # every store failed (an entry's times must be finite)
        {"ttl": float("nan")},
        {"stale_ttl": float("inf")},
        {"verify_band": float("nan")},  # the verifier was never asked
        {"max_entries": 0},
        {"threshold": 1.5},
        {"margin": 1.0},
        {"namespace": ""},
    ):
        with pytest.raises(ConfigurationError):
            ResponseCache(**options)


def test_options_of_the_wrong_type_are_configuration_errors(redis_url: str) -> None:
    """Each was a TypeError from a comparison, or taken and an AttributeError later (a
    number namespace with a Redis store, a number tenant at the first lookup)."""
    for options in (
        {"ttl": "60"},
        {"ttl": True},
        {"stale_ttl": None},
        {"max_entries": "10"},
        {"max_entries": 2.5},
        {"threshold": "0.7"},
        {"target_precision": "0.95"},
        {"margin": "0"},
        {"version": 2},
        {"sync_interval": float("nan")},
        {"sync_interval": -1.0},
    ):
        with pytest.raises(ConfigurationError):
            ResponseCache(**options)
    with pytest.raises(ConfigurationError):
        ResponseCache(redis_url, namespace=5)  # type: ignore[arg-type]
    cache = ResponseCache(per_user=True)
    for scope in (Scope(tenant=5), Scope(user=7)):  # type: ignore[arg-type]
        with pytest.raises(RequestValidationError):
            cache.lookup(ask(FAQ), scope)


def test_parts_and_switches_of_the_wrong_kind_are_configuration_errors() -> None:
    """An embedder or monitor that is not one was an AttributeError; a verifier that cannot
    be called was taken, and each semantic match it was asked about was refused; a switch
    such as ``semantic="no"`` was taken as true."""
    for options in (
        {"embedder": "minilm"},
        {"verifier": "paraphrase"},
        {"monitor": "on"},
        {"semantic": "no"},
        {"guards": "off"},
        {"strict": 1},
        {"cache_sampled": "yes"},
        {"per_user": None},
    ):
        with pytest.raises(ConfigurationError):
            ResponseCache(**options)


def test_two_processes_share_one_redis_cache(redis_url: str, redis_prefix: str) -> None:
    writer = f"""
import sys
from llmguard_sdk.cache import ResponseCache
from llmguard_sdk.models import ChatRequest, ChatResponse, Message
from tests.conftest import RedisTarget
cache = ResponseCache({redis_url!r}, key_prefix={redis_prefix!r})
request = ChatRequest(messages=[Message(role="user", content={FAQ!r})], model="m")
assert cache.store(request, ChatResponse(text="from the other process", finish_reason="stop"))
cache.close()
"""
    reader = ResponseCache(redis_url, key_prefix=redis_prefix, sync_interval=0.0)
    assert reader.lookup(ask(PARAPHRASE)) is None  # loads the (empty) log first
    subprocess.run([sys.executable, "-c", writer], check=True, timeout=60)
    hit = reader.lookup(ask(PARAPHRASE))
    assert hit is not None
    assert hit.kind == "semantic"
    assert hit.response.text == "from the other process"
    late = ResponseCache(redis_url, key_prefix=redis_prefix)  # a process started afterwards
    assert late.lookup(ask(PARAPHRASE)) is not None
    reader.close()
    late.close()


def test_a_process_started_after_the_stream_was_trimmed_indexes_the_live_entries(
    redis_url: str, redis_prefix: str
) -> None:
    """The change stream keeps the last 1,000 or so changes: a process started after more
    than that never saw an old entry's put. It loads the live entries instead (here a hot
    one, kept in use while 1,200 others came and went) and reads the stream on from there."""
    writer = ResponseCache(redis_url, key_prefix=redis_prefix, max_entries=300, guards=False)
    writer.store(ask(FAQ), answer("the hot answer"))
    for i in range(1_200):
        writer.store(ask(f"Unrelated question number {i} about item {i * 7}?"), answer(f"{i}"))
        if i % 100 == 0:
            assert writer.lookup(ask(FAQ)) is not None  # in use: never evicted
    late = ResponseCache(redis_url, key_prefix=redis_prefix, guards=False, sync_interval=0.0)
    late.lookup(ask("Is the shop open on Sundays?"))  # starts the load (does not wait for it)
    hit = late.lookup(ask(PARAPHRASE))
    assert hit is not None
    assert hit.kind == "semantic"
    assert hit.response.text == "the hot answer"
    writer.store(ask("What are your opening hours on public holidays?"), answer("9 to 5"))
    assert late.lookup(ask("What are your opening hours on public holiday?")) is not None
    writer.close()
    late.close()


def test_loading_the_live_entries_takes_a_few_pages_a_sync(
    redis_url: str, redis_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process started after the stream was trimmed loaded every live entry in its first
    sync, page after page, in the opening batch of its first call: with 100,000 entries that
    call waited for 200 round trips and as many parsed entries, whatever its deadline. A
    sync now loads a few pages and the next syncs go on from there."""
    import redis

    from llmguard_sdk.cache import _redis

    monkeypatch.setattr(_redis, "_LIVE_PAGE", 10)  # 4 pages a sync: 40 entries
    writer = ResponseCache(redis_url, key_prefix=redis_prefix, max_entries=500, guards=False)
    for i in range(100):
        writer.store(ask(f"Unrelated question number {i} about item {i * 7}?"), answer(f"{i}"))
    client = redis.Redis.from_url(redis_url)
    log = f"{redis_prefix}:cache:{{{hash_id('default')}}}:log"
    for _ in range(1100):  # more changes than the stream keeps: a new reader loads entries
        client.xadd(log, {"op": "noop"}, maxlen=10)
    client.close()
    late = ResponseCache(redis_url, key_prefix=redis_prefix, guards=False, sync_interval=0.0)
    late._sync()
    assert len(late._local.index_of) == 40
    for _ in range(2):
        late._sync()
    assert len(late._local.index_of) == 100  # all loaded
    writer.store(ask("What are your opening hours on public holidays?"), answer("9 to 5"))
    hit = late.lookup(ask("What are your opening hours on public holiday?"))  # read on
    assert hit is not None
    assert hit.response.text == "9 to 5"
    writer.close()
    late.close()


def test_one_sync_of_the_change_stream_at_a_time(redis_url: str, redis_prefix: str) -> None:
    """Two threads reading the change stream at once could apply its parts out of order (an
    entry's delete before its earlier put, say): while one sync is under way, another call
    skips its sync (the next one reads on), and an abandoned sync lets the next one run."""
    writer = ResponseCache(redis_url, key_prefix=redis_prefix)
    reader = ResponseCache(redis_url, key_prefix=redis_prefix, sync_interval=0.0)
    writer.store(ask(FAQ), answer("a"))
    first = reader.sync_steps()
    next(first)  # its read of the stream is under way
    second = reader.sync_steps()
    with pytest.raises(StopIteration):
        next(second)  # skipped: nothing read, nothing applied
    first.close()  # abandoned (its batch cancelled, say)
    third = reader.sync_steps()
    next(third)  # runs
    third.close()
    assert reader.lookup(ask(PARAPHRASE)) is not None
    writer.close()
    reader.close()


def test_an_entry_found_expired_leaves_the_other_processes_indexes(
    redis_url: str, redis_prefix: str
) -> None:
    one, two = (
        ResponseCache(redis_url, key_prefix=redis_prefix, ttl=0.2, stale_ttl=0, sync_interval=0)
        for _ in range(2)
    )
    other = ask("What are your opening hours on public holidays?")
    one.store(ask(FAQ), answer("a"))
    assert two.lookup(other) is None  # reads the log: indexes the entry
    entry_id = one.keys(ask(FAQ)).exact
    assert entry_id in two._local.index_of
    time.sleep(0.3)
    assert one.lookup(ask(FAQ)) is None  # found expired (and no longer in the LRU to evict)
    assert two.lookup(other) is None
    assert entry_id not in two._local.index_of  # else kept for good: no eviction would log it
    one.close()
    two.close()


def test_redis_entries_are_json_with_a_ttl(redis_url: str, redis_prefix: str) -> None:
    import redis

    cache = ResponseCache(redis_url, key_prefix=redis_prefix, ttl=60, stale_ttl=60)
    cache.store(ask(FAQ), answer("a"))
    client: RawRedis = redis.Redis.from_url(redis_url)
    keys = [k for k in client.scan_iter(match=f"{redis_prefix}:cache:*:e:*")]
    assert len(keys) == 1
    assert json.loads(client.get(keys[0]))["query"] == FAQ
    assert 0 < client.pttl(keys[0]) <= 120_000
    client.close()
    cache.close()


class _ClockAhead:
    """The ``time`` module of a host whose clock is ``seconds`` ahead of this one's."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def time(self) -> float:
        return time.time() + self.seconds

    def monotonic(self) -> float:
        return time.monotonic()


def test_a_shared_entry_lives_its_ttl_whatever_the_reading_hosts_clock(
    redis_url: str, redis_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Freshness was judged by comparing the writer's timestamps with the reader's clock: a
    host whose clock ran 2 minutes ahead found a 1-minute entry dead as soon as it was
    written (one running behind served it past its ttl). The entry's remaining life in
    Redis (its PTTL) now says how long it lives, on every host."""
    from llmguard_sdk.cache import _redis, core

    writer, reader = (
        ResponseCache(redis_url, key_prefix=redis_prefix, ttl=60, stale_ttl=0, sync_interval=0)
        for _ in range(2)
    )
    writer.store(ask(FAQ), answer("a"))
    for module in (core, _redis):
        monkeypatch.setattr(module, "time", _ClockAhead(120.0))
    hit = reader.lookup(ask(FAQ))
    assert hit is not None
    assert hit.kind == "exact"
    semantic = reader.lookup(ask(PARAPHRASE))
    assert semantic is not None
    assert semantic.kind == "semantic"
    writer.close()
    reader.close()


def test_the_change_stream_judges_an_entry_alive_by_the_servers_clock(
    redis_url: str, redis_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A change logged by a writer carried its ``stale_until`` by the writer's clock, and a
    reader compared it with its own: a reader 2 minutes ahead never indexed an entry of a
    1-minute ttl (no semantic hit while it lived), from the stream as from the live entries
    loaded after the stream was trimmed. A put's life now counts from its message id, by
    Redis's clock; a loaded entry's from its PTTL."""
    from llmguard_sdk.cache import _local, _redis, core

    writer = ResponseCache(redis_url, key_prefix=redis_prefix, ttl=60, stale_ttl=0)
    writer.store(ask(FAQ), answer("a"))
    for module in (core, _redis, _local):
        monkeypatch.setattr(module, "time", _ClockAhead(120.0))
    reader = ResponseCache(redis_url, key_prefix=redis_prefix, sync_interval=0)
    hit = reader.lookup(ask(PARAPHRASE))
    assert hit is not None
    assert hit.kind == "semantic"
    import redis

    client = redis.Redis.from_url(redis_url)
    log = f"{redis_prefix}:cache:{{{hash_id('default')}}}:log"
    for _ in range(1100):  # more changes than the stream keeps: a new reader loads entries
        client.xadd(log, {"op": "noop"}, maxlen=10)
    client.close()
    late = ResponseCache(redis_url, key_prefix=redis_prefix, sync_interval=0)
    assert late.lookup(ask("Is the shop open on Sundays?")) is None  # loads the live entries
    loaded = late.lookup(ask(PARAPHRASE))
    assert loaded is not None
    assert loaded.kind == "semantic"
    for cache in (writer, reader, late):
        cache.close()


def test_an_entry_this_version_cannot_read_is_a_miss_not_an_error(
    redis_url: str, redis_prefix: str
) -> None:
    """An entry written in another shape (a newer SDK sharing the namespace during a rolling
    upgrade) raised pydantic's ValidationError from every lookup of its request and of its
    paraphrases, failing the guarded calls, and from the first sync of a process started
    after the change stream was trimmed."""
    import redis

    cache = ResponseCache(redis_url, key_prefix=redis_prefix, sync_interval=0, max_entries=1)
    cache.store(ask(FAQ), answer("a"))
    client = redis.Redis.from_url(redis_url)
    (key,) = client.scan_iter(match=f"{redis_prefix}:cache:*:e:*")
    client.set(key, json.dumps({"entry_id": "x", "schema": 2}), keepttl=True)
    assert cache.lookup(ask(FAQ)) is None
    assert cache.lookup(ask(PARAPHRASE)) is None
    for _ in range(1100):  # more changes than the stream keeps: a new process loads entries
        client.xadd(f"{redis_prefix}:cache:{{{hash_id('default')}}}:log", {"op": "noop"}, maxlen=10)
    late = ResponseCache(redis_url, key_prefix=redis_prefix, sync_interval=0)
    assert late.lookup(ask(PARAPHRASE)) is None
    cache.store(ask(FAQ), answer("b"))  # written again in this version's shape
    hit = late.lookup(ask(PARAPHRASE))  # its sync reads on: the new entry is indexed
    assert hit is not None
    assert (hit.kind, hit.response.text) == ("semantic", "b")
    client.close()
    cache.close()
    late.close()


def test_a_dead_redis_means_misses_not_errors() -> None:
    cache = ResponseCache("redis://127.0.0.1:1/0")
    assert not cache.store(ask(FAQ), answer("a"))  # dropped (it says so), logged once
    assert cache.lookup(ask(FAQ)) is None
    cache.close()
