"""The fake provider's Anthropic-style Messages API (plain and streamed, normal and faulty)."""

from __future__ import annotations

import json
import math
from typing import Any

from ._faults import Fault
from ._http import _BaseHandler
from ._tool_args import _Call, _forced_call, _within
from ._wire import (
    _HTML_BODY,
    _STOP_REASONS,
    _TEXT_BLOCK,
    _anthropic_error,
    _anthropic_tokens,
    _dumps,
    _fault_headers,
    _messages_problem,
    _request_id,
    _split_pieces,
    _sse,
)


class _MessagesHandler(_BaseHandler):
    def _messages(self, raw: bytes, n: int) -> None:
        provider = self._srv.provider
        try:
            body = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            body = None
        stream = isinstance(body, dict) and body.get("stream") is True
        provider._note_chat(stream=stream)
        problem = _messages_problem(body, self.headers.get("anthropic-version"), provider.strict)
        if problem is not None or not isinstance(body, dict):
            provider._note_status(400)
            error = _anthropic_error(400, problem or "bad request", n=n)
            self._send(400, error, "application/json", provider._common_headers(n, anthropic=True))
            return
        fault = provider._choose_fault()
        if fault is not None and not fault.is_delay_only:
            provider._note_fault()
            self._messages_fault(body, stream, fault, n)
            return
        self._messages_normal(body, stream, fault, n)

    def _messages_normal(
        self, body: dict[str, Any], stream: bool, fault: Fault | None, n: int
    ) -> None:
        provider = self._srv.provider
        extra = _fault_headers(fault)
        call = _forced_call(body)
        try:
            reply = "" if call is not None else provider._make_reply(body)
        except Exception as exc:
            if not self._pause(fault.latency if fault else 0.0):
                return
            provider._note_status(500)
            error = _anthropic_error(500, f"reply callback failed: {exc!r}", n=n)
            self._send(
                500, error, "application/json", provider._common_headers(n, anthropic=True) + extra
            )
            return
        max_tokens: int = body["max_tokens"]
        pieces, call, finish = _within(_split_pieces(reply), call, max_tokens)
        tokens, breakpoints = _anthropic_tokens(body)
        retry_after, rate_headers = provider._admit(len(tokens) + max_tokens, anthropic=True)
        headers = [("request-id", _request_id(n, anthropic=True)), *rate_headers, *extra]
        if not self._pause(fault.latency if fault else 0.0):
            return
        if retry_after is not None:
            provider._note_rate_limited()
            provider._note_status(429)
            seconds = max(1, math.ceil(retry_after))
            if not any(name.lower().startswith("retry-after") for name, _ in extra):
                headers.append(("Retry-After", str(seconds)))
            said = f"rate limit reached; retry after {seconds} seconds"
            error = _anthropic_error(429, said, n=n)
            self._send(429, error, "application/json", headers)
            return
        read, written = provider._anthropic_cached(tokens, breakpoints)
        outputs = len(pieces) if call is None else len(call.fragments)
        usage: dict[str, Any] | None = _usage(body, len(tokens), read, written, outputs)
        if fault is not None and fault.omit_usage:
            usage = None
        message: dict[str, Any] = {
            "id": f"msg_fake_{n}",
            "type": "message",
            "role": "assistant",
            "model": body["model"],
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
        }
        if stream:
            answer = (pieces, finish, call)
            self._messages_stream(message, usage, answer, headers, fault, (len(tokens), body))
            return
        message["content"] = [*_server_blocks(body, n), {"type": "text", "text": "".join(pieces)}]
        if call is not None:
            message["content"] = [call.tool_use()]
        message["stop_reason"] = _STOP_REASONS[finish]
        if usage is not None:
            message["usage"] = usage
        provider._note_status(200)
        provider._note_success(len(tokens), outputs)
        try:
            self._send(200, _dumps(message), "application/json", headers)
        except OSError:
            provider._note_success(len(tokens), outputs, undo=True)
            raise

    def _messages_stream(
        self,
        message: dict[str, Any],
        usage: dict[str, Any] | None,
        answer: tuple[list[str], str, _Call | None],
        headers: list[tuple[str, str]],
        fault: Fault | None,
        asked: tuple[int, dict[str, Any]],
    ) -> None:
        """Send a normal answer (its text pieces, finish reason and the tool it calls, if
        any) as Anthropic's stream of events, after the blocks of the server tools it ran
        (:func:`_server_blocks`); a tool call's input as ``input_json_delta``s (an empty one,
        then its fragments). ``asked``: the request's input tokens, and its body."""
        provider = self._srv.provider
        pieces, finish, call = answer
        input_tokens, body = asked
        if usage is not None:
            message["usage"] = _started_usage(usage)
        provider._note_status(200)
        self._start_stream(headers)
        self._event(_sse("message_start", {"message": message}))
        at = 0 if call is not None else self._server_events(body, message["id"])
        block = _TEXT_BLOCK if call is None else {**call.tool_use(), "input": {}}
        self._event(_sse("content_block_start", {"index": at, "content_block": block}))
        self._event(_sse("ping", {}))
        deltas = [{"type": "text_delta", "text": piece} for piece in pieces]
        if call is not None:
            parts = ["", *call.fragments]
            deltas = [{"type": "input_json_delta", "partial_json": p} for p in parts]
        outputs = len(pieces) if call is None else len(call.fragments)
        for i, delta in enumerate(deltas):
            delay = (fault.first_token_delay if i == 0 else fault.inter_token_delay) if fault else 0
            if not self._pause(delay):
                return
            self._event(_sse("content_block_delta", {"index": at, "delta": delta}))
        self._event(_sse("content_block_stop", {"index": at}))
        end: dict[str, Any] = {
            "delta": {"stop_reason": _STOP_REASONS[finish], "stop_sequence": None}
        }
        if usage is not None:
            end["usage"] = {"output_tokens": outputs}
            if "server_tool_use" in usage:
                end["usage"]["server_tool_use"] = usage["server_tool_use"]
        self._event(_sse("message_delta", end))
        provider._note_success(input_tokens, outputs)
        try:
            self._event(_sse("message_stop", {}), last=True)
        except OSError:
            provider._note_success(input_tokens, outputs, undo=True)
            raise
        if not self._chunked:
            self.close_connection = True

    def _server_events(self, body: dict[str, Any], message_id: str) -> int:
        """Stream the blocks of the server tools the fake runs for ``body``
        (:func:`_server_blocks`): each a ``content_block_start`` (a ``server_tool_use``'s
        input as one ``input_json_delta``) and ``content_block_stop``; the index of the
        block after them."""
        blocks = _server_blocks(body, message_id)
        for at, block in enumerate(blocks):
            start = {**block, "input": {}} if block["type"] == "server_tool_use" else block
            self._event(_sse("content_block_start", {"index": at, "content_block": start}))
            if block["type"] == "server_tool_use":
                delta = {
                    "type": "input_json_delta",
                    "partial_json": _dumps(block["input"]).decode(),
                }
                self._event(_sse("content_block_delta", {"index": at, "delta": delta}))
            self._event(_sse("content_block_stop", {"index": at}))
        return len(blocks)

    def _messages_stream_error(
        self, body: dict[str, Any], fault: Fault, n: int, headers: list[tuple[str, str]]
    ) -> None:
        """``Fault.stream_error_after``: some pieces, then Anthropic's ``event: error``."""
        provider = self._srv.provider
        try:
            reply = provider._make_reply(body)
        except Exception:
            reply = "Echo:"
        provider._note_status(200)
        self._start_stream(headers)
        start: dict[str, Any] = {"id": f"msg_fake_{n}", "type": "message", "role": "assistant"}
        start |= {"content": []}
        start |= {"model": body["model"], "stop_reason": None, "stop_sequence": None}
        self._event(_sse("message_start", {"message": start}))
        self._event(_sse("content_block_start", {"index": 0, "content_block": _TEXT_BLOCK}))
        for i, piece in enumerate(_split_pieces(reply)[: fault.stream_error_after]):
            if not self._pause(fault.first_token_delay if i == 0 else fault.inter_token_delay):
                return
            delta = {"type": "text_delta", "text": piece}
            self._event(_sse("content_block_delta", {"index": 0, "delta": delta}))
        error = _anthropic_error(fault.status or 529, fault.message, fault.error_code, n=n)
        self._event(b"event: error\ndata: " + error + b"\n\n", last=True)
        if not self._chunked:
            self.close_connection = True

    def _messages_fault(self, body: dict[str, Any], stream: bool, fault: Fault, n: int) -> None:
        provider = self._srv.provider
        if self._silent_fault(fault):
            return
        headers = provider._common_headers(n, anthropic=True) + _fault_headers(fault)
        if fault.stream_error_after is not None and stream:
            self._messages_stream_error(body, fault, n, headers)
            return
        if fault.status is not None or fault.stream_error_after is not None:
            status = fault.status or 500
            provider._note_status(status)
            error = _anthropic_error(status, fault.message, fault.error_code, n=n)
            self._send(status, error, "application/json", headers)
            return
        provider._note_status(200)
        if fault.wrong_content_type:
            self._send(200, _HTML_BODY, "text/html; charset=utf-8", headers)
            return
        start: dict[str, Any] = {"id": f"msg_fake_{n}", "type": "message", "role": "assistant"}
        start["model"] = body["model"]
        if fault.malformed_json:
            broken = b'{"id":"msg_fake_%d","type":"message","content":[' % n
            if stream:
                self._start_stream(headers)
                self._event(b"event: message_start\ndata: " + broken + b"\n\n")
                self._event(_sse("message_stop", {}), last=True)
            else:
                self._send(200, broken, "application/json", headers)
            return
        if fault.missing_fields:
            if stream:
                self._start_stream(headers)
                self._event(_sse("message_start", {}))
                self._event(_sse("message_stop", {}), last=True)
            else:
                self._send(200, _dumps(start), "application/json", headers)
            return
        # cut_stream_after
        try:
            reply = provider._make_reply(body)
        except Exception:
            reply = "Echo:"
        pieces = _split_pieces(reply)
        if stream:
            self._start_stream(headers)
            self._event(_sse("message_start", {"message": _cut_started(start, body, fault)}))
            at = self._server_events(body, start["id"])  # (run before it is cut)
            self._event(_sse("content_block_start", {"index": at, "content_block": _TEXT_BLOCK}))
            for i, piece in enumerate(pieces[: fault.cut_stream_after or 0]):
                if not self._pause(fault.first_token_delay if i == 0 else fault.inter_token_delay):
                    return
                delta = {"type": "text_delta", "text": piece}
                self._event(_sse("content_block_delta", {"index": at, "delta": delta}))
            self._event(b'event: content_block_delta\ndata: {"type":"content_bl')
        else:
            whole = _dumps({**start, "content": [{"type": "text", "text": reply}]})
            self._send(
                200, whole[: len(whole) // 2], "application/json", headers, length=len(whole)
            )
        self.close_connection = True


def _usage(
    body: dict[str, Any], input_tokens: int, read: int, written: int, outputs: int
) -> dict[str, Any]:
    """Claude's usage of an answer: its input past the cache reads and writes, and the web
    searches of its web search tool, where it has one."""
    usage: dict[str, Any] = {
        "input_tokens": input_tokens - read - written,
        "cache_creation_input_tokens": written,
        "cache_read_input_tokens": read,
        "output_tokens": outputs,
    }
    searches = _web_searches(body)
    if searches is not None:  # (Claude's usage names its server tools' uses)
        usage["server_tool_use"] = {"web_search_requests": searches}
    return usage


def _cut_started(start: dict[str, Any], body: dict[str, Any], fault: Fault) -> dict[str, Any]:
    """The message of a cut stream's ``message_start``: with the prompt's usage, as
    Claude's, unless ``fault.omit_usage``."""
    message = {**start, "content": []}
    if not fault.omit_usage:
        tokens = len(_anthropic_tokens(body)[0])
        message["usage"] = _started_usage(_usage(body, tokens, 0, 0, 0))
    return message


def _started_usage(usage: dict[str, Any]) -> dict[str, Any]:
    """The usage of a stream's ``message_start``: the answer's ``usage`` before any output
    and any search (``message_delta`` gives the call's counts)."""
    started = {**usage, "output_tokens": 0}
    if "server_tool_use" in usage:
        started["server_tool_use"] = {"web_search_requests": 0}
    return started


def _server_blocks(body: dict[str, Any], n: int | str) -> list[dict[str, Any]]:
    """The content blocks of the server tools the fake runs for a request, as Claude gives
    them before its text: a ``server_tool_use`` block and its ``web_search_tool_result`` for
    each search of its web search tool (:func:`_web_searches`), and one ``code_execution``
    block and its ``code_execution_tool_result`` for a code execution tool
    (``{"type": "code_execution_20250825", "name": "code_execution"}``)."""
    runs = [("web_search", {"query": "fake search"})] * (_web_searches(body) or 0)
    for tool in body.get("tools") or ():
        if isinstance(tool, dict) and str(tool.get("type", "")).startswith("code_execution_"):
            runs.append(("code_execution", {"code": "print(1)"}))
            break
    blocks: list[dict[str, Any]] = []
    for place, (name, given) in enumerate(runs):
        use_id = f"srvtoolu_fake_{n}_{place}"
        blocks.append({"type": "server_tool_use", "id": use_id, "name": name, "input": given})
        result: Any = []  # (a search's results: none)
        if name == "code_execution":
            result = {"type": "code_execution_result", "stdout": "1\n", "stderr": ""}
            result |= {"return_code": 0, "content": []}
        blocks.append({"type": f"{name}_tool_result", "tool_use_id": use_id, "content": result})
    return blocks


def _web_searches(body: dict[str, Any]) -> int | None:
    """The web searches the fake runs for a request with Claude's web search server tool
    (``{"type": "web_search_20250305", "name": "web_search", "max_uses": 3}``): as many as its
    ``max_uses`` allows, one without; ``None`` for a request without it."""
    for tool in body.get("tools") or ():
        if isinstance(tool, dict) and str(tool.get("type", "")).startswith("web_search_"):
            most = tool.get("max_uses")
            return most if isinstance(most, int) and not isinstance(most, bool) else 1
    return None
