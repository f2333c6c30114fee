"""The fake provider's batch APIs: OpenAI's Batch API and Anthropic's Message Batches.

OpenAI: ``POST /v1/files`` (multipart, ``purpose=batch``, a JSON Lines file of
``{custom_id, method, url, body}``), ``POST /v1/batches`` (``input_file_id``, ``endpoint``,
``completion_window``), ``GET /v1/batches/{id}`` (``status`` ``in_progress`` until the batch is
done, then ``completed`` with ``output_file_id``), ``GET /v1/files/{id}/content`` (JSON Lines of
``{id, custom_id, response: {status_code, body}, error}``).

Anthropic: ``POST /v1/messages/batches`` (``requests: [{custom_id, params}]``),
``GET /v1/messages/batches/{id}`` (``processing_status`` ``in_progress``, then ``ended`` with
``results_url``), ``GET /v1/messages/batches/{id}/results`` (JSON Lines of
``{custom_id, result: {type: "succeeded", message}}``; usage says ``service_tier: "batch"``).

Both: ``POST .../{id}/cancel`` cancels a batch that is not done: it ends at once (OpenAI:
``status`` ``cancelled``, no output file; Anthropic: ``ended``, each request ``canceled``).

A batch is answered when it is created (each request as the chat or messages endpoint would
answer it, counted in the provider's stats) and reported done ``batch_seconds`` later (an
attribute of the :class:`~llmguard_sdk.testing.FakeProvider`, default 0.2 s). Its
``batch_rows`` attribute, when set, rewrites each result row as it is stored:
``batch_rows(row)`` returns the row to write (a dict), a raw line (a str: a row the provider
broke) or ``None`` (the row left out).
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from email.parser import BytesParser
from email.policy import HTTP
from typing import TYPE_CHECKING, Any

from ._http import _BaseHandler
from ._wire import (
    _STOP_REASONS,
    _anthropic_tokens,
    _dumps,
    _error_body,
    _openai_tokens,
    _split_pieces,
)

if TYPE_CHECKING:
    from ._provider import FakeProvider

__all__ = ["BATCH_PREFIXES"]

BATCH_PREFIXES = ("/v1/files", "/v1/batches", "/v1/messages/batches")
_LOCK = threading.Lock()


class _Store:
    """The files and batches one fake provider holds."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.batches: dict[str, dict[str, Any]] = {}


def _store(provider: FakeProvider) -> _Store:
    with _LOCK:
        found = provider.__dict__.get("_batch_store")
        if found is None:
            found = provider.__dict__["_batch_store"] = _Store()
        return found


def _answer(provider: FakeProvider, body: dict[str, Any], inputs: int) -> tuple[list[str], str]:
    """The reply's pieces (cut at the output limit) and finish reason, counted in stats."""
    pieces = _split_pieces(provider._make_reply(body))
    limit = body.get("max_completion_tokens") or body.get("max_tokens")
    finish = "stop"
    if isinstance(limit, int) and limit < len(pieces):
        pieces, finish = pieces[:limit], "length"
    provider._note_success(inputs, len(pieces))
    return pieces, finish


def _chat_answer(provider: FakeProvider, body: dict[str, Any], n: int) -> dict[str, Any]:
    """A chat completion as the chat endpoint answers it (no faults in batches)."""
    tokens = _openai_tokens(body)
    pieces, finish = _answer(provider, body, len(tokens))
    return {
        "id": f"chatcmpl-batch-{n}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model") or provider.model,
        "service_tier": "batch",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "".join(pieces)},
                "finish_reason": finish,
            }
        ],
        "usage": {
            "prompt_tokens": len(tokens),
            "completion_tokens": len(pieces),
            "total_tokens": len(tokens) + len(pieces),
        },
    }


def _message_answer(provider: FakeProvider, params: dict[str, Any], n: int) -> dict[str, Any]:
    """A Messages answer as the messages endpoint gives it, batch tier in its usage."""
    tokens, _ = _anthropic_tokens(params)
    pieces, finish = _answer(provider, params, len(tokens))
    return {
        "id": f"msg_batch_{n}",
        "type": "message",
        "role": "assistant",
        "model": params.get("model") or provider.model,
        "content": [{"type": "text", "text": "".join(pieces)}],
        "stop_reason": _STOP_REASONS[finish],
        "stop_sequence": None,
        "usage": {
            "input_tokens": len(tokens),
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "output_tokens": len(pieces),
            "service_tier": "batch",
        },
    }


def _multipart_file(headers: dict[str, str], raw: bytes) -> tuple[bytes, str] | None:
    """(the uploaded file, its purpose) of a multipart form, or None."""
    head = f"Content-Type: {headers.get('content-type', '')}\r\n\r\n".encode()
    message = BytesParser(policy=HTTP).parsebytes(head + raw)
    if not message.is_multipart():
        return None
    content, purpose = None, ""
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True)
        if not isinstance(payload, bytes):
            continue
        if name == "file":
            content = payload
        elif name == "purpose":
            purpose = payload.decode()
    return None if content is None else (content, purpose)


def _lines(provider: FakeProvider, rows: list[dict[str, Any]]) -> bytes:
    """The JSON Lines of a batch's result rows, each as ``provider.batch_rows`` rewrites it."""
    edit = getattr(provider, "batch_rows", None)
    out = []
    for row in rows:
        written = edit(row) if edit is not None else row
        if written is not None:
            out.append(written if isinstance(written, str) else json.dumps(written))
    return "".join(line + "\n" for line in out).encode()


class _BatchHandler(_BaseHandler):
    def _batch_api(self, path: str, raw: bytes, n: int) -> bool:
        """Answer a batch API request; False when ``path`` is not one."""
        if not path.startswith(BATCH_PREFIXES):
            return False
        provider = self._srv.provider
        store = _store(provider)
        parts = path.strip("/").split("/")[1:]  # after "v1"
        found: tuple[int, Any] | None = None
        if self.command == "POST" and parts == ["files"]:
            found = self._upload(store, raw)
        elif self.command == "POST" and parts == ["batches"]:
            found = self._openai_batch(provider, store, raw, n)
        elif self.command == "POST" and parts == ["messages", "batches"]:
            found = self._anthropic_batch(provider, store, raw, n)
        elif self.command == "POST" and parts[-1:] == ["cancel"]:
            found = self._cancel(store, parts[:-1])
        elif self.command == "GET":
            found = self._lookup(store, parts)
        if found is None:
            found = (404, _error_body(f"no batch route {path}", "invalid_request_error", None))
        status, payload = found
        content = "application/jsonl" if isinstance(payload, bytes) else "application/json"
        body = payload if isinstance(payload, bytes) else _dumps(payload)
        self._send(status, body, content, provider._common_headers(n))
        return True

    def _upload(self, store: _Store, raw: bytes) -> tuple[int, Any]:
        uploaded = _multipart_file({k.lower(): v for k, v in self.headers.items()}, raw)
        if uploaded is None or uploaded[1] != "batch":
            return 400, _error_body("a batch file upload (purpose=batch)", "invalid_request", None)
        file_id = f"file-{uuid.uuid4().hex[:16]}"
        store.files[file_id] = uploaded[0]
        return 200, {"id": file_id, "object": "file", "purpose": "batch", "bytes": len(raw)}

    def _openai_batch(
        self, provider: FakeProvider, store: _Store, raw: bytes, n: int
    ) -> tuple[int, Any]:
        try:
            body = json.loads(raw)
            lines = store.files[body["input_file_id"]].decode().splitlines()
            requests = [json.loads(line) for line in lines if line.strip()]
        except (ValueError, KeyError, TypeError):
            return 400, _error_body("input_file_id names no batch file", "invalid_request", None)
        out = []
        for i, item in enumerate(requests):
            answer = _chat_answer(provider, item["body"], n * 100_000 + i)
            out.append(
                {
                    "id": f"batch_req_{i}",
                    "custom_id": item["custom_id"],
                    "response": {"status_code": 200, "request_id": f"r{i}", "body": answer},
                    "error": None,
                }
            )
        output_id = f"file-{uuid.uuid4().hex[:16]}"
        store.files[output_id] = _lines(provider, out)
        batch_id = f"batch_{uuid.uuid4().hex[:16]}"
        store.batches[batch_id] = {
            "kind": "openai",
            "done_at": time.monotonic() + getattr(provider, "batch_seconds", 0.2),
            "output_file_id": output_id,
            "count": len(out),
        }
        return 200, self._openai_status(batch_id, store.batches[batch_id])

    def _anthropic_batch(
        self, provider: FakeProvider, store: _Store, raw: bytes, n: int
    ) -> tuple[int, Any]:
        try:
            requests = json.loads(raw)["requests"]
            rows = [
                {
                    "custom_id": item["custom_id"],
                    "result": {
                        "type": "succeeded",
                        "message": _message_answer(provider, item["params"], n * 100_000 + i),
                    },
                }
                for i, item in enumerate(requests)
            ]
        except (ValueError, KeyError, TypeError):
            return 400, _error_body("requests: [{custom_id, params}]", "invalid_request", None)
        batch_id = f"msgbatch_{uuid.uuid4().hex[:16]}"
        store.batches[batch_id] = {
            "kind": "anthropic",
            "done_at": time.monotonic() + getattr(provider, "batch_seconds", 0.2),
            "results": _lines(provider, rows),
            "ids": [row["custom_id"] for row in rows],
            "count": len(rows),
        }
        return 200, self._anthropic_status(batch_id, store.batches[batch_id])

    def _cancel(self, store: _Store, parts: list[str]) -> tuple[int, Any] | None:
        """Cancel the batch ``parts`` names (``batches/{id}``, ``messages/batches/{id}``)."""
        kind = "anthropic" if parts[:1] == ["messages"] else "openai"
        batch = store.batches.get(parts[-1])
        if (
            len(parts) != (3 if kind == "anthropic" else 2)
            or batch is None
            or batch["kind"] != kind
        ):
            return None
        if time.monotonic() < batch["done_at"]:
            batch["cancelled"], batch["done_at"] = True, time.monotonic()
            if kind == "anthropic":
                canceled = ({"custom_id": i, "result": {"type": "canceled"}} for i in batch["ids"])
                batch["results"] = "".join(json.dumps(r) + "\n" for r in canceled).encode()
        if kind == "anthropic":
            return 200, self._anthropic_status(parts[-1], batch)
        return 200, self._openai_status(parts[-1], batch)

    def _lookup(self, store: _Store, parts: list[str]) -> tuple[int, Any] | None:
        if parts[0] == "files" and len(parts) == 3 and parts[2] == "content":
            content = store.files.get(parts[1])
            return None if content is None else (200, content)
        if parts[0] == "batches" and len(parts) == 2 and parts[1] in store.batches:
            return 200, self._openai_status(parts[1], store.batches[parts[1]])
        if parts[:2] != ["messages", "batches"] or len(parts) not in (3, 4):
            return None
        batch = store.batches.get(parts[2])
        if batch is None or batch["kind"] != "anthropic":
            return None
        if len(parts) == 3:
            return 200, self._anthropic_status(parts[2], batch)
        if parts[3] == "results" and time.monotonic() >= batch["done_at"]:
            return 200, batch["results"]
        return None

    def _openai_status(self, batch_id: str, batch: dict[str, Any]) -> dict[str, Any]:
        done = time.monotonic() >= batch["done_at"]
        cancelled = batch.get("cancelled", False)
        return {
            "id": batch_id,
            "object": "batch",
            "endpoint": "/v1/chat/completions",
            "status": "cancelled" if cancelled else "completed" if done else "in_progress",
            "output_file_id": batch["output_file_id"] if done and not cancelled else None,
            "error_file_id": None,
            "request_counts": {
                "total": batch["count"],
                "completed": batch["count"] if done and not cancelled else 0,
                "failed": 0,
            },
        }

    def _anthropic_status(self, batch_id: str, batch: dict[str, Any]) -> dict[str, Any]:
        done = time.monotonic() >= batch["done_at"]
        cancelled = batch["count"] if batch.get("cancelled") else 0
        return {
            "id": batch_id,
            "type": "message_batch",
            "processing_status": "ended" if done else "in_progress",
            "request_counts": {
                "processing": 0 if done else batch["count"],
                "succeeded": batch["count"] - cancelled if done else 0,
                "errored": 0,
                "canceled": cancelled,
                "expired": 0,
            },
            "results_url": f"http://{self.headers.get('host', '127.0.0.1')}/v1/messages/batches/"
            f"{batch_id}/results"
            if done
            else None,
        }
