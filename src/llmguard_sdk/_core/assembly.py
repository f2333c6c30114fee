"""A stream's chunks assembled into the response they add up to."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

from ..budget._tool_fees import TOOLS
from ..budget._usage import usable_usage
from ..context import AttemptRecord, CallContext
from ..models import ChatResponse, StreamChunk, Usage
from ..providers._chat_content import COMPLETION_FIELDS
from ..tokens import count_text_tokens

__all__ = [
    "Assembler",
    "CallSlots",
    "at_least",
    "has_content",
    "merge_metadata",
    "merge_tool_call_deltas",
    "shows",
]


def has_content(chunk: StreamChunk) -> bool:
    """Whether ``chunk`` carries content (what a hedge race waits for): text, tool calls, a
    finish, or what :func:`shows` counts."""
    return bool(chunk.text or chunk.tool_calls or chunk.finish_reason or shows(chunk))


def shows(chunk: StreamChunk) -> bool:
    """Whether ``chunk`` carries answer the caller sees besides text and tool calls: a piece
    of OpenAI's refusal, one of Claude's thinking blocks, or a piece of a model's reasoning."""
    metadata = chunk.metadata
    return bool(metadata.get("refusal") or metadata.get("thinking") or metadata.get("reasoning"))


def _output(text: str, reasoning: object, thinking: object, calls: Iterable[object] | None) -> str:
    """The output to count when the provider reports no usage (all billed as output
    tokens): text, reasoning, thinking blocks' text and tool calls' arguments, joined."""
    parts = [text]
    if isinstance(reasoning, str):
        parts.append(reasoning)
    for block in thinking if isinstance(thinking, list) else ():
        if isinstance(block, Mapping) and isinstance(block.get("thinking"), str):
            parts.append(block["thinking"])
    for call in calls or ():
        arguments = call_function(call).get("arguments") if isinstance(call, Mapping) else None
        if isinstance(arguments, str):
            parts.append(arguments)
    return "".join(parts)


class Assembler:
    """Collects one attempt's chunks into the response they add up to.

    ``carried`` is text an interrupted earlier route already delivered, and
    ``carried_metadata`` what its chunks' metadata added up to (its reasoning, thinking
    blocks, a refusal's pieces): this route continues them (its own metadata folds into
    that, as a route's chunks fold), and ``delivered`` counts only this route's own content;
    the answer's own fields (``created``, ``system_fingerprint`` ...) are this route's alone.
    ``ctx`` None: the chunks are only counted (a hedge race's loser), the call's first token
    not noted.
    """

    def __init__(
        self,
        ctx: CallContext | None,
        carried: str,
        record: AttemptRecord,
        carried_metadata: Mapping[str, Any] | None = None,
    ) -> None:
        self._ctx = ctx
        self._carried = carried
        self.record = record
        self._first_token_at: float | None = None
        self._last_content_at = 0.0
        self._text: list[str] = []
        self._tool_calls: dict[int, dict[str, Any]] = {}
        self._slots = CallSlots()  # which of them each streamed piece belongs to
        self.finish_reason: str | None = None
        self.usage: Usage | None = None
        self._so_far: Usage | None = None  # the provider's usage before its end (its tools')
        self.model = ""
        self.id: str | None = None
        self.metadata: dict[str, Any] = dict(carried_metadata or {})  # (folding copies)
        self.metadata.pop(COMPLETION_FIELDS, None)
        # what the carried reasoning and thinking come to: this route's own follow them
        self._carried_reasoning = _length(self.metadata.get("reasoning"))
        self._carried_thinking = _length(self.metadata.get("thinking"))
        self.headers: dict[str, str] = {}
        self._shown = False  # a piece of OpenAI's refusal, or a thinking block, went out
        self.reasoned = False  # this route streamed reasoning or thinking the caller sees
        self.chunks = 0  # this route's so far
        # how long the caller held the chunks handed to it (all, and before the first token):
        # the caller's pace, not the provider's, left out of the latency measure
        self._held_s = self._held_first_s = 0.0

    @property
    def delivered(self) -> bool:
        """Whether any content (text, a tool call, a refusal's piece, a thinking block) has gone
        to the caller: a stream that breaks after it is not replayed."""
        return bool(self._text or self._tool_calls or self._shown)

    @property
    def ran_tools(self) -> bool:
        """Whether the stream showed server-side tool uses its provider bills once run
        (Claude's ``server_tool_use`` blocks, OpenAI's ``web_search_call`` items ...): a
        stream cut after them is billed, text or not."""
        shown = self._so_far
        return shown is not None and any(getattr(shown, tool.uses) for tool in TOOLS)

    @property
    def called(self) -> bool:
        """Whether part of a tool call has gone to the caller."""
        return bool(self._tool_calls)

    def add(self, chunk: StreamChunk) -> None:
        self.chunks += 1
        if chunk.text:
            now = time.monotonic()
            if self._first_token_at is None:
                self._first_token_at = self.record.first_token_at = now
                if self._ctx is not None and self._ctx.first_token_at is None:
                    self._ctx.first_token_at = self._first_token_at
            else:
                self.record.chunk_gaps.append(now - self._last_content_at)
            self._last_content_at = now
            self._text.append(chunk.text)
        if chunk.tool_calls:
            merge_tool_call_deltas(self._tool_calls, chunk.tool_calls, self._slots)
        self.finish_reason = chunk.finish_reason or self.finish_reason
        self.usage = usable_usage(chunk.usage) or self.usage  # (a provider object's: bounded)
        self._so_far = usable_usage(chunk._usage_so_far) or self._so_far
        self.model = chunk.model or self.model
        self.id = chunk.id or self.id
        if chunk.metadata:
            merge_metadata(self.metadata, chunk.metadata)
            self._shown = self._shown or shows(chunk)
            metadata = chunk.metadata
            self.reasoned = self.reasoned or bool(
                metadata.get("reasoning") or metadata.get("thinking")
            )
        if chunk.headers:
            self.headers.update(chunk.headers)

    def seconds(self) -> float:
        """How long this attempt took to its first token (or until now, without one)."""
        return (self._first_token_at or time.monotonic()) - self.record.started

    def held(self, seconds: float) -> None:
        """The caller took ``seconds`` to ask for the next chunk after one was handed to it:
        time the provider's pace is measured without."""
        self._held_s += seconds
        if self._first_token_at is None:
            self._held_first_s += seconds

    def sample(self) -> tuple[float, float | None, int]:
        """(whole time, time to the first token, output tokens: reported, else one per
        content chunk) of the attempt so far, for the router's latency measure: the time
        spent waiting on the provider, not the time the caller held the chunks (a slow
        reader says nothing of the deployment)."""
        started = self.record.started
        first = None
        if self._first_token_at is not None:
            first = self._first_token_at - started - self._held_first_s
        tokens = self.usage.output_tokens if self.usage is not None else len(self._text)
        return time.monotonic() - started - self._held_s, first, tokens

    @property
    def text(self) -> str:
        """Everything the caller has received: carried text and this route's."""
        return self._carried + "".join(self._text)

    def charged(self, prompt_billed: bool) -> bool:
        """Whether the provider bills this attempt: its prompt (``prompt_billed``: the
        stream ended, was closed once sent, or failed once its provider took the request,
        :func:`~.limits.bills_prompt`), or what it showed, whoever cut it: content that
        went to the caller, server-side tools it ran."""
        return prompt_billed or self.delivered or self.ran_tools

    def used(self, model: str | None, input_tokens: float, billed: bool = True) -> Usage | None:
        """What the attempt used, for settling its rate-limit reservation and pricing it: the
        provider's usage, else its ``input_tokens`` and the SDK's count of what this route
        delivered (carried text aside), its text, reasoning and tool calls' arguments
        (:func:`_output`) as ``model`` counts them, and the server-side tool uses its stream
        showed (Claude's ``server_tool_use`` blocks before ``message_delta``, OpenAI's tool
        call items before ``response.completed``: billed once run), its input as its
        provider reported it before its end where it did (Claude's ``message_start``: cache
        reads and writes apart, :func:`at_least`); None where it is not
        :meth:`charged` (``billed``: its prompt is), a failure before any content or tool
        use that its provider does not bill (everything goes back)."""
        if self.usage is not None:
            return self.usage
        if not self.charged(billed):
            return None
        output = self.counted(model)
        if self._so_far is not None:
            return at_least(self._so_far, output, int(input_tokens))
        return Usage(input_tokens=int(input_tokens), output_tokens=output, estimated=True)

    def counted(self, model: str | None) -> int:
        """The output tokens of what this route delivered (carried text aside), as ``model``
        counts them: its text, reasoning and tool calls' arguments (:func:`_output`)."""
        own = self._own_output()
        return count_text_tokens(own, model).tokens if own else 0

    def _own_output(self) -> str:
        """This route's output (:func:`_output`), from what the assembly keeps: its text,
        its reasoning and thinking blocks (past the carried ones) and its tool calls'
        arguments."""
        reasoning, thinking = self.metadata.get("reasoning"), self.metadata.get("thinking")
        if isinstance(reasoning, str):
            reasoning = reasoning[self._carried_reasoning :]
        if isinstance(thinking, list):
            thinking = thinking[self._carried_thinking :]
        calls = [self._tool_calls[i] for i in sorted(self._tool_calls)]
        return _output("".join(self._text), reasoning, thinking, calls)

    def response(self, route: str) -> ChatResponse:
        return ChatResponse(
            text=self.text,
            finish_reason=self.finish_reason,
            usage=self.usage,
            model=self.model,
            route=route,
            id=self.id,
            tool_calls=[self._tool_calls[i] for i in sorted(self._tool_calls)] or None,
            headers=dict(self.headers),
            metadata=dict(self.metadata),
        )


def at_least(used: Usage, output: int, sent: int) -> Usage:
    """``used`` (a provider's usage so far, before its stream's end), its output at least
    ``output`` (estimated), its prompt the ``sent`` tokens where the provider counted none
    yet (OpenAI's tool call items come before its usage)."""
    update: dict[str, Any] = {"output_tokens": max(used.output_tokens, output), "estimated": True}
    if not used.input_tokens:
        update["input_tokens"] = sent
    return used.model_copy(update=update)


def _length(value: object) -> int:
    """The length of a string or a list (0 for anything else)."""
    return len(value) if isinstance(value, (str, list)) else 0


def merge_metadata(into: dict[str, Any], piece: Mapping[str, Any]) -> None:
    """Fold one chunk's ``metadata`` (what it adds) into the stream's so far: text joins
    text (a refusal's pieces), a list extends a list (logprobs' ``content``), but an object
    in it with the ``id`` of one before replaces that one (a Responses route's reasoning
    item, sent again as it grows); an object merges into an object by these rules, key by
    key; any other value replaces the one before (the last chunk's wins)."""
    for key, value in piece.items():
        before = into.get(key)
        if isinstance(before, str) and isinstance(value, str):
            into[key] = ""  # (its one reference left is ``before``: CPython grows it in
            before += value  # place, so a stream's reasoning joins in linear time)
            into[key] = before
        elif isinstance(before, list) and isinstance(value, list):
            into[key] = _extended(before, value)
        elif isinstance(before, dict) and isinstance(value, Mapping):
            merged = dict(before)
            merge_metadata(merged, value)
            into[key] = merged
        else:
            into[key] = value


def _id(entry: object) -> object:
    return entry.get("id") if isinstance(entry, Mapping) else None


def _extended(before: list[Any], more: list[Any]) -> list[Any]:
    """``before`` and then ``more``; an object of ``more`` whose string ``id`` an object of
    the list has takes that one's place."""
    merged = list(before)
    for entry in more:
        entry_id = _id(entry)
        at = None  # (only an object with an id is looked for: logprobs' tokens have none)
        if isinstance(entry_id, str):
            at = next((n for n, e in enumerate(merged) if _id(e) == entry_id), None)
        if at is None:
            merged.append(entry)
        else:
            merged[at] = entry
    return merged


class CallSlots:
    """Which call each streamed tool-call piece of one answer belongs to (its call's key in
    :func:`merge_tool_call_deltas`'s ``calls``).

    A piece with an integer ``index`` belongs to that call, as OpenAI numbers them. A piece
    without one (Gemini's OpenAI-compatible stream sends each parallel call whole, one call
    a chunk, without an ``index``) belongs to the call its ``position`` in the chunk's list
    went to last (at first the call keyed ``position``), unless it carries an ``id`` that
    call's is not: then to the call of that ``id``, else to a new call after all so far.
    ``calls``: those of the answer so far, to go on from.
    """

    def __init__(self, calls: Mapping[int, Mapping[str, Any]] | None = None) -> None:
        self._ids: dict[int, str | None] = {
            key: _call_id(call) for key, call in (calls or {}).items()
        }
        self._last: dict[int, int] = {}  # an index-less piece's position -> its call's key

    def key(self, delta: Mapping[str, Any], position: int) -> int:
        """The key of the call ``delta``, at ``position`` in its chunk's list, belongs to."""
        index, call_id = delta.get("index"), _call_id(delta)
        if isinstance(index, int):
            key = index
        else:
            key = self._last.get(position, position)
            if call_id is not None and self._ids.get(key) not in (None, call_id):
                known = (k for k, other in self._ids.items() if other == call_id)
                key = next(known, max(self._ids) + 1)
            self._last[position] = key
        if self._ids.get(key) is None:
            self._ids[key] = call_id
        return key


def _call_id(call: Mapping[str, Any]) -> str | None:
    found = call.get("id")
    return found if isinstance(found, str) and found else None


def call_function(call: Mapping[str, Any]) -> Mapping[str, Any]:
    """A tool call's (or a streamed piece's) ``function`` object; an empty one where it is
    none (read past, as :func:`merge_tool_call_deltas` reads it)."""
    function = call.get("function")
    return function if isinstance(function, Mapping) else {}


def merge_tool_call_deltas(
    calls: dict[int, dict[str, Any]],
    deltas: list[dict[str, Any]],
    slots: CallSlots | None = None,
) -> None:
    """Fold streamed tool-call pieces into whole calls, keyed as ``slots`` (the stream's
    own, else one that goes on from ``calls``) keys them: by their ``index``.

    A stream sends each call's ``id``, ``type`` and ``function.name`` once and its
    ``function.arguments`` in pieces to be joined, as OpenAI's streaming format does.
    """
    slots = slots or CallSlots(calls)
    for position, delta in enumerate(deltas):
        call = calls.setdefault(
            slots.key(delta, position), {"id": None, "type": "function", "function": {}}
        )
        for key_name in ("id", "type"):
            if isinstance(delta.get(key_name), str) and delta[key_name]:
                call[key_name] = delta[key_name]
        function = delta.get("function")
        if isinstance(function, dict):
            merged = call["function"]
            if isinstance(function.get("name"), str) and function["name"]:
                merged["name"] = function["name"]
            if isinstance(function.get("arguments"), str):
                merged["arguments"] = merged.get("arguments", "") + function["arguments"]
