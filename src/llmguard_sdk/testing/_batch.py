"""The fake provider's batch APIs: OpenAI's Batch API and Anthropic's Message Batches.

OpenAI: ``POST /v1/files`` (multipart, ``purpose=batch``, a JSON Lines file of
``{custom_id, method, url, body}``), ``POST /v1/batches`` (``input_file_id``, ``endpoint``,
``completion_window``; answered ``validating``), ``GET /v1/batches/{id}`` (``status``
``validating`` for the first tenth of ``batch_seconds``, ``in_progress``, ``finalizing`` for the
last tenth, then ``completed`` with ``output_file_id``; each phase's ``*_at`` time once entered),
``GET /v1/files/{id}/content`` (JSON Lines of ``{id, custom_id, response: {status_code, body},
error}``).

Anthropic: ``POST /v1/messages/batches`` (``requests: [{custom_id, params}]``),
``GET /v1/messages/batches/{id}`` (``processing_status`` ``in_progress``, then ``ended`` with
``results_url``: Anthropic has no phase between them, only ``canceling`` after a cancel),
``GET /v1/messages/batches/{id}/results`` (JSON Lines of ``{custom_id, result: {type:
"succeeded", message}}``; usage says ``service_tier: "batch"``).

Both: ``POST .../{id}/cancel`` cancels a batch that is not done: the answer says it is
cancelling (OpenAI: ``cancelling``; Anthropic: ``canceling``, ``cancel_initiated_at``) and the
next status read that it ended (OpenAI: ``status`` ``cancelled``, no output file; Anthropic:
``ended``, each request ``canceled``).

A batch is answered when it is created (each request as the chat or messages endpoint would
answer it, counted in the provider's stats) and reported done ``batch_seconds`` later (an
argument and attribute of the :class:`~llmguard_sdk.testing.FakeProvider`, default 0.2 s).
Its ``batch_rows``, when set, rewrites each result row as it is stored:
``batch_rows(row)`` returns the row to write (a dict), a raw line (a str: a row the provider
broke) or ``None`` (the row left out). An OpenAI row with an ``error`` or a response whose
``status_code`` is not 200 goes to the batch's error file (``error_file_id``), as OpenAI files
failed requests, and counts in ``request_counts.failed``; an Anthropic batch's
``request_counts`` count its rows by result type.

Its ``batch_outcome`` (default ``None``: every request succeeds) makes the next
batches end otherwise: ``"expired"`` (OpenAI: ``status`` ``expired``, each request in the error
file with the code ``batch_expired``; Anthropic: each result ``expired``) or ``"failed"``
(OpenAI: ``status`` ``failed`` with ``errors``, no files, straight from ``validating`` as
OpenAI fails a batch whose input it refuses; Anthropic, whose batches never fail
whole: each result ``errored`` with an ``api_error``). ``batch_rows`` still rewrites the rows.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from datetime import datetime, timezone
from email.parser import BytesParser
from email.policy import HTTP
from typing import TYPE_CHECKING, Any

from ._http import _BaseHandler
from ._tool_args import _Call, _forced_call, _within
from ._wire import (
    _BASE58,
    _STOP_REASONS,
    _anthropic_error,
    _anthropic_tokens,
    _dumps,
    _error_body,
    _openai_tokens,
    _request_id,
    _split_pieces,
)

if TYPE_CHECKING:
    from ._provider import FakeProvider

__all__ = ["BATCH_PREFIXES"]

BATCH_PREFIXES = ("/v1/files", "/v1/batches", "/v1/messages/batches")
_LOCK = threading.Lock()


def _hex_id(prefix: str) -> str:
    """A new id as OpenAI's batches and their rows have: ``prefix`` and 32 hex digits."""
    return prefix + uuid.uuid4().hex


def _base58_id(prefix: str) -> str:
    """A new id of ``prefix`` and 22 base58 characters: OpenAI's ``file-`` ids, and with
    ``msgbatch_01`` Anthropic's batch ids (``msgbatch_01HkcTjaV5uDC8jWR4ZsDV8d``)."""
    number, tail = uuid.uuid4().int, ""
    for _ in range(22):
        number, digit = divmod(number, 58)
        tail += _BASE58[digit]
    return prefix + tail


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


def _answer(
    provider: FakeProvider, body: dict[str, Any], inputs: int
) -> tuple[list[str], _Call | None, str]:
    """The reply's pieces, the call it makes when the request forces a tool (its pieces: the
    argument fragments, one output token each), both cut at the output limit as the
    endpoints cut them, and the finish reason; counted in stats."""
    call = _forced_call(body)
    reply = "" if call is not None else provider._make_reply(body)
    limit = body.get("max_completion_tokens") or body.get("max_tokens")
    pieces, call, finish = _within(_split_pieces(reply), call, limit)
    if call is not None:
        pieces = call.fragments
    provider._note_success(inputs, len(pieces))
    return pieces, call, finish


def _chat_answer(provider: FakeProvider, body: dict[str, Any], n: int) -> dict[str, Any]:
    """A chat completion as the chat endpoint answers it (no faults in batches)."""
    tokens = _openai_tokens(body)
    pieces, called, finish = _answer(provider, body, len(tokens))
    message: dict[str, Any] = {"role": "assistant", "content": "".join(pieces)}
    if called is not None:
        message = {"role": "assistant", "content": None, "tool_calls": [called.chat_call()]}
    return {
        "id": f"chatcmpl-batch-{n}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model") or provider.model,
        "service_tier": "batch",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {
            "prompt_tokens": len(tokens),
            "completion_tokens": len(pieces),
            "total_tokens": len(tokens) + len(pieces),
        },
    }


def _message_answer(provider: FakeProvider, params: dict[str, Any], n: int) -> dict[str, Any]:
    """A Messages answer as the messages endpoint gives it, batch tier in its usage."""
    tokens, _ = _anthropic_tokens(params)
    pieces, called, finish = _answer(provider, params, len(tokens))
    return {
        "id": f"msg_batch_{n}",
        "type": "message",
        "role": "assistant",
        "model": params.get("model") or provider.model,
        "content": [{"type": "text", "text": "".join(pieces)}]
        if called is None
        else [called.tool_use()],
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


def _edited(provider: FakeProvider, rows: list[dict[str, Any]]) -> list[str | dict[str, Any]]:
    """A batch's result rows, each as ``provider.batch_rows`` rewrites it (None: left out)."""
    edit = provider.batch_rows
    out: list[str | dict[str, Any]] = []
    for row in rows:
        written = edit(row) if edit is not None else row
        if written is not None:
            out.append(written)
    return out


def _jsonl(rows: list[str | dict[str, Any]]) -> bytes:
    return "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows).encode()


def _failed_row(row: str | dict[str, Any]) -> bool:
    """Whether an OpenAI result row belongs in the error file: an ``error``, or a response
    whose status is not 200 (a raw line the provider broke stays in the output file)."""
    if not isinstance(row, dict):
        return False
    response = row.get("response")
    status = response.get("status_code") if isinstance(response, dict) else None
    return bool(row.get("error")) or (isinstance(status, int) and status != 200)


def _openai_expired(row: dict[str, Any]) -> dict[str, Any]:
    return {
        **row,
        "response": None,
        "error": {
            "code": "batch_expired",
            "message": "This request could not be executed before the completion window expired.",
        },
    }


def _anthropic_unrun(custom_id: str, outcome: str) -> dict[str, Any]:
    """An Anthropic result row of a batch that expired or failed (each request errored)."""
    if outcome == "expired":
        return {"custom_id": custom_id, "result": {"type": "expired"}}
    error = {"type": "api_error", "message": "Internal server error"}
    return {
        "custom_id": custom_id,
        "result": {"type": "errored", "error": {"type": "error", "error": error}},
    }


def _anthropic_counts(rows: list[str | dict[str, Any]]) -> dict[str, int]:
    """``request_counts`` of an ended Anthropic batch, from the result rows it holds."""
    counts = dict.fromkeys(("succeeded", "errored", "canceled", "expired"), 0)
    for row in rows:
        result = row.get("result") if isinstance(row, dict) else None
        kind = result.get("type") if isinstance(result, dict) else None
        if kind in counts:
            counts[str(kind)] += 1
    return counts


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
        anthropic = parts[:2] == ["messages", "batches"]
        if anthropic and status >= 400:  # Anthropic's error body, its request id in it
            body = _anthropic_error(status, payload["error"]["message"], n=n)
        self._send(status, body, content, provider._common_headers(n, anthropic=anthropic))
        return True

    def _upload(self, store: _Store, raw: bytes) -> tuple[int, Any]:
        uploaded = _multipart_file({k.lower(): v for k, v in self.headers.items()}, raw)
        if uploaded is None or uploaded[1] != "batch":
            return 400, _error_body("a batch file upload (purpose=batch)", "invalid_request", None)
        file_id = _base58_id("file-")
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
                    "id": _hex_id("batch_req_"),
                    "custom_id": item["custom_id"],
                    "response": {
                        "status_code": 200,
                        "request_id": _request_id(n * 100_000 + i),
                        "body": answer,
                    },
                    "error": None,
                }
            )
        outcome = provider.batch_outcome
        if outcome == "expired":
            out = [_openai_expired(row) for row in out]
        rows = _edited(provider, out) if outcome != "failed" else []
        failed = [row for row in rows if _failed_row(row)]
        done = [row for row in rows if not _failed_row(row)]
        batch: dict[str, Any] = {"kind": "openai", "count": len(out), "outcome": outcome}
        batch |= {"completed": len(done), "failed": len(failed), "body": body}
        batch |= _clock(provider.batch_seconds)
        for key, kept in (("output_file_id", done), ("error_file_id", failed)):
            batch[key] = None
            if kept:
                batch[key] = _base58_id("file-")
                store.files[batch[key]] = _jsonl(kept)
        batch_id = _hex_id("batch_")
        store.batches[batch_id] = batch
        return 200, self._openai_status(batch_id, batch, answer="validating")

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
        outcome = provider.batch_outcome
        if outcome is not None:
            rows = [_anthropic_unrun(row["custom_id"], outcome) for row in rows]
        edited = _edited(provider, rows)
        batch_id = _base58_id("msgbatch_01")
        store.batches[batch_id] = {
            "kind": "anthropic",
            **_clock(provider.batch_seconds),
            "results": _jsonl(edited),
            "counts": _anthropic_counts(edited),
            "ids": [row["custom_id"] for row in rows],
            "count": len(rows),
        }
        return 200, self._anthropic_status(batch_id, store.batches[batch_id], "in_progress")

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
        answer = None
        if not _ended(batch, time.monotonic()):  # (cancelling, then cancelled when next read)
            batch["cancel_at"], answer = time.monotonic(), "cancelling"
            if kind == "anthropic":
                canceled = ({"custom_id": i, "result": {"type": "canceled"}} for i in batch["ids"])
                batch["results"] = "".join(json.dumps(r) + "\n" for r in canceled).encode()
        if kind == "anthropic":
            said = None if answer is None else "canceling"  # (Anthropic's spelling)
            return 200, self._anthropic_status(parts[-1], batch, said)
        return 200, self._openai_status(parts[-1], batch, answer)

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
        if parts[3] == "results" and _ended(batch, time.monotonic()):
            return 200, batch["results"]
        return None

    def _openai_status(
        self, batch_id: str, batch: dict[str, Any], answer: str | None = None
    ) -> dict[str, Any]:
        """A Batch object; ``answer``: the status the answer to its creation (``validating``)
        or cancel (``cancelling``) says."""
        status, stamps = _openai_phase(batch, time.monotonic())
        if answer is not None:  # (a new batch has entered no phase yet; a cancel is under way)
            status = answer
            stamps = {} if answer == "validating" else {**stamps, "cancelled": None}
        shown = status in ("completed", "expired", "failed")
        errors = None
        if status == "failed":
            error = {"code": "batch_failed", "message": "The batch failed.", "param": None}
            errors = {"object": "list", "data": [{**error, "line": None}]}
        body = batch["body"]
        return {
            "id": batch_id,
            "object": "batch",
            "endpoint": body.get("endpoint") or "/v1/chat/completions",
            "input_file_id": body.get("input_file_id"),
            "completion_window": body.get("completion_window") or "24h",
            "created_at": int(batch["created"]),
            "status": status,
            "errors": errors,
            "output_file_id": batch["output_file_id"] if shown else None,
            "error_file_id": batch["error_file_id"] if shown else None,
            "request_counts": {
                "total": batch["count"],
                "completed": batch["completed"] if shown else 0,
                "failed": batch["failed"] if shown else 0,
            },
            "expires_at": int(batch["created"]) + 86_400,
            **{f"{name}_at": None for name in _OPENAI_STAMPS},
            **{
                f"{name}_at": int(_wall(batch, at)) for name, at in stamps.items() if at is not None
            },
        }

    def _anthropic_status(
        self, batch_id: str, batch: dict[str, Any], answer: str | None = None
    ) -> dict[str, Any]:
        """A Message Batch object; ``answer``: the ``processing_status`` the answer to its
        creation (``in_progress``) or cancel (``canceling``) says."""
        cancel_at = batch.get("cancel_at")
        done = _ended(batch, time.monotonic()) and answer is None
        counts = dict.fromkeys(("succeeded", "errored", "canceled", "expired"), 0)
        if done:
            counts = {**counts, "canceled": batch["count"]} if cancel_at else batch["counts"]
        ended = batch["done_at"] if cancel_at is None else cancel_at
        return {
            "id": batch_id,
            "type": "message_batch",
            "processing_status": "ended" if done else answer or "in_progress",
            "request_counts": {"processing": 0 if done else batch["count"], **counts},
            "created_at": _rfc3339(batch["created"]),
            "expires_at": _rfc3339(batch["created"] + 86_400),
            "ended_at": _rfc3339(_wall(batch, ended)) if done else None,
            "cancel_initiated_at": _rfc3339(_wall(batch, cancel_at)) if cancel_at else None,
            "archived_at": None,
            "results_url": f"http://{self.headers.get('host', '127.0.0.1')}/v1/messages/batches/"
            f"{batch_id}/results"
            if done
            else None,
        }


def _clock(seconds: float) -> dict[str, Any]:
    """When a batch made now runs: ``created`` (Unix time), ``started`` and ``done_at``
    (monotonic), and ``seconds``."""
    now = time.monotonic()
    return {"created": time.time(), "started": now, "done_at": now + seconds, "seconds": seconds}


def _wall(batch: dict[str, Any], instant: float) -> float:
    """The Unix time of a monotonic ``instant`` of ``batch``."""
    return float(batch["created"] + (instant - batch["started"]))


def _ended(batch: dict[str, Any], now: float) -> bool:
    """Whether ``batch`` has ended by ``now``: run to its end, or cancelled."""
    return now >= batch["done_at"] or batch.get("cancel_at") is not None


_OPENAI_STAMPS = (
    "in_progress",
    "finalizing",
    "completed",
    "failed",
    "expired",
    "cancelling",
    "cancelled",
)


def _openai_phase(batch: dict[str, Any], now: float) -> tuple[str, dict[str, float | None]]:
    """An OpenAI batch's status at ``now`` and when it entered each phase so far:
    ``validating`` the first tenth of its ``batch_seconds``, ``in_progress``, ``finalizing``
    the last tenth, then ``completed`` (or, with ``batch_outcome``, ``expired`` from
    ``in_progress``, ``failed`` from ``validating``); a cancelled one is ``cancelled``."""
    start, done, tenth = batch["started"], batch["done_at"], batch["seconds"] / 10
    outcome, cancel_at = batch["outcome"], batch.get("cancel_at")
    phases = [("validating", start)]
    if outcome != "failed":
        phases.append(("in_progress", start + tenth))
    if outcome is None:
        phases.append(("finalizing", done - tenth))
    phases.append((outcome or "completed", done))
    until = now if cancel_at is None else min(now, cancel_at)
    entered = [(name, at) for name, at in phases if at <= until and (at < done or until >= done)]
    stamps: dict[str, float | None] = dict(entered[1:])
    if cancel_at is not None:
        stamps |= {"cancelling": cancel_at, "cancelled": cancel_at}
        return "cancelled", stamps
    return entered[-1][0], stamps


def _rfc3339(stamp: float) -> str:
    """A Unix time as Anthropic writes times: RFC 3339 in UTC."""
    return datetime.fromtimestamp(stamp, tz=timezone.utc).isoformat().replace("+00:00", "Z")
