"""A sampling parameter a Claude model refuses ("`temperature` is deprecated for this model.",
Opus 4.7 and later): the attempt is sent again without it, and later calls to that model
leave it out; nothing Claude did not name is ever left out."""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import anyio
import pytest

from llmguard_sdk import AnthropicProvider, ChatRequest, ChatResponse, Guard
from llmguard_sdk.errors import BadRequestError
from llmguard_sdk.providers._anthropic_sampling import RefusedSampling

from .conftest import USER
from .rawserver import RawServer, http_response, sse_head

_MESSAGE: dict[str, Any] = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "claude-next",
    "content": [{"type": "text", "text": "hello"}],
    "stop_reason": "end_turn",
    "usage": {"input_tokens": 3, "output_tokens": 1},
}
_EVENTS: list[dict[str, Any]] = [
    {"type": "message_start", "message": {**_MESSAGE, "content": [], "stop_reason": None}},
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "hello"}},
    {"type": "content_block_stop", "index": 0},
    {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 1}},
    {"type": "message_stop"},
]
_STREAM = sse_head() + b"".join(
    f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in _EVENTS
)


def _refusal(message: str) -> bytes:
    error = {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
    return http_response(json.dumps(error).encode(), status="400 Bad Request")


class _Claude(RawServer):
    """Claude: a 400 refusal naming the first of ``refused`` a request's body holds (each
    ``(name, message)``; model ``claude-old`` refuses none), else its answer (a stream's
    events where it asked for a stream)."""

    def __init__(self, *refused: tuple[str, str]) -> None:
        self.refused = refused
        super().__init__(b"")

    def respond(self, body: bytes) -> bytes:
        payload = json.loads(body)
        for name, message in self.refused:
            if name in payload and payload.get("model") != "claude-old":
                return _refusal(message)
        return _STREAM if payload.get("stream") else http_response(json.dumps(_MESSAGE).encode())

    def sent(self) -> list[dict[str, Any]]:
        return [json.loads(body) for body in self.received]


_DEPRECATED = ("temperature", "`temperature` is deprecated for this model.")


def _ask(guard: Guard, mode: str, **options: Any) -> str:
    """The text of one call through ``guard`` in ``mode`` (plain or streamed, sync or async)."""
    if mode == "sync":
        text: str = guard.chat(USER, model="claude-next", **options).text
        return text
    if mode == "stream":
        with guard.chat(USER, model="claude-next", stream=True, **options) as chunks:
            return "".join(chunk.text for chunk in chunks)

    async def run() -> str:
        try:
            if mode == "async":
                answer: ChatResponse = await guard.achat(USER, model="claude-next", **options)
                return answer.text
            chunks = await guard.achat(USER, model="claude-next", stream=True, **options)
            async with chunks:
                return "".join([chunk.text async for chunk in chunks])
        finally:
            await guard.aclose()

    return anyio.run(run)


@pytest.mark.parametrize("mode", ["sync", "async", "stream", "astream"])
def test_a_deprecated_sampling_parameter_is_left_out_once_claude_says_so(
    mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    """AnthropicProvider sent the caller's temperature to every model, and a model that
    refuses it answered each call with a 400: the call failed (its route did, in a chain)."""
    with (
        caplog.at_level(logging.WARNING, logger="llmguard_sdk"),
        _Claude(_DEPRECATED) as claude,
        Guard(AnthropicProvider(claude.base_url, api_key="k"), retry=None, environ={}) as guard,
    ):
        assert _ask(guard, mode, temperature=0.2, top_p=0.9) == "hello"
        assert _ask(guard, mode, temperature=0.2, top_p=0.9) == "hello"
    first, again, later = claude.sent()
    assert first["temperature"] == 0.2
    assert "temperature" not in again
    assert "temperature" not in later
    assert again["top_p"] == later["top_p"] == 0.9  # Claude did not name it: sent as asked
    warned = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert len(warned) == 1
    assert "temperature" in warned[0]
    assert "claude-next" in warned[0]


def test_each_parameter_claude_names_in_turn_is_left_out() -> None:
    claude = _Claude(_DEPRECATED, ("top_p", "`top_p` is deprecated for this model."))
    with claude, Guard(AnthropicProvider(claude.base_url), retry=None, environ={}) as guard:
        guard.chat(USER, model="claude-next", temperature=0.2, top_p=0.9)
    assert [sorted({"temperature", "top_p"} & set(body)) for body in claude.sent()] == [
        ["temperature", "top_p"],
        ["top_p"],
        [],
    ]


def test_top_p_is_left_out_where_the_model_takes_only_one_of_the_two() -> None:
    both = "`temperature` and `top_p` cannot both be specified for this model. Please use only one."
    request = ChatRequest.model_validate({"messages": USER, "temperature": 0.2, "top_p": 0.9})
    with _Claude(("top_p", both)) as claude:
        provider = AnthropicProvider(claude.base_url)
        try:
            provider.complete(request, model="claude-next", deadline=time.monotonic() + 10)
        finally:
            provider.close()
    assert [(b.get("temperature"), b.get("top_p")) for b in claude.sent()] == [
        (0.2, 0.9),
        (0.2, None),
    ]


def test_another_model_still_gets_the_parameter() -> None:
    with (
        _Claude(_DEPRECATED) as claude,
        Guard(AnthropicProvider(claude.base_url), retry=None, environ={}) as guard,
    ):
        guard.chat(USER, model="claude-next", temperature=0.2)
        guard.chat(USER, model="claude-old", temperature=0.2)
    assert claude.sent()[-1]["temperature"] == 0.2


@pytest.mark.parametrize(
    "message",
    [
        "max_tokens: Field required",
        "`temperature` may only be set to 1 when thinking is enabled.",  # the request's, not
        "temperature: range: 0..1",  # the model's
    ],
)
def test_no_other_400_is_sent_again(message: str) -> None:
    with (
        _Claude(("temperature", message)) as claude,
        Guard(AnthropicProvider(claude.base_url), retry=None, environ={}) as guard,
        pytest.raises(BadRequestError),
    ):
        guard.chat(USER, model="claude-next", temperature=0.2)
    assert len(claude.received) == 1


def test_a_refusal_of_a_parameter_not_sent_is_not_sent_again() -> None:
    with (
        _Claude(("messages", _DEPRECATED[1])) as claude,
        Guard(AnthropicProvider(claude.base_url), retry=None, environ={}) as guard,
        pytest.raises(BadRequestError),
    ):
        guard.chat(USER, model="claude-next")
    assert len(claude.received) == 1


def test_what_models_refused_is_remembered_for_the_latest_models_only() -> None:
    refused = RefusedSampling("claude", limit=2)
    error = BadRequestError(_DEPRECATED[1], status_code=400)
    for model in ("a", "b", "c"):
        assert refused.learn(model, error, {"temperature": 0.2})
    assert [refused.left_out(m) for m in ("a", "b", "c")] == [
        frozenset(),
        frozenset({"temperature"}),
        frozenset({"temperature"}),
    ]
