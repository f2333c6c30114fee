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
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Generator
from typing import Protocol, runtime_checkable

from ..models import ChatRequest, ChatResponse, StreamChunk

__all__ = ["Provider"]


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
