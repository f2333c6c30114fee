"""The reads of a semantic lookup after its exact read: a candidate's entry or a server
search that Redis did not serve is counted in ``stats.errors``."""

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

FIRST = "How do I configure topic1?"
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
