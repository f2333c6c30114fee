"""Error objects whose kind was read from no field the tables know: a numeric ``code`` sent as
a string (LiteLLM's proxy), the Responses API's request-error codes (a bad image, a policy
refusal), and the error object inside Gemini's OpenAI-compatible list body."""

from __future__ import annotations

import json
import typing

import pytest
from openai.types.responses import ResponseError

from llmguard_sdk import (
    BadRequestError,
    ContentPolicyError,
    OpenAICompatibleProvider,
    OpenAIResponsesProvider,
    ProviderError,
    ProviderTimeoutError,
    ProviderUnavailableError,
    RateLimitedError,
)
from llmguard_sdk.providers._error_kinds import POLICY_CODES, body_error, error_kind

from .rawserver import RawServer, http_response, raised_by, seen, sse_head

# the Responses API's error codes (openai-python's ResponseError.code, the authority) that
# the tables read by a name of their own; every other one says the request is at fault (a bad
# image, a policy refusal): another attempt, or another route, gets the same refusal
KNOWN = {"server_error", "rate_limit_exceeded", "invalid_prompt", "vector_store_timeout"}
REQUEST_FAULTS = sorted(set(typing.get_args(ResponseError.model_fields["code"].annotation)) - KNOWN)


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
    error: dict[str, object] = {
        "message": "it failed",
        "type": "None",
        "param": "None",
        "code": code,
    }
    raised = _chat_error(error, streaming)
    assert seen(raised) == expected
    assert "it failed" in str(raised)


def test_the_responses_request_faults_are_the_bad_inputs_and_refusals() -> None:
    assert {"invalid_image_url", "image_too_large", "bio_policy", "data_residency_mismatch"} <= set(
        REQUEST_FAULTS
    )
    for code in KNOWN:  # read by the tables as the status their name says, not the 200's
        assert error_kind({"code": code}, 200)[1] != 200, code


def _responses_failed(code: str, streaming: bool) -> ProviderError:
    error = {"code": code, "message": f"it is {code}"}
    failed = {"id": "resp_1", "object": "response", "status": "failed", "error": error}
    parts: tuple[bytes, ...] = ()
    if streaming:
        event = {"type": "response.failed", "response": {**failed, "output": []}}
        head, parts = sse_head(), (b"data: " + json.dumps(event).encode() + b"\n\n",)
    else:
        head = http_response(json.dumps({**failed, "output": []}).encode())
    with RawServer(head, parts) as raw:
        return raised_by(OpenAIResponsesProvider(raw.base_url, name="r"), streaming)


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize("code", REQUEST_FAULTS)
def test_a_responses_request_fault_is_a_bad_request(code: str, streaming: bool) -> None:
    """A bad image or a policy refusal in a failed response matched no word: a retried
    ProviderUnavailableError with status 200, asked again and again and then of every
    route. It is the request's fault: a BadRequestError (400), not retried; a usage policy's
    refusal its ContentPolicyError (a BadRequestError too), with its code."""
    kind = ContentPolicyError if code in POLICY_CODES else BadRequestError
    raised = _responses_failed(code, streaming)
    assert seen(raised) == (kind, 400, False)
    assert f"it is {code}" in str(raised)
    chat = _chat_error({"code": code, "message": "m", "type": "invalid_request_error"}, False)
    assert seen(chat) == (kind, 400, False)
    if isinstance(chat, ContentPolicyError):
        assert chat.code == code


def _list_body(status: str, error: dict[str, object], listed: bool) -> RawServer:
    body = json.dumps([{"error": error}] if listed else {"error": error}).encode()
    return RawServer(http_response(body, status=status))


def test_the_error_object_of_gemini_s_list_body_is_read() -> None:
    """Gemini's OpenAI-compatible endpoint wraps its error in a list: ``[{"error": {...}}]``;
    the error object was read only from a JSON object."""
    gemini = {"code": 400, "message": "API key not valid.", "status": "INVALID_ARGUMENT"}
    assert body_error(json.dumps([{"error": gemini}])) == gemini
    assert body_error(json.dumps([{"error": gemini}, {"error": gemini}])) is None  # not one
    assert body_error(json.dumps(["error"])) is None
    spent: dict[str, object] = {
        "code": "insufficient_quota",
        "message": "You exceeded your current quota.",
    }
    for listed in (False, True):
        with _list_body("429 Too Many Requests", spent, listed) as raw:
            raised = raised_by(OpenAICompatibleProvider(raw.base_url, name="p"), False)
        # a spent quota (read from the error object) is not retried, listed or not
        assert seen(raised) == (RateLimitedError, 429, False)
        assert "You exceeded your current quota." in str(raised)


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize(
    ("error", "expected"),
    [
        ({"type": "gateway_timeout"}, (ProviderUnavailableError, 504, True)),
        ({"code": "read_timeout", "type": "None"}, (ProviderUnavailableError, 504, True)),
        (
            {"type": "server_error", "code": "upstream_timeout"},
            (ProviderUnavailableError, 504, True),
        ),
        ({"type": "GatewayTimeout"}, (ProviderUnavailableError, 504, True)),
        # the exact names keep their own statuses; a 4xx word still decides
        ({"type": "request_timeout"}, (ProviderTimeoutError, 408, True)),
        ({"type": "timeout_error"}, (ProviderUnavailableError, 504, True)),
        ({"type": "invalid_request_error", "code": "x_timeout"}, (BadRequestError, 400, False)),
        # "timeout" inside a name, not at its end: no timeout kind
        ({"type": "timeout_policy_unknown"}, (ProviderUnavailableError, 200, True)),
    ],
)
def test_an_unknown_timeout_name_is_a_504(
    error: dict[str, object], expected: tuple[type[ProviderError], int, bool], streaming: bool
) -> None:
    """Since ``timeout`` was dropped from the words (OpenAI's ``request_timeout`` is a 408),
    ``gateway_timeout`` and the like inside a stream or a 200 answer kept the answer's status,
    200, where they stand for a 504."""
    raised = _chat_error({"message": "it timed out", **error}, streaming)
    assert seen(raised) == expected
