"""A prompt longer than a llama.cpp server's context is the context overflow it is
(:class:`ContextLengthExceededError`: the call moves on to a route with room, and the
Messages seam says it in Anthropic's words, ``prompt is too long: N tokens > M maximum``),
as llama.cpp's own server (llama-server) words it and as llama-cpp-python's server
(``llama_cpp.server``, run here with the bundled model) does."""

from __future__ import annotations

import json
from typing import Any

import pytest

from llmguard_sdk import (
    BadRequestError,
    CallEvent,
    ContextLengthExceededError,
    Guard,
    OpenAICompatibleProvider,
)
from llmguard_sdk.client import anthropic_client
from llmguard_sdk.testing import FakeProvider, Fault

from .conftest import require_module
from .llamaserver import llama_server
from .rawserver import RawServer, http_response, raised_by, sse_head

ASK: Any = [{"role": "user", "content": "two and two?"}]

# llama.cpp's server's words for a prompt past its context, as its source (tools/server)
# writes them; they moved between builds, the error's type and fields did not
LLAMA_CPP = {
    "old": "the request exceeds the available context size, try increasing it",
    "counted": "request (430 tokens) exceeds the available context size (256 tokens), try"
    " increasing it",
    "new": "request (430 tokens) exceeds context size (256 tokens)",
    "multimodal": "input (430 tokens) is larger than the max context size (256 tokens). skipping",
}


def _llama_cpp_error(said: str) -> dict[str, Any]:
    """llama.cpp's error object for an input past its context (format_error_response's
    ``exceed_context_size_error``, the counts beside the words)."""
    return {
        "code": 400,
        "message": said,
        "type": "exceed_context_size_error",
        "n_prompt_tokens": 430,
        "n_ctx": 256,
    }


def _refusal(said: str) -> bytes:
    """llama.cpp's 400 answer (a plain call's, and a stream's refused before it began)."""
    body = json.dumps({"error": _llama_cpp_error(said)}).encode()
    return http_response(body, status="400 Bad Request")


@pytest.mark.parametrize("streaming", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("wording", list(LLAMA_CPP))
def test_llama_cpp_s_overflow_is_a_context_overflow(wording: str, streaming: bool) -> None:
    """It was a plain BadRequestError: the call stopped there, as for a request that fails
    everywhere, instead of moving on to a route whose context holds it."""
    with RawServer(_refusal(LLAMA_CPP[wording])) as raw:
        error = raised_by(OpenAICompatibleProvider(raw.base_url, model="m"), streaming)
    assert isinstance(error, ContextLengthExceededError)
    assert error.status_code == 400


def test_llama_cpp_s_overflow_inside_a_stream_is_a_context_overflow() -> None:
    """An error event in the stream (as llama.cpp sends one that came after the answer
    began) is the same overflow."""
    said = LLAMA_CPP["counted"]
    event = b"data: " + json.dumps({"error": _llama_cpp_error(said)}).encode() + b"\n\n"
    with RawServer(sse_head(), (event,)) as raw:
        error = raised_by(OpenAICompatibleProvider(raw.base_url, model="m"), True)
    assert isinstance(error, ContextLengthExceededError)
    assert str(error).startswith(said)


def test_llama_cpp_s_overflow_moves_the_call_to_the_next_route(fake: FakeProvider) -> None:
    events: list[CallEvent] = []
    with RawServer(_refusal(LLAMA_CPP["new"])) as raw:
        routes = [
            OpenAICompatibleProvider(raw.base_url, model="m", name="llama"),
            OpenAICompatibleProvider(fake.base_url, model=fake.model, name="backup"),
        ]
        with Guard(routes, environ={}, retry=None, hooks=[events.append]) as guard:
            answer = guard.chat(ASK)
    assert answer.route == "backup"
    assert events[-1].route_errors == (("llama", "llmguard_sdk.errors.ContextLengthExceededError"),)


@pytest.mark.parametrize("wording", list(LLAMA_CPP))
def test_llama_cpp_s_overflow_keeps_its_numbers_in_anthropic_s_words(wording: str) -> None:
    """The numbers lead the Messages seam's words, from llama.cpp's words where they are
    there, else from its error's ``n_prompt_tokens`` and ``n_ctx``."""
    anthropic = require_module("anthropic", "anthropic is a dev dependency")
    with (
        RawServer(_refusal(LLAMA_CPP[wording])) as raw,
        Guard(OpenAICompatibleProvider(raw.base_url, model="m"), environ={}, retry=None) as guard,
        pytest.raises(anthropic.BadRequestError) as caught,
    ):
        anthropic_client(guard).messages.create(model="m", max_tokens=10, messages=ASK)
    message = caught.value.body["error"]["message"]
    assert message.startswith("prompt is too long: 430 tokens > 256 maximum (")
    assert LLAMA_CPP[wording] in message  # the server's own words stay


def test_llama_cpp_python_s_own_words_keep_their_numbers(fake: FakeProvider) -> None:
    """llama-cpp-python's own words for it (its ``Llama`` raises them; its server words them
    as OpenAI does, below)."""
    anthropic = require_module("anthropic", "anthropic is a dev dependency")
    said = "Requested tokens (430) exceed context window of 256"
    fake.always(Fault(status=400, error_message=said))
    guard = Guard(OpenAICompatibleProvider(fake.base_url, model="m"), environ={}, retry=None)
    with guard, pytest.raises(anthropic.BadRequestError) as caught:
        anthropic_client(guard).messages.create(model="m", max_tokens=10, messages=ASK)
    message = caught.value.body["error"]["message"]
    assert message.startswith("prompt is too long: 430 tokens > 256 maximum (")
    assert issubclass(type(caught.value), ContextLengthExceededError)


def test_a_bad_request_that_names_no_context_stays_one() -> None:
    """(The words are llama.cpp's overflow's, not any refusal's.)"""
    body = {"error": {"code": 400, "message": "invalid 'n_probs'", "type": "invalid_request_error"}}
    with RawServer(http_response(json.dumps(body).encode(), status="400 Bad Request")) as raw:
        error = raised_by(OpenAICompatibleProvider(raw.base_url, model="m"), False)
    assert type(error) is BadRequestError


# -- llama-cpp-python's server, with the bundled model -------------------------------------


@pytest.mark.local_model
def test_llama_cpp_python_s_server_overflow_is_a_context_overflow(fake: FakeProvider) -> None:
    """Its 400 (OpenAI's words: ``maximum context length is 256 tokens. However, you
    requested N tokens``) is an overflow whose numbers the Messages seam keeps, and the call
    moves on to a route with room."""
    anthropic = require_module("anthropic", "anthropic is a dev dependency")
    long: Any = [{"role": "user", "content": " ".join(["word"] * 400)}]
    events: list[CallEvent] = []
    with llama_server(n_ctx=256) as base_url:
        route = OpenAICompatibleProvider(base_url, model="smollm2", name="llama")
        with Guard(route, environ={}, retry=None, timeout=60) as guard:
            with pytest.raises(ContextLengthExceededError) as refused:
                guard.chat(long, max_tokens=10)
            with pytest.raises(anthropic.BadRequestError) as caught:
                anthropic_client(guard).messages.create(model="m", max_tokens=10, messages=long)
        backup = OpenAICompatibleProvider(fake.base_url, model=fake.model, name="backup")
        with Guard([route, backup], environ={}, retry=None, hooks=[events.append]) as guard:
            assert guard.chat(long, max_tokens=10).route == "backup"
    assert refused.value.status_code == 400
    assert "maximum context length is 256 tokens" in str(refused.value)
    message = caught.value.body["error"]["message"]
    assert message.startswith("prompt is too long: ")
    assert " tokens > 256 maximum (" in message
    assert events[-1].route_errors == (("llama", "llmguard_sdk.errors.ContextLengthExceededError"),)
