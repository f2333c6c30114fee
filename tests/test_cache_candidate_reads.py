"""The reads of a semantic lookup after its exact read: a candidate's entry or a server
search that Redis did not serve is counted in ``stats.errors``, and a rival entry read only
to judge a hit ambiguous is not marked as used (the least recently used go first)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt
import pytest
import redis8
import with_redis

from llmguard_sdk.cache import HashingEmbedder, ResponseCache
from llmguard_sdk.models import ChatRequest, ChatResponse, Message
from tests.conftest import require

FIRST, SECOND = "How do I configure topic1?", "How can I configure topic1?"
LOOKED_UP = "How would I configure topic1?"


def _ask(text: str) -> ChatRequest:
    return ChatRequest(messages=[Message(role="user", content=text)], model="fake-model")


def _answer(text: str = "Open the settings page.") -> ChatResponse:
    return ChatResponse(text=text, finish_reason="stop")


class StoppingEmbedder:
    """The default embedder, that calls ``stop`` the first time it embeds ``trigger``: a
    lookup of that query has had its exact read served, and its candidates are read (or
    searched on the server) after ``stop``."""

    def __init__(self, trigger: str, stop: Callable[[], None]) -> None:
        self._inner = HashingEmbedder()
        self.name, self.dimension = self._inner.name, self._inner.dimension
        self._trigger, self._stop = trigger, stop
        self.stopped = False

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        if self._trigger in texts and not self.stopped:
            self.stopped = True
            self._stop()
        return self._inner.embed(texts)


@pytest.mark.parametrize("where", ["local", "server"])
def test_a_candidate_read_redis_did_not_serve_is_an_error(where: str) -> None:
    """Redis stops between a lookup's exact read and the read of its semantic candidate
    (``local``) or its ``VSIM`` search (``server``): a miss, and an error (errors 0 -> 1)."""
    binary = redis8.binary() if where == "server" else None
    require(where == "local" or binary is not None, redis8.missing_reason())
    process, url, workdir = with_redis.start_throwaway(binary)
    embedder = StoppingEmbedder(LOOKED_UP, lambda: with_redis.stop_throwaway(process, workdir))
    cache = ResponseCache(
        url, key_prefix="candidates", vector_search="server" if where == "server" else "local",
        embedder=embedder, threshold=0.3, strict=False,
    )  # fmt: skip
    try:
        assert cache.store(_ask(FIRST), _answer())
        assert cache.lookup(_ask(LOOKED_UP)) is None
        assert embedder.stopped
        assert (cache.stats.misses, cache.stats.errors) == (1, 1)
    finally:
        cache.close()
        with_redis.stop_throwaway(process, workdir)


def _served_and_rival_kept(cache: ResponseCache) -> tuple[bool, bool]:
    """Two paraphrases of one answer; a third is looked up: one is served, the other read as
    its rival (within the margin). A third entry then evicts one of them (two at most):
    whether the served one and the rival are still held."""
    for text in (FIRST, SECOND):
        assert cache.store(_ask(text), _answer())
    hit = cache.lookup(_ask(LOOKED_UP))
    assert hit is not None
    first = cache.call_keys(_ask(FIRST))
    assert first is not None
    served = FIRST if hit.entry_id == first.exact else SECOND
    rival = SECOND if served == FIRST else FIRST
    assert cache.store(_ask("What is the capital of France?"), _answer("Paris."))
    kept = []
    for text in (served, rival):
        found = cache.lookup(_ask(text))
        kept.append(found is not None and found.kind == "exact")
    return kept[0], kept[1]


def test_a_rival_read_to_judge_ambiguity_is_not_marked_as_used() -> None:
    """It was, so the entry served went first: (served, rival) kept (False, True) -> (True,
    False)."""
    cache = ResponseCache(max_entries=2, threshold=0.3, strict=False, margin=0.5)
    assert _served_and_rival_kept(cache) == (True, False)


def test_a_rival_read_in_redis_is_not_marked_as_used(redis_url: str, redis_prefix: str) -> None:
    cache = ResponseCache(
        redis_url, key_prefix=redis_prefix, max_entries=2, threshold=0.3, strict=False, margin=0.5
    )
    try:
        assert _served_and_rival_kept(cache) == (True, False)
    finally:
        cache.close()
