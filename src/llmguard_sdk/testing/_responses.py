"""The fake provider's OpenAI Responses API: ``POST /v1/responses``, plain and streamed.

Deterministic like the chat endpoint: the reply echoes the last user text (or the ``reply``
callback's answer, given the request as chat messages), input tokens count the same way (the
``instructions`` as a system message), ``prefix_cache=True`` reports
``input_tokens_details.cached_tokens``, ``max_output_tokens`` cuts the reply (status
``incomplete``; under 16 it is refused with OpenAI's 400, ``integer_below_min_value``); a
parameter the API does not have (chat's ``frequency_penalty``, ``n``, ``response_format`` ...)
is refused with OpenAI's 400 (``unknown_parameter``; ``unsupported_parameter`` where OpenAI says
where it moved); the
response echoes the request's parameters, as OpenAI's does. A request with ``reasoning.effort``
also spends reasoning tokens (2 for ``low``, 4 for ``medium``, 8 for ``high``) reported in
``output_tokens_details``. A request with a ``web_search`` (or ``web_search_preview``) tool is
answered after one completed ``web_search_call`` output item per such tool (OpenAI bills each
call; the usage does not count them), a ``file_search`` tool after a ``file_search_call``, a
``code_interpreter`` tool after a ``code_interpreter_call`` in a container. With tools and a
``tool_choice`` of ``"required"`` or one named function, the answer is a ``function_call`` of
that tool (the first one for ``"required"``) with arguments its schema takes (see
``_tool_args``). ``input_file`` parts are read (they count no tokens). Faults: delays apply as
usual; a failing fault answers its status
with OpenAI's error body, after its latency; hangs, resets, wrong content types, malformed JSON
(streamed: in the ``response.created`` event), missing fields (a response with no ``output``)
and cuts (``cut_stream_after``: that many text deltas, then half an event, or half a plain
answer) as for chat; ``omit_usage`` answers ``usage: null``; ``stream_error_after`` fails a
stream with an ``error`` event (its ``code`` the fault's ``error_code``, default
``"server_error"``) after that many text deltas (a plain request: the fault's ``status``, 500 by
default).
"""

from __future__ import annotations

import json
import math
from typing import Any

from ..errors import RequestValidationError
from ..models import StreamChunk, Usage
from ..providers._responses_input import chat_messages
from ..providers._responses_params import RESPONSES_PARAMETERS
from ..providers._responses_wire import Answer, EventWriter
from ..providers.responses import MIN_OUTPUT_TOKENS
from ._faults import Fault
from ._http import _BaseHandler
from ._tool_args import _forced_call, _within
from ._wire import (
    _HTML_BODY,
    _BadRequest,
    _dumps,
    _error_body,
    _error_type,
    _fault_headers,
    _openai_tokens,
    _request_id,
    _split_pieces,
)

RESPONSES_PATHS = frozenset({"/v1/responses", "/responses"})
# chat completions' parameters OpenAI's Responses API names otherwise, and its word for them
_MOVED = {
    "messages": "input",
    "response_format": "text.format",
    "max_completion_tokens": "max_output_tokens",
    "reasoning_effort": "reasoning.effort",
}
_REASONING = {"minimal": 1, "low": 2, "medium": 4, "high": 8}


def _files_as_text(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` with each ``input_file`` part (a PDF, say, as OpenAI reads it) an empty text
    part, which counts no tokens; one that names no file (by ``file_id``, ``file_data`` or
    ``file_url``) is refused, as OpenAI refuses it."""
    items = body.get("input")
    if not isinstance(items, list):
        return body
    out: list[Any] = []
    for item in items:
        content = item.get("content") if isinstance(item, dict) else None
        if isinstance(content, list):
            parts = [_file_as_text(part) for part in content]
            item = {**item, "content": parts}
        out.append(item)
    return {**body, "input": out}


def _file_as_text(part: Any) -> Any:
    if not isinstance(part, dict) or part.get("type") != "input_file":
        return part
    named = [key for key in ("file_id", "file_data", "file_url") if part.get(key)]
    if len(named) != 1:
        raise RequestValidationError(
            "an input_file part needs exactly one of 'file_id', 'file_data' or 'file_url'"
        )
    return {"type": "input_text", "text": ""}


def _check_parameters(body: dict[str, Any]) -> None:
    """Refuse a parameter the Responses API does not have, with OpenAI's 400: ``Unknown
    parameter`` (a chat parameter it names otherwise: ``Unsupported parameter``, saying where
    it moved), as for a member of ``stream_options`` other than ``include_obfuscation``
    (chat's ``include_usage``)."""
    for key in body:
        if key in _MOVED:
            raise _BadRequest(
                f"Unsupported parameter: {key!r}. In the Responses API, this parameter has "
                f"moved to {_MOVED[key]!r}. Try again with the new parameter.",
                None,
                "unsupported_parameter",
            )
        if key not in RESPONSES_PARAMETERS:
            raise _BadRequest(f"Unknown parameter: {key!r}.", key, "unknown_parameter")
    options = body.get("stream_options")
    for key in options if isinstance(options, dict) else ():
        if key != "include_obfuscation":
            name = f"stream_options.{key}"
            raise _BadRequest(f"Unknown parameter: {name!r}.", name, "unknown_parameter")


def _check_output_limit(body: dict[str, Any]) -> None:
    """Refuse a ``max_output_tokens`` under 16, as OpenAI does (chat completions take any
    ``max_tokens`` from 1)."""
    limit = body.get("max_output_tokens")
    if isinstance(limit, int) and not isinstance(limit, bool) and limit < MIN_OUTPUT_TOKENS:
        raise _BadRequest(
            "Invalid 'max_output_tokens': integer below minimum value. Expected a value >= "
            f"{MIN_OUTPUT_TOKENS}, but got {limit} instead.",
            "max_output_tokens",
            "integer_below_min_value",
        )


def _cuts_the_answer(fault: Fault, stream: bool) -> bool:
    """Whether ``fault`` breaks off an answer it lets begin: a stream's ``stream_error_after``
    (an ``error`` event) or a ``cut_stream_after`` that no earlier failure of the fault wins
    over (see :class:`Fault`'s precedence)."""
    if fault.hang or fault.reset:
        return False
    if stream and fault.stream_error_after is not None:
        return True
    earlier = fault.status, fault.wrong_content_type, fault.malformed_json, fault.missing_fields
    return fault.cut_stream_after is not None and not any(earlier)


class _ResponsesHandler(_BaseHandler):
    def _responses(self, raw: bytes, n: int) -> None:
        provider = self._srv.provider
        try:
            body = json.loads(raw)
            if not isinstance(body, dict):
                raise RequestValidationError("request body must be a JSON object")
            if provider.strict and not body.get("model"):
                raise _BadRequest(
                    "Missing required parameter: 'model'.", "model", "missing_required_parameter"
                )
            _check_parameters(body)
            _check_output_limit(body)
            messages = chat_messages(_files_as_text(body))
        except (ValueError, UnicodeDecodeError, _BadRequest) as exc:  # RequestValidationError too
            provider._note_chat(stream=False)
            provider._note_status(400)
            param, code = (exc.param, exc.code) if isinstance(exc, _BadRequest) else (None, None)
            err = _error_body(str(exc), "invalid_request_error", code, param)
            self._send(400, _dumps(err), "application/json", provider._common_headers(n))
            return
        stream = body.get("stream") is True
        provider._note_chat(stream=stream)
        fault = provider._choose_fault()
        chat = {"messages": messages, "tools": body.get("tools")}
        if fault is not None and _cuts_the_answer(fault, stream):
            provider._note_fault()
            self._answer_responses(body, chat, fault, n)
            return
        if fault is not None and not fault.is_delay_only:
            provider._note_fault()
            self._responses_fault(fault, stream, n)
            return
        self._answer_responses(body, chat, fault, n)

    def _responses_fault(self, fault: Fault, stream: bool, n: int) -> None:
        """A fault that answers no reply: a hang, a reset, an HTTP error (``status``; 500 for
        ``stream_error_after`` on a plain request) or a broken 200."""
        provider = self._srv.provider
        if self._silent_fault(fault):
            return
        headers = provider._common_headers(n) + _fault_headers(fault)
        if fault.status is not None or not (
            fault.wrong_content_type or fault.malformed_json or fault.missing_fields
        ):
            status = fault.status or 500
            provider._note_status(status)
            err = _error_body(fault.message, _error_type(status), fault.error_code)
            self._send(status, _dumps(err), "application/json", headers)
            return
        provider._note_status(200)
        if fault.wrong_content_type:
            self._send(200, _HTML_BODY, "text/html; charset=utf-8", headers)
            return
        head: dict[str, Any] = {"id": f"resp_fake_{n}", "object": "response"}
        data = b'{"id":"resp_fake_%d","object":"response","output":[' % n
        if fault.missing_fields:
            data = _dumps(head)
        if not stream:
            self._send(200, data, "application/json", headers)
            return
        if fault.missing_fields:
            data = _dumps({"type": "response.created", "sequence_number": 0, "response": head})
        self._start_stream(headers)
        self._event(b"event: response.created\ndata: " + data + b"\n\n", last=True)
        if not self._chunked:
            self.close_connection = True

    def _answer_responses(
        self, body: dict[str, Any], chat: dict[str, Any], fault: Fault | None, n: int
    ) -> None:
        provider = self._srv.provider
        call = _forced_call(body)
        pieces = [] if call is not None else _split_pieces(provider._make_reply(chat))
        limit = body.get("max_output_tokens")
        pieces, call, finish = _within(pieces, call, limit)
        tokens = _openai_tokens(chat)
        effort = (body.get("reasoning") or {}).get("effort")
        reasoning = _REASONING.get(effort, 4) if effort else 0
        model = body.get("model") or provider._model
        outputs = len(pieces) if call is None else len(call.fragments)
        retry_after, rate_headers = provider._admit(len(tokens) + (limit or outputs))
        headers = [("x-request-id", _request_id(n)), *rate_headers, *_fault_headers(fault)]
        if not self._pause(fault.latency if fault else 0.0):
            return
        if retry_after is not None:
            provider._note_rate_limited()
            provider._note_status(429)
            seconds = max(1, math.ceil(retry_after))
            headers.append(("Retry-After", str(seconds)))
            headers.append(("retry-after-ms", str(math.ceil(retry_after * 1000))))
            said = f"Rate limit reached for {model} on the fake provider; retry after {seconds} s"
            err = _error_body(said, "rate_limit_error", "rate_limit_exceeded")
            self._send(429, _dumps(err), "application/json", headers)
            return
        cached = provider._openai_cached(tokens) if provider.prefix_cache else 0
        usage = Usage(
            input_tokens=len(tokens),
            output_tokens=outputs + reasoning,
            cached_input_tokens=cached,
            reasoning_tokens=reasoning,
        )
        chunks = [StreamChunk(text=p) for p in pieces]
        if call is not None:  # (its id and name, then a function_call_arguments.delta a fragment)
            chunks = [StreamChunk(tool_calls=[item]) for item in call.chat_deltas()]
        reported = None if fault is not None and fault.omit_usage else usage
        chunks.append(StreamChunk(finish_reason=finish, usage=reported))
        stored = body.get("store") is not False  # (OpenAI stores unless told not to)
        writer = EventWriter(Answer(f"resp_fake_{n}", str(model), request=body, store=stored))
        provider._note_status(200)
        broken = fault is not None and not fault.is_delay_only  # (a cut, an error in the stream)
        if not broken:
            provider._note_success(len(tokens), usage.output_tokens)
        searched = _tool_items(body, n)
        self._write_answer(body.get("stream") is True, writer, chunks, headers, fault, searched)

    def _write_answer(
        self,
        stream: bool,
        writer: EventWriter,
        chunks: list[StreamChunk],
        headers: list[tuple[str, str]],
        fault: Fault | None,
        searched: list[dict[str, Any]] | None = None,
    ) -> None:
        """Send the answer ``chunks`` make (after the ``searched`` output items), plain or as
        events; a fault's ``stream_error_after``
        ends the stream with an ``error`` event, its ``cut_stream_after`` cuts it (or a plain
        answer's body) mid-way and closes the connection."""
        if not stream:
            for item in searched or ():
                writer.searched(item)
            for chunk in chunks:
                writer.chunk(chunk)
            writer.end()
            answer = _dumps(writer.answer.body())
            if fault is not None and fault.cut_stream_after is not None:
                half = answer[: len(answer) // 2]
                self._send(200, half, "application/json", headers, length=len(answer))
                self.close_connection = True
                return
            self._send(200, answer, "application/json", headers)
            return
        cuts = (fault.stream_error_after, fault.cut_stream_after) if fault else (None, None)
        cut = next((c for c in cuts if c is not None), None)
        self._start_stream(headers)
        self._event(writer.start())
        for item in searched or ():
            self._event(writer.searched(item, fault.omit_item_id if fault else None))
        for i, chunk in enumerate(chunks):
            if fault is not None and cut is not None and i >= min(cut, len(chunks) - 1):
                if fault.stream_error_after is None:
                    self._event(b'event: response.output_text.delta\ndata: {"type":"response.ou')
                    self.close_connection = True
                    return
                failure = writer.failure(fault.message, fault.error_code or "server_error")
                self._event(failure, last=True)
                return
            delay = (fault.first_token_delay if i == 0 else fault.inter_token_delay) if fault else 0
            if not self._pause(delay):
                return
            events = writer.chunk(chunk)
            if events:  # an empty piece would end a chunked body
                self._event(events)
        self._event(writer.end(), last=True)
        if not self._chunked:
            self.close_connection = True


def _tool_items(body: dict[str, Any], n: int) -> list[dict[str, Any]]:
    """One completed output item per server-side tool of the request, as OpenAI gives them:
    a ``web_search_call`` per web search tool, a ``file_search_call`` per ``file_search``
    tool, a ``code_interpreter_call`` per ``code_interpreter`` tool (in its ``container``
    where that is an id, else in a new one of its own)."""
    tools = body.get("tools")
    items: list[dict[str, Any]] = []
    for place, tool in enumerate(tools if isinstance(tools, list) else ()):
        kind = str(tool.get("type", "")) if isinstance(tool, dict) else ""
        item: dict[str, Any]
        if kind.startswith("web_search"):
            item = {"type": "web_search_call", "id": f"ws_fake_{n}_{place}"}
            item["action"] = {"type": "search", "query": "fake search"}
        elif kind == "file_search":
            item = {"type": "file_search_call", "id": f"fs_fake_{n}_{place}"}
            item |= {"queries": ["fake search"], "results": None}
        elif kind == "code_interpreter":
            given = tool.get("container")
            container = given if isinstance(given, str) else f"cntr_fake_{n}_{place}"
            item = {"type": "code_interpreter_call", "id": f"ci_fake_{n}_{place}"}
            item |= {"code": "print(1)", "container_id": container, "outputs": None}
        else:
            continue
        items.append({**item, "status": "completed"})
    return items
