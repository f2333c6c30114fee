"""OpenAI's Responses API (``/v1/responses``) as a server speaks it: an answer written as a
``response`` object or its stream events (:mod:`._responses_input` reads the request).

Used by the Guard's transport (an SDK's ``responses.create`` answered by any route) and by the
fake provider; :mod:`.responses` is the client side (a route that calls ``/v1/responses``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

from .._core.assembly import CallSlots, call_function
from ..models import StreamChunk, Usage, openai_finish_reason
from ._chat_content import COMPLETION_FIELDS, MESSAGE_FIELDS, created_of, kept_fields
from ._responses_reasoning import (
    ItemEvents,
    guard_reasoning_id,
    opening,
    route_items,
    unfinished,
)


def usage_object(usage: Usage | None) -> dict[str, Any] | None:
    """Responses usage: cached input (read from and written to the cache) and reasoning
    output tokens in their details."""
    if usage is None:
        return None
    return {
        "input_tokens": usage.input_tokens,
        "input_tokens_details": {
            "cached_tokens": usage.cached_input_tokens,
            "cache_write_tokens": usage.cache_write_input_tokens,
        },
        "output_tokens": usage.output_tokens,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
        "total_tokens": usage.total_tokens,
    }


# The unfinished answers a token limit cut (max_tokens, the context window): the Responses
# API's "max_output_tokens". The others said "length" (vLLM's abort, an error, DeepSeek's
# insufficient_system_resource, Claude's pause_turn) broke off or paused for another reason.
_CUT_BY_A_LIMIT = frozenset(
    {"length", "max_tokens", "model_length", "model_context_window_exceeded"}
)


def _status(finish_reason: str | None) -> tuple[str, dict[str, Any] | None]:
    """The response's status and ``incomplete_details`` for an answer's finish reason, read
    in OpenAI's words (:func:`~llmguard_sdk.models.openai_finish_reason`: a server's own
    ``model_length`` is a cut, ``length``).

    An unfinished answer is ``incomplete``, with the reason openai-python's
    ``IncompleteDetails.reason`` has for it: ``max_output_tokens`` where a token limit cut it
    (``length``, ``max_tokens``, the context window), ``content_filter`` for a refusal or a
    blocked answer, and ``null`` (the type allows no reason) for one broken off by an abort
    or an error (vLLM's ``abort``, ``error``, DeepSeek's ``insufficient_system_resource``) or
    paused (Claude's ``pause_turn``, a long server-tool turn: the type has no word for it,
    and a client validating the body refused one): no limit cut it, and ``failed`` would
    make the text it delivered an error."""
    finish = openai_finish_reason(finish_reason)
    if finish == "length":
        cut = (finish_reason or "").lower() in _CUT_BY_A_LIMIT
        return "incomplete", {"reason": "max_output_tokens" if cut else None}
    if finish == "content_filter":
        return "incomplete", {"reason": "content_filter"}
    return "completed", None


def _function_item(call: Mapping[str, Any], index: int) -> dict[str, Any]:
    function = call_function(call)
    call_id = call.get("id") or f"call_{index}"
    return {
        "type": "function_call",
        "id": f"fc_{call_id}",
        "call_id": call_id,
        "name": function.get("name") or "",
        "arguments": function.get("arguments") or "",
        "status": "completed",
    }


def _message_item(item_id: str, content: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The assistant's message: completed with ``content``, in progress without it."""
    return {
        "type": "message",
        "id": item_id,
        "status": "in_progress" if content is None else "completed",
        "role": "assistant",
        "content": content or [],
    }


def _reasoning_item(item_id: str, text: str | None = None) -> dict[str, Any]:
    """The route's reasoning (its own, as open models' servers send it; see
    :func:`~llmguard_sdk.providers._chat_content.reasoning`) as a ``reasoning`` item whose
    content is one ``reasoning_text``: completed with ``text``, in progress and empty without."""
    content = [] if text is None else [{"type": "reasoning_text", "text": text}]
    status = "in_progress" if text is None else "completed"
    return {"type": "reasoning", "id": item_id, "summary": [], "content": content, "status": status}


def _content_part(
    kind: str, text: str = "", logprobs: list[Any] | None = None, notes: list[Any] | None = None
) -> dict[str, Any]:
    if kind == "refusal":
        return {"type": "refusal", "refusal": text}
    return {
        "type": "output_text",
        "text": text,
        "annotations": notes or [],
        "logprobs": logprobs or [],
    }


def text_annotations(metadata: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The annotations a chat route's message (a delta) gave its text (web search's
    ``url_citation`` ...), kept in ``metadata``'s :data:`MESSAGE_FIELDS`, in Responses' shape:
    chat's nest an annotation's fields under its type's name, Responses' have them beside
    its ``type``; what is no annotation is left out."""
    given = kept_fields(metadata, MESSAGE_FIELDS).get("annotations")
    found = []
    for note in given if isinstance(given, list) else ():
        kind = note.get("type") if isinstance(note, Mapping) else None
        if not isinstance(kind, str):
            continue
        inner = note.get(kind)
        flat = {k: v for k, v in note.items() if k != kind}
        found.append({**flat, **inner} if isinstance(inner, Mapping) else dict(note))
    return found


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _token(token: object) -> dict[str, Any] | None:
    """One token's logprob in Responses' shape: ``bytes`` a list of ints (the token's UTF-8
    where chat's answer said ``null``)."""
    if not isinstance(token, Mapping) or not isinstance(token.get("token"), str):
        return None
    if not _number(token.get("logprob")):
        return None
    given = token.get("bytes")
    ints = isinstance(given, list) and all(isinstance(b, int) for b in given)
    data = given if ints else list(token["token"].encode("utf-8"))
    return {"token": token["token"], "logprob": token["logprob"], "bytes": data}


def responses_logprobs(tokens: object) -> list[dict[str, Any]]:
    """A text's tokens' logprobs (chat completions' ``logprobs.content``, or Responses' own)
    in Responses' shape, each with its ``top_logprobs``; what is no token is left out."""
    found = []
    for token in tokens if isinstance(tokens, list) else ():
        entry = _token(token)
        if entry is None:
            continue
        top = token.get("top_logprobs") if isinstance(token, Mapping) else None
        alternatives = [_token(t) for t in (top if isinstance(top, list) else ())]
        entry["top_logprobs"] = [t for t in alternatives if t is not None]
        found.append(entry)
    return found


# The request's parameters a Response echoes, as OpenAI's does, with what OpenAI's says when
# the request did not give them (the others: null).
_ECHO_DEFAULTS: dict[str, Any] = {
    "instructions": None,
    "metadata": {},
    "parallel_tool_calls": True,
    "temperature": None,
    "top_p": None,
    "tool_choice": "auto",
    "tools": [],
    "max_output_tokens": None,
    "max_tool_calls": None,
    "previous_response_id": None,
    "prompt_cache_key": None,
    "reasoning": None,
    "safety_identifier": None,
    "top_logprobs": None,
    "truncation": "disabled",
    "user": None,
}


def echoed(request: Mapping[str, Any], *, store: bool = False) -> dict[str, Any]:
    """The parameters of the request (a Responses request's body) that its ``response``
    object echoes: ``instructions``, ``metadata``, ``tools``, ``tool_choice``,
    ``temperature``, ``text``, ``reasoning`` ... as asked, OpenAI's defaults for the others;
    ``text`` always has its ``format``, and ``store`` is ``store``: whether the response was
    stored (the Guard stores none and answers no ``previous_response_id``; a Responses route
    stores one as it was sent ``store``, see :meth:`Answer.add_metadata`)."""
    fields = {
        key: default if request.get(key) is None else request[key]
        for key, default in _ECHO_DEFAULTS.items()
    }
    text = request.get("text")
    fields["text"] = {"format": {"type": "text"}, **(text if isinstance(text, dict) else {})}
    fields["store"] = store
    return fields


class Answer:
    """What a ``response`` object holds, gathered from a whole answer or from its chunks."""

    def __init__(
        self,
        response_id: str,
        model: str,
        created: int | None = None,
        request: Mapping[str, Any] | None = None,
        *,
        store: bool = False,
    ) -> None:
        self.id = response_id
        self.model = model
        self.created = int(time.time()) if created is None else created
        self.echo = echoed(request or {}, store=store)  # the request's parameters it says
        self.text = ""
        self.tool_calls: list[dict[str, Any]] = []
        self.usage: Usage | None = None
        self.finish_reason: str | None = None
        self.refusal = ""  # OpenAI's refusal, in place of the text
        self.reasoning = ""  # the route's reasoning text
        # a Responses route's own reasoning items, by id (the last of each), in their order
        self.route_reasoning: dict[str, dict[str, Any]] = {}
        self.logprobs: list[Any] = []  # the text's tokens' logprobs, asked for with logprobs=True
        self.annotations: list[dict[str, Any]] = []  # the text's (a chat route's url citations)
        self.service_tier: str | None = None  # the route's, where it said one
        self.parts: list[str] = []  # the content parts' types, in the order a stream opened them
        # the output items in the order a stream opened them ("reasoning", "message", "call N":
        # the answer's N-th call); a whole answer's: reasoning, message, calls
        self.order: list[str] = []
        self.searched: list[dict[str, Any]] = []  # web_search_call items, first ("search N")

    def add_metadata(self, metadata: Mapping[str, Any]) -> None:
        """Take in what a response's (or a chunk's) ``metadata`` adds: its ``refusal`` (or the
        chunk's piece of it), its ``reasoning`` (or its piece), a Responses route's
        ``reasoning_items`` and ``store`` (whether it stored the response), its
        ``logprobs``' ``content`` (the text's tokens, in Responses' shape), a chat route's
        annotations (:func:`text_annotations`) and ``service_tier``."""
        self.take_store(metadata)
        self.annotations += text_annotations(metadata)
        tier = kept_fields(metadata, COMPLETION_FIELDS).get("service_tier")
        if isinstance(tier, str) and tier:
            self.service_tier = tier
        for item in route_items(metadata):
            self.route_reasoning[item["id"]] = item
        refusal = metadata.get("refusal")
        if isinstance(refusal, str):
            self.refusal += refusal
        reasoning = metadata.get("reasoning")
        if isinstance(reasoning, str):
            self.reasoning += reasoning
        logprobs = metadata.get("logprobs")
        if isinstance(logprobs, Mapping) and isinstance(logprobs.get("content"), list):
            self.logprobs += responses_logprobs(logprobs["content"])

    def take_head(self, metadata: Mapping[str, Any]) -> None:
        """Take what the first of ``metadata`` (a whole answer's, a stream's first chunk's)
        says of the response before it is given: its ``store`` (:meth:`take_store`) and a
        chat route's ``created``, as ``created_at`` (else the Guard's clock stays)."""
        self.take_store(metadata)
        self.created = created_of(kept_fields(metadata, COMPLETION_FIELDS), self.created)

    def take_store(self, metadata: Mapping[str, Any]) -> None:
        """Echo the ``store`` a Responses route said in ``metadata`` (it stored the response,
        or not), the answering route's word."""
        store = metadata.get("store")
        if isinstance(store, bool):
            self.echo["store"] = store

    def part(self, kind: str) -> dict[str, Any]:
        """The content part of ``kind`` (``output_text`` or ``refusal``) as it stands."""
        text = self.refusal if kind == "refusal" else self.text
        return _content_part(kind, text, self.logprobs, self.annotations)

    def content(self) -> list[dict[str, Any]]:
        """The message's content parts: its text's and its refusal's (the text's alone when
        there is neither)."""
        kinds = list(self.parts)
        if self.refusal and "refusal" not in kinds:
            kinds.append("refusal")
        if "output_text" not in kinds and (self.text or not kinds):
            kinds.insert(0, "output_text")
        return [self.part(kind) for kind in kinds]

    def item(self, key: str) -> dict[str, Any]:
        """The completed output item ``key`` (an entry of :attr:`order`)."""
        if key == "reasoning":
            return _reasoning_item(guard_reasoning_id(self.id), self.reasoning)
        if key.startswith("reasoning "):  # a Responses route's own, as it sent it
            return unfinished(self.route_reasoning[key.removeprefix("reasoning ")])
        if key == "message":
            return _message_item(f"msg_{self.id}", self.content())
        if key.startswith("search "):
            return self.searched[int(key.removeprefix("search "))]
        place = int(key.removeprefix("call "))
        return _function_item(self.tool_calls[place], place)

    def output(self) -> list[dict[str, Any]]:
        """The output items, in the order a stream opened them (a whole answer's: its
        reasoning, the route's own items or the Guard's item of its text, its message, its
        calls)."""
        order = list(self.order)
        if not order:  # (its searches first, as OpenAI gives them)
            order = [f"search {place}" for place in range(len(self.searched))]
            order += [f"reasoning {item_id}" for item_id in self.route_reasoning]
            order = order or (["reasoning"] if self.reasoning else [])
            if self.text or self.refusal or not self.tool_calls:
                order.append("message")
            order += [f"call {place}" for place in range(len(self.tool_calls))]
        return [self.item(key) for key in order]

    def body(self, status: str | None = None) -> dict[str, Any]:
        """The ``response`` object (``status`` overrides the one the finish reason gives)."""
        final, incomplete = _status(self.finish_reason)
        in_progress = status == "in_progress"
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created,
            "status": status or final,
            "model": self.model,
            "output": [] if in_progress else self.output(),
            "usage": None if in_progress else usage_object(self.usage),
            "incomplete_details": None if in_progress else incomplete,
            "error": None,
            **self.echo,
            **({"service_tier": self.service_tier} if self.service_tier else {}),
        }


class EventWriter:
    """A stream's chunks as Responses events (``response.created`` ... ``response.completed``),
    numbered with ``sequence_number`` as OpenAI numbers them; each output item (the route's
    reasoning, the message, each call) has the next ``output_index`` when it first comes."""

    def __init__(self, answer: Answer) -> None:
        self._answer = answer
        self._seq = 0
        # a streamed call's index (as the route numbers it: a gateway in front of Claude counts
        # content blocks, so the first call after text is 1) -> its place among the answer's
        # calls (in the order they first came); each place's output item
        self._place: dict[int, int] = {}
        self._calls: dict[int, dict[str, Any]] = {}
        self._slots = CallSlots()  # (a piece's call, as the Guard's assembly keys it)
        self._items: dict[str, ItemEvents] = {}  # a route's own reasoning items' events

    @property
    def answer(self) -> Answer:
        """The answer gathered so far."""
        return self._answer

    def _event(self, kind: str, **data: Any) -> bytes:
        payload = {"type": kind, "sequence_number": self._seq, **data}
        self._seq += 1
        return f"event: {kind}\ndata: ".encode() + json.dumps(payload).encode() + b"\n\n"

    def _add(self, key: str, item: dict[str, Any]) -> bytes:
        """``response.output_item.added`` for the output item ``key``, at the next index."""
        self._answer.order.append(key)
        return self._event("response.output_item.added", output_index=self._at(key), item=item)

    def _at(self, key: str) -> int:
        return self._answer.order.index(key)

    def start(self) -> bytes:
        """``response.created`` and ``response.in_progress``."""
        body = self._answer.body(status="in_progress")
        return self._event("response.created", response=body) + self._event(
            "response.in_progress", response=body
        )

    def chunk(self, chunk: StreamChunk) -> bytes:
        """The events of one chunk: its reasoning, its text (with its logprobs), its piece of
        a refusal, its tool calls' pieces."""
        answer, out = self._answer, b""
        answer.model = chunk.model or answer.model
        noted = len(answer.annotations)
        answer.add_metadata(chunk.metadata)
        reasoning = chunk.metadata.get("reasoning")
        items = route_items(chunk.metadata)
        for item in items:  # (the item holds the piece of its text the chunk brings)
            out += self._route_item(item)
        if isinstance(reasoning, str) and reasoning and not items:
            out += self._reasoned(reasoning)
        logprobs = chunk.metadata.get("logprobs")
        tokens = logprobs.get("content") if isinstance(logprobs, Mapping) else None
        if chunk.text:
            out += self._open("output_text")
            answer.text += chunk.text
            out += self._part_event(
                "response.output_text.delta",
                "output_text",
                delta=chunk.text,
                logprobs=responses_logprobs(tokens),
            )
        out += self._noted(noted)
        refusal = chunk.metadata.get("refusal")
        if isinstance(refusal, str) and refusal:
            out += self._open("refusal")
            out += self._part_event("response.refusal.delta", "refusal", delta=refusal)
        for position, call in enumerate(chunk.tool_calls or ()):
            out += self._call_delta(call, self._slots.key(call, position))
        answer.usage = chunk.usage or answer.usage
        answer.finish_reason = chunk.finish_reason or answer.finish_reason
        return out

    def _noted(self, since: int) -> bytes:
        """``response.output_text.annotation.added`` for each annotation of the text from the
        ``since``-th on (the chunk's)."""
        out, notes = b"", self._answer.annotations
        for index in range(since, len(notes)):
            out += self._open("output_text")
            out += self._part_event(
                "response.output_text.annotation.added",
                "output_text",
                annotation_index=index,
                annotation=notes[index],
            )
        return out

    def _route_item(self, item: dict[str, Any]) -> bytes:
        """One of a Responses route's reasoning items as it stands: opened at its first
        (its own id), the rest of its text as its parts' deltas."""
        key, out = f"reasoning {item['id']}", b""
        if key not in self._answer.order:
            out += self._add(key, opening(item))
            where = {"item_id": item["id"], "output_index": self._at(key)}
            self._items[key] = ItemEvents(self._event, where)
        return out + self._items[key].grow(item)

    def _reasoned(self, delta: str) -> bytes:
        """A piece of the route's reasoning text: the Guard's reasoning item (opened at its
        first) gets it as its ``reasoning_text``'s delta."""
        item_id, out = guard_reasoning_id(self._answer.id), b""
        where = {"item_id": item_id, "content_index": 0}
        if "reasoning" not in self._answer.order:
            out += self._add("reasoning", _reasoning_item(item_id))
            part = {"type": "reasoning_text", "text": ""}
            at = self._at("reasoning")
            out += self._event("response.content_part.added", output_index=at, part=part, **where)
        at = self._at("reasoning")
        return out + self._event(
            "response.reasoning_text.delta", output_index=at, delta=delta, **where
        )

    def _part_event(self, kind: str, of: str, **data: Any) -> bytes:
        """An event of the message's content part of type ``of``."""
        return self._event(
            kind,
            item_id=f"msg_{self._answer.id}",
            output_index=self._at("message"),
            content_index=self._answer.parts.index(of),
            **data,
        )

    def _open(self, part: str) -> bytes:
        """The events that open the message (at its first) and its content part ``part``."""
        answer, out = self._answer, b""
        if "message" not in answer.order:
            out += self._add("message", _message_item(f"msg_{answer.id}"))
        if part in answer.parts:
            return out
        answer.parts.append(part)
        return out + self._part_event("response.content_part.added", part, part=_content_part(part))

    def _call_delta(self, call: Mapping[str, Any], index: int) -> bytes:
        function = call_function(call)
        place = self._place.setdefault(index, len(self._place))
        out = b""
        if place not in self._calls:
            item = _function_item({"id": call.get("id"), "function": function}, place)
            item.update(arguments="", status="in_progress")
            self._calls[place] = item
            self._answer.tool_calls.append(
                {
                    "id": item["call_id"],
                    "type": "function",
                    "function": {"name": item["name"], "arguments": ""},
                }
            )
            out = self._add(f"call {place}", item)
        delta = function.get("arguments") or ""
        if not delta:
            return out
        self._calls[place]["arguments"] += delta
        self._answer.tool_calls[place]["function"]["arguments"] += delta
        return out + self._event(
            "response.function_call_arguments.delta",
            item_id=self._calls[place]["id"],
            output_index=self._at(f"call {place}"),
            delta=delta,
        )

    def end(self) -> bytes:
        """The closing events of each output item, in order, then ``response.completed``
        (``response.incomplete`` when cut)."""
        answer = self._answer
        out = b"" if "message" in answer.order or self._calls else self._open("output_text")
        for key in answer.order:
            if key == "reasoning":
                out += self._reasoning_done()
            elif key in self._items:
                item, at = answer.item(key), self._at(key)
                out += self._items[key].end(item)
                out += self._event("response.output_item.done", output_index=at, item=item)
            elif key == "message":
                out += self._message_done()
            elif key.startswith("search "):
                continue  # (done as it came)
            else:
                out += self._call_done(int(key.removeprefix("call ")))
        body = answer.body()
        kind = "response.incomplete" if body["status"] == "incomplete" else "response.completed"
        return out + self._event(kind, response=body)

    def searched(self, item: dict[str, Any], without_id: str | None = None) -> bytes:
        """A web search the route ran (a completed ``web_search_call`` item): its item's
        ``response.output_item.added`` and ``.done`` events (``without_id``: the one of them,
        ``"added"`` or ``"done"``, whose item leaves its ``id`` out)."""
        key = f"search {len(self._answer.searched)}"
        self._answer.searched.append(item)
        bare = {name: value for name, value in item.items() if name != "id"}
        added = bare if without_id == "added" else item
        done = bare if without_id == "done" else item
        out = self._add(key, {**added, "status": "in_progress"})
        return out + self._event("response.output_item.done", output_index=self._at(key), item=done)

    def _reasoning_done(self) -> bytes:
        answer = self._answer
        at, text = self._at("reasoning"), answer.reasoning
        item_id = guard_reasoning_id(answer.id)
        where = {"item_id": item_id, "output_index": at, "content_index": 0}
        part = {"type": "reasoning_text", "text": text}
        out = self._event("response.reasoning_text.done", text=text, **where)
        out += self._event("response.content_part.done", part=part, **where)
        item = answer.item("reasoning")
        return out + self._event("response.output_item.done", output_index=at, item=item)

    def _call_done(self, place: int) -> bytes:
        item, at = self._calls[place], self._at(f"call {place}")
        out = self._event(
            "response.function_call_arguments.done",
            item_id=item["id"],
            output_index=at,
            arguments=item["arguments"],
        )
        item["status"] = "completed"
        return out + self._event("response.output_item.done", output_index=at, item=item)

    def _message_done(self) -> bytes:
        """The events that close the message and each of its content parts (a text part,
        empty, when nothing opened one)."""
        answer = self._answer
        out = b"" if answer.parts else self._open("output_text")
        for kind in answer.parts:
            part = answer.part(kind)
            if kind == "refusal":
                out += self._part_event("response.refusal.done", kind, refusal=answer.refusal)
            else:
                done = {"text": answer.text, "logprobs": answer.logprobs}
                out += self._part_event("response.output_text.done", kind, **done)
            out += self._part_event("response.content_part.done", kind, part=part)
        item = answer.item("message")
        return out + self._event(
            "response.output_item.done", output_index=self._at("message"), item=item
        )

    def failure(self, message: str, code: str | None) -> bytes:
        """An ``error`` event: the stream failed after it started."""
        return self._event("error", message=message, code=code, param=None)
