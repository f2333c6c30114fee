"""Anthropic's own client over the Guard's transport (:func:`llmguard_sdk.client.anthropic_client`):
``messages.create`` returns anthropic's ``Message`` (streams its events), answered by any route;
``messages.count_tokens`` the Guard's own count (an estimate for Claude's models: see
:mod:`llmguard_sdk.transport`).

Its retries are off (``max_retries=0``: one retry loop, the Guard's) and it has no timeout of
its own (the Guard's bounds each call; a per-call ``timeout=`` shortens a plain call's and
bounds a stream's silence, as through the transport seam). A failed call raises
an error that is both the Guard's (``AllRoutesFailedError`` ..., every attribute) and anthropic's
own for the seam's answer (``anthropic.RateLimitError`` for 429, ``anthropic.OverloadedError``
for Claude's 529 ...: anthropic's SDK wraps whatever a transport raises into its connection
error, so the Guard's errors come as answers and are joined again when the SDK raises); the
Guard's error is also ``error.response.extensions["llmguard_error"]`` and its class name the
``x-llmguard-error`` header. Each parsed object carries the Guard's view as ``.llmguard``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

import anthropic

from ._sdk_clients import _both, _BothErrors, _given, _Tagged
from .errors import LLMGuardError
from .transport._messages import MessagesWire

if TYPE_CHECKING:
    from .guard import Guard

__all__ = ["AsyncGuardedAnthropic", "GuardedAnthropic"]

_BASE_URL = "http://llmguard.invalid"


def _anthropic_options(
    guard: Guard | None, options: dict[str, Any], *, asynchronous: bool
) -> dict[str, Any]:
    # the Guard's errors as answers: anthropic's SDK wraps what a transport raises (but not
    # its own errors, which a stream that broke after it began raises)
    how = {"base_url": _BASE_URL, "stream_error": _broken_stream}
    return _given(guard, options, asynchronous=asynchronous, **how)


def _broken_stream(exc: LLMGuardError, request: Any) -> BaseException:
    """What anthropic raises for the seam's error event in a stream (its status error for
    the stream's 200 answer), as the Guard's error too."""
    body = MessagesWire().error(exc)
    library = importlib.import_module(type(request).__module__.partition(".")[0])  # httpx(2)
    response = library.Response(200, request=request)
    return _both(exc, anthropic.APIStatusError(str(exc), response=response, body=body))


# anthropic marks _make_status_error final (for its type checker: it is an ordinary method);
# it is the one place both its plain calls and its streams' error events make their errors
class GuardedAnthropic(_BothErrors, _Tagged, anthropic.Anthropic):  # type: ignore[misc]
    """``anthropic.Anthropic`` whose requests the Guard answers."""

    def __init__(self, guard: Guard | None = None, **options: Any) -> None:
        super().__init__(**_anthropic_options(guard, options, asynchronous=False))
        self.guard = guard


class AsyncGuardedAnthropic(  # type: ignore[misc]  # (as above)
    _BothErrors, _Tagged, anthropic.AsyncAnthropic
):
    """``anthropic.AsyncAnthropic`` whose requests the Guard answers."""

    def __init__(self, guard: Guard | None = None, **options: Any) -> None:
        super().__init__(**_anthropic_options(guard, options, asynchronous=True))
        self.guard = guard
