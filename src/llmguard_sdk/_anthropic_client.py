"""Anthropic's own client over the Guard's transport (:func:`llmguard_sdk.client.anthropic_client`):
``messages.create`` returns anthropic's ``Message`` (streams its events), answered by any route.

Its retries are off (``max_retries=0``: one retry loop, the Guard's) and it has no timeout of
its own (the Guard's bounds each call; a per-call ``timeout=`` shortens it). A failed call raises
anthropic's own error for the status (``anthropic.InternalServerError`` for 503 ...: anthropic's
SDK wraps whatever a transport raises into its connection error, so the Guard's errors come as
answers); the Guard's error is ``error.response.extensions["llmguard_error"]`` and its class
name the ``x-llmguard-error`` header. Each parsed object carries the Guard's view as
``.llmguard``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anthropic

from ._sdk_clients import _given, _Tagged

if TYPE_CHECKING:
    from .guard import Guard

__all__ = ["AsyncGuardedAnthropic", "GuardedAnthropic"]

_BASE_URL = "http://llmguard.invalid"


def _anthropic_options(
    guard: Guard | None, options: dict[str, Any], *, asynchronous: bool
) -> dict[str, Any]:
    # the Guard's errors as answers, also inside a stream: anthropic's SDK wraps what a
    # transport raises
    return _given(guard, options, asynchronous=asynchronous, base_url=_BASE_URL)


class GuardedAnthropic(_Tagged, anthropic.Anthropic):
    """``anthropic.Anthropic`` whose requests the Guard answers."""

    def __init__(self, guard: Guard | None = None, **options: Any) -> None:
        super().__init__(**_anthropic_options(guard, options, asynchronous=False))
        self.guard = guard


class AsyncGuardedAnthropic(_Tagged, anthropic.AsyncAnthropic):
    """``anthropic.AsyncAnthropic`` whose requests the Guard answers."""

    def __init__(self, guard: Guard | None = None, **options: Any) -> None:
        super().__init__(**_anthropic_options(guard, options, asynchronous=True))
        self.guard = guard
