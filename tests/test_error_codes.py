"""Error objects whose kind was read from no field the tables know: a numeric ``code`` sent as
a string (LiteLLM's proxy)."""

from __future__ import annotations

import json

import pytest

from llmguard_sdk import (
    BadRequestError,
    OpenAICompatibleProvider,
    ProviderError,
    ProviderTimeoutError,
    ProviderUnavailableError,
    RateLimitedError,
)

from .rawserver import RawServer, http_response, raised_by, seen, sse_head


def _chat_error(error: dict[str, object], streaming: bool) -> ProviderError:
    """The error a chat route raises for a 200 answer (or a stream's event) of ``error``."""
    body = json.dumps({"error": error}).encode()
    answer = (sse_head(), (b"data: " + body + b"\n\n",)) if streaming else (http_response(body),)
    with RawServer(*answer) as raw:
        return raised_by(OpenAICompatibleProvider(raw.base_url, name="p"), streaming)


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("408", (ProviderTimeoutError, 408, True)),
        ("429", (RateLimitedError, 429, True)),
        ("400", (BadRequestError, 400, False)),
        ("503", (ProviderUnavailableError, 503, True)),
        # no HTTP error status: the answer's own 200, unknown kind
        ("200", (ProviderUnavailableError, 200, True)),
        ("4080", (ProviderUnavailableError, 200, True)),
        ("40", (ProviderUnavailableError, 200, True)),
        ("٤٠٨", (ProviderUnavailableError, 200, True)),  # Arabic-Indic digits: no status
    ],
)
def test_a_numeric_code_sent_as_a_string_is_the_status_it_names(
    code: str, expected: tuple[type[ProviderError], int, bool], streaming: bool
) -> None:
    """LiteLLM's proxy sends ``"code": "408"``: it was read as no code at all, a retried
    ProviderUnavailableError with status 200 (a timeout, a bad request alike)."""
    error = {"message": "it failed", "type": "None", "param": "None", "code": code}
    raised = _chat_error(error, streaming)
    assert seen(raised) == expected
    assert "it failed" in str(raised)
