"""Which answers the response cache may keep: one that a later call can be given instead of
asking the model again.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import math
import time
from typing import Any

from ..models import ChatRequest, ChatResponse
from ..providers._chat_content import answer_audio
from ..telemetry._signals import signals_of

__all__ = ["audio_expiry", "cached_form", "kept_until", "storable"]

# the words for a natural stop (read in lower case: Gemini's raw STOP): OpenAI's, Claude's,
# TGI's end-of-sequence token; not any word openai_finish_reason reads as "stop" (an unknown
# word is said "stop" there, and may mean an answer cut short)
_SERVABLE_FINISH = frozenset({"stop", "end_turn", "stop_sequence", "eos_token"})
# what an answer's metadata says of the call that got it, not of the answer a later call is
# given: a Responses route's reasoning items (that call's thoughts, by their ids and sealed in
# their encrypted_content: a later caller would send them back to the route as its own; the
# reasoning's text stays, as the answer's does) and whether the route stored the response
_THAT_CALL_S = ("reasoning_items", "store")


def storable(request: ChatRequest, response: ChatResponse) -> bool:
    """Whether ``response`` may be cached for ``request``: a natural stop without tool calls,
    neither degraded nor itself from the cache, and none of the quality signals of
    :mod:`llmguard_sdk.telemetry` (a refusal, a blank answer, or JSON asked for and not
    given: a later call asking again may well get a good answer, and a cached one would be
    served to every paraphrase for the whole ``ttl``), nor an answer whose audio id has
    already expired (:func:`audio_expiry`). An audio answer without text (``content:
    null``) is no blank one: the audio is the answer (no quality signal says it is)."""
    expiry = audio_expiry(response)
    if expiry is not None and expiry <= time.time():
        return False
    finish = (response.finish_reason or "").lower()
    if response.tool_calls or finish not in _SERVABLE_FINISH:
        return False
    if response.metadata.get("degraded") or response.metadata.get("cache"):
        return False
    return not signals_of(request, response, None)


def cached_form(response: ChatResponse) -> dict[str, Any]:
    """``response`` as the cache keeps it: as JSON, without what only the call that got it
    had (its headers, timings and attempts, and the metadata of that call alone: a
    Responses route's reasoning items, whether it stored the response). Its text, tool
    calls and reasoning's text are kept."""
    kept = response.model_dump(
        mode="json",
        exclude={"headers", "timings", "attempts"},
        exclude_none=True,
        exclude_defaults=True,
    )
    metadata = {k: v for k, v in kept.pop("metadata", {}).items() if k not in _THAT_CALL_S}
    return {**kept, "metadata": metadata} if metadata else kept


def audio_expiry(response: ChatResponse) -> float | None:
    """When the id of the answer's audio expires (OpenAI's ``message.audio.expires_at``, Unix
    seconds: a later turn refers to the audio by that id until then, and the provider knows
    it no more after); ``None`` for an answer without one."""
    audio = answer_audio(response.metadata)
    expires = audio.get("expires_at") if audio is not None else None
    if isinstance(expires, bool) or not isinstance(expires, (int, float)):
        return None
    return float(expires)


def kept_until(response: ChatResponse, now: float, ttl: float, stale: float) -> tuple[float, float]:
    """An entry's ``fresh_until`` and ``stale_until``: ``ttl`` from ``now``, then ``stale``
    more, neither past the expiry of the answer's audio id (:func:`audio_expiry`): a cached
    answer is never served with an audio id the provider no longer knows."""
    expiry = audio_expiry(response)
    limit = math.inf if expiry is None else expiry
    return min(now + ttl, limit), min(now + ttl + stale, limit)
