"""A cascade's call with ``stream=True``: buffered. Each tier's answer must pass the cascade's
checks before the caller may see it, so the cascade runs as a plain call and the served answer
is then delivered as one chunk (the stream's ``response`` is the cascade's, total cost and
record included). A call whose tier is not a cascade streams as usual.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Generator

from ..context import CallContext
from ..models import ChatResponse, StreamChunk
from .calls import acomplete_call, complete_call
from .stages import Stages
from .streams import AsyncChatStream, ChatStream, _AsyncStreamState, _ChatStreamState

__all__ = ["achat_stream", "chat_stream"]

_CHUNK_FIELDS = ("text", "finish_reason", "usage", "tool_calls", "model", "route", "id", "metadata")


def _is_cascade(ctx: CallContext) -> bool:
    return ctx.task is not None and ctx.task.cascade is not None


def chat_stream(ctx: CallContext, stages: Stages) -> ChatStream:
    """The stream of ``Guard.chat(..., stream=True)``: buffered for a cascade."""
    return _BufferedStream(ctx, stages) if _is_cascade(ctx) else ChatStream(ctx, stages)


def achat_stream(ctx: CallContext, stages: Stages) -> AsyncChatStream:
    """Async twin of :func:`chat_stream`."""
    if _is_cascade(ctx):
        return _AsyncBufferedStream(ctx, stages)
    return AsyncChatStream(ctx, stages)


def _whole(ctx: CallContext, response: ChatResponse) -> StreamChunk:
    """The served answer as the stream's one chunk (its first token reaches the caller now)."""
    ctx.first_token_at = time.monotonic()
    return StreamChunk(**{name: getattr(response, name) for name in _CHUNK_FIELDS})


class _BufferedState(_ChatStreamState):
    """A cascade's answer, checked, as the one chunk of a :class:`ChatStream`."""

    def _guarded(self) -> Generator[StreamChunk, None, None]:
        self._response = complete_call(self._ctx, self._guard_stages)
        yield _whole(self._ctx, self._response)


class _AsyncBufferedState(_AsyncStreamState):
    """Async twin of :class:`_BufferedState`."""

    async def _guarded(self) -> AsyncGenerator[StreamChunk, None]:
        self._response = await acomplete_call(self._ctx, self._guard_stages)
        yield _whole(self._ctx, self._response)


class _BufferedStream(ChatStream):
    """A cascade's answer, checked, as a one-chunk :class:`ChatStream`."""

    _State = _BufferedState


class _AsyncBufferedStream(AsyncChatStream):
    """Async twin of :class:`_BufferedStream`."""

    _State = _AsyncBufferedState
