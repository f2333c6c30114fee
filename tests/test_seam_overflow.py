"""An input too large answered through the seam looks like the overflow it is, to each SDK
and to the frameworks over them: the Guard's own ``max_input_tokens`` refusal as a
provider's context overflow does (OpenAI's ``context_length_exceeded``, LangChain's
``ContextOverflowError``), and through the Messages seam in Anthropic's words (``prompt is
too long: N tokens > M maximum``, which LangChain's Anthropic model looks for)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import openai
import pytest

from llmguard_sdk import (
    ContextLengthExceededError,
    Guard,
    InputTooLargeError,
    OpenAICompatibleProvider,
)
from llmguard_sdk.client import _openai_client, anthropic_client
from llmguard_sdk.testing import FakeProvider, Fault
from llmguard_sdk.transport import http_client

from .conftest import require_module
from .test_client_openai_errors import overflowing

MakeGuard = Callable[..., Guard]
LONG: Any = [{"role": "user", "content": "hello there " * 40}]
LIMIT = 20


@pytest.fixture
def anthropic() -> Any:
    return require_module("anthropic", "anthropic is a dev dependency")


def _seam(guard: Guard) -> openai.OpenAI:
    return openai.OpenAI(
        api_key="sk-x", base_url="http://guard.test/v1", http_client=http_client(guard)
    )


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("api", ["chat", "responses"])
def test_max_input_tokens_is_an_overflow_to_openai_s_sdk(
    fake: FakeProvider, make_guard: MakeGuard, api: str, stream: bool
) -> None:
    # the Guard's refusal was a 400 without a code: LangChain (and any code that tells an
    # overflow by context_length_exceeded) saw a plain bad request, not an input to trim
    seam = _seam(make_guard(fake, max_input_tokens=LIMIT))
    create: Any = seam.chat.completions.create if api == "chat" else seam.responses.create
    ask = {"messages": LONG} if api == "chat" else {"input": LONG[0]["content"]}
    with pytest.raises(openai.BadRequestError) as caught:
        create(model="m", stream=stream, **ask)
    error = caught.value
    assert (error.status_code, error.code, error.type) == (
        400,
        "context_length_exceeded",
        "invalid_request_error",
    )
    assert "maximum context length" in error.message
    assert f"the limit is {LIMIT}" in error.message  # the Guard's own words stay
    assert error.response.headers["x-llmguard-error"] == "InputTooLargeError"
    assert fake.requests == []


def test_max_input_tokens_is_langchain_s_context_overflow(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    lc = require_module("langchain_openai", "langchain-openai is a dev dependency")
    from langchain_core.exceptions import ContextOverflowError

    client = _openai_client(make_guard(fake, max_input_tokens=LIMIT))
    llm = lc.ChatOpenAI(
        model="m", api_key="sk-not-sent", client=client.chat.completions, root_client=client
    )
    with pytest.raises(ContextOverflowError) as caught:
        llm.invoke(LONG[0]["content"])
    cause: Any = caught.value.__cause__
    assert isinstance(cause, InputTooLargeError)
    assert isinstance(cause, openai.BadRequestError)
    assert cause.code == "context_length_exceeded"


def test_max_input_tokens_in_anthropic_s_words(anthropic: Any, fake: FakeProvider) -> None:
    # the Messages seam answered the Guard's text alone: LangChain's Anthropic model (and
    # whatever reads Claude's errors) tells an overflow by "prompt is too long"
    guard = Guard(
        OpenAICompatibleProvider(fake.base_url, model="fake-model", name="primary"),
        max_input_tokens=LIMIT,
        environ={},
    )
    with pytest.raises(anthropic.BadRequestError) as caught:
        anthropic_client(guard).messages.create(model="m", max_tokens=10, messages=LONG)
    error: Any = caught.value
    refused = error.response.extensions["llmguard_error"]
    assert isinstance(refused, InputTooLargeError)
    assert issubclass(type(error), InputTooLargeError)  # (isinstance would narrow Any)
    assert error.status_code == 400
    assert error.body["error"]["type"] == "invalid_request_error"
    words = f"prompt is too long: {refused.tokens} tokens > {LIMIT} maximum"
    assert error.body["error"]["message"].startswith(words)
    assert "prompt is too long" in error.message  # where LangChain looks
    plain = anthropic.Anthropic(
        api_key="sk-x", base_url="http://guard.test", http_client=http_client(guard)
    )
    with pytest.raises(anthropic.BadRequestError) as seen:
        list(plain.messages.create(model="m", max_tokens=10, messages=LONG, stream=True))
    assert seen.value.body["error"]["message"].startswith(words)
    guard.close()


@pytest.mark.parametrize("where", ["provider", "window"])
def test_a_provider_s_overflow_in_anthropic_s_words(
    anthropic: Any, fake: FakeProvider, make_guard: MakeGuard, where: str
) -> None:
    guard = overflowing(where, fake, make_guard)
    with pytest.raises(anthropic.BadRequestError) as caught:
        anthropic_client(guard).messages.create(model="m", max_tokens=10, messages=LONG)
    error: Any = caught.value
    assert error.body["error"]["type"] == "invalid_request_error"
    assert error.body["error"]["message"].startswith("prompt is too long")
    assert "prompt is too long" in error.message
    assert issubclass(type(error), ContextLengthExceededError)
    guard.close()


# a provider's own words for an overflow, and the numbers in them (tokens, maximum)
_WORDINGS = [
    (
        "This model's maximum context length is 8192 tokens. However, your messages resulted"
        " in 9001 tokens. Please reduce the length of the messages.",
        (9001, 8192),
    ),
    (
        "This model's maximum context length is 4096 tokens. However, you requested 5000"
        " tokens (4000 in the messages, 1000 in the completion). Please reduce the length of"
        " the messages or completion.",
        (5000, 4096),
    ),
    (
        "This model's maximum context length is 4096 tokens. However, your request has 4500"
        " input tokens. Please reduce the length of the input messages.",
        (4500, 4096),
    ),
    ("prompt is too long: 210000 tokens > 200000 maximum", (210000, 200000)),
]


@pytest.mark.parametrize(
    ("said", "numbers"), _WORDINGS, ids=["openai", "vllm", "vllm-input", "claude"]
)
def test_a_provider_s_overflow_keeps_its_numbers_in_anthropic_s_words(
    anthropic: Any,
    fake: FakeProvider,
    make_guard: MakeGuard,
    said: str,
    numbers: tuple[int, int],
) -> None:
    # the Messages seam answered "prompt is too long: This model's maximum ..." without
    # Anthropic's "N tokens > M maximum", which code that trims by the numbers reads
    fake.always(Fault(status=400, error_code="context_length_exceeded", error_message=said))
    guard = make_guard(fake, retry=None, breaker=None)
    with pytest.raises(anthropic.BadRequestError) as caught:
        anthropic_client(guard).messages.create(model="m", max_tokens=10, messages=LONG)
    message = caught.value.body["error"]["message"]
    assert message.startswith(f"prompt is too long: {numbers[0]} tokens > {numbers[1]} maximum")
    assert said in message  # the provider's own words stay


def test_a_known_window_s_overflow_has_its_numbers_in_anthropic_s_words(
    anthropic: Any, fake: FakeProvider, make_guard: MakeGuard
) -> None:
    guard = overflowing("window", fake, make_guard)
    with pytest.raises(anthropic.BadRequestError) as caught:
        anthropic_client(guard).messages.create(model="m", max_tokens=10, messages=LONG)
    message = caught.value.body["error"]["message"]
    assert re.match(r"prompt is too long: \d+ tokens > 8 maximum \(", message), message
    guard.close()


def test_an_overflow_without_numbers_is_said_without_them(
    anthropic: Any, fake: FakeProvider, make_guard: MakeGuard
) -> None:
    fake.always(Fault(status=400, error_code="context_length_exceeded"))
    guard = make_guard(fake, retry=None, breaker=None)
    with pytest.raises(anthropic.BadRequestError) as caught:
        anthropic_client(guard).messages.create(model="m", max_tokens=10, messages=LONG)
    message = caught.value.body["error"]["message"]
    assert message.startswith("prompt is too long: fake error 400")
