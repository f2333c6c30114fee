"""The ``llmguard.cache`` of a call the response cache skipped (``cacheable=False``, a sampled
call, a call for an end user): ``skipped``, not ``miss``. Counted as misses, they pulled the
hit rate read off ``llmguard.cache.lookups`` down by every call that never looked."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from llmguard_sdk import Guard
from llmguard_sdk.cache import ResponseCache
from llmguard_sdk.testing import FakeProvider

from .conftest import USER
from .test_telemetry import Exported, call_span, exporting

otel = pytest.fixture(exporting, name="otel")
MakeGuard = Callable[..., Guard]


def test_calls_the_cache_skips_are_labelled_skipped_not_missed(
    fake: FakeProvider, make_guard: MakeGuard, otel: Exported
) -> None:
    cache = ResponseCache()
    guard = make_guard(fake, telemetry=otel.telemetry, cache=cache)
    guard.chat(USER)  # a miss, stored
    guard.chat(USER)  # a hit
    guard.chat(USER, cacheable=False)
    guard.chat(USER, temperature=0.8)
    guard.chat(USER, user="u-42")
    with guard.chat(USER, stream=True, cacheable=False) as stream:
        list(stream)
    lookups = {
        p.attributes["llmguard.cache"]: p.value for p in otel.points("llmguard.cache.lookups")
    }
    assert lookups == {"miss": 1, "exact": 1, "skipped": 4}
    assert (cache.stats.misses, cache.stats.exact_hits, cache.stats.skipped) == (1, 1, 4)
    # a skipped call is a provider's answer: its duration and tokens are the provider's
    durations = {
        p.attributes.get("llmguard.cache"): p.count
        for p in otel.points("gen_ai.client.operation.duration")
    }
    assert durations == {None: 5, "exact": 1}
    tokens = {
        p.attributes["gen_ai.token.type"]: p.count for p in otel.points("gen_ai.client.token.usage")
    }
    assert tokens == {"input": 5, "output": 5}


def test_a_protected_call_never_looks_the_cache_up(fake: FakeProvider, otel: Exported) -> None:
    guard = Guard([], telemetry=otel.telemetry, cache=True, environ={})

    @guard.protect(feature="faq")
    def vendor() -> str:
        return "answer"

    assert vendor() == "answer"
    attributes = call_span(otel).attributes
    assert attributes is not None
    assert "llmguard.cache" not in attributes  # (no lookup: neither a miss nor skipped)
    guard.close()
