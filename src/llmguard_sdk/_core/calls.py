"""A guarded call's envelope, around the plan: its context from the caller's arguments, and a
plain call's two round trips (the opening batch, the route loop, the tail batch).

:class:`~llmguard_sdk.Guard` and the drop-in clients start calls here; streams have their own
envelope in :mod:`.streams`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from contextlib import suppress
from typing import Any

import anyio
from pydantic import BaseModel

from .. import _lazy
from ..cache._config import check_controls
from ..context import CallContext
from ..errors import RequestValidationError
from ..models import ChatRequest, ChatResponse, Message
from . import filters, tasks
from .drive import acomplete, complete
from .opening import OpeningOutcome, aopen_call, open_call
from .refusals import refusals
from .run import Run
from .stages import Stages, afinish, finish, preparing, resolve_scope

__all__ = [
    "MessagesArg",
    "acomplete_call",
    "call_context",
    "call_contexts",
    "complete_call",
    "loads_awaited",
    "stream_flag",
]

MessagesArg = Iterable[Message | Mapping[str, Any]]
"""Chat messages as :class:`~llmguard_sdk.Message` objects or dicts (a list, or any iterable)."""
_NO_TAGS: tuple[str, ...] = ()


def call_context(
    stages: Stages,
    messages: MessagesArg | None,
    options: Mapping[str, Any],
    *,
    stream: object = False,
    reported: bool = False,
) -> CallContext:
    """:func:`call_contexts` in a sync call (an async input filter's wait in a worker
    thread; an async call awaits it on its loop: ``filters.arun(call_contexts(...))``)."""
    return filters.run(call_contexts(stages, messages, options, stream=stream, reported=reported))


def call_contexts(
    stages: Stages,
    messages: MessagesArg | None,
    options: Mapping[str, Any],
    *,
    stream: object,
    reported: bool,
) -> filters.Plan[CallContext]:
    """The call's context from ``Guard.chat``'s arguments (validated, ``stream`` too: see
    :func:`stream_flag`; no network yet). A ``reported`` call refused here (its request or
    ``stream`` invalid, an input guardrail's refusal, over ``max_input_tokens``) is reported
    as a failed call: to the telemetry, and to the hooks as a
    :class:`~llmguard_sdk.CallEvent` (a ``"stream"`` if ``stream`` is True, else a
    ``"chat"``)."""
    params: dict[str, Any] = dict(options)  # less the call's own options: the request's
    request, model = params.pop("request", None), params.pop("model", None)
    with refusals(stages, asked=model or request, stream=stream, reported=reported) as refusal:
        scope = refusal.scope = resolve_scope(
            params.pop("tenant", None), params.pop("feature", None), params.pop("user", None)
        )
        stream_flag(stream)  # (before any guardrail runs: nothing runs for a bad call)
        timeout, hedge_after = params.pop("timeout", None), params.pop("hedge_after", None)
        attempt_timeout = params.pop("attempt_timeout", None)
        priority, region = params.pop("priority", "interactive"), params.pop("region", None)
        cacheable, cache_tags = params.pop("cacheable", True), params.pop("cache_tags", _NO_TAGS)
        if cache_tags is not _NO_TAGS:  # (checked where given)
            cache_tags = _tags(cache_tags)
        if not isinstance(cacheable, bool):  # ("no" would be true: the answer cached)
            raise RequestValidationError(f"cacheable must be True or False, got {cacheable!r}")
        refresh = params.pop("cache_refresh", False)
        ttl, max_age = params.pop("cache_ttl", None), params.pop("cache_max_age", None)
        if refresh is not False or ttl is not None or max_age is not None:
            check_controls(refresh, ttl, max_age, prefix="cache_")
        ctx = yield from preparing(
            stages,
            _request_data(messages, request, model, params),
            scope=scope,
            timeout=timeout,
            hedge_after=hedge_after,
            attempt_timeout=attempt_timeout,
            priority=priority,
            region=region,
            started_at=refusal.started,
        )
    ctx.cacheable, ctx.cache_tags = cacheable, (*ctx.cache_tags, *cache_tags)
    ctx.cache_refresh, ctx.cache_ttl, ctx.cache_max_age = refresh, ttl, max_age
    return ctx


async def loads_awaited(
    stages: Stages, options: Mapping[str, Any], *, stream: object, within: float
) -> None:
    """Wait, ``within`` seconds at most, for the Guards' first-use loads off the event loop
    (:func:`~llmguard_sdk._lazy.aloaded`), before an async call's checks. A cancel meanwhile
    is reported as a cancelled call (with the call's scope where its ids are sound), as one
    during the checks or the attempts is: it was not reported at all."""
    asked = options.get("model") or options.get("request")
    with refusals(stages, asked=asked, stream=stream) as refusal:
        with suppress(RequestValidationError):  # (a bad id: the call's checks refuse it next)
            refusal.scope = resolve_scope(
                options.get("tenant"), options.get("feature"), options.get("user")
            )
        await _lazy.aloaded(within)


def stream_flag(stream: object) -> bool:
    """``Guard.chat``'s ``stream``, checked: True or False (``"no"`` would be true: a stream
    where the caller wanted an answer)."""
    if not isinstance(stream, bool):
        raise RequestValidationError(f"stream must be True or False, got {stream!r:.80}")
    return stream


def _tags(tags: Any) -> tuple[str, ...]:
    """The call's cache tags: a sequence of strings (one string is refused, not split into
    its characters, which would mix permission groups such as "ab" and "ba")."""
    one = isinstance(tags, (str, bytes)) or not isinstance(tags, Iterable)
    found = None if one else tuple(tags)
    if found is None or not all(isinstance(t, str) for t in found):
        raise RequestValidationError(f"cache_tags must be a list of strings, got {tags!r}")
    return found


def complete_call(ctx: CallContext, stages: Stages) -> ChatResponse:
    """A non-streaming call: one plain call, or a cascade's (one per tier it tries)."""
    if stages.tasks is not None and ctx.task is not None and ctx.task.cascade is not None:
        return tasks.complete(ctx, stages, stages.tasks, _complete_once)
    return _complete_once(ctx, stages)


async def acomplete_call(ctx: CallContext, stages: Stages) -> ChatResponse:
    """Async twin of :func:`complete_call`."""
    if stages.tasks is not None and ctx.task is not None and ctx.task.cascade is not None:
        return await tasks.acomplete(ctx, stages, stages.tasks, _acomplete_once)
    return await _acomplete_once(ctx, stages)


def _complete_once(ctx: CallContext, stages: Stages) -> ChatResponse:
    """One non-streaming call in two round trips to the shared state when all goes well: the
    opening batch (cache, spend, first permit and reservation), the chain, then the tail
    batch (records, settles, spend settle, cache store)."""
    opening = open_call(ctx, stages)
    try:
        if (cached := opening.begin(ctx, stages)) is not None:
            return finish(ctx, stages, cached)
        response = None
        try:
            response = finish(ctx, stages, complete(_run(ctx, stages, opening)))
        finally:  # settle to what was served; nothing served: to what went out
            if opening.held is not None and stages.spend is not None:
                opening.tail.add(stages.spend.settle_steps(opening.held, ctx, response))
        opening.remember_later(ctx, stages, response)  # (as served: what the filters left)
        return response
    finally:
        opening.tail.flush(last=True)


async def _acomplete_once(ctx: CallContext, stages: Stages) -> ChatResponse:
    """Async twin of :func:`_complete_once`."""
    opening = await aopen_call(ctx, stages)
    try:
        if (cached := opening.begin(ctx, stages)) is not None:
            return await afinish(ctx, stages, cached)
        response = None
        try:
            response = await afinish(ctx, stages, await acomplete(_run(ctx, stages, opening)))
        finally:  # settle to what was served; nothing served (or cancelled): to what went out
            if opening.held is not None and stages.spend is not None:
                opening.tail.add(stages.spend.settle_steps(opening.held, ctx, response))
        await opening.aremember_later(ctx, stages, response)  # (as served)
        return response
    finally:
        if opening.tail.steps:  # a memory backend's tail is done already: no cancel scope
            with anyio.CancelScope(shield=True):
                await opening.tail.aflush(last=True)


def _run(ctx: CallContext, stages: Stages, opening: OpeningOutcome) -> Run:
    """The route loop's state for a plain call that the opening sent to its routes (under the
    spend hold's stages, when a budget holds it)."""
    held = opening.held
    return Run(
        ctx, held.stages if held is not None else stages, streaming=False,
        tail=opening.tail, ahead=opening.ahead, held=held, keys=opening.cache_keys,
    )  # fmt: skip


def _request_data(
    messages: MessagesArg | None,
    request: ChatRequest | None,
    model: str | None,
    params: dict[str, Any],
) -> ChatRequest | dict[str, Any]:
    if request is not None:
        if messages is not None or params:
            raise RequestValidationError(
                "pass either request= or messages and parameters, not both"
            )
        if isinstance(request, Mapping):  # its fields, validated with the rest
            return dict(request) if model is None else {**request, "model": model}
        if not isinstance(request, ChatRequest):
            hint = _what_to_pass(request)
            shown = type(request).__name__ if hint else f"{request!r:.80}"
            raise RequestValidationError(
                f"request must be a ChatRequest or a mapping of its fields, got {shown}{hint}"
            )
        return request if model is None else request.model_copy(update={"model": model})
    data = params  # (the call's own copy of its options)
    data["messages"] = [  # a model object (a Message, openai's answer's message): its fields
        _fields(m) if isinstance(m, BaseModel) else m for m in _messages(messages)
    ]
    if model is not None:
        data["model"] = model
    return data


def _fields(message: BaseModel) -> dict[str, Any]:
    """A message object's fields, as ``model_dump(exclude_none=True)`` gives them: a
    :class:`~llmguard_sdk.Message` of strings read as they are (a third of the time)."""
    if type(message) is Message:
        fields = {}
        for name, value in message.__dict__.items():
            if value is not None:
                if type(value) is not str:
                    return message.model_dump(exclude_none=True)
                fields[name] = value
        return fields
    return message.model_dump(exclude_none=True)


def _messages(messages: object) -> Iterable[Any]:
    """``Guard.chat``'s messages: a list (any iterable) of them, else a
    :class:`RequestValidationError` saying so (one message, a string or a request would be
    read item by item, each refused on its own)."""
    if messages is None:
        return ()
    if type(messages) is list:  # (nearly every call: no ABC checks)
        return messages
    one = isinstance(messages, (str, bytes, Mapping, BaseModel))
    if one or not isinstance(messages, Iterable):
        hint = ": pass a ChatRequest as request=" if isinstance(messages, ChatRequest) else ""
        raise RequestValidationError(
            f"messages must be a list of messages (dicts or Message objects), got "
            f"{type(messages).__name__}{hint or _what_to_pass(messages)}"
        )
    return messages


def _what_to_pass(value: object) -> str:
    """A hint for a :class:`~llmguard_sdk.prompts.Prompt` given as the messages or the
    request: its :meth:`~llmguard_sdk.prompts.Prompt.request` is what ``chat`` takes."""
    from ..prompts import Prompt  # (an error's path only)

    if isinstance(value, Prompt):
        return ": a Prompt's request is request=prompt.request(max_tokens=...)"
    return ""
