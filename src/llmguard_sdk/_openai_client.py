"""``guard.client()`` where openai-python is installed: openai's own client over the Guard's
transport, so every object is genuinely openai's (``ChatCompletion``, ``ChatCompletionChunk``,
``Response``), and ``with_raw_response``, ``with_streaming_response``, ``models.list`` and
``responses.create`` work as frameworks expect.

The SDK's retries are off (``max_retries=0``: one retry loop, the Guard's). A failed call
raises an error that is both the Guard's (``RequestValidationError``, ``AllRoutesFailedError``
... with every attribute) and the openai error the transport seam gives for it (the seam's
status and error body: ``openai.RateLimitError`` for 429 ..., ``openai.APIError`` for a
stream that broke after it began), so ``except AllRoutesFailedError`` and ``except
openai.APIStatusError`` (frameworks' fallbacks) both catch it. Each parsed object carries the
Guard's view of the call as ``.llmguard`` (a :class:`~llmguard_sdk.ChatResponse`), left out
of its dumps.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import openai

from ._sdk_clients import _both, _BothErrors, _given, _Tagged
from .errors import LLMGuardError
from .transport._wire import openai_error

if TYPE_CHECKING:
    from .guard import Guard

__all__ = ["AsyncGuardedOpenAI", "GuardedOpenAI"]

_BASE_URL = "http://llmguard.invalid/v1"


def _broken_stream(exc: LLMGuardError, request: Any) -> BaseException:
    """What openai raises for the seam's error event in a stream, as the Guard's error too."""
    body = openai_error(exc)["error"]
    return _both(exc, openai.APIError(body["message"], request, body=body))


def _options(guard: Guard | None, options: dict[str, Any], *, asynchronous: bool) -> Any:
    how = {"base_url": _BASE_URL, "stream_error": _broken_stream}
    return _given(guard, options, asynchronous=asynchronous, **how)


class GuardedOpenAI(_BothErrors, _Tagged, openai.OpenAI):
    """``openai.OpenAI`` whose requests the Guard answers."""

    def __init__(self, guard: Guard | None = None, **options: Any) -> None:
        super().__init__(**_options(guard, options, asynchronous=False))
        self.guard = guard


class AsyncGuardedOpenAI(_BothErrors, _Tagged, openai.AsyncOpenAI):
    """``openai.AsyncOpenAI`` whose requests the Guard answers."""

    def __init__(self, guard: Guard | None = None, **options: Any) -> None:
        super().__init__(**_options(guard, options, asynchronous=True))
        self.guard = guard
