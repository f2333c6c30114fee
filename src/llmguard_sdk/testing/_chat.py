"""The fake provider's OpenAI-style chat completions (plain and streamed, normal and faulty)."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

from ._faults import Fault
from ._http import _BaseHandler
from ._tool_args import _Call, _forced_call, _within
from ._wire import (
    _HTML_BODY,
    _BadRequest,
    _ChatRequest,
    _dumps,
    _error_body,
    _error_type,
    _fault_headers,
    _openai_tokens,
    _parse_chat,
    _request_id,
    _split_pieces,
)


class _ChatHandler(_BaseHandler):
    def _chat(self, raw: bytes, n: int) -> None:
        provider = self._srv.provider
        try:
            req = _parse_chat(raw, provider._model, strict=provider.strict)
        except _BadRequest as exc:
            provider._note_chat(stream=False)
            err = _error_body(str(exc), "invalid_request_error", exc.code, exc.param)
            headers = provider._common_headers(n)
            provider._note_status(400)
            self._send(400, _dumps(err), "application/json", headers)
            return
        provider._note_chat(stream=req.stream)
        fault = provider._choose_fault()
        if fault is not None and not fault.is_delay_only:
            provider._note_fault()
            self._answer_fault(req, fault, n)
            return
        self._answer_normal(req, fault, n)

    def _answer_normal(self, req: _ChatRequest, fault: Fault | None, n: int) -> None:
        provider = self._srv.provider
        extra = _fault_headers(fault)
        call = _forced_call(req.body)
        try:
            reply = "" if call is not None else provider._make_reply(req.body)
        except Exception as exc:
            if not self._pause(fault.latency if fault else 0.0):
                return
            err = _error_body(f"reply callback failed: {exc!r}", "server_error", None)
            headers = provider._common_headers(n) + extra
            provider._note_status(500)
            self._send(500, _dumps(err), "application/json", headers)
            return
        pieces, call, finish_reason = _within(_split_pieces(reply), call, req.max_tokens)
        outputs = len(pieces) if call is None else len(call.fragments)
        cost = req.input_tokens + (req.max_tokens if req.max_tokens is not None else outputs)
        retry_after, rate_headers = provider._admit(cost)
        headers = [("x-request-id", _request_id(n)), *rate_headers, *extra]
        if not self._pause(fault.latency if fault else 0.0):
            return
        if retry_after is not None:
            self._rate_limited(req, retry_after, extra, headers)
            return
        cached = provider._openai_cached(_openai_tokens(req.body)) if provider.prefix_cache else 0
        counted = {
            "prompt_tokens": req.input_tokens,
            "completion_tokens": outputs,
            "total_tokens": req.input_tokens + outputs,
            "prompt_tokens_details": {"cached_tokens": cached},
        }
        usage: dict[str, Any] | None = provider._make_usage(req.body, counted)
        if fault is not None and fault.omit_usage:
            usage = None
        if req.stream:
            first = fault.first_token_delay if fault else 0.0
            between = fault.inter_token_delay if fault else 0.0
            self._stream(req, n, headers, pieces, (finish_reason, call), usage, first, between)
            return
        message: dict[str, Any] = {"role": "assistant", "content": "".join(pieces)}
        if call is not None:
            message = {"role": "assistant", "content": None, "tool_calls": [call.chat_call()]}
        payload = {
            "id": f"chatcmpl-fake-{n}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": req.model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        }
        if usage is not None:
            payload["usage"] = usage
        provider._note_status(200)
        provider._note_success(req.input_tokens, outputs)  # before the client can see it
        try:
            self._send(200, _dumps(payload), "application/json", headers)
        except OSError:
            provider._note_success(req.input_tokens, outputs, undo=True)
            raise

    def _rate_limited(
        self,
        req: _ChatRequest,
        retry_after: float,
        extra: list[tuple[str, str]],
        headers: list[tuple[str, str]],
    ) -> None:
        """Answer the 429 of the ``rpm`` / ``tpm`` limits (the fault's own wait wins)."""
        provider = self._srv.provider
        provider._note_rate_limited()
        seconds = max(1, math.ceil(retry_after))
        err = _error_body(
            f"Rate limit reached for {req.model} on the fake provider; "
            f"retry after {seconds} seconds",
            "rate_limit_error",
            "rate_limit_exceeded",
        )
        provider._note_status(429)
        if not any(name.lower().startswith("retry-after") for name, _ in extra):
            headers.append(("Retry-After", str(seconds)))
            headers.append(("retry-after-ms", str(math.ceil(retry_after * 1000))))
        self._send(429, _dumps(err), "application/json", headers)

    def _answer_fault(self, req: _ChatRequest, fault: Fault, n: int) -> None:
        provider = self._srv.provider
        if self._silent_fault(fault):
            return
        headers = provider._common_headers(n) + _fault_headers(fault)
        if fault.stream_error_after is not None and req.stream:
            self._stream_error(req, fault, n, headers)
            return
        if fault.status is not None or fault.stream_error_after is not None:
            status = fault.status or 500
            err = _error_body(fault.message, _error_type(status), fault.error_code)
            provider._note_status(status)
            self._send(status, _dumps(err), "application/json", headers)
            return
        provider._note_status(200)
        if fault.wrong_content_type:
            self._send(200, _HTML_BODY, "text/html; charset=utf-8", headers)
            return
        created = int(time.time())
        if fault.malformed_json:
            broken = b'{"id":"chatcmpl-fake-%d","object":"chat.completion","choices":[{"index":0,'
            if req.stream:
                self._start_stream(headers)
                self._event(b"data: " + (broken % n) + b"\n\n")
                self._event(b"data: [DONE]\n\n", last=True)
            else:
                self._send(200, broken % n, "application/json", headers)
            return
        if fault.missing_fields:
            obj: dict[str, Any] = {"id": f"chatcmpl-fake-{n}", "created": created}
            obj["model"] = req.model
            if req.stream:
                obj["object"] = "chat.completion.chunk"
                self._start_stream(headers)
                self._event(b"data: " + _dumps(obj) + b"\n\n")
                self._event(b"data: [DONE]\n\n", last=True)
            else:
                obj["object"] = "chat.completion"
                self._send(200, _dumps(obj), "application/json", headers)
            return
        # cut_stream_after
        limit = fault.cut_stream_after or 0
        try:
            reply = provider._make_reply(req.body)
        except Exception:
            reply = "Echo:"
        pieces = _split_pieces(reply)
        if req.stream:
            self._start_stream(headers)
            self._event(
                b"data: "
                + _dumps(self._chunk(req, n, {"role": "assistant", "content": ""}))
                + b"\n\n"
            )
            for i, piece in enumerate(pieces[:limit]):
                delay = fault.first_token_delay if i == 0 else fault.inter_token_delay
                if not self._pause(delay):
                    return
                self._event(b"data: " + _dumps(self._chunk(req, n, {"content": piece})) + b"\n\n")
            self._event(b'data: {"id":"chatcmpl-fake-%d","object":"chat.compl' % n)
        else:
            payload = _dumps(
                {
                    "id": f"chatcmpl-fake-{n}",
                    "object": "chat.completion",
                    "created": created,
                    "model": req.model,
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": reply},
                            "finish_reason": "stop",
                        }
                    ],
                }
            )
            self._send(
                200, payload[: len(payload) // 2], "application/json", headers, length=len(payload)
            )
        self.close_connection = True

    def _stream_error(
        self, req: _ChatRequest, fault: Fault, n: int, headers: list[tuple[str, str]]
    ) -> None:
        """``Fault.stream_error_after``: some pieces, then OpenAI's in-stream error chunk."""
        provider = self._srv.provider
        try:
            reply = provider._make_reply(req.body)
        except Exception:
            reply = "Echo:"
        provider._note_status(200)
        self._start_stream(headers)
        role = self._chunk(req, n, {"role": "assistant", "content": ""})
        self._event(b"data: " + _dumps(role) + b"\n\n")
        for i, piece in enumerate(_split_pieces(reply)[: fault.stream_error_after]):
            if not self._pause(fault.first_token_delay if i == 0 else fault.inter_token_delay):
                return
            self._event(b"data: " + _dumps(self._chunk(req, n, {"content": piece})) + b"\n\n")
        err = _error_body(fault.message, _error_type(fault.status or 500), fault.error_code)
        self._event(b"data: " + _dumps(err) + b"\n\n", last=True)
        if not self._chunked:
            self.close_connection = True

    def _chunk(
        self, req: _ChatRequest, n: int, delta: dict[str, Any], finish: str | None = None
    ) -> dict[str, Any]:
        chunk: dict[str, Any] = {
            "id": f"chatcmpl-fake-{n}",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": req.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        if req.include_usage:
            chunk["usage"] = None
        return chunk

    def _stream(
        self,
        req: _ChatRequest,
        n: int,
        headers: Sequence[tuple[str, str]],
        pieces: list[str],
        end: tuple[str, _Call | None],
        usage: dict[str, Any] | None,
        first_delay: float,
        between: float,
    ) -> None:
        """Stream an answer: its text ``pieces``, or with ``end``'s tool name, a call of it
        (its id and name in one chunk, then its arguments' fragments, as OpenAI streams them)."""
        finish_reason, call = end
        self._srv.provider._note_status(200)
        self._start_stream(headers)
        self._event(
            b"data: " + _dumps(self._chunk(req, n, {"role": "assistant", "content": ""})) + b"\n\n"
        )
        deltas: list[dict[str, Any]] = [{"content": piece} for piece in pieces]
        outputs = len(pieces)
        if call is not None:
            deltas = [{"tool_calls": [item]} for item in call.chat_deltas()]
            outputs = len(call.fragments)
        for i, delta in enumerate(deltas):
            if not self._pause(first_delay if i == 0 else between):
                return
            self._event(b"data: " + _dumps(self._chunk(req, n, delta)) + b"\n\n")
        self._event(b"data: " + _dumps(self._chunk(req, n, {}, finish_reason)) + b"\n\n")
        if req.include_usage and usage is not None:
            final = {
                "id": f"chatcmpl-fake-{n}",
                "object": "chat.completion.chunk",
                "created": int(time.time()),
                "model": req.model,
                "choices": [],
                "usage": usage,
            }
            self._event(b"data: " + _dumps(final) + b"\n\n")
        # Count the success before the last write so that a client which has seen [DONE]
        # also sees it in the stats; undo it if that write fails.
        provider = self._srv.provider
        provider._note_success(req.input_tokens, outputs)
        try:
            self._event(b"data: [DONE]\n\n", last=True)
        except OSError:
            provider._note_success(req.input_tokens, outputs, undo=True)
            raise
        if not self._chunked:
            self.close_connection = True
