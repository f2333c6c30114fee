"""``guard.client()`` where openai-python is installed: openai's own client over the Guard's
transport, so every object is genuinely openai's (``ChatCompletion``, ``ChatCompletionChunk``,
``Response``), and ``with_raw_response``, ``with_streaming_response``, ``models.list`` and
``responses.create`` work as frameworks expect.

The SDK's retries are off (``max_retries=0``: one retry loop, the Guard's), and the Guard's
own errors reach the caller unchanged (``RequestValidationError``, ``AllRoutesFailedError``
...), as they did from the look-alike client. Each parsed object carries the Guard's view of
the call as ``.llmguard`` (a :class:`~llmguard_sdk.ChatResponse`), left out of its dumps.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import openai

from ._sdk_clients import _given, _Tagged

if TYPE_CHECKING:
    from .guard import Guard

__all__ = ["AsyncGuardedOpenAI", "GuardedOpenAI"]

_BASE_URL = "http://llmguard.invalid/v1"


class GuardedOpenAI(_Tagged, openai.OpenAI):
    """``openai.OpenAI`` whose requests the Guard answers."""

    def __init__(self, guard: Guard | None = None, **options: Any) -> None:
        super().__init__(**_given(guard, options, asynchronous=False, base_url=_BASE_URL))
        self.guard = guard


class AsyncGuardedOpenAI(_Tagged, openai.AsyncOpenAI):
    """``openai.AsyncOpenAI`` whose requests the Guard answers."""

    def __init__(self, guard: Guard | None = None, **options: Any) -> None:
        super().__init__(**_given(guard, options, asynchronous=True, base_url=_BASE_URL))
        self.guard = guard
