"""The seam between the Guard and a model: the :class:`Provider` protocol.

A provider turns a :class:`~llmguard_sdk.models.ChatRequest` into a
:class:`~llmguard_sdk.models.ChatResponse` (or a stream of
:class:`~llmguard_sdk.models.StreamChunk`), sync and async, and raises only
:class:`~llmguard_sdk.errors.ProviderError` subclasses for the provider's failures.

``deadline`` is a :func:`time.monotonic` instant: the provider must give up by then and raise
:class:`~llmguard_sdk.errors.ProviderTimeoutError`. Streams also take ``idle_timeout``: the
longest silence allowed before the first piece and between later ones.

Streams are generators: the consumer must close them (the Guard does). A stream fails with a
retryable error while nothing has been yielded yet, and with
:class:`~llmguard_sdk.errors.StreamInterruptedError` once content has been yielded.

Capabilities a provider may declare, read through the functions below (a provider that
declares none of them is still a :class:`Provider`, with the defaults):

- ``is_local`` (``bool``, default ``False``): the model runs on this machine, costs nothing
  and needs no network (budgets send ``on_exhausted="local_only"`` calls to such routes);
  :class:`~llmguard_sdk.LocalProvider` declares it.
- ``context_window`` (``int | None``, default ``None``): the model's context in tokens (1 to
  2**31 - 1: a Guard refuses another); the Guard skips a route that cannot hold the request.
- ``count_tokens(request) -> int | None``: the request's input tokens as the model counts
  them (its own tokenizer); rate limits and budgets use it instead of tiktoken's estimate.
- ``cache_answers`` (``bool``, default: undeclared): whether the response cache keeps this
  route's answers. Undeclared, it keeps them, but for a local route that answered in place
  of a remote one (a fallback in an outage: a small model's answer would be served from the
  cache for its whole ``ttl`` after the outage ends).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable, Generator
from dataclasses import dataclass
from typing import Protocol, TypedDict, runtime_checkable

from typing_extensions import NotRequired, Unpack

from ..errors import RequestValidationError
from ..models import ChatRequest, ChatResponse, StreamChunk

__all__ = [
    "Provider",
    "StreamCall",
    "cache_answers",
    "context_window",
    "is_local",
    "token_counter",
]


@runtime_checkable
class Provider(Protocol):
    """What the Guard needs from a model backend.

    ``name`` identifies the route in responses, errors and telemetry; ``model`` is the model
    the route serves (``None``: the request's model is used).
    """

    name: str
    model: str | None

    def complete(self, request: ChatRequest, *, model: str, deadline: float) -> ChatResponse:
        """Answer ``request`` with ``model`` in one response."""
        ...

    async def acomplete(self, request: ChatRequest, *, model: str, deadline: float) -> ChatResponse:
        """Async twin of :meth:`complete`."""
        ...

    def stream(
        self,
        request: ChatRequest,
        *,
        model: str,
        deadline: float,
        idle_timeout: float | None = None,
    ) -> Generator[StreamChunk, None, None]:
        """Answer ``request`` as a stream of chunks; the last one carries usage when known."""
        ...

    def astream(
        self,
        request: ChatRequest,
        *,
        model: str,
        deadline: float,
        idle_timeout: float | None = None,
    ) -> AsyncGenerator[StreamChunk, None]:
        """Async twin of :meth:`stream`."""
        ...

    def close(self) -> None:
        """Release sync resources (connection pools)."""
        ...

    async def aclose(self) -> None:
        """Release async resources."""
        ...


@dataclass(frozen=True)
class StreamCall:
    """The arguments of one :meth:`Provider.stream` or :meth:`Provider.astream` call.

    .. versionadded:: 0.2.0
    """

    request: ChatRequest
    model: str
    deadline: float
    idle_timeout: float | None = None


class _Timing(TypedDict):
    deadline: float
    idle_timeout: NotRequired[float | None]


class _Streams:
    """:meth:`Provider.stream` and :meth:`Provider.astream` written once for the providers of
    this package: each one implements ``_stream(call)`` and ``_astream(call)`` on a
    :class:`StreamCall`."""

    def stream(
        self, request: ChatRequest, *, model: str, **timing: Unpack[_Timing]
    ) -> Generator[StreamChunk, None, None]:
        """Answer ``request`` as a stream of chunks; the last one carries usage when known.

        ``idle_timeout`` bounds the silence before the first piece and between later ones.
        """
        return self._stream(StreamCall(request, model, **timing))

    def astream(
        self, request: ChatRequest, *, model: str, **timing: Unpack[_Timing]
    ) -> AsyncGenerator[StreamChunk, None]:
        """Async twin of :meth:`stream`."""
        return self._astream(StreamCall(request, model, **timing))

    def _stream(self, call: StreamCall) -> Generator[StreamChunk, None, None]:
        raise NotImplementedError

    def _astream(self, call: StreamCall) -> AsyncGenerator[StreamChunk, None]:
        raise NotImplementedError


def is_local(provider: object) -> bool:
    """Whether ``provider`` declares that it runs on this machine (``is_local = True``): free,
    no network. Providers that declare nothing are remote.

    .. versionadded:: 0.2.0
    """
    return getattr(provider, "is_local", False) is True


def cache_answers(provider: object) -> bool | None:
    """Whether ``provider`` declares that the response cache keeps its answers
    (``cache_answers = True`` or ``False``; ``None``: it declares nothing, see the module).

    .. versionadded:: 0.2.0
    """
    declared = getattr(provider, "cache_answers", None)
    return declared if isinstance(declared, bool) else None


def context_window(provider: object) -> int | None:
    """The context window ``provider`` declares, in tokens (``None``: unknown).

    .. versionadded:: 0.2.0
    """
    window = getattr(provider, "context_window", None)
    return window if isinstance(window, int) and not isinstance(window, bool) else None


def token_counter(provider: object) -> Callable[[ChatRequest], int | None] | None:
    """The provider's own ``count_tokens(request)`` (``None`` when it has none).

    .. versionadded:: 0.2.0
    """
    counter = getattr(provider, "count_tokens", None)
    return counter if callable(counter) else None


def _check_timing(deadline: object, idle_timeout: object = None) -> None:
    """Refuse (:class:`~llmguard_sdk.errors.RequestValidationError`) a call's ``deadline`` or
    ``idle_timeout`` that is NaN or not a number; ``math.inf`` is one (no deadline)."""
    for what, seconds in (("deadline", deadline), ("idle_timeout", idle_timeout)):
        if seconds is None and what == "idle_timeout":
            continue
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds != seconds:
            raise RequestValidationError(f"{what} must be a number of seconds, not {seconds!r}")
