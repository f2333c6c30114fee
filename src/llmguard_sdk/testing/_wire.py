"""The fake provider's wire format: request parsing, deterministic tokens, error bodies."""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass
from typing import Any

from .._json import canonical_json
from ..providers._anthropic_only import without_breakpoint
from ._faults import Fault
from ._strict import chat_tools_problem, messages_tools_problem

_POLL_S = 0.05  # how often the accept loop checks for stop()
_IDLE_TIMEOUT_S = 120.0  # an idle keep-alive connection (or a stalled client) is dropped after this
_STOP_WAIT_S = 1.0  # how long stop() waits for in-flight handlers to finish
_MAX_BODY = 32 * 1024 * 1024
_MAX_RECORDED = 1000
_CHAT_PATHS = frozenset({"/v1/chat/completions", "/chat/completions"})
_MODELS_PATHS = frozenset({"/v1/models", "/models"})
_MESSAGES_PATHS = frozenset({"/v1/messages", "/messages"})
_PREFIX_MEMORY = 4096  # prefixes (OpenAI-style: requests) the emulated cache remembers
_ANTHROPIC_ERRORS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}
_STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}
_WORD_RE = re.compile(r"\s*\S+")
_HTML_BODY = (
    b"<!DOCTYPE html>\n<html><head><title>502 Bad Gateway</title></head>"
    b"<body><h1>502 Bad Gateway</h1><p>fake upstream proxy page</p></body></html>\n"
)


def _format_duration(seconds: float) -> str:
    """Format a duration like OpenAI's ``x-ratelimit-reset-*`` headers: 20ms, 1s, 6m0s."""
    ms = max(0, math.ceil(seconds * 1000.0 - 1e-6))
    if ms < 1000:
        return f"{ms}ms"
    hours, rest = divmod(ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    secs, frac = divmod(rest, 1000)
    text = f"{secs}.{frac:03d}".rstrip("0").rstrip(".") + "s"
    if hours:
        return f"{hours}h{minutes}m{text}"
    if minutes:
        return f"{minutes}m{text}"
    return text


def _format_seconds(value: float) -> str:
    if float(value).is_integer():
        return str(int(value))
    return f"{value:g}"


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [
            part["text"]
            for part in content
            if isinstance(part, dict)
            and part.get("type") == "text"
            and isinstance(part.get("text"), str)
        ]
        return " ".join(parts)
    return ""


def _split_pieces(reply: str) -> list[str]:
    pieces: list[str] = _WORD_RE.findall(reply)
    trailing = reply[sum(len(p) for p in pieces) :]
    if trailing:
        if pieces:
            pieces[-1] += trailing
        else:
            pieces.append(trailing)
    return pieces


def _error_type(status: int) -> str:
    if status == 429:
        return "rate_limit_error"
    if 400 <= status < 500:
        return "invalid_request_error"
    return "server_error"


def _error_body(
    message: str, err_type: str, code: str | None, param: str | None = None
) -> dict[str, Any]:
    """OpenAI's error body: ``message``, ``type``, ``param`` and ``code``, always all four."""
    return {"error": {"message": message, "type": err_type, "param": param, "code": code}}


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _fault_headers(fault: Fault | None) -> list[tuple[str, str]]:
    if fault is None:
        return []
    out: list[tuple[str, str]] = []
    if fault.retry_after is not None:
        value = fault.retry_after
        out.append(("Retry-After", value if isinstance(value, str) else _format_seconds(value)))
    if fault.retry_after_ms is not None:
        out.append(("retry-after-ms", str(fault.retry_after_ms)))
    out.extend((str(k), str(v)) for k, v in fault.headers.items())
    return out


class _BadRequest(Exception):
    """A request OpenAI refuses with a 400: its message, and the ``param`` and ``code``."""

    def __init__(self, message: str, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.param = param
        self.code = code


_CHAT_ROLES = ("system", "assistant", "user", "function", "tool", "developer")


@dataclass
class _ChatRequest:
    body: dict[str, Any]
    model: str
    stream: bool
    include_usage: bool
    max_tokens: int | None
    input_tokens: int


def _messages_tokens(messages: Any) -> int:
    """The input tokens of chat ``messages``, refused (a :class:`_BadRequest` with OpenAI's
    message, ``param`` and ``code``) where OpenAI refuses them: none, not a list, a message
    that is no object or has a role chat has not."""
    if messages is None:
        raise _BadRequest(
            "Missing required parameter: 'messages'.", "messages", "missing_required_parameter"
        )
    if not isinstance(messages, list):
        raise _BadRequest("Invalid type for 'messages': expected an array.", "messages")
    if not messages:
        raise _BadRequest(
            "Invalid 'messages': empty array. Expected an array with minimum length 1, but got "
            "an empty array instead.",
            "messages",
            "empty_array",
        )
    input_tokens = 0
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise _BadRequest(
                f"Invalid type for 'messages[{i}]': expected an object.", f"messages[{i}]"
            )
        role = message.get("role")
        if role is None:
            raise _BadRequest(
                f"Missing required parameter: 'messages[{i}].role'.",
                f"messages[{i}].role",
                "missing_required_parameter",
            )
        if role not in _CHAT_ROLES:
            supported = ", ".join(repr(r) for r in _CHAT_ROLES[:-1])
            raise _BadRequest(
                f"Invalid value: {str(role)[:40]!r}. Supported values are: {supported}, and "
                f"{_CHAT_ROLES[-1]!r}.",
                f"messages[{i}].role",
                "invalid_value",
            )
        input_tokens += len(_content_text(message.get("content")).split()) + 4
    return input_tokens


def _parse_chat(raw: bytes, default_model: str, *, strict: bool = False) -> _ChatRequest:
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise _BadRequest(f"request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise _BadRequest("request body must be a JSON object")
    if strict and not body.get("model"):
        raise _BadRequest("you must provide a model parameter")
    input_tokens = _messages_tokens(body.get("messages"))
    problem = chat_tools_problem(body["messages"]) if strict else None
    if problem is not None:
        raise _BadRequest(*problem)
    max_tokens: int | None = None
    for key in ("max_tokens", "max_completion_tokens"):
        value = body.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise _BadRequest(f"'{key}' must be a non-negative integer", key, "invalid_value")
        max_tokens = value if max_tokens is None else min(max_tokens, value)
    model = body.get("model")
    options = body.get("stream_options")
    return _ChatRequest(
        body=body,
        model=model if isinstance(model, str) and model else default_model,
        stream=body.get("stream") is True,
        include_usage=isinstance(options, dict) and options.get("include_usage") is True,
        max_tokens=max_tokens,
        input_tokens=input_tokens,
    )


def _echo_reply(body: dict[str, Any]) -> str:
    text = ""
    for message in body.get("messages", []):
        if isinstance(message, dict) and message.get("role") == "user":
            text = _content_text(message.get("content"))
    return "Echo: " + text


def _framed(role: str, words: list[str], tag: str = "") -> list[str]:
    """One message's fake tokens: its words framed by 4 tokens (see the module docs)."""
    return [f"<{role}{tag}>", "<s>", *words, "</s>", "<eot>"]


def _openai_tokens(body: dict[str, Any]) -> list[str]:
    """The fake tokens of a chat-completions request (tools hashed into the first message)."""
    tools = body.get("tools")
    tag = ""
    if tools:
        canonical = canonical_json(tools, default=str)
        tag = "|" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:12]
    tokens: list[str] = []
    for i, message in enumerate(body.get("messages") or []):
        if isinstance(message, dict):
            words = _content_text(message.get("content")).split()
            tokens += _framed(str(message.get("role")), words, tag if i == 0 else "")
    return tokens


def _block_words(block: Any) -> list[str]:
    """The words of one Anthropic content block (text, tool use, tool result, image)."""
    if isinstance(block, str):
        return block.split()
    if not isinstance(block, dict):
        return []
    kind = block.get("type")
    if kind == "text" and isinstance(block.get("text"), str):
        return str(block["text"]).split()
    if kind == "tool_use":
        return json.dumps(block.get("input"), sort_keys=True, default=str).split()
    if kind == "tool_result":
        content = block.get("content")
        if isinstance(content, list):
            return [w for part in content for w in _block_words(part)]
        return str(content or "").split()
    return [f"<{kind}>"]


def _anthropic_tokens(body: dict[str, Any]) -> tuple[list[str], list[int]]:
    """The fake tokens of a Messages request, and the positions just after each
    ``cache_control`` breakpoint (tools, then the system prompt, then the messages)."""
    tokens: list[str] = []
    breakpoints: list[int] = []
    for tool in body.get("tools") or []:
        if isinstance(tool, dict):
            bare = without_breakpoint(tool)
            tokens += _framed("tool", json.dumps(bare, sort_keys=True, default=str).split())
            if "cache_control" in tool:
                breakpoints.append(len(tokens))
    parts: list[tuple[str, Any]] = []
    system = body.get("system")
    if isinstance(system, (str, list)) and system:
        parts.append(("system", system))
    parts += [
        (str(m.get("role")), m.get("content")) for m in body["messages"] if isinstance(m, dict)
    ]
    for role, content in parts:
        blocks = content if isinstance(content, list) else [content]
        tokens += [f"<{role}>", "<s>"]
        for block in blocks:
            tokens += _block_words(block)
            if isinstance(block, dict) and "cache_control" in block:
                breakpoints.append(len(tokens))
        tokens += ["</s>", "<eot>"]
    return tokens, breakpoints


def _prefix_key(tokens: list[str], length: int) -> str:
    return hashlib.sha256("\x1f".join(tokens[:length]).encode("utf-8")).hexdigest()


_TEXT_BLOCK: dict[str, Any] = {"type": "text", "text": ""}


def _messages_problem(body: Any, version: str | None, strict: bool = False) -> str | None:
    """Why a Messages request is invalid (Anthropic answers 400), or None; with ``strict``,
    also tool results that do not answer the tool uses before them."""
    if not version:
        return "anthropic-version: header is required"
    if not isinstance(body, dict):
        return "request body must be a JSON object"
    if not isinstance(body.get("model"), str) or not body["model"]:
        return "model: Field required"
    max_tokens = body.get("max_tokens")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        return "max_tokens: Field required (an integer >= 1)"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages: at least one message is required"
    for message in messages:
        if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
            return "messages: each message needs role 'user' or 'assistant'"
        if not isinstance(message.get("content"), (str, list)):
            return "messages: each message needs content"
    for i, message in enumerate(messages):
        if not message["content"] and (i < len(messages) - 1 or message["role"] == "user"):
            return (
                f"messages.{i}: all messages must have non-empty content except for the "
                "optional final assistant message"
            )
    system = body.get("system")
    if system is not None and not isinstance(system, (str, list)):
        return "system: must be a string or a list of text blocks"
    return (messages_tools_problem(messages) if strict else None) or _breakpoints_problem(body)


def _breakpoints_problem(body: dict[str, Any]) -> str | None:
    """Why a Messages request's ``cache_control`` breakpoints are refused (Anthropic's 400):
    one on a block that takes none (thinking, an empty text), more than 4, or a 1-hour one
    after a 5-minute one (tools, then system, then messages)."""
    blocks: list[Any] = list(body.get("tools") or [])
    system = body.get("system")
    blocks += system if isinstance(system, list) else []
    for i, message in enumerate(body["messages"]):
        for j, block in enumerate(
            message["content"] if isinstance(message["content"], list) else []
        ):
            refused = _unmarkable(block)
            if refused is not None:
                return f"messages.{i}.content.{j}.{refused}"
            blocks.append(block)
            inner = block.get("content") if isinstance(block, dict) else None
            blocks += inner if isinstance(inner, list) else []  # (a tool result's blocks)
    blocks.append(body)  # (a top-level cache_control: automatic caching, on the last block)
    ttls = [
        str(b["cache_control"].get("ttl") or "5m")
        for b in blocks
        if isinstance(b, dict) and isinstance(b.get("cache_control"), dict)
    ]
    if len(ttls) > 4:
        return f"A maximum of 4 blocks with cache_control may be provided. Found {len(ttls)}."
    if "1h" in ttls and "5m" in ttls[: len(ttls) - ttls[::-1].index("1h")]:
        return (
            "a ttl='1h' cache_control block must not come after a ttl='5m' cache_control "
            "block. Note that blocks are processed in the following order: `tools`, `system`, "
            "`messages`."
        )
    return None


def _unmarkable(block: object) -> str | None:
    """Claude's words for a ``cache_control`` on a block that takes none (None: it may)."""
    if not isinstance(block, dict) or "cache_control" not in block:
        return None
    kind = block.get("type")
    if kind in ("thinking", "redacted_thinking"):
        return f"{kind}.cache_control: Extra inputs are not permitted"
    if kind == "text" and block.get("text") == "":
        return "text: cache_control cannot be set for empty text blocks"
    return None


_BASE58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"


def _request_id(n: int, anthropic: bool = False) -> str:
    """The id of a server's ``n``-th request (the same each run), shaped as each API's:
    OpenAI's ``x-request-id`` (``req_`` and 32 hex digits), or with ``anthropic`` its
    ``request-id`` header and the ``request_id`` of its error body (``req_011C`` and 20
    base58 characters, as ``req_011CSHoEeqs5C35K2UUqR7Fy``)."""
    digest = hashlib.sha256(b"llmguard-fake-request %d" % n).digest()
    if not anthropic:
        return "req_" + digest.hex()[:32]
    number, tail = int.from_bytes(digest[:16], "big"), ""
    for _ in range(20):
        number, digit = divmod(number, 58)
        tail += _BASE58[digit]
    return "req_011C" + tail


def _anthropic_error(
    status: int, message: str, code: str | None = None, *, n: int | None = None
) -> bytes:
    """Anthropic's error body; ``code``, the cause, in ``error.details.error_code``; with
    ``n``, the request's id in ``request_id``, as Anthropic's HTTP errors and a stream's
    ``event: error`` both carry it."""
    kind = _ANTHROPIC_ERRORS.get(status, "api_error" if status >= 500 else "invalid_request_error")
    error: dict[str, Any] = {"type": kind, "message": message}
    if code is not None:
        error["details"] = {"error_code": code}
    body: dict[str, Any] = {"type": "error", "error": error}
    if n is not None:
        body["request_id"] = _request_id(n, anthropic=True)
    return _dumps(body)


def _sse(kind: str, data: dict[str, Any]) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + _dumps({"type": kind, **data}) + b"\n\n"


# --------------------------------------------------------------------------- server
