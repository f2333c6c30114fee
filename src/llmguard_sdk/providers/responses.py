"""A route that calls OpenAI's Responses API (``POST /v1/responses``), plain and streamed.

The Guard's requests are chat-shaped; this provider sends them as Responses requests (system
and developer messages as input items, assistant tool calls as ``function_call`` items, tool
results as ``function_call_output`` items, ``max_output_tokens``, flat function tools
(``strict: false`` where a tool does not say, chat's default),
``text.format`` for structured output, ``text.verbosity``, ``reasoning.effort`` (and a
Responses caller's whole ``reasoning``), a content part's ``prompt_cache_breakpoint`` (on
``input_text`` and ``input_image``, as chat's), chat's ``logprobs: true`` as ``include``'s
``message.output_text.logprobs``, an assistant message's reasoning items on its ``thinking``
before it, ``store: false`` unless the request or the provider says otherwise, with
``include``'s ``reasoning.encrypted_content`` when it reasons) and reads the answer back:
output text, function calls, the reasoning's text in ``metadata["reasoning"]`` and its
items, as the route sent them, in ``metadata["reasoning_items"]``, whether the route stored
the response (the response's ``store``) in ``metadata["store"]``, and usage with its cached
input and reasoning output tokens.

What the Responses API cannot take: a limit under :data:`MIN_OUTPUT_TOKENS` (16; OpenAI
answers ``max_output_tokens`` 1 to 15 with a 400, where chat completions take any
``max_tokens``) is an :class:`~llmguard_sdk.errors.UnsupportedRequestError` before anything is
sent, on which a chain moves on to its next route (a chat route serves ``max_tokens=5``).
Chat completions' other parameters the API lacks (a request's own or in its ``extra_body``)
follow one table (:data:`~llmguard_sdk.providers._responses_params.CHAT_ONLY`): those it has
under another name are sent so (``max_completion_tokens`` as ``max_output_tokens``,
``response_format`` as ``text.format``, ``reasoning_effort`` as ``reasoning.effort``,
``stream_options`` less ``include_usage`` ...); those that only shape sampling (``seed``,
``stop``, ``frequency_penalty``, ``presence_penalty``, ``logit_bias``, ``prediction``) are
not sent, and a :class:`~llmguard_sdk.errors.DroppedParameterWarning` says so once per route
and parameter; those the caller depends on (``n`` above 1, ``audio`` or audio
``modalities``, legacy ``functions`` / ``function_call``, ``web_search_options``) are an
:class:`~llmguard_sdk.errors.UnsupportedRequestError` before anything is sent. OpenAI
answers any of them sent as they are with a 400 that no other route would get to try. So too
a vendor's parameter in ``extra_body`` that OpenAI has not (``top_k``, ``min_p`` ...): it is
not sent, and a :class:`~llmguard_sdk.errors.DroppedParameterWarning` says so (a key named
in ``metadata[RESPONSES_ONLY_KEY]`` is sent as given).

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Mapping
from typing import Any, TypeGuard

from pydantic import ValidationError

from .._callers import caller_level
from .._core.assembly import merge_metadata
from ..errors import (
    ConfigurationError,
    DroppedParameterWarning,
    MalformedResponseError,
    UnsupportedRequestError,
)
from ..models import ChatRequest, ChatResponse, Message, StreamChunk, Usage
from ._anthropic_only import leave_out_server_tools
from ._error_kinds import error_answer
from ._responses_params import (
    CHAT_ONLY,
    FOREIGN,
    chat_parameters,
    dropped,
    foreign,
    refusal,
    translate,
)
from ._responses_reasoning import StreamedItems, keep_reasoning
from ._server_tools import openai_tool_uses, with_tool_uses
from ._wire_request import leave_out_hints
from .anthropic import AnthropicStreamState
from .openai_compat import OpenAICompatibleProvider
from .wire import (
    ANTHROPIC_ONLY_KEY,
    SERVER_TOOLS,
    AnswerShape,
    checked_answer,
    function_tool,
    named_keys,
    sent_extra_body,
    usage_from_payload,
)

__all__ = ["MIN_OUTPUT_TOKENS", "OpenAIResponsesProvider"]

MIN_OUTPUT_TOKENS = 16
"""The least ``max_output_tokens`` OpenAI's Responses API takes (a 400 below it: "Invalid
'max_output_tokens': integer below minimum value. Expected a value >= 16, but got 5
instead.")."""

_SAME = ("temperature", "top_p", "tool_choice")
_BREAKPOINT = "prompt_cache_breakpoint"  # openai's, on a chat and a Responses input part


class OpenAIResponsesProvider(OpenAICompatibleProvider):
    """OpenAI's Responses API, sync and async, streaming and not.

    Args:
        base_url: the API root including its version path, such as
            ``https://<provider host>/v1``.
        options: the other arguments of :class:`~llmguard_sdk.OpenAICompatibleProvider`
            (``api_key``, ``model``, ``name`` ...).
        send_cache_key: whether a :class:`~llmguard_sdk.PromptBuilder` request's
            ``prompt_cache_key`` is sent here, by the rule of
            :class:`~llmguard_sdk.OpenAICompatibleProvider`'s (``None``, the default: where
            ``base_url`` is OpenAI's own API or Azure OpenAI's (an Azure AI Foundry
            resource's ``/openai/...`` paths too); a server of the Responses API
            elsewhere may refuse a field it does not know). A key the caller puts in
            ``extra_body`` is always sent.
        store: the ``store`` sent with requests that do not set their own (a Responses
            caller's ``store``, ``extra_body={"store": ...}``). ``False`` by default: OpenAI
            keeps a response it is not told not to store (for 30 days at least), and the
            Guard never uses a stored response (``previous_response_id`` is refused).
            ``True`` stores them; ``None`` sends no ``store`` (the server's default). With
            ``store: false`` a call that reasons (it asks for ``reasoning`` or
            ``reasoning_effort``, sends reasoning items back, or names one of OpenAI's
            reasoning models: ``o1``, ``o3``, ``o4-mini``, ``gpt-5`` ..., not gpt-5's chat
            models) asks for its reasoning items sealed, ``include``'s
            ``reasoning.encrypted_content`` (added to the request's own ``include``), so that
            the next turn can send them back (an answer's ``metadata["reasoning_items"]``, on
            the assistant message's ``thinking``); a reasoning item sent back by its id alone
            (without its ``encrypted_content``) is left out: the route kept nothing to find
            it by.

    Answers carry ``usage.cached_input_tokens`` and ``usage.reasoning_tokens``; an
    ``incomplete`` answer cut by ``max_output_tokens`` has ``finish_reason="length"``. A
    request whose ``max_tokens`` (or ``max_completion_tokens``) is under 16 is refused with an
    :class:`~llmguard_sdk.errors.UnsupportedRequestError` before it is sent (the chain moves
    on), as is one asking what only chat completions gives (``n`` above 1, audio, legacy
    ``functions``, ``web_search_options``); chat's parameters the API has under another name
    are sent under it, and its sampling-only ones (``seed``, ``stop``, the penalties,
    ``logit_bias``, ``prediction``) are not sent (a
    :class:`~llmguard_sdk.errors.DroppedParameterWarning`, once per parameter).

    .. versionchanged:: 0.2.0 a builder's ``prompt_cache_key`` follows ``send_cache_key``
       (it went to every host).
       chat's parameters the Responses API lacks, in ``extra_body``
       too, are translated, dropped or refused (they were sent, and OpenAI's 400 ended the
       chain).
       A vendor's parameter OpenAI lacks (``top_k`` ...) is not sent, with a warning.

    .. versionadded:: 0.2.0
    """

    def __init__(self, base_url: str, *, store: bool | None = False, **options: Any) -> None:
        if store is not None and not isinstance(store, bool):
            raise ConfigurationError(f"store must be True, False or None, got {store!r:.40}")
        super().__init__(base_url, **options)
        self._url = self.base_url + "/responses"
        self.store = store
        self._dropped: set[str] = set()  # the parameters a warning said are not sent
        self._dropped_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"OpenAIResponsesProvider(name={self.name!r}, base_url={self.base_url!r})"

    def _payload(self, request: ChatRequest, model: str, *, stream: bool) -> dict[str, Any]:
        payload = build_responses_payload(
            request, model=model, stream=stream, store=self.store, hints=self.send_cache_key
        )
        limit = payload.get("max_output_tokens")
        if isinstance(limit, int) and not isinstance(limit, bool) and limit < MIN_OUTPUT_TOKENS:
            raise UnsupportedRequestError(
                f"the Responses API takes max_output_tokens of {MIN_OUTPUT_TOKENS} or more, "
                f"not {limit}: ask for {MIN_OUTPUT_TOKENS} or more, or let a chat route serve it",
                route=self.name,
            )
        asked = chat_parameters(request)
        problem = refusal(asked)
        if problem is not None:
            raise UnsupportedRequestError(problem, route=self.name)
        self._say_dropped({**dropped(asked), **dict.fromkeys(foreign(request), FOREIGN)})
        return payload

    def _say_dropped(self, lacking: Mapping[str, str]) -> None:
        """Warn, once per parameter, that a parameter of ``lacking`` (its name, what the
        answer lacks without it) is not sent."""
        with self._dropped_lock:
            new = [name for name in lacking if name not in self._dropped]
            self._dropped.update(new)
        for name in new:
            warnings.warn(
                f"{self.name}: the Responses API has no {name!r}; it is not sent ({lacking[name]})",
                DroppedParameterWarning,
                stacklevel=caller_level(),
            )


# -- requests ------------------------------------------------------------------------------


def _content(message: Message) -> str | list[dict[str, Any]]:
    """A message's content as Responses content parts: a part's ``prompt_cache_breakpoint``
    (the end of a reusable prefix) goes on, as Responses' ``input_text`` and ``input_image``
    take it, and an image's ``detail``: chat's ``image_url.detail``, ``"auto"`` (the default of
    both APIs) when it has none; openai's own ``ResponseInputImageParam`` requires it, as
    servers that check input against it do (vLLM: a 400 "Field required"). Chat's ``file``
    part (a PDF ...) is an ``input_file``."""
    if isinstance(message.content, str) or message.content is None:
        return message.content or ""
    text_type = "output_text" if message.role == "assistant" else "input_text"
    parts: list[dict[str, Any]] = []
    for part in message.content:
        if part.get("type") == "text":
            made: dict[str, Any] = {"type": text_type, "text": part.get("text", "")}
        elif part.get("type") == "image_url":
            image = part.get("image_url")
            url = image.get("url") if isinstance(image, dict) else image
            detail = image.get("detail") if isinstance(image, dict) else None
            made = {"type": "input_image", "image_url": url, "detail": detail or "auto"}
        elif part.get("type") == "file" and isinstance(file := part.get("file"), dict):
            made = {"type": "input_file", **_file(file)}
        else:
            continue
        if part.get(_BREAKPOINT) is not None and made["type"] in ("input_text", "input_image"):
            made[_BREAKPOINT] = part[_BREAKPOINT]
        parts.append(made)
    return parts


def _file(file: Mapping[str, Any]) -> dict[str, Any]:
    """Chat's ``file`` part's file (an uploaded one's ``file_id``, or ``file_data`` inline
    with its ``filename``) as an ``input_file`` takes it: the same fields, those given."""
    return {k: file[k] for k in ("file_id", "file_data", "filename") if file.get(k) is not None}


def _items(message: Message) -> list[dict[str, Any]]:
    """``message`` as input items: an assistant message's reasoning items (Responses' own,
    sent back on its ``thinking``; Claude's thinking blocks there are not sent) before its
    content and its calls, as the answer that made them had them."""
    if message.role == "tool":
        return [
            {
                "type": "function_call_output",
                "call_id": message.tool_call_id,
                "output": message.text,
            }
        ]
    items: list[dict[str, Any]] = [
        dict(t) for t in message.thinking or () if t.get("type") == "reasoning"
    ]
    if message.content:
        items.append({"role": message.role, "content": _content(message)})
    for call in message.tool_calls or ():
        function = call.get("function")
        function = function if isinstance(function, dict) else {}
        items.append(
            {
                "type": "function_call",
                "call_id": call.get("id"),
                "name": function.get("name"),
                "arguments": function.get("arguments") or "",
            }
        )
    return items


def _tool(tool: Mapping[str, Any]) -> dict[str, Any]:
    """A chat function tool as the Responses API's, flat; ``strict: false`` where it does
    not say (chat's default: the Responses API's is strict, which makes each property required
    and no other allowed)."""
    tool = function_tool(tool)  # (Anthropic's shape: a function tool first)
    function = tool.get("function")
    if tool.get("type") != "function" or not isinstance(function, dict):
        return dict(tool)  # already flat, or a built-in tool: sent as given
    return {"type": "function", "strict": False, **function}


def build_responses_payload(
    request: ChatRequest,
    *,
    model: str,
    stream: bool,
    store: bool | None = None,
    hints: bool = True,
) -> dict[str, Any]:
    """The JSON body of a Responses call for ``request`` (``store``: the one sent when the
    request sets none; ``None``: none); without ``hints``, less a builder's OpenAI hints (its
    ``prompt_cache_key``), as a chat-completions body."""
    payload: dict[str, Any] = {
        "model": model,
        "input": [item for m in request.messages for item in _items(m)],
    }
    payload.update(request.model_dump(include=set(_SAME), exclude_none=True))
    choice = payload.get("tool_choice")
    if isinstance(choice, dict) and isinstance(choice.get("function"), dict):
        payload["tool_choice"] = {"type": "function", "name": choice["function"].get("name")}
    if request.tools:
        payload["tools"] = [_tool(t) for t in request.tools]
    extra = sent_extra_body(request, responses=True)
    reasoning = extra.pop("reasoning", None)  # a Responses caller's, whole (its summary)
    if isinstance(reasoning, Mapping) and reasoning:
        payload["reasoning"] = dict(reasoning)
    unsent = CHAT_ONLY.keys() | foreign(request)
    payload.update({k: v for k, v in extra.items() if k not in unsent})
    if not hints:
        leave_out_hints(payload, request)
    translate(payload, chat_parameters(request), stream=stream)
    if store is not None:
        payload.setdefault("store", store)
    if payload.get("store") is False:
        payload["input"] = [item for item in payload["input"] if _findable(item)]
    keep_reasoning(payload)
    if SERVER_TOOLS in named_keys(request, ANTHROPIC_ONLY_KEY):
        leave_out_server_tools(payload)
    if stream:
        payload["stream"] = True
    return payload


def _findable(item: Mapping[str, Any]) -> bool:
    """Whether a route that stores nothing can read input ``item``: any but a reasoning item
    sent back by its id alone (without its ``encrypted_content``), which OpenAI answers
    with a 404 ("Items are not persisted when `store` is set to false")."""
    return item.get("type") != "reasoning" or bool(item.get("encrypted_content"))


# -- answers -------------------------------------------------------------------------------


def _finish(data: Mapping[str, Any], has_calls: bool) -> str:
    details = data.get("incomplete_details")
    reason = details.get("reason") if isinstance(details, dict) else None
    if data.get("status") == "incomplete":
        return "content_filter" if reason == "content_filter" else "length"
    return "tool_calls" if has_calls else "stop"


def _output(data: Mapping[str, Any]) -> tuple[str, list[dict[str, Any]], dict[str, Any]]:
    """The answer's text, tool calls and metadata (its refusal, its text's logprobs in chat
    completions' shape, ``{"content": [...]}``, its reasoning's text and its reasoning
    items as they came, ``reasoning_items``)."""
    text: list[str] = []
    calls: list[dict[str, Any]] = []
    metadata: dict[str, Any] = {}
    reasoning: list[str] = []
    items: list[dict[str, Any]] = []
    output = data.get("output")
    for item in output if isinstance(output, list) else ():
        if not isinstance(item, dict):
            continue
        if item.get("type") == "message":
            content = item.get("content")
            for part in content if isinstance(content, list) else ():
                if isinstance(part, dict) and part.get("type") == "output_text":
                    text.append(str(part.get("text", "")))
                    merge_metadata(metadata, _logprobs(part.get("logprobs")))
                elif isinstance(part, dict) and part.get("type") == "refusal":
                    merge_metadata(metadata, {"refusal": str(part.get("refusal") or "")})
        elif item.get("type") == "reasoning":
            reasoning += _reasoning_texts(item)
            items += [item] if isinstance(item.get("id"), str) else []
        elif item.get("type") == "function_call":
            calls.append(
                {
                    "id": item.get("call_id"),
                    "type": "function",
                    "function": {"name": item.get("name"), "arguments": item.get("arguments")},
                }
            )
    if reasoning:  # as a stream gives it (see ResponsesStreamState._reasoned)
        metadata["reasoning"] = "\n\n".join(reasoning)
    if items:
        metadata["reasoning_items"] = items
    metadata.update(_stored(data))
    return "".join(text), calls, metadata


def _stored(response: Mapping[str, Any]) -> dict[str, Any]:
    """Whether the route stored the response, as the response says (its ``store``), as
    ``metadata["store"]``; nothing where it does not say."""
    store = response.get("store")
    return {"store": store} if isinstance(store, bool) else {}


def _reasoning_texts(item: Mapping[str, Any]) -> list[str]:
    """A reasoning item's texts: its summary's parts (OpenAI's), its content's (an open
    model's own reasoning, as servers of gpt-oss send it)."""
    texts = []
    for key in ("summary", "content"):
        parts = item.get(key)
        for part in parts if isinstance(parts, list) else ():
            if isinstance(part, dict) and isinstance(part.get("text"), str) and part["text"]:
                texts.append(part["text"])
    return texts


def _logprobs(tokens: object) -> dict[str, Any]:
    """Responses' logprobs of a text (a list of tokens) as chat completions' ``logprobs``."""
    return {"logprobs": {"content": tokens}} if isinstance(tokens, list) and tokens else {}


def parse_response(
    status: int, headers: Mapping[str, str], body: bytes, *, route: str
) -> ChatResponse:
    """A Responses answer as a :class:`ChatResponse`, or its typed error."""
    data, problem = checked_answer(status, headers, body, route=route)
    if data.get("status") == "failed":  # with the answer's headers (request id) and body
        error = data.get("error")
        raise error_answer(error, headers, body, route=route, default="the response failed")
    if not isinstance(data.get("output"), list):
        raise problem("response has no output list")
    text, calls, metadata = _output(data)
    usage, cost = usage_from_payload(data.get("usage"), service_tier=data.get("service_tier"))
    usage = with_tool_uses(usage, openai_tool_uses(data["output"]))
    try:
        return ChatResponse(
            text=text,
            finish_reason=_finish(data, bool(calls)),
            usage=usage,
            cost_usd=cost,
            cost_source="reported" if cost is not None else None,
            model=str(data.get("model") or ""),
            route=route,
            id=data.get("id") if isinstance(data.get("id"), str) else None,
            tool_calls=calls or None,
            headers=dict(headers),
            metadata=metadata,
        )
    except ValidationError as exc:
        raise problem(f"response does not fit the model: {exc.errors()[0]['msg']}") from None


def _is_tool_use(item: object) -> TypeGuard[dict[str, Any]]:
    return isinstance(item, dict) and item.get("type") in (
        "web_search_call",
        "file_search_call",
        "code_interpreter_call",
    )


def _event_error(event: dict[str, Any]) -> dict[str, Any]:
    """An ``error`` event's error object: the ``error`` object the live API nests its
    ``code``, ``type`` and ``message`` in, or the event itself, whose fields the API reference
    gives them as."""
    nested = event.get("error")
    return nested if isinstance(nested, dict) else event


class ResponsesStreamState(AnthropicStreamState):
    """Decodes Responses stream events into chunks: one event at most one chunk, as
    Anthropic's stream (whose loop and chunk making it shares); the error rules are
    :class:`~llmguard_sdk.providers.wire.StreamState`'s."""

    def __init__(self, route: str, deadline: float) -> None:
        super().__init__(route, deadline)
        self.calls: dict[int, int] = {}  # output index -> tool call index
        self.reasoning_part: tuple[object, ...] | None = None  # the last reasoning delta's
        self.reasoning_items = StreamedItems()
        # server-side tool call items, by output index (else id)
        self.tool_items: dict[tuple[str, object], object] = {}

    def _event(self, data: str) -> StreamChunk | None:
        event = self.event_object(data)
        kind = event.get("type")
        if kind in ("error", "response.failed"):
            response = event.get("response")
            failed = response.get("error") if isinstance(response, dict) else None
            error = _event_error(event) if kind == "error" else failed
            message = error.get("message") if isinstance(error, dict) else None
            text = message if isinstance(message, str) else None
            raise self.error_event(error, text, default="the response failed")
        if kind == "response.created":
            response = event.get("response")
            if not isinstance(response, dict):
                raise self.failure(MalformedResponseError, "response.created has no response")
            self.model = str(response.get("model") or "")
            self.message_id = response.get("id") if isinstance(response.get("id"), str) else None
            return self._make(metadata=_stored(response))
        if kind in ("response.output_text.delta", "response.refusal.delta"):
            return self._delta(kind, event.get("delta"), event.get("logprobs"))
        if kind in ("response.output_item.added", "response.output_item.done"):
            item = self.reasoning_items.item(event.get("item"), done=kind.endswith("done"))
            if item is not None:  # (the route's own, given out as it came)
                return self._make(metadata={"reasoning_items": [item]})
            if _is_tool_use(tool := event.get("item")):
                return self._tool_item(tool, event.get("output_index"))
        if kind in ("response.output_item.added", "response.function_call_arguments.delta"):
            return self._call(kind, event)
        if kind in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"):
            return self._reasoned(event)
        if kind in ("response.completed", "response.incomplete"):
            response = event.get("response")
            response = response if isinstance(response, dict) else {}
            self.finished = self.done = True
            finish = _finish(response, bool(self.calls))
            usage, _cost = usage_from_payload(
                response.get("usage"), service_tier=response.get("service_tier")
            )
            seen = openai_tool_uses(response.get("output")), self._tool_uses()
            usage = with_tool_uses(usage, *seen)
            return self._make(finish=finish, usage=usage)
        return None  # in_progress, content parts, the *.done events

    def _tool_uses(self) -> dict[str, int]:
        return openai_tool_uses(list(self.tool_items.values())) if self.tool_items else {}

    def _tool_item(self, item: dict[str, Any], at: object) -> StreamChunk:
        """A server-side tool call item, added (billed once begun) or done: a chunk with the
        uses seen so far, for a stream cut before ``response.completed``; the item once
        however often it comes: by its output index, which its ``added`` and ``done`` events
        both carry (its id may come on one of them alone), else by its id."""
        key: tuple[str, object] = ("new", len(self.tool_items))
        if isinstance(at, int) and not isinstance(at, bool):
            key = ("at", at)
        elif isinstance(item.get("id"), str):
            key = ("id", item["id"])
        self.tool_items[key] = item
        chunk = self._make()
        chunk._usage_so_far = Usage.model_validate(self._tool_uses())
        return chunk

    def _delta(self, kind: str, delta: object, logprobs: object) -> StreamChunk | None:
        """A piece of the message's text (with its tokens' logprobs) or of its refusal."""
        if not isinstance(delta, str) or not delta:
            return None
        if kind == "response.refusal.delta":
            return self._make(metadata={"refusal": delta})
        return self._make(text=delta, metadata=_logprobs(logprobs))

    def _reasoned(self, event: Mapping[str, Any]) -> StreamChunk | None:
        """A piece of the model's reasoning (of its summary, or its own) as
        ``metadata["reasoning"]``, never the text; a new part (of a summary, or of a
        reasoning item) after another starts with a blank line, as a whole answer's
        parts are joined. The reasoning item it adds to comes with it, as it now stands."""
        delta = event.get("delta")
        if not isinstance(delta, str) or not delta:
            return None
        part = tuple(event.get(key) for key in ("output_index", "summary_index", "content_index"))
        if self.reasoning_part is not None and part != self.reasoning_part:
            delta = "\n\n" + delta
        self.reasoning_part = part
        metadata: dict[str, Any] = {"reasoning": delta}
        item = self.reasoning_items.grown(event)
        if item is not None:
            metadata["reasoning_items"] = [item]
        return self._make(metadata=metadata)

    def _call(self, kind: str, event: dict[str, Any]) -> StreamChunk | None:
        at = event.get("output_index")
        at = at if isinstance(at, int) else None  # (a list or an object is no key)
        if kind == "response.output_item.added":
            item = event.get("item")
            if not isinstance(item, dict) or item.get("type") != "function_call":
                return None
            index = self.calls[len(self.calls) if at is None else at] = len(self.calls)
            call = {
                "index": index,
                "id": item.get("call_id"),
                "type": "function",
                "function": {"name": item.get("name"), "arguments": item.get("arguments") or ""},
            }
            return self._make(tool_calls=[call])
        delta = event.get("delta")
        if at not in self.calls or not isinstance(delta, str):
            return None
        return self._make(tool_calls=[{"index": self.calls[at], "function": {"arguments": delta}}])


OpenAIResponsesProvider._answers = AnswerShape(parse_response, ResponsesStreamState)
