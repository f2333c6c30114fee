"""A usage in OpenAI's chat-completions words, for what answers an SDK as OpenAI would: the
transport seam's writer and the stand-in client both give it.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

from typing import Any

from ..models import Usage

__all__ = ["chat_usage"]


def chat_usage(usage: Usage | None) -> dict[str, Any] | None:
    """``usage`` as chat completions report it: prompt, completion and total tokens, the
    input tokens read from the cache in ``prompt_tokens_details`` with, where there are any,
    those written to it (openai's optional ``cache_write_tokens``, billed above input by
    OpenAI's newer models) and those that carried audio (``audio_tokens``); the reasoning
    and audio output tokens and a Predicted Output's accepted and rejected tokens in
    ``completion_tokens_details``, where there are any."""
    if usage is None:
        return None
    prompt = {"cached_tokens": usage.cached_input_tokens}
    if usage.cache_write_input_tokens:
        prompt["cache_write_tokens"] = usage.cache_write_input_tokens
    if usage.audio_input_tokens:
        prompt["audio_tokens"] = usage.audio_input_tokens
    body: dict[str, Any] = {
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.total_tokens,
        "prompt_tokens_details": prompt,
    }
    completion = {}
    if usage.reasoning_tokens:
        completion["reasoning_tokens"] = usage.reasoning_tokens
    if usage.audio_output_tokens:
        completion["audio_tokens"] = usage.audio_output_tokens
    if usage.accepted_prediction_tokens or usage.rejected_prediction_tokens:
        completion["accepted_prediction_tokens"] = usage.accepted_prediction_tokens
        completion["rejected_prediction_tokens"] = usage.rejected_prediction_tokens
    if completion:
        body["completion_tokens_details"] = completion
    return body
