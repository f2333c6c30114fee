"""OpenAI's Responses API (``/v1/responses``) as a server speaks it: a request read into chat
messages and parameters, an answer written as a ``response`` object or its stream events.

Used by the Guard's transport (an SDK's ``responses.create`` answered by any route) and by the
fake provider; :mod:`.responses` is the client side (a route that calls ``/v1/responses``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

from ..errors import RequestValidationError
from ..models import StreamChunk, Usage

# Parameters with the same name and meaning in chat completions.
_SAME = ("temperature", "top_p", "metadata", "user", "parallel_tool_calls", "seed")
# Responses-only parameters the Guard serves without (the answer is not stored server-side).
_DROPPED = frozenset({"store", "include", "truncation", "stream_options", "background"})
_ROLES = frozenset({"system", "developer", "user", "assistant"})
_TEXT_PARTS = frozenset({"input_text", "output_text", "text"})


def _bad(message: str) -> RequestValidationError:
    return RequestValidationError(f"responses request: {message}")


def _part(part: object) -> dict[str, Any]:
    if not isinstance(part, dict):
        raise _bad("a content part must be an object")
    kind = part.get("type")
    if kind in _TEXT_PARTS:
        return {"type": "text", "text": part.get("text", "")}
    if kind == "input_image":
        return {"type": "image_url", "image_url": {"url": part.get("image_url", "")}}
    raise _bad(f"content part type {kind!r} is not supported")


def _message(item: dict[str, Any]) -> dict[str, Any]:
    role = item.get("role")
    if role not in _ROLES:
        raise _bad(f"role {role!r} is not supported")
    content = item.get("content")
    if isinstance(content, list):
        parts = [_part(p) for p in content]
        if all(p["type"] == "text" for p in parts):
            return {"role": role, "content": "".join(str(p["text"]) for p in parts)}
        return {"role": role, "content": parts}
    if not isinstance(content, str):
        raise _bad("message content must be a string or a list of parts")
    return {"role": role, "content": content}


def _tool_call(item: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": item.get("call_id") or item.get("id"),
        "type": "function",
        "function": {"name": item.get("name"), "arguments": item.get("arguments") or ""},
    }


def chat_messages(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The request's ``instructions`` and ``input`` as chat messages."""
    messages: list[dict[str, Any]] = []
    instructions = body.get("instructions")
    if isinstance(instructions, str) and instructions:
        messages.append({"role": "system", "content": instructions})
    items = body.get("input")
    if isinstance(items, str):
        return [*messages, {"role": "user", "content": items}]
    if not isinstance(items, list):
        raise _bad("input must be a string or a list of items")
    for item in items:
        if not isinstance(item, dict):
            raise _bad("each input item must be an object")
        kind = item.get("type", "message")
        if kind == "message":
            messages.append(_message(item))
        elif kind == "function_call":
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant" and last.get("tool_calls"):
                last["tool_calls"].append(_tool_call(item))
            else:
                messages.append({"role": "assistant", "tool_calls": [_tool_call(item)]})
        elif kind == "function_call_output":
            output = item.get("output")
            text = output if isinstance(output, str) else json.dumps(output)
            messages.append({"role": "tool", "tool_call_id": item.get("call_id"), "content": text})
        elif kind != "reasoning":  # reasoning items only replay a model's own thoughts
            raise _bad(f"input item type {kind!r} is not supported")
    return messages


def _chat_tool(tool: object) -> dict[str, Any]:
    if not isinstance(tool, dict) or tool.get("type") != "function":
        kind = tool.get("type") if isinstance(tool, dict) else tool
        raise _bad(f"only function tools are supported, not {kind!r}")
    function = {k: tool[k] for k in ("name", "description", "parameters", "strict") if k in tool}
    return {"type": "function", "function": function}


def _tool_choice(choice: object) -> object:
    if isinstance(choice, dict) and choice.get("type") == "function":
        return {"type": "function", "function": {"name": choice.get("name")}}
    return choice


def _response_format(text: object) -> dict[str, Any] | None:
    fmt = text.get("format") if isinstance(text, dict) else None
    if not isinstance(fmt, dict) or fmt.get("type") in (None, "text"):
        return None
    if fmt.get("type") == "json_schema":
        schema = {k: fmt[k] for k in ("name", "schema", "strict", "description") if k in fmt}
        return {"type": "json_schema", "json_schema": schema}
    return {"type": str(fmt.get("type"))}


def chat_arguments(body: Mapping[str, Any]) -> dict[str, Any]:
    """A Responses request as chat-completions ``create()`` keywords."""
    if body.get("previous_response_id"):
        raise _bad("previous_response_id needs state the Guard does not keep: send the input")
    if body.get("background"):
        raise _bad("background responses are not supported")
    known = {
        "model",
        "input",
        "instructions",
        "max_output_tokens",
        "tools",
        "tool_choice",
        "text",
        "reasoning",
        "stream",
        *_SAME,
        *_DROPPED,
    }
    params: dict[str, Any] = {k: body[k] for k in _SAME if body.get(k) is not None}
    params["messages"] = chat_messages(body)
    params["model"] = body.get("model")
    if body.get("max_output_tokens") is not None:
        params["max_completion_tokens"] = body["max_output_tokens"]
    if body.get("tools"):
        if not isinstance(body["tools"], list):
            raise _bad("tools must be a list")
        params["tools"] = [_chat_tool(t) for t in body["tools"]]
    if body.get("tool_choice") is not None:
        params["tool_choice"] = _tool_choice(body["tool_choice"])
    response_format = _response_format(body.get("text"))
    if response_format is not None:
        params["response_format"] = response_format
    reasoning = body.get("reasoning")
    if isinstance(reasoning, dict) and reasoning.get("effort"):
        params["reasoning_effort"] = reasoning["effort"]
    params.update({k: v for k, v in body.items() if k not in known})
    return params


# -- answers -------------------------------------------------------------------------------


def usage_object(usage: Usage | None) -> dict[str, Any] | None:
    """Responses usage: cached input and reasoning output tokens in their details."""
    if usage is None:
        return None
    return {
        "input_tokens": usage.input_tokens,
        "input_tokens_details": {"cached_tokens": usage.cached_input_tokens},
        "output_tokens": usage.output_tokens,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
        "total_tokens": usage.total_tokens,
    }


def _status(finish_reason: str | None) -> tuple[str, dict[str, Any] | None]:
    if finish_reason == "length":
        return "incomplete", {"reason": "max_output_tokens"}
    if finish_reason == "content_filter":
        return "incomplete", {"reason": "content_filter"}
    return "completed", None


def _function_item(call: Mapping[str, Any], index: int) -> dict[str, Any]:
    function = call.get("function") or {}
    call_id = call.get("id") or f"call_{index}"
    return {
        "type": "function_call",
        "id": f"fc_{call_id}",
        "call_id": call_id,
        "name": function.get("name") or "",
        "arguments": function.get("arguments") or "",
        "status": "completed",
    }


def _message_item(item_id: str, text: str, status: str = "completed") -> dict[str, Any]:
    content = [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]
    return {
        "type": "message",
        "id": item_id,
        "status": status,
        "role": "assistant",
        "content": content if status == "completed" else [],
    }


class Answer:
    """What a ``response`` object holds, gathered from a whole answer or from its chunks."""

    def __init__(self, response_id: str, model: str, created: int | None = None) -> None:
        self.id = response_id
        self.model = model
        self.created = int(time.time()) if created is None else created
        self.text = ""
        self.tool_calls: list[dict[str, Any]] = []
        self.usage: Usage | None = None
        self.finish_reason: str | None = None

    def body(self, status: str | None = None) -> dict[str, Any]:
        """The ``response`` object (``status`` overrides the one the finish reason gives)."""
        final, incomplete = _status(self.finish_reason)
        output: list[dict[str, Any]] = []
        if self.text or not self.tool_calls:
            output.append(_message_item(f"msg_{self.id}", self.text))
        output += [_function_item(c, i) for i, c in enumerate(self.tool_calls)]
        in_progress = status == "in_progress"
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created,
            "status": status or final,
            "model": self.model,
            "output": [] if in_progress else output,
            "usage": None if in_progress else usage_object(self.usage),
            "incomplete_details": None if in_progress else incomplete,
            "error": None,
            "instructions": None,
            "metadata": {},
            "parallel_tool_calls": True,
            "temperature": None,
            "top_p": None,
            "tool_choice": "auto",
            "tools": [],
        }


class EventWriter:
    """A stream's chunks as Responses events (``response.created`` ... ``response.completed``),
    numbered with ``sequence_number`` as OpenAI numbers them."""

    def __init__(self, answer: Answer) -> None:
        self._answer = answer
        self._seq = 0
        self._text_open = False
        self._calls: dict[int, dict[str, Any]] = {}  # tool call index -> its output item
        self._at: dict[int, int] = {}  # tool call index -> its output index

    @property
    def answer(self) -> Answer:
        """The answer gathered so far."""
        return self._answer

    def _event(self, kind: str, **data: Any) -> bytes:
        payload = {"type": kind, "sequence_number": self._seq, **data}
        self._seq += 1
        return f"event: {kind}\ndata: ".encode() + json.dumps(payload).encode() + b"\n\n"

    def start(self) -> bytes:
        """``response.created`` and ``response.in_progress``."""
        body = self._answer.body(status="in_progress")
        return self._event("response.created", response=body) + self._event(
            "response.in_progress", response=body
        )

    def chunk(self, chunk: StreamChunk) -> bytes:
        """The events of one chunk."""
        answer, out = self._answer, b""
        answer.model = chunk.model or answer.model
        if chunk.text:
            out += self._open_text()
            answer.text += chunk.text
            out += self._event(
                "response.output_text.delta",
                item_id=f"msg_{answer.id}",
                output_index=0,
                content_index=0,
                delta=chunk.text,
                logprobs=[],
            )
        for call in chunk.tool_calls or ():
            out += self._call_delta(call)
        answer.usage = chunk.usage or answer.usage
        answer.finish_reason = chunk.finish_reason or answer.finish_reason
        return out

    def _open_text(self) -> bytes:
        if self._text_open:
            return b""
        self._text_open = True
        item_id = f"msg_{self._answer.id}"
        part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        return self._event(
            "response.output_item.added",
            output_index=0,
            item=_message_item(item_id, "", "in_progress"),
        ) + self._event(
            "response.content_part.added",
            item_id=item_id,
            output_index=0,
            content_index=0,
            part=part,
        )

    def _call_delta(self, call: Mapping[str, Any]) -> bytes:
        index = int(call.get("index", 0))
        function = call.get("function") or {}
        output_index = self._at.setdefault(index, index + int(self._text_open))
        if index not in self._calls:
            item = _function_item({"id": call.get("id"), "function": function}, index)
            item.update(arguments="", status="in_progress")
            self._calls[index] = item
            self._answer.tool_calls.append(
                {
                    "id": item["call_id"],
                    "type": "function",
                    "function": {"name": item["name"], "arguments": ""},
                }
            )
            out = self._event("response.output_item.added", output_index=output_index, item=item)
        else:
            out = b""
        delta = function.get("arguments") or ""
        if not delta:
            return out
        self._calls[index]["arguments"] += delta
        self._answer.tool_calls[index]["function"]["arguments"] += delta
        return out + self._event(
            "response.function_call_arguments.delta",
            item_id=self._calls[index]["id"],
            output_index=output_index,
            delta=delta,
        )

    def end(self) -> bytes:
        """The closing events, ``response.completed`` (``response.incomplete`` when cut)."""
        answer, out = self._answer, b""
        item_id = f"msg_{answer.id}"
        if self._text_open or not self._calls:
            out += self._open_text()
            part = {"type": "output_text", "text": answer.text, "annotations": [], "logprobs": []}
            out += self._event(
                "response.output_text.done",
                item_id=item_id,
                output_index=0,
                content_index=0,
                text=answer.text,
                logprobs=[],
            )
            out += self._event(
                "response.content_part.done",
                item_id=item_id,
                output_index=0,
                content_index=0,
                part=part,
            )
            out += self._event(
                "response.output_item.done",
                output_index=0,
                item=_message_item(item_id, answer.text),
            )
        for index, item in self._calls.items():
            at = self._at[index]
            out += self._event(
                "response.function_call_arguments.done",
                item_id=item["id"],
                output_index=at,
                arguments=item["arguments"],
            )
            item["status"] = "completed"
            out += self._event("response.output_item.done", output_index=at, item=item)
        body = answer.body()
        kind = "response.incomplete" if body["status"] == "incomplete" else "response.completed"
        return out + self._event(kind, response=body)

    def failure(self, message: str, code: str | None) -> bytes:
        """An ``error`` event: the stream failed after it started."""
        return self._event("error", message=message, code=code, param=None)
