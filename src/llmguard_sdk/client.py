"""A drop-in for openai-python's client: ``client = guard.client()`` instead of ``OpenAI()``.

``client.chat.completions.create(...)`` takes the same arguments and gives back objects of
the same shape (``resp.choices[0].message.content``, ``resp.usage.prompt_tokens``, chunks with
``choices[0].delta.content``), so the rest of the application does not change. Parameters the
SDK has no field for (``frequency_penalty``, ``logprobs`` ...) are passed to the provider as
they are. The scope of a call comes from :func:`llmguard_sdk.scoped`.

Each completion also carries the Guard's own view as ``completion.llmguard`` (route,
attempts, timings, cost), left out of ``model_dump()`` so dumps match openai's.

Where openai-python is installed, ``guard.client()`` is openai's own ``OpenAI`` client over
the Guard's transport (:mod:`llmguard_sdk.transport`): its objects are genuinely openai's
(``isinstance(c, openai.types.chat.ChatCompletion)``), and ``with_raw_response``,
``with_streaming_response``, ``models.list`` and ``responses.create`` work as frameworks
expect (``instructor.from_openai(guard.client())``, ``ChatOpenAI(root_client=...)``). A
failed call raises the Guard's error (``AllRoutesFailedError`` ..., every attribute), which is
also openai's error for it, the one the seam answers (``openai.RateLimitError`` for a rate
limit or budget, ``openai.APIError`` for a stream broken after it began ...), so code and
frameworks that catch openai's errors work too. The classes below are the look-alikes it falls
back to without openai; they raise the Guard's errors alone.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import math
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar, overload

from pydantic import BaseModel, ConfigDict, Field

from ._core.calls import stream_flag
from ._core.refusals import refusals
from ._core.stages import resolve_scope
from ._ids import UniqueIds
from .errors import RequestValidationError
from .models import ChatRequest, ChatResponse, StreamChunk, Usage, openai_finish_reason
from .providers._chat_content import (
    COMPLETION_FIELDS,
    created_of,
    kept_fields,
    message_content,
    message_fields,
)
from .providers._chat_usage import chat_usage
from .providers.wire import StreamHead, chat_chunk_carries, chat_chunk_skipped

if TYPE_CHECKING:
    from ._core.streams import AsyncChatStream, ChatStream
    from .guard import Guard

__all__ = [
    "AsyncChunkStream",
    "AsyncGuardedClient",
    "ChatCompletion",
    "ChatCompletionChunk",
    "ChunkStream",
    "GuardedClient",
    "anthropic_client",
    "async_anthropic_client",
]

# ChatRequest fields taken from create()'s keywords; ``metadata`` is forwarded to the provider
# (openai's meaning) as well as kept as the SDK's own tags.
_REQUEST_FIELDS = frozenset(ChatRequest.model_fields) - {"extra_body", "messages", "model"}
_FORWARDED = frozenset({"metadata"})


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class CompletionUsage(_Open):
    """openai-shaped usage."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: dict[str, int] = Field(default_factory=dict)
    completion_tokens_details: dict[str, int] | None = None


class _Content(_Open):
    content: str | None = None
    tool_calls: list[dict[str, Any]] | None = None


class ChatCompletionMessage(_Content):
    """openai-shaped assistant message."""

    role: Literal["assistant"] = "assistant"


class ChoiceDelta(_Content):
    """openai-shaped delta of a stream chunk."""

    role: Literal["assistant"] | None = None


class _Choice(_Open):
    index: int = 0
    finish_reason: str | None = None


class Choice(_Choice):
    """openai-shaped choice of a completion."""

    message: ChatCompletionMessage


class ChunkChoice(_Choice):
    """openai-shaped choice of a stream chunk."""

    delta: ChoiceDelta


class _Answer(_Open):
    id: str
    created: int
    model: str
    usage: CompletionUsage | None = None


class ChatCompletion(_Answer):
    """openai-shaped ``chat.completion`` object."""

    object: Literal["chat.completion"] = "chat.completion"
    choices: list[Choice]
    llmguard: ChatResponse | None = Field(default=None, exclude=True)


class ChatCompletionChunk(_Answer):
    """openai-shaped ``chat.completion.chunk`` object."""

    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    choices: list[ChunkChoice]


def _openai_usage(usage: Usage | None) -> CompletionUsage | None:
    body = chat_usage(usage)
    return None if body is None else CompletionUsage.model_validate(body)


_ANSWER_IDS = UniqueIds("llmguard-")  # (no two answers of any process share one)


def _new_id() -> str:
    return f"chatcmpl-{_ANSWER_IDS.next()}"


def _pieces(metadata: Mapping[str, Any], model: type[BaseModel]) -> dict[str, Any]:
    """A message's (a delta's) fields besides content and tool calls: OpenAI's refusal, and
    the route's other fields (``audio``, ``annotations``, ``reasoning_content`` ...) as sent."""
    pieces = {k: v for k, v in message_fields(metadata).items() if k not in model.model_fields}
    refusal = metadata.get("refusal")
    if isinstance(refusal, str) and refusal:
        pieces["refusal"] = refusal
    return pieces


def _choice(response: ChatResponse) -> Choice:
    """The completion's choice; OpenAI's refusal (``message.refusal``, no content in its place),
    the message's other fields and the logprobs as the provider sent them."""
    pieces = _pieces(response.metadata, ChatCompletionMessage)
    content = message_content(response)  # (None where the route's was null)
    message = ChatCompletionMessage(content=content, tool_calls=response.tool_calls, **pieces)
    logprobs = (
        {"logprobs": response.metadata["logprobs"]} if "logprobs" in response.metadata else {}
    )
    finish = openai_finish_reason(response.finish_reason)  # Claude's pause_turn: "length"
    return Choice(message=message, finish_reason=finish, **logprobs)


def to_completion(response: ChatResponse) -> ChatCompletion:
    """A :class:`ChatResponse` in openai's ``ChatCompletion`` shape, with the provider's
    ``created``, ``system_fingerprint``, ``service_tier`` ... where it sent them."""
    kept = kept_fields(response.metadata, COMPLETION_FIELDS)
    fields = {k: v for k, v in kept.items() if k not in ChatCompletion.model_fields}
    return ChatCompletion(
        id=response.id or _new_id(),
        created=created_of(kept, int(time.time())),
        model=response.model,
        choices=[_choice(response)],
        usage=_openai_usage(response.usage),
        llmguard=response,
        **fields,
    )


def _usage_only(chunk: StreamChunk) -> bool:
    return chunk.usage is not None and not chat_chunk_carries(chunk)


def _chunk_choice(chunk: StreamChunk) -> ChunkChoice:
    """The chunk's choice; its piece of OpenAI's refusal, of the message's other fields
    (``delta.reasoning_content`` ...) and its logprobs as the provider sent them."""
    pieces = _pieces(chunk.metadata, ChoiceDelta)
    delta = ChoiceDelta(role="assistant", content=chunk.text, tool_calls=chunk.tool_calls, **pieces)
    logprobs = {"logprobs": chunk.metadata["logprobs"]} if "logprobs" in chunk.metadata else {}
    finish = openai_finish_reason(chunk.finish_reason)
    return ChunkChoice(delta=delta, finish_reason=finish, **logprobs)


def to_chunk(
    chunk: StreamChunk,
    created: int,
    *,
    usage: bool = True,
    head: Mapping[str, Any] | None = None,
) -> ChatCompletionChunk:
    """A :class:`StreamChunk` in openai's ``ChatCompletionChunk`` shape (``usage``: with its
    usage, which openai sends only when ``stream_options.include_usage`` asks for it;
    ``head``: the stream's ``id`` and the provider's ``created``, ``system_fingerprint`` ...,
    each chunk's)."""
    choices = [] if _usage_only(chunk) else [_chunk_choice(chunk)]
    given = {k: v for k, v in (head or {}).items() if k not in ("choices", "model", "usage")}
    if "id" not in given:
        given["id"] = chunk.id or _new_id()
    given.setdefault("created", created)
    return ChatCompletionChunk(
        model=chunk.model,
        choices=choices,
        usage=_openai_usage(chunk.usage) if usage else None,
        **given,
    )


def _asks_usage(params: Mapping[str, Any]) -> bool:
    options = params.get("stream_options")
    return isinstance(options, Mapping) and options.get("include_usage") is True


def _call_arguments(
    messages: Sequence[Mapping[str, Any]],
    model: str | None,
    params: dict[str, Any],
) -> dict[str, Any]:
    """Split openai keyword arguments into Guard.chat arguments; ``extra_headers``'
    ``x-llmguard-`` ones (cache controls, tenant, feature) are read as the seam reads
    them, and not sent."""
    user = _call_user(params)
    n = params.pop("n", None)
    if n not in (None, 1):
        raise RequestValidationError("n must be 1: the Guard returns one choice per call")
    params.pop("stream_options", None)  # the Guard always asks its routes for usage
    timeout = params.pop("timeout", None)
    if timeout is not None and not isinstance(timeout, (int, float)):
        raise RequestValidationError("timeout must be a number of seconds")
    extra_body = params.pop("extra_body", None) or {}
    if not isinstance(extra_body, Mapping):
        raise RequestValidationError("extra_body must be an object")
    extra = dict(extra_body)
    own: dict[str, Any] = {}
    if isinstance(params.get("extra_headers"), Mapping):  # (the seam's x-llmguard- headers)
        from .transport._controls import header_arguments  # (transport imports httpx)

        params["extra_headers"], own = header_arguments(params["extra_headers"])
    known = {k: v for k, v in params.items() if k in _REQUEST_FIELDS and v is not None}
    extra.update(
        {
            k: v
            for k, v in params.items()
            if (k not in _REQUEST_FIELDS or k in _FORWARDED) and v is not None
        }
    )
    arguments: dict[str, Any] = {
        "messages": list(messages),
        "model": model,
        "timeout": timeout,
        "user": user,
        **known,
        **own,
    }
    if extra:
        arguments["extra_body"] = extra
    return arguments


def _call_user(params: Mapping[str, Any]) -> str | None:
    """The call's user in openai ``create()`` keywords ``params``: ``user=``, else
    ``extra_body``'s (sent to the provider as well); ``None`` where it is no string."""
    user = params.get("user")
    if user is None:
        extra_body = params.get("extra_body")
        user = extra_body.get("user") if isinstance(extra_body, Mapping) else None
    return user if isinstance(user, str) else None


def _stream_silence(guard: Guard, arguments: dict[str, Any], read: float | None) -> None:
    """A stream's ``timeout`` as openai's SDK means it (httpx's read timeout: the longest
    wait for the next byte), not the stream's total: the call's ``attempt_timeout`` (each
    route's wait for its first chunk and between chunks) when shorter than the Guard's own
    bounds, its total the Guard's ``timeout`` (given only when shorter: the default call
    stays as it was)."""
    arguments["timeout"] = None
    if read is None:
        return
    if isinstance(read, bool) or not read > 0:  # (NaN too)
        raise RequestValidationError(f"timeout must be a positive number of seconds, got {read!r}")
    settings = guard.settings  # (the call's deadline bounds any longer silence)
    if read < min(settings.timeout, settings.attempt_timeout or math.inf):
        arguments["attempt_timeout"] = read


def _create_arguments(
    guard: Guard,
    messages: Sequence[Mapping[str, Any]],
    model: str | None,
    stream: object,
    params: dict[str, Any],
) -> tuple[dict[str, Any], bool]:
    """``create()``'s arguments as :meth:`Guard.chat`'s, and whether it streams (``"false"``
    would be true: a stream, not a completion). Arguments refused here never reach the Guard:
    their call is reported as the Guard reports one it refuses (its span, its duration point,
    a failed :class:`~llmguard_sdk.CallEvent`), with the error the caller gets."""
    with refusals(guard._stages, asked=model, stream=stream) as refusal:
        refusal.scope = resolve_scope(None, None, _call_user(params))  # (the Guard's)
        arguments = _call_arguments(messages, model, params)
        if "tenant" in arguments or "feature" in arguments:  # (x-llmguard-tenant ...)
            scope = (arguments.get("tenant"), arguments.get("feature"), arguments["user"])
            refusal.scope = resolve_scope(*scope)
        streaming = stream_flag(stream)
        if streaming:
            _stream_silence(guard, arguments, arguments["timeout"])
    return arguments, streaming


class _Completions:
    def __init__(self, guard: Guard) -> None:
        self._guard = guard

    @overload
    def create(
        self,
        *,
        messages: Sequence[Mapping[str, Any]],
        model: str | None = ...,
        stream: Literal[False] = ...,
        **params: Any,
    ) -> ChatCompletion: ...

    @overload
    def create(
        self,
        *,
        messages: Sequence[Mapping[str, Any]],
        model: str | None = ...,
        stream: Literal[True],
        **params: Any,
    ) -> ChunkStream: ...

    @overload
    def create(
        self,
        *,
        messages: Sequence[Mapping[str, Any]],
        model: str | None = ...,
        stream: bool,
        **params: Any,
    ) -> ChatCompletion | ChunkStream: ...

    def create(
        self,
        *,
        messages: Sequence[Mapping[str, Any]],
        model: str | None = None,
        stream: bool = False,
        **params: Any,
    ) -> ChatCompletion | ChunkStream:
        """Like ``openai.OpenAI().chat.completions.create``, through the Guard."""
        usage = _asks_usage(params)
        arguments, streaming = _create_arguments(self._guard, messages, model, stream, params)
        if streaming:
            return ChunkStream(self._guard.chat(stream=True, **arguments), usage=usage)
        return to_completion(self._guard.chat(**arguments))


class _AsyncCompletions:
    def __init__(self, guard: Guard) -> None:
        self._guard = guard

    @overload
    async def create(
        self,
        *,
        messages: Sequence[Mapping[str, Any]],
        model: str | None = ...,
        stream: Literal[False] = ...,
        **params: Any,
    ) -> ChatCompletion: ...

    @overload
    async def create(
        self,
        *,
        messages: Sequence[Mapping[str, Any]],
        model: str | None = ...,
        stream: Literal[True],
        **params: Any,
    ) -> AsyncChunkStream: ...

    @overload
    async def create(
        self,
        *,
        messages: Sequence[Mapping[str, Any]],
        model: str | None = ...,
        stream: bool,
        **params: Any,
    ) -> ChatCompletion | AsyncChunkStream: ...

    async def create(
        self,
        *,
        messages: Sequence[Mapping[str, Any]],
        model: str | None = None,
        stream: bool = False,
        **params: Any,
    ) -> ChatCompletion | AsyncChunkStream:
        """Like ``openai.AsyncOpenAI().chat.completions.create``, through the Guard."""
        usage = _asks_usage(params)
        arguments, streaming = _create_arguments(self._guard, messages, model, stream, params)
        if streaming:
            return AsyncChunkStream(await self._guard.achat(stream=True, **arguments), usage=usage)
        return to_completion(await self._guard.achat(**arguments))


_GuardStream = TypeVar("_GuardStream", "ChatStream", "AsyncChatStream")


class _Chunks(Generic[_GuardStream]):
    """A Guard stream read as openai-shaped chunks (usage only when ``usage``)."""

    def __init__(self, stream: _GuardStream, *, usage: bool = True) -> None:
        self._stream: _GuardStream = stream
        self._created = int(time.time())
        self._usage = usage
        self._held: ChatCompletionChunk | None = None  # a usage chunk due next
        self._head: dict[str, Any] = {}  # the stream's system_fingerprint ...
        self._ids = StreamHead(_new_id)  # its id and created: the route's first real ones

    def _skips(self, chunk: StreamChunk) -> bool:
        return chat_chunk_skipped(chunk, usage=self._usage)

    def _converted(self, chunk: StreamChunk) -> ChatCompletionChunk:
        """``chunk`` as openai's; one that finishes and carries usage (a cache hit's only
        chunk) is its choice now and its usage next, on a chunk without choices, as openai
        sends usage."""
        fields = kept_fields(chunk.metadata, COMPLETION_FIELDS)
        self._head.update(fields)
        self._head["id"], self._head["created"] = self._ids.of(chunk.id, fields)
        out = to_chunk(chunk, self._created, usage=self._usage, head=self._head)
        if out.usage is not None and out.choices:
            self._held = out.model_copy(update={"choices": []})
            out = out.model_copy(update={"usage": None})
        return out

    def _take_held(self) -> ChatCompletionChunk | None:
        held, self._held = self._held, None
        return held

    @property
    def response(self) -> ChatResponse:
        """The assembled answer, once the stream has been read to its end."""
        return self._stream.response


class ChunkStream(_Chunks["ChatStream"]):
    """openai-shaped stream: iterate ``ChatCompletionChunk`` objects; ``close()`` or ``with``.

    ``response`` gives the Guard's assembled :class:`ChatResponse` after the last chunk.
    """

    def __iter__(self) -> Iterator[ChatCompletionChunk]:
        return self

    def __next__(self) -> ChatCompletionChunk:
        held = self._take_held()
        if held is not None:
            return held
        chunk = next(self._stream)
        while self._skips(chunk):
            chunk = next(self._stream)
        return self._converted(chunk)

    def close(self) -> None:
        """Stop the stream and release its connection."""
        self._stream.close()

    def __enter__(self) -> ChunkStream:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class AsyncChunkStream(_Chunks["AsyncChatStream"]):
    """Async twin of :class:`ChunkStream`: ``async for``, ``await close()``, ``async with``."""

    def __aiter__(self) -> AsyncIterator[ChatCompletionChunk]:
        return self

    async def __anext__(self) -> ChatCompletionChunk:
        held = self._take_held()
        if held is not None:
            return held
        chunk = await self._stream.__anext__()
        while self._skips(chunk):
            chunk = await self._stream.__anext__()
        return self._converted(chunk)

    async def close(self) -> None:
        """Stop the stream and release its connection (openai's name)."""
        await self._stream.aclose()

    async def aclose(self) -> None:
        """Same as :meth:`close`."""
        await self._stream.aclose()

    async def __aenter__(self) -> AsyncChunkStream:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self._stream.aclose()


_Completer = TypeVar("_Completer", _Completions, _AsyncCompletions)


class _Chat(Generic[_Completer]):
    def __init__(self, completions: _Completer) -> None:
        self.completions: _Completer = completions


class GuardedClient:
    """Sync drop-in for ``openai.OpenAI``: ``client.chat.completions.create(...)``."""

    def __init__(self, guard: Guard) -> None:
        self.guard = guard
        self.chat = _Chat(_Completions(guard))


class AsyncGuardedClient:
    """Async drop-in for ``openai.AsyncOpenAI``: ``await client.chat.completions.create(...)``."""

    def __init__(self, guard: Guard) -> None:
        self.guard = guard
        self.chat = _Chat(_AsyncCompletions(guard))


def _openai_client(guard: Guard) -> Any:
    """openai's own client over the Guard's transport where openai is installed, else the
    look-alike :class:`GuardedClient`."""
    try:
        from ._openai_client import GuardedOpenAI
    except ImportError:
        return GuardedClient(guard)
    return GuardedOpenAI(guard)


def _async_openai_client(guard: Guard) -> Any:
    """The async twin of :func:`_openai_client`."""
    try:
        from ._openai_client import AsyncGuardedOpenAI
    except ImportError:
        return AsyncGuardedClient(guard)
    return AsyncGuardedOpenAI(guard)


def anthropic_client(guard: Guard) -> Any:
    """anthropic's own ``Anthropic`` client whose requests ``guard`` answers (any route, the
    local model included): ``messages.create`` returns anthropic's ``Message`` (or streams its
    events), ``messages.stream`` and ``with_raw_response`` work; its retries are off. A failed
    call raises the Guard's error (every attribute), which is also anthropic's error for the
    seam's answer (``anthropic.RateLimitError`` for a rate limit or budget,
    ``anthropic.OverloadedError`` for Claude's 529 ...; its status error for a stream broken
    after it began), so ``except AllRoutesFailedError`` and ``except anthropic.APIStatusError``
    both catch it. Needs the ``anthropic`` package.

    .. versionadded:: 0.2.0
    .. versionchanged:: 0.2.0 its errors are the Guard's as well as anthropic's.
    """
    from ._anthropic_client import GuardedAnthropic

    return GuardedAnthropic(guard)


def async_anthropic_client(guard: Guard) -> Any:
    """The async twin of :func:`anthropic_client` (``anthropic.AsyncAnthropic``).

    .. versionadded:: 0.2.0
    """
    from ._anthropic_client import AsyncGuardedAnthropic

    return AsyncGuardedAnthropic(guard)
