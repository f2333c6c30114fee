"""One request through the Guard: parse it (written once), then a thin sync or async driver
calls :meth:`Guard.chat` / :meth:`Guard.achat` and answers in the SDK's shape."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from .._core.refusals import refusals
from .._core.stages import resolve_scope
from ..client import _stream_silence
from ..errors import LLMGuardError, RequestValidationError
from ..models import StreamChunk
from . import _count, _wire
from ._chat import ChatWire, ModelsWire
from ._head import Head
from ._messages import MessagesWire
from ._responses import ResponsesWire
from ._wire import Answer, Call, Incoming, NotServedError, Writer

if TYPE_CHECKING:
    from .._core.streams import AsyncChatStream, ChatStream
    from ..guard import Guard

_CHAT = ChatWire()
_RESPONSES = ResponsesWire()
_ROUTES: dict[str, _wire.Wire] = {
    "/chat/completions": _CHAT,
    "/responses": _RESPONSES,
    "/messages": MessagesWire(),
}


def _wire_for(path: str, headers: Mapping[str, str] | None = None) -> _wire.Wire:
    for suffix, wire in _ROUTES.items():
        if path.rstrip("/").endswith(suffix):
            return wire
    # an Anthropic endpoint the seam does not serve, or anthropic's SDK asking (it sends
    # anthropic-version on every request): Anthropic's error shape
    if "/messages/" in path or _from_anthropic(headers):
        return _ROUTES["/messages"]
    return _CHAT


def _from_anthropic(headers: Mapping[str, str] | None) -> bool:
    return headers is not None and "anthropic-version" in headers


def plan(guard: Guard, incoming: Incoming) -> Call | Answer:
    """The Guard call ``incoming`` asks for, or the answer when it needs none. A chat request
    refused here (its body, its ``stream``, its arguments or the SDK's timeout invalid) is
    reported as the Guard reports a call it refuses; a request for what the seam does not
    serve, a model lookup or a token count is no chat call: not reported."""
    path = incoming.path.rstrip("/")
    if incoming.method == "GET" and (path.endswith("/models") or "/models/" in path):
        routing = guard._stages.routing  # (with task routing, the tier decides: no group)
        groups = tuple(routing.groups) if routing and guard._stages.tasks is None else ()
        models = ModelsWire(
            guard.routes, groups=groups, anthropic=_from_anthropic(incoming.headers)
        )
        _, slash, model = path.rpartition("/models/")
        body = models.model(model) if slash else models.listing()
        return Answer(200, [("content-type", "application/json")], _wire.dumps(body))
    if _count.asked(incoming):
        return _count.count_tokens(guard, incoming)
    wire = _wire_for(path)
    if incoming.method != "POST" or not any(path.endswith(s) for s in _ROUTES):
        served = (
            "POST .../chat/completions, .../responses, .../messages,"
            " .../messages/count_tokens; GET .../models"
        )
        raise NotServedError(
            f"the Guard's transport does not serve {incoming.method} {incoming.path}"
            f" (it serves {served})"
        )
    with refusals(guard._stages) as refusal:  # reported as the Guard reports its refusals
        named = _wire.scope(incoming)
        refusal.scope = resolve_scope(named.get("tenant"), named.get("feature"), None)
        body = _wire.load_object(incoming.body)
        refusal.asked = body
        user = wire.user(body)  # (the Guard's call would have it from its arguments)
        if user is not None:
            refusal.scope = refusal.scope.merged(None, None, user)
        refusal.stream = stream = body.get("stream")
        if stream is not None and not isinstance(stream, bool):  # "true" was read as false
            raise RequestValidationError(f"stream must be true or false, got {stream!r:.40}")
        arguments = wire.arguments(body, incoming)
        if incoming.timeout is not None:
            _sdk_timeout(guard, arguments, incoming.timeout, stream=stream is True)
    return Call(wire, arguments, stream is True, body)


def _sdk_timeout(guard: Guard, arguments: dict[str, Any], read: float, *, stream: bool) -> None:
    """The SDK's read timeout, as httpx means it: the longest wait for the next byte.

    A plain answer's bytes all come when the Guard's call ends (its retries and fallback
    happen inside the one exchange the SDK sees), so there it bounds the whole call: the
    call's ``timeout`` when shorter than the Guard's. A stream's bytes come chunk by chunk,
    so there it bounds silence, not the stream (see ``_stream_silence``): a silent route
    loses the call to the next, and the Guard's ``timeout`` stays the call's total."""
    if stream:
        _stream_silence(guard, arguments, read)
    else:
        arguments["timeout"] = min(read, guard.settings.timeout)


def _failed(incoming: Incoming, exc: LLMGuardError, raise_errors: bool) -> Answer:
    if raise_errors:
        raise exc
    return _wire.error_answer(_wire_for(incoming.path, incoming.headers), exc)


def handle(
    guard: Guard, incoming: Incoming, *, raise_errors: bool = False, raise_in_stream: bool = False
) -> Answer:
    """Answer ``incoming`` through ``guard`` (blocking); ``raise_errors``: a Guard error
    propagates instead of becoming an error answer; ``raise_in_stream``: so does one after a
    stream began, in place of its error event."""
    try:
        call = plan(guard, incoming)
        if isinstance(call, Answer):
            return call
        if not call.stream:
            response = guard.chat(**call.arguments)
            return _wire.json_answer(call.wire.answer(response, call.body), response)
        stream = guard.chat(stream=True, **call.arguments)
        head = Head()
        try:
            while head.add(next(stream, None)):
                pass
        except BaseException:
            stream.close()
            raise
    except LLMGuardError as exc:
        return _failed(incoming, exc, raise_errors)
    writer = call.wire.writer(call.arguments, call.body)
    events = _events(stream, head.replayed(), writer, raise_errors or raise_in_stream)
    return Answer(200, head.headers(), events=events, close=stream.close)


async def ahandle(
    guard: Guard, incoming: Incoming, *, raise_errors: bool = False, raise_in_stream: bool = False
) -> Answer:
    """Async twin of :func:`handle`."""
    try:
        if _count.asked(incoming):  # (an async input filter awaited on the loop)
            return await _count.acount_tokens(guard, incoming)
        call = plan(guard, incoming)
        if isinstance(call, Answer):
            return call
        if not call.stream:
            response = await guard.achat(**call.arguments)
            return _wire.json_answer(call.wire.answer(response, call.body), response)
        stream = await guard.achat(stream=True, **call.arguments)
        head = Head()
        try:
            while head.add(await anext_or_none(stream)):
                pass
        except BaseException:
            await stream.aclose()
            raise
    except LLMGuardError as exc:
        return _failed(incoming, exc, raise_errors)
    writer = call.wire.writer(call.arguments, call.body)
    events = _aevents(stream, head.replayed(), writer, raise_errors or raise_in_stream)
    return Answer(200, head.headers(), events=events, close=stream.aclose)


async def anext_or_none(stream: AsyncChatStream) -> StreamChunk | None:
    """The stream's first chunk, ``None`` when it has none."""
    try:
        return await stream.__anext__()
    except StopAsyncIteration:
        return None


def _events(
    stream: ChatStream, head: list[StreamChunk], writer: Writer, raise_errors: bool
) -> Iterator[bytes]:
    try:
        for chunk in head:
            yield writer.event(chunk)
        if head:
            for chunk in stream:
                yield writer.event(chunk)
        yield writer.end()
    except LLMGuardError as exc:
        if raise_errors:  # the SDK clients: the Guard's error, not an error event
            raise
        yield writer.failure(exc)
    finally:
        stream.close()


async def _aevents(
    stream: AsyncChatStream, head: list[StreamChunk], writer: Writer, raise_errors: bool
) -> AsyncIterator[bytes]:
    try:
        for chunk in head:
            yield writer.event(chunk)
        if head:
            async for chunk in stream:
                yield writer.event(chunk)
        yield writer.end()
    except LLMGuardError as exc:
        if raise_errors:  # the SDK clients: the Guard's error, not an error event
            raise
        yield writer.failure(exc)
    finally:
        await stream.aclose()
