"""Pydantic models of what flows through a Guard: requests, responses, stream chunks, usage.

The shapes follow the OpenAI chat-completions API, which most providers and local servers speak,
with the provider-neutral names the rest of the SDK uses (``input_tokens`` rather than
``prompt_tokens``).

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

from ._problems import problems
from .errors import RequestValidationError

__all__ = [
    "INCOMPLETE_FINISH_REASONS",
    "ChatRequest",
    "ChatResponse",
    "Message",
    "Role",
    "StreamChunk",
    "Timings",
    "Usage",
    "openai_finish_reason",
    "validate_request",
]

_OPENAI_FINISH_REASONS = frozenset(
    {"stop", "length", "tool_calls", "content_filter", "function_call"}
)
# Finish reasons OpenAI has no word for, and the nearest of its words (looked up in lower case;
# the ones said "length", unfinished answers, are INCOMPLETE_FINISH_REASONS)
_NEAREST_OPENAI_REASON = {
    "degraded": "stop",  # the Guard's degraded answer: a whole answer of its own
    # Claude's (AnthropicProvider says them in OpenAI's words; a server relaying them raw)
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
    "pause_turn": "length",  # a long server-tool turn paused half-way
    "max_tokens": "length",  # (Gemini's MAX_TOKENS too)
    "model_context_window_exceeded": "length",
    # compatible servers' own
    "eos_token": "stop",  # TGI: the model's end-of-sequence token
    "model_length": "length",  # Mistral: the context window ended it
    "insufficient_system_resource": "length",  # DeepSeek: cut off, unfinished
    "abort": "length",  # vLLM: the request was aborted, unfinished
    "error": "length",  # Mistral, vLLM: generation broke off, unfinished
    # Gemini's blocked answers (its native reasons, relayed raw)
    "safety": "content_filter",
    "recitation": "content_filter",
    "blocklist": "content_filter",
    "prohibited_content": "content_filter",
    "spii": "content_filter",
}

INCOMPLETE_FINISH_REASONS = frozenset(
    {"length"} | {reason for reason, word in _NEAREST_OPENAI_REASON.items() if word == "length"}
)
"""Finish reasons of an answer that stopped before it was complete, the ones
:func:`openai_finish_reason` says ``length`` for (in any case): ``length`` (cut at
``max_tokens`` or by the context window), Claude's ``pause_turn`` (a long server-tool turn
paused half-way; sent back, it goes on) and ``max_tokens``, and compatible servers' words for
a cut answer (Mistral's ``model_length``, vLLM's ``abort``, DeepSeek's
``insufficient_system_resource``, ``error``, ``model_context_window_exceeded``). The
cascade's :func:`~llmguard_sdk.router.finish_reason` check rejects them, the quality signal
``truncated`` counts them and the response cache does not keep them.

.. versionadded:: 0.2.0
"""


def openai_finish_reason(reason: str | None) -> str | None:
    """``reason`` in OpenAI's chat-completions words (``stop``, ``length``, ``tool_calls``,
    ``content_filter``, ``function_call``), the only ones OpenAI's schema allows, read in
    lower case: one of them as it is; an incomplete reason
    (:data:`INCOMPLETE_FINISH_REASONS`: Claude's ``pause_turn``, Mistral's
    ``model_length``) ``length``, an unfinished answer; any other the nearest word: the
    degraded answer's ``degraded`` ``stop``, a refusal or a blocked answer (``refusal``,
    Gemini's ``SAFETY``) ``content_filter``, a word of no known meaning ``stop``. No reason
    (``None`` or ``""``, a chunk that does not finish) is ``None``. The raw reason stays in
    the response (``ChatResponse.finish_reason``; an Anthropic route's
    ``metadata["stop_reason"]``).

    .. versionadded:: 0.2.0
    """
    if not reason:
        return None
    word = reason.lower()
    if word in _OPENAI_FINISH_REASONS:
        return word
    return _NEAREST_OPENAI_REASON.get(word, "stop")


Role = Literal["system", "developer", "user", "assistant", "tool"]
"""The roles a chat message can have."""


# openai's answer message's fields that no request sends (null or [] in its model_dump())
_ANSWER_ONLY = frozenset(("refusal", "audio", "function_call", "annotations"))


class Message(BaseModel):
    """One chat message.

    ``content`` is a string, or a list of content parts (``{"type": "text", "text": ...}``,
    images and so on) passed through unchanged. An assistant message may carry ``tool_calls``
    instead of content; a tool message must name the ``tool_call_id`` it answers, and may say
    with ``is_error=True`` that the tool failed (Anthropic's ``tool_result.is_error``; only
    Anthropic routes send it, chat completions has no such field). An assistant message may
    carry Claude's ``thinking`` blocks of that turn, as Claude sent them (Claude wants them back
    with a tool's result when thinking is on); only Anthropic routes send them. Its
    ``thinking`` may also hold OpenAI Responses' ``reasoning`` items that led to it, as the
    route sent them; only Responses routes send those. The fields of openai's answer message
    that a request has no use for (``refusal``, ``audio``, ``function_call``, ``annotations``)
    are left out where empty, as in ``message.model_dump()`` of an answer sent back; an
    assistant's ``refusal`` without content is its content (the model's words, sent back).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    role: Role
    content: str | list[dict[str, JsonValue]] | None = None
    name: str | None = None
    tool_calls: list[dict[str, JsonValue]] | None = None
    tool_call_id: str | None = None
    is_error: bool | None = Field(default=None, strict=True)
    thinking: list[dict[str, JsonValue]] | None = None

    @model_validator(mode="before")
    @classmethod
    def _without_empty_answer_fields(cls, data: Any) -> Any:
        if isinstance(data, dict) and not _ANSWER_ONLY.isdisjoint(data):
            return _request_fields(data)
        return data

    @model_validator(mode="after")
    def _check_shape(self) -> Message:
        if self.role == "tool" and not self.tool_call_id:
            raise ValueError("a tool message needs tool_call_id")
        if self.is_error is not None and self.role != "tool":
            raise ValueError("only a tool message has is_error")
        if self.thinking is not None and self.role != "assistant":
            raise ValueError("only an assistant message has thinking")
        if self.content is None and not (self.role == "assistant" and self.tool_calls):
            raise ValueError(f"a {self.role} message needs content")
        if isinstance(self.content, list):
            for at, part in enumerate(self.content):
                _check_part(at, part)
        return self

    @property
    def text(self) -> str:
        """The message's text: the content string, or its text parts joined."""
        if isinstance(self.content, str):
            return self.content
        if not self.content:
            return ""
        return "".join(str(p.get("text", "")) for p in self.content if p.get("type") == "text")


def _request_fields(data: dict[str, Any]) -> dict[str, Any]:
    """A message as a request takes it: the answer-only fields left out where empty, and an
    assistant's ``refusal`` without content taken as its content (what the model said: the
    chat API takes a refusal back in the history; no route has a field for it)."""
    kept = {k: v for k, v in data.items() if v or k not in _ANSWER_ONLY}
    refusal = kept.get("refusal")
    if isinstance(refusal, str) and kept.get("role") == "assistant" and not kept.get("content"):
        del kept["refusal"]
        kept["content"] = refusal
    return kept


# the detail values of chat's image_url part ("auto": the default); the Responses API's
# input_image takes them too (and "original", which no chat route takes)
_IMAGE_DETAILS = ("auto", "low", "high")


def _check_part(at: int, part: dict[str, JsonValue]) -> None:
    """A content part has a ``type``; a text part's ``text`` is a string; an image's
    ``detail``, where given, is ``"auto"``, ``"low"`` or ``"high"`` (other parts go as they
    are). Else a ValueError naming the part: an OpenAI route, chat or Responses, refused it
    with a 400 (a Claude route sends no detail: a typo there failed only on the fallback)."""
    kind = part.get("type")
    if not isinstance(kind, str) or not kind:
        raise ValueError(f"content part {at} needs a type (a string such as 'text')")
    if kind == "text" and not isinstance(part.get("text"), str):
        raise ValueError(f"content part {at} is a text part: its text must be a string")
    image = part.get("image_url")
    detail = image.get("detail") if kind == "image_url" and isinstance(image, dict) else None
    if detail is not None and detail not in _IMAGE_DETAILS:
        raise ValueError(
            f"content part {at} is an image_url part: its detail must be 'auto', 'low' or"
            f" 'high', got {detail!r:.40}"
        )


_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")  # the chat API's rule for a function's name


def _checked_tool(tool: dict[str, JsonValue]) -> dict[str, JsonValue]:
    """A tool in the shape the providers take, else a ValueError saying what is wrong:
    OpenAI's function tool (``{"type": "function", "function": {"name": ..., "parameters":
    {...}}}``), Anthropic's (``{"name": ..., "input_schema": {...}}``, no ``type``); other
    types (server tools) go as they are."""
    kind = tool.get("type")
    if kind is None:  # Anthropic's shape: a name and (if given) an input schema object
        if not isinstance(tool.get("name"), str) or not tool["name"]:
            raise ValueError("a tool without a type is Anthropic's shape and needs a name")
        if "input_schema" in tool and not isinstance(tool["input_schema"], dict):
            raise ValueError("a tool's input_schema must be a JSON Schema object")
        return tool
    if kind != "function":
        return tool
    function = tool.get("function")
    if not isinstance(function, dict):
        raise ValueError('a function tool needs a "function" object (its name, parameters)')
    _check_named(function, "function", "parameters")
    parameters = function.get("parameters", {})
    if isinstance(parameters, dict) and parameters.get("type", "object") != "object":
        raise ValueError("function.parameters must be a JSON Schema object (type: object)")
    return tool


def _check_named(spec: dict[str, JsonValue], where: str, schema: str) -> None:
    """A function's or a JSON schema format's ``name`` (the chat API's rule), its ``schema``
    (an object), ``description`` (a string) and ``strict`` (a bool, or null as openai's types
    allow), as the API takes them."""
    name = spec.get("name")
    if not isinstance(name, str) or _TOOL_NAME.fullmatch(name) is None:
        raise ValueError(
            f"{where}.name must be 1 to 64 letters, digits, '_' or '-', got {name!r:.80}"
        )
    if not isinstance(spec.get(schema, {}), dict):
        raise ValueError(f"{where}.{schema} must be a JSON Schema object")
    if not isinstance(spec.get("description", ""), str):
        raise ValueError(f"{where}.description must be a string")
    if spec.get("strict") is not None and not isinstance(spec["strict"], bool):
        raise ValueError(f"{where}.strict must be true, false or null")


def _checked_format(response_format: dict[str, JsonValue]) -> dict[str, JsonValue]:
    """A ``response_format`` the providers take (a ``type``; a ``json_schema`` one with
    ``json_schema.name`` and a schema object), else a ValueError saying what is wrong."""
    kind = response_format.get("type")
    if not isinstance(kind, str):
        raise ValueError('needs a "type" ("text", "json_object" or "json_schema")')
    if kind != "json_schema":
        return response_format
    spec = response_format.get("json_schema")
    if not isinstance(spec, dict):
        raise ValueError('a json_schema format needs a "json_schema" object (name, schema)')
    _check_named(spec, "json_schema", "schema")
    return response_format


def _tool_name(tool: dict[str, JsonValue]) -> JsonValue:
    function = tool.get("function")
    return function.get("name") if isinstance(function, dict) else tool.get("name")


_TOOL_CHOICES = frozenset({"none", "auto", "required", "any"})  # ("any": Anthropic's "required")


def _tool_choice_problem(choice: object, tools: list[dict[str, JsonValue]] | None) -> str | None:
    """What is wrong with a ``tool_choice``: a word no provider knows, a function choice
    without a name or naming none of the request's tools; or None."""
    if isinstance(choice, str) and choice not in _TOOL_CHOICES:
        return (
            f"tool_choice must be one of {sorted(_TOOL_CHOICES)} or an object, got {choice!r:.80}"
        )
    if not isinstance(choice, dict) or choice.get("type") != "function":
        return None
    function = choice.get("function")
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(name, str):
        return 'tool_choice: a function choice needs "function": {"name": ...}'
    names = {_tool_name(tool) for tool in tools or ()}
    if tools and name not in names:
        return f"tool_choice: {name!r:.80} is not one of the request's tools"
    return None


_MOST_OUTPUT_TOKENS = 2**31 - 1  # an output limit's bound (an int32, as the chat APIs take)


class ChatRequest(BaseModel):
    """A chat-completion request, provider-neutral.

    ``model`` may be left out when the route that serves the call names its own model.
    ``max_completion_tokens`` (OpenAI's newer name, required by its reasoning models) is sent as
    given; the SDK's token accounting uses whichever of the two limits is set.
    ``metadata`` is for the SDK's own use (tags for logs, budgets and caches) and is not sent to
    the provider. ``extra_body`` carries provider-specific parameters through unchanged, and
    ``extra_headers`` / ``extra_query`` add HTTP headers and query parameters to the request
    (a header's name a token, its value ASCII without a line break or a NUL; not
    ``Content-Length`` or ``Transfer-Encoding``: the body's framing is the SDK's).
    Every free-form field must hold JSON values (no sets, no arbitrary objects). Each of
    ``tools`` is OpenAI's function tool (``function.name`` 1 to 64 of ``[A-Za-z0-9_-]``,
    ``parameters`` a JSON Schema object), Anthropic's shape (``name``, ``input_schema``) or
    another typed tool (sent as it is); ``tools=[]`` is no tools, and a ``tool_choice`` that
    names a function names one of them. A ``json_schema`` ``response_format`` needs
    ``json_schema.name`` and a schema object. The numbers are numbers: a bool or a string is
    refused; ``max_tokens`` and ``max_completion_tokens`` are at most 2**31 - 1 (no model
    answers more; a larger one, ``10**400``, passed a Guard's checks and broke its rate
    limits and budgets, which reserve it as a float).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    messages: list[Message] = Field(min_length=1)
    model: str | None = Field(default=None, min_length=1)
    # strict: a bool or a string is an error, not a number (True was max_tokens=1); an int
    # is still a float
    max_tokens: int | None = Field(default=None, gt=0, le=_MOST_OUTPUT_TOKENS, strict=True)
    max_completion_tokens: int | None = Field(
        default=None, gt=0, le=_MOST_OUTPUT_TOKENS, strict=True
    )
    temperature: float | None = Field(default=None, ge=0.0, le=2.0, strict=True)
    # 0 is allowed, as the chat APIs allow it (OpenAI's and Anthropic's range is [0, 1]):
    # a provider that refuses it answers its own 400
    top_p: float | None = Field(default=None, ge=0.0, le=1.0, strict=True)
    stop: str | list[str] | None = None
    # an int64, as the chat APIs take it (a larger one was sent, and refused there)
    seed: int | None = Field(default=None, strict=True, ge=-(2**63), le=2**63 - 1)
    tools: list[Annotated[dict[str, JsonValue], AfterValidator(_checked_tool)]] | None = None
    tool_choice: str | dict[str, JsonValue] | None = None
    response_format: Annotated[dict[str, JsonValue], AfterValidator(_checked_format)] | None = None
    metadata: dict[str, str] | None = None
    extra_body: dict[str, JsonValue] | None = None
    extra_headers: dict[str, str] | None = None
    extra_query: dict[str, str] | None = None

    @field_validator("tools")
    @classmethod
    def _no_empty_tools(
        cls, tools: list[dict[str, JsonValue]] | None
    ) -> list[dict[str, JsonValue]] | None:
        return tools or None  # (OpenAI refuses "tools": [], on every route)

    @model_validator(mode="after")
    def _check_stop(self) -> ChatRequest:
        if isinstance(self.stop, list) and len(self.stop) > 4:
            raise ValueError("stop takes at most 4 sequences")
        if self.tool_choice is not None:
            problem = _tool_choice_problem(self.tool_choice, self.tools)
            if problem is not None:
                raise ValueError(problem)
        for name, value in (self.extra_headers or {}).items():
            known = name in _GOOD_HEADER_NAMES  # (the idempotency key's, every call)
            if not (known or _HEADER_NAME.fullmatch(name)) or not _is_header_text(value):
                raise ValueError(
                    f"extra_headers: {name!r} must be a token, its value ASCII without line "
                    "breaks or NUL"
                )
            if known:
                continue
            if name.lower() in _FRAMING_HEADERS:  # a wrong one cuts the body or waits for more
                raise ValueError(f"extra_headers: {name!r} is the SDK's (the body's framing)")
            if len(_GOOD_HEADER_NAMES) >= 256:
                _GOOD_HEADER_NAMES.clear()
            _GOOD_HEADER_NAMES.add(name)
        return self

    @property
    def output_limit(self) -> int | None:
        """The most output tokens the call may produce (``max_completion_tokens`` first)."""
        return self.max_completion_tokens or self.max_tokens

    @property
    def most_output(self) -> int | None:
        """The most output tokens the call may be billed: the larger of ``max_tokens`` and
        ``max_completion_tokens`` where both are set (a provider may follow either), what
        budgets and rate limits hold for its worst case."""
        limits = [n for n in (self.max_tokens, self.max_completion_tokens) if n is not None]
        return max(limits) if limits else None

    def last_user_text(self) -> str:
        """Text of the last user message ('' when there is none)."""
        for message in reversed(self.messages):
            if message.role == "user":
                return message.text
        return ""


_HEADER_NAME = re.compile(r"[-!#$%&'*+.^_`|~0-9A-Za-z]+")  # a token (RFC 9110 5.6.2)
_FRAMING_HEADERS = frozenset({"content-length", "transfer-encoding"})
_GOOD_HEADER_NAMES: set[str] = set()
"""Header names found to be tokens and not the framing's (a few hundred at most): a name
sent again is not matched again."""


def _is_header_text(text: str) -> bool:
    return text.isascii() and "\r" not in text and "\n" not in text and "\x00" not in text


def validate_request(data: ChatRequest | dict[str, Any]) -> ChatRequest:
    """Build a :class:`ChatRequest`, turning pydantic's errors into :class:`RequestValidationError`.

    The error message lists every problem with its location, e.g.
    ``messages.0.role: Input should be 'system', 'developer', 'user', 'assistant' or 'tool'``.
    """
    if isinstance(data, ChatRequest):
        return data
    if type(data) is dict and (quick := _quick_request.quick_request(data)) is not None:
        return quick  # (the common shape, checked without pydantic: the same request)
    try:
        return ChatRequest.model_validate(data)
    except ValidationError as exc:
        found = problems(exc, "request")
        details = [dict(err) for err in exc.errors(include_url=False, include_context=False)]
        raise RequestValidationError("invalid chat request: " + "; ".join(found), details) from None


class Usage(BaseModel):
    """Token usage of one call.

    ``input_tokens`` counts every input token, including ``cached_input_tokens`` (read from a
    provider's prefix cache) and ``cache_write_input_tokens`` (written to it, Anthropic's
    ``cache_creation_input_tokens``). ``estimated`` is true when the SDK counted the tokens
    itself because the provider did not report them.

    ``output_tokens`` counts every output token, ``reasoning_tokens`` (OpenAI's
    ``reasoning_tokens``, Anthropic's thinking) among them; ``cache_write_1h_input_tokens`` are
    the cache writes (among ``cache_write_input_tokens``) kept for an hour (Anthropic's 1-hour
    TTL), ``cache_write_12h_input_tokens`` those kept for 12 hours (OpenAI's 12-hour
    retention), each billed at its own rate. ``service_tier`` is the tier that served the call
    as the provider reported it (``"flex"``, ``"priority"``, ``"batch"``...; ``None``: standard
    or not reported). ``audio_input_tokens`` are the input tokens (among ``input_tokens``)
    that carried audio, ``audio_output_tokens`` the output tokens (among ``output_tokens``)
    that did (OpenAI's ``prompt_tokens_details.audio_tokens`` and
    ``completion_tokens_details.audio_tokens``), billed at a model's audio rates.
    ``accepted_prediction_tokens`` and ``rejected_prediction_tokens`` are OpenAI's counts of a
    Predicted Output's tokens that appeared in the answer and that did not (the rejected ones
    are among ``output_tokens``, billed as output). ``web_search_requests`` counts the web
    searches the provider ran for the call on its side, billed per search besides the tokens
    (Anthropic's ``usage.server_tool_use.web_search_requests``, the ``web_search_call``
    items of an OpenAI Responses answer, one per answer of OpenAI's chat search models).
    ``file_search_calls`` counts the file searches (OpenAI's ``file_search_call`` items) and
    ``code_executions`` the code execution sessions (an OpenAI ``code_interpreter`` container,
    one per container id its ``code_interpreter_call`` items name; a Claude answer that ran
    its code execution tool: one) the provider ran, each billed per use besides the tokens.

    .. versionchanged:: 0.2.0 ``reasoning_tokens``, ``cache_write_1h_input_tokens``,
       ``cache_write_12h_input_tokens``, ``service_tier``, ``audio_input_tokens``,
       ``audio_output_tokens``, ``accepted_prediction_tokens``,
       ``rejected_prediction_tokens``, ``web_search_requests``, ``file_search_calls`` and
       ``code_executions``.
    """

    model_config = ConfigDict(frozen=True)

    input_tokens: int = Field(default=0, ge=0)
    output_tokens: int = Field(default=0, ge=0)
    cached_input_tokens: int = Field(default=0, ge=0)
    cache_write_input_tokens: int = Field(default=0, ge=0)
    estimated: bool = False
    reasoning_tokens: int = Field(default=0, ge=0)
    cache_write_1h_input_tokens: int = Field(default=0, ge=0)
    service_tier: str | None = None
    cache_write_12h_input_tokens: int = Field(default=0, ge=0)
    audio_input_tokens: int = Field(default=0, ge=0)
    audio_output_tokens: int = Field(default=0, ge=0)
    accepted_prediction_tokens: int = Field(default=0, ge=0)
    rejected_prediction_tokens: int = Field(default=0, ge=0)
    web_search_requests: int = Field(default=0, ge=0)
    file_search_calls: int = Field(default=0, ge=0)
    code_executions: int = Field(default=0, ge=0)

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens


class Timings(BaseModel):
    """How long a call took, in seconds, measured from the caller's call.

    ``first_token_s`` is the time to the first non-empty content delta (streams only).
    """

    model_config = ConfigDict(frozen=True)

    total_s: float = 0.0
    first_token_s: float | None = None


class ChatResponse(BaseModel):
    """The answer of a guarded call.

    ``route`` names the route (provider) that served it; ``attempts`` counts the provider calls
    made for it. ``cost_source`` says whether ``cost_usd`` was ``"reported"`` by the provider or
    ``"estimated"`` from a price table, or that the answer was served from the response
    cache (``"cached"``, at ``cost_usd=0.0``); both are ``None`` when the cost is unknown.
    """

    model_config = ConfigDict(frozen=True)

    text: str
    finish_reason: str | None = None
    usage: Usage | None = None
    model: str = ""
    route: str = ""
    id: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    cost_usd: float | None = None
    cost_source: Literal["reported", "estimated", "cached"] | None = None
    timings: Timings = Field(default_factory=Timings)
    attempts: int = 1
    headers: dict[str, str] = Field(default_factory=dict)
    metadata: dict[str, Any] = Field(default_factory=dict)


class StreamChunk(BaseModel):
    """One piece of a streamed answer.

    ``text`` is the content delta ('' for role-only, finish and usage chunks). The last chunk of
    a stream that asked for usage carries ``usage``; ``metadata`` carries what the chunk adds to
    the assembled response's metadata (a local model's context trimming, a piece of OpenAI's
    ``refusal``, the chunk's ``logprobs``, an Anthropic thinking block in a ``thinking`` list,
    a Responses route's reasoning item in a ``reasoning_items`` list): the stream joins text to
    text and lists to lists (an object with the ``id`` of one before in its place), merges
    objects key by key by these rules, and lets any other value replace the one before.
    ``headers``: the HTTP response headers, on a stream's first chunk only (empty on the
    others), so rate-limit counters can be read from streams too; after a retry or a fallback,
    on the first chunk of the attempt that answers.
    """

    model_config = ConfigDict(frozen=True)

    text: str = ""
    finish_reason: str | None = None
    usage: Usage | None = None
    tool_calls: list[dict[str, Any]] | None = None
    model: str = ""
    route: str = ""
    id: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    headers: dict[str, str] = Field(default_factory=dict)
    # the provider's usage so far, before the stream's end (Anthropic's ``message_start``: the
    # prompt's input tokens): not the answer's, what a hedge race's stopped loser had used
    _usage_so_far: Usage | None = PrivateAttr(default=None)


from . import _quick_request  # noqa: E402  (it builds this module's models; a module: imported first, it imports this one)
