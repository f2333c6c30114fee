"""OpenAI's chat completions on the wire: ``POST /v1/chat/completions``, JSON or SSE."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from .._core.assembly import CallSlots
from ..client import _call_arguments, _call_user
from ..errors import LLMGuardError, RequestValidationError
from ..models import ChatResponse, StreamChunk, openai_finish_reason
from ..providers._anthropic_only import CLAUDE_HEADERS, HEADERS
from ..providers._chat_content import (
    COMPLETION_FIELDS,
    StreamHead,
    created_of,
    kept_fields,
    message_content,
    message_fields,
)
from ..providers._chat_usage import chat_usage
from ..providers.wire import ANTHROPIC_ONLY_KEY, chat_chunk_carries, chat_chunk_skipped
from . import _wire
from ._wire import Incoming


def guard_arguments(params: dict[str, Any], incoming: Incoming) -> dict[str, Any]:
    """openai ``create()`` keywords (``messages`` and ``model`` among them) as
    :meth:`Guard.chat` arguments, with the caller's headers, query and scope; Claude's own
    headers among them (``anthropic-beta`` ...) are named for the routes that do not speak
    Anthropic's API to leave out, whichever API the request came in.

    A ``timeout`` in the body (an SDK's ``extra_body={"timeout": ...}``) is dropped: the call's
    deadline is the Guard's ``timeout``, which the SDK's own bounds as :func:`.plan` says, and
    no provider takes a ``timeout`` body field."""
    params = dict(params)
    params.pop("stream", None)
    params.pop("timeout", None)
    messages, model = params.pop("messages", None), params.pop("model", None)
    if not isinstance(messages, list):
        raise RequestValidationError("messages must be a list of messages")
    if model is not None and not isinstance(model, str):
        raise RequestValidationError("model must be a string")
    arguments = _call_arguments(messages, model, params)
    arguments.update(_wire.passthrough(incoming))
    if HEADERS & set(incoming.headers):  # forwarded to Anthropic routes alone
        _wire.name_only(arguments, ANTHROPIC_ONLY_KEY, [CLAUDE_HEADERS])
    return arguments


class ChatWire:
    """Chat completions: parse a request, answer a completion or its chunks."""

    def arguments(self, body: dict[str, Any], incoming: Incoming) -> dict[str, Any]:
        """``body`` (a chat-completions request) as Guard arguments."""
        return guard_arguments(body, incoming)

    def user(self, body: Mapping[str, Any]) -> str | None:
        """The call's user, as its arguments will have it (``user``, else ``extra_body``'s)."""
        return _call_user(body)

    def answer(self, response: ChatResponse, request: Mapping[str, Any]) -> dict[str, Any]:
        """The ``chat.completion`` object of ``response`` (the request's body says nothing in
        it), with the fields of the provider's message and answer the Guard does not read
        (``audio``, ``annotations``, ``reasoning_content``; ``created``,
        ``system_fingerprint``, ``service_tier`` ...) as the provider sent them."""
        refusal = response.metadata.get("refusal")  # OpenAI's, in place of content
        message: dict[str, Any] = {"role": "assistant", "content": message_content(response)}
        if isinstance(refusal, str) and refusal:
            message["refusal"] = refusal
        if response.tool_calls:
            message["tool_calls"] = response.tool_calls
        for key, value in message_fields(response.metadata).items():
            message.setdefault(key, value)
        finish = openai_finish_reason(response.finish_reason)  # Claude's pause_turn: "length"
        fields = kept_fields(response.metadata, COMPLETION_FIELDS)
        body: dict[str, Any] = {
            "id": response.id or _wire.new_id("chatcmpl"),
            "object": "chat.completion",
            "created": created_of(fields, int(time.time())),
            "model": response.model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        }
        for key, value in fields.items():
            body.setdefault(key, value)
        if "logprobs" in response.metadata:  # the provider's, asked for with logprobs=True
            body["choices"][0]["logprobs"] = response.metadata["logprobs"]
        usage = chat_usage(response.usage)
        if usage is not None:
            body["usage"] = usage
        return body

    def writer(self, arguments: Mapping[str, Any], body: Mapping[str, Any]) -> ChunkWriter:
        """A writer for one stream's chunks (usage only where the request asked for it)."""
        model = arguments.get("model")
        options = body.get("stream_options")
        usage = isinstance(options, dict) and options.get("include_usage") is True
        return ChunkWriter(model if isinstance(model, str) else "", usage=usage)

    def error(self, exc: LLMGuardError) -> dict[str, Any]:
        """OpenAI's error body."""
        return _wire.openai_error(exc)


class ChunkWriter:
    """``chat.completion.chunk`` events: the role on the first chunk, as OpenAI sends it;
    usage (which the Guard always asks its routes for) only when ``usage`` (the request's
    ``stream_options.include_usage``), as OpenAI sends it: alone, on a last chunk whose
    ``choices`` is empty."""

    def __init__(self, model: str, *, usage: bool = True) -> None:
        self._model = model
        self._usage = usage
        self._head = StreamHead(lambda: _wire.new_id("chatcmpl"))  # its id and created
        self._first = True
        self._places: dict[int, int] = {}  # a call's index as the route gave it -> its place
        self._slots = CallSlots()  # (the call a piece is for, as the Guard's assembly keys it)
        self._fields: dict[str, Any] = {}  # the provider's system_fingerprint ..., on each

    def event(self, chunk: StreamChunk) -> bytes:
        """One chunk as an SSE event, with the provider's fields the Guard does not read
        (``created``, ``system_fingerprint`` ...) as it sent them."""
        fields = kept_fields(chunk.metadata, COMPLETION_FIELDS)
        self._fields.update(fields)
        given, created = self._head.of(chunk.id, fields)  # (the route's first real ones)
        data: dict[str, Any] = {
            "id": given,
            "object": "chat.completion.chunk",
            "created": created,
            "model": chunk.model or self._model,
            "choices": [],
        }
        for key, value in self._fields.items():
            data.setdefault(key, value)
        if chat_chunk_skipped(chunk, usage=self._usage):  # a thinking block, say: no place
            return b""
        if chunk.usage is None or chat_chunk_carries(chunk):
            data["choices"] = [self._choice(chunk)]
        usage = chat_usage(chunk.usage) if self._usage else None
        if usage is None:
            return _wire.sse(data)
        if not data["choices"]:
            return _wire.sse({**data, "usage": usage})
        # a chunk that also finishes (a cache hit's only one, a local model's last): its
        # choice, then its usage on a chunk of its own without choices, as OpenAI sends it
        return _wire.sse(data) + _wire.sse({**data, "choices": [], "usage": usage})

    def _choice(self, chunk: StreamChunk) -> dict[str, Any]:
        delta: dict[str, Any] = {}
        if self._first:
            delta = {"role": "assistant", "content": chunk.text}
            self._first = False
        elif chunk.text:
            delta["content"] = chunk.text
        if chunk.tool_calls:
            delta["tool_calls"] = [self._numbered(c, n) for n, c in enumerate(chunk.tool_calls)]
        refusal = chunk.metadata.get("refusal")  # this chunk's piece of OpenAI's refusal
        if isinstance(refusal, str) and refusal:
            delta["refusal"] = refusal
        for key, value in message_fields(chunk.metadata).items():
            delta.setdefault(key, value)  # reasoning_content, audio ...: as the route sent them
        finish = openai_finish_reason(chunk.finish_reason)
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        if "logprobs" in chunk.metadata:  # this chunk's, as the provider sent them
            choice["logprobs"] = chunk.metadata["logprobs"]
        return choice

    def _numbered(self, call: dict[str, Any], position: int) -> dict[str, Any]:
        """A streamed call's piece with the call's place (0, 1 ... in the order the calls
        came, as OpenAI numbers them) as its ``index``: a route may number them otherwise (a
        gateway in front of Claude counts content blocks, Gemini sends none), and openai's
        stream helpers put a call at its ``index`` in their list. The call is the one the
        Guard's own assembly takes the piece for."""
        place = self._places.setdefault(self._slots.key(call, position), len(self._places))
        return {**call, "index": place}

    def end(self) -> bytes:
        """The closing event."""
        return b"data: [DONE]\n\n"

    def failure(self, exc: LLMGuardError) -> bytes:
        """An error after the stream started, as OpenAI sends one."""
        return _wire.sse(_wire.openai_error(exc))


class ModelsWire:
    """``GET /v1/models``: the Guard's deployment groups (the names a call's ``model=``
    selects, each owned by itself), then the models of its routes, in OpenAI's shape, or in
    Anthropic's when ``anthropic`` (its SDK asked)."""

    def __init__(self, routes: Any, *, groups: Sequence[str] = (), anthropic: bool = False) -> None:
        self._routes = routes
        self._groups = groups
        self._anthropic = anthropic

    def _models(self) -> list[dict[str, Any]]:
        found = {name: self._model(name, name) for name in self._groups}
        for route in self._routes:
            if route.model and route.model not in found:
                found[route.model] = self._model(route.model, route.name)
        return list(found.values())

    def _model(self, model: str, owner: str) -> dict[str, Any]:
        if self._anthropic:  # (when it was made is unknown: the epoch, as OpenAI's created)
            created = "1970-01-01T00:00:00Z"
            return {"type": "model", "id": model, "display_name": model, "created_at": created}
        return {"id": model, "object": "model", "created": 0, "owned_by": owner}

    def listing(self) -> dict[str, Any]:
        """The model list of the routes that pin one (each model once)."""
        data = self._models()
        if self._anthropic:
            first, last = (data[0]["id"], data[-1]["id"]) if data else (None, None)
            return {"data": data, "has_more": False, "first_id": first, "last_id": last}
        return {"object": "list", "data": data}

    def model(self, model: str) -> dict[str, Any]:
        """``GET /v1/models/{model}``: a route's model, else a 404 as OpenAI answers one."""
        for found in self._models():
            if found["id"] == model:
                return found
        raise _wire.NotServedError(
            f"The model '{model}' does not exist or the Guard has no route for it",
            code="model_not_found",
        )
