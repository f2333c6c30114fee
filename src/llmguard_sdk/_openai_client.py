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

from typing import TYPE_CHECKING, Any, TypeVar

import openai

from .transport import _client

if TYPE_CHECKING:
    from .guard import Guard

__all__ = ["AsyncGuardedOpenAI", "GuardedOpenAI"]

_BASE_URL = "http://llmguard.invalid/v1"
_KEY = "llmguard"  # never sent anywhere: the transport answers in process
T = TypeVar("T")


def _options(
    guard: Guard, *, asynchronous: bool, base_url: str = _BASE_URL, raise_errors: bool = True
) -> dict[str, Any]:
    """An SDK client's options over the Guard's transport (openai's, anthropic's): no retries
    (one loop, the Guard's) and no timeout of its own (the Guard's bounds each call, a per-call
    ``timeout=`` shortens it; anthropic's default one also refuses a plain call with a large
    ``max_tokens``)."""
    # httpx2 where installed (openai 3.x), else httpx (openai 1.x and 2.x)
    client = _client(
        guard, None, asynchronous=asynchronous, raise_errors=raise_errors, base_url=base_url
    )
    return {
        "api_key": _KEY,
        "base_url": base_url,
        "max_retries": 0,
        "http_client": client,
        "timeout": None,
    }


class _Tagged:
    """Puts the Guard's view on every parsed object."""

    def _process_response_data(self, *, data: object, cast_to: type[T], response: Any) -> T:
        parsed: T = super()._process_response_data(  # type: ignore[misc]
            data=data, cast_to=cast_to, response=response
        )
        served = response.extensions.get("llmguard")
        if served is not None and hasattr(parsed, "__pydantic_fields__"):
            object.__setattr__(parsed, "llmguard", served)  # outside the fields: not dumped
        return parsed


class GuardedOpenAI(_Tagged, openai.OpenAI):
    """``openai.OpenAI`` whose requests the Guard answers."""

    def __init__(self, guard: Guard) -> None:
        super().__init__(**_options(guard, asynchronous=False))
        self.guard = guard


class AsyncGuardedOpenAI(_Tagged, openai.AsyncOpenAI):
    """``openai.AsyncOpenAI`` whose requests the Guard answers."""

    def __init__(self, guard: Guard) -> None:
        super().__init__(**_options(guard, asynchronous=True))
        self.guard = guard
