"""Which answers the response cache may keep: one that a later call can be given instead of
asking the model again.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

from ..models import ChatRequest, ChatResponse
from ..telemetry._quality import signals_of

__all__ = ["storable"]

# the words for a natural stop (read in lower case: Gemini's raw STOP): OpenAI's, Claude's,
# TGI's end-of-sequence token; not any word openai_finish_reason reads as "stop" (an unknown
# word is said "stop" there, and may mean an answer cut short)
_SERVABLE_FINISH = frozenset({"stop", "end_turn", "stop_sequence", "eos_token"})


def storable(request: ChatRequest, response: ChatResponse) -> bool:
    """Whether ``response`` may be cached for ``request``: a natural stop without tool calls,
    neither degraded nor itself from the cache, and none of the quality signals of
    :mod:`llmguard_sdk.telemetry` (a refusal, a blank answer, or JSON asked for and not
    given: a later call asking again may well get a good answer, and a cached one would be
    served to every paraphrase for the whole ``ttl``)."""
    finish = (response.finish_reason or "").lower()
    if response.tool_calls or finish not in _SERVABLE_FINISH:
        return False
    if response.metadata.get("degraded") or response.metadata.get("cache"):
        return False
    return not signals_of(request, response, None)
