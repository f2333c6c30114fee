"""A Claude web search whose result is an error (``max_uses_exceeded``: Claude tried one
search more than the tool's ``max_uses``; ``too_many_requests``, ``unavailable`` ...) is not
billed: its ``server_tool_use`` block is not counted as a search, whole or streamed, so the
searches charged are the ones Claude's usage reports (and, for a stream cut before its usage,
the ones that did not fail). Real Redis budgets, a loopback server answering Claude's
shapes."""

from __future__ import annotations

import json
from typing import Any

import pytest

from llmguard_sdk import Guard
from llmguard_sdk.budget import Budget, Budgets, Price, PriceTable
from llmguard_sdk.errors import ProviderUnavailableError, StreamInterruptedError
from llmguard_sdk.models import ChatResponse
from llmguard_sdk.providers import AnthropicProvider

from .rawserver import RawServer, http_response, sse_head

PRICES = PriceTable.default_table().with_prices({"claude-fake": Price(input=3.0, output=15.0)})
TOOLS = [{"type": "web_search_20250305", "name": "web_search", "max_uses": 2}]
USER = [{"role": "user", "content": "what is new today?"}]
FAILED = {"type": "web_search_tool_result_error", "error_code": "max_uses_exceeded"}
TOKENS_USD = (100 * 3.0 + 20 * 15.0) / 1e6  # the answer's 100 tokens in, 20 out


def _blocks() -> list[dict[str, Any]]:
    """Three searches begun; the third's result an error (over ``max_uses``), then text."""
    blocks: list[dict[str, Any]] = []
    for place in range(3):
        use_id = f"srvtoolu_{place}"
        blocks.append(
            {"type": "server_tool_use", "id": use_id, "name": "web_search", "input": {"q": "x"}}
        )
        result: Any = FAILED if place == 2 else []
        blocks.append({"type": "web_search_tool_result", "tool_use_id": use_id, "content": result})
    return [*blocks, {"type": "text", "text": "done"}]


USAGE = {"input_tokens": 100, "output_tokens": 20, "server_tool_use": {"web_search_requests": 2}}


def _message() -> bytes:
    message = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-fake",
        "content": _blocks(),
        "stop_reason": "end_turn",
        "usage": USAGE,
    }
    return http_response(json.dumps(message).encode())


def _event(data: dict[str, Any]) -> bytes:
    return f"event: {data['type']}\ndata: {json.dumps(data)}\n\n".encode()


def _stream(*, whole: bool, blocks: list[dict[str, Any]] | None = None) -> bytes:
    """The answer as Claude streams it (``blocks``: its content, :func:`_blocks` by
    default); cut before ``message_delta`` unless ``whole``."""
    started: dict[str, Any] = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-fake",
    }
    started |= {"content": [], "usage": {"input_tokens": 100, "output_tokens": 1}}
    events = [_event({"type": "message_start", "message": started})]
    for index, block in enumerate(_blocks() if blocks is None else blocks):
        opened = {**block, "text": ""} if block["type"] == "text" else block
        begun = {"type": "content_block_start", "index": index, "content_block": opened}
        events.append(_event(begun))
        if block["type"] == "text":
            delta = {"type": "text_delta", "text": block["text"]}
            events.append(_event({"type": "content_block_delta", "index": index, "delta": delta}))
        events.append(_event({"type": "content_block_stop", "index": index}))
    if whole:
        delta = {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": USAGE}
        events += [_event(delta), _event({"type": "message_stop"})]
    return sse_head() + b"".join(events)


def _guard(server: RawServer, redis: tuple[str, str]) -> Guard:
    route = AnthropicProvider(f"http://127.0.0.1:{server.port}", model="claude-fake", api_key="x")
    budgets = Budgets([Budget(limit_usd=5.0)], prices=PRICES)
    store, prefix = redis  # (not retried: the server answers each request alike)
    return Guard(route, budgets=budgets, environ={}, store=store, key_prefix=prefix, retry=None)


def _spent(guard: Guard) -> tuple[float, float]:
    row = guard.budget_status()[0]
    return float(row["spent_usd"]), float(row["held_usd"])


@pytest.mark.parametrize("stream", [False, True])
def test_a_failed_claude_search_is_not_charged(
    redis_url: str, redis_prefix: str, stream: bool
) -> None:
    """Claude's usage says two searches (the third failed, over ``max_uses``): two are on
    the answer's usage and charged, $0.02, within what the call held (three were, $0.03)."""
    server = RawServer(_stream(whole=True) if stream else _message())
    with server, _guard(server, (redis_url, redis_prefix)) as guard:
        if stream:
            with guard.chat(USER, stream=True, max_tokens=50, tools=TOOLS) as streamed:
                list(streamed)
            answer: ChatResponse = streamed.response
        else:
            answer = guard.chat(USER, max_tokens=50, tools=TOOLS)
        spent, held = _spent(guard)
    assert answer.usage is not None
    assert answer.usage.web_search_requests == 2
    assert answer.cost_usd == pytest.approx(TOKENS_USD + 0.02)
    assert spent == pytest.approx(TOKENS_USD + 0.02, abs=1e-9)
    assert held == 0


def test_a_cut_claude_stream_is_not_charged_its_failed_search(
    redis_url: str, redis_prefix: str
) -> None:
    """The stream is cut after its text, before ``message_delta``: charged the two searches
    that ran (the third's result was an error), besides its tokens (under $0.001)."""
    server = RawServer(_stream(whole=False))
    with server, _guard(server, (redis_url, redis_prefix)) as guard:
        with (
            pytest.raises(StreamInterruptedError),
            guard.chat(USER, stream=True, max_tokens=50, tools=TOOLS) as streamed,
        ):
            list(streamed)
        spent, held = _spent(guard)
    assert 0.02 < spent < 0.021
    assert held == 0


def test_a_claude_stream_cut_before_its_text_is_charged_the_searches_that_ran(
    redis_url: str, redis_prefix: str
) -> None:
    """Cut before any text, after three searches began: the first's result came, the
    second's is an error (not billed), the third's never came. Charged two searches ($0.02)
    besides the prompt (before: the prompt alone): a search whose ``server_tool_use`` block
    came counts until its result says it failed, as Anthropic's count of the searches
    (``message_delta``'s) never came."""
    blocks = _blocks()[:5]
    blocks[3] = {**blocks[3], "content": FAILED}
    server = RawServer(_stream(whole=False, blocks=blocks))
    with server, _guard(server, (redis_url, redis_prefix)) as guard:
        with (
            pytest.raises(ProviderUnavailableError),  # (cut before any text)
            guard.chat(USER, stream=True, max_tokens=50, tools=TOOLS) as streamed,
        ):
            list(streamed)
        spent, held = _spent(guard)
    assert 0.02 < spent < 0.021
    assert held == 0
