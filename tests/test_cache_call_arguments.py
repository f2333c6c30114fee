"""A standalone cache's lookups and stores given what they cannot take: a scope that is no
:class:`Scope` (the tenant's name given as the scope) raised ``AttributeError`` from deep
inside, and an option the cache does not know (``ttl_s=600``, ``max_age_s=60``) was taken
and ignored: the answer was kept the cache's whole ``ttl``, or an old one served. Both are a
:class:`RequestValidationError` now, before anything is read or written."""

from __future__ import annotations

from typing import Any

import pytest

from llmguard_sdk.cache import ResponseCache
from llmguard_sdk.errors import RequestValidationError
from llmguard_sdk.models import ChatRequest, ChatResponse, Message

QUESTION = ChatRequest(messages=[Message(role="user", content="What is a VPN?")], model="m")
ANSWER = ChatResponse(text="A private network.", finish_reason="stop")


@pytest.mark.parametrize(
    "call",
    [
        lambda cache, scope: cache.lookup(QUESTION, scope),
        lambda cache, scope: cache.lookup_stale(QUESTION, scope),
        lambda cache, scope: cache.store(QUESTION, ANSWER, scope),
        lambda cache, scope: cache.call_keys(QUESTION, scope),
        lambda cache, scope: cache.invalidate(QUESTION, scope),
    ],
)
def test_a_scope_that_is_no_scope_is_refused(call: Any) -> None:
    cache = ResponseCache()
    with pytest.raises(RequestValidationError, match="scope"):  # was AttributeError
        call(cache, "acme")


@pytest.mark.parametrize(
    "call",
    [
        lambda cache: cache.store(QUESTION, ANSWER, ttl_s=600),
        lambda cache: cache.lookup(QUESTION, max_age_s=60),
        lambda cache: cache.lookup_stale(QUESTION, refrsh=True),
        lambda cache: cache.invalidate(QUESTION, tag=["plan:pro"]),
    ],
)
def test_an_option_the_cache_does_not_know_is_refused(call: Any) -> None:
    cache = ResponseCache()
    with pytest.raises(RequestValidationError, match="unknown keyword"):  # was ignored
        call(cache)
    assert cache.stats.stores == 0
