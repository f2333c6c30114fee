"""A provider's content-filter refusal is a :class:`ContentPolicyError` (a
:class:`BadRequestError`, so every ``except BadRequestError`` still catches it) with the
provider's own message and code, over HTTP and inside a stream; it stops the chain by default,
``moves_on=`` with :func:`~llmguard_sdk.router.is_route_failure` moves it on; the transport
seam and the drop-in clients answer it with the provider's status and code, as openai's SDK
pointed at the provider would raise it."""

from __future__ import annotations

import json
from collections.abc import Callable

import openai
import pytest

from llmguard_sdk import (
    AllRoutesFailedError,
    BadRequestError,
    ContentPolicyError,
    Guard,
    OpenAICompatibleProvider,
    ProviderError,
)
from llmguard_sdk.router import is_route_failure
from llmguard_sdk.testing import FakeProvider, Fault
from llmguard_sdk.transport import http_client

from .conftest import USER
from .rawserver import RawServer, http_response, raised_by, sse_head

MakeGuard = Callable[..., Guard]

OPENAI_SAYS = "Your request was rejected as a result of our safety system."
AZURE_SAYS = (
    "The response was filtered due to the prompt triggering Azure OpenAI's content management "
    "policy. Please modify your prompt and retry."
)
# Azure OpenAI's 400 for a prompt its content filter blocked, as it sends it
AZURE_BODY = {
    "error": {
        "message": AZURE_SAYS,
        "type": None,
        "param": "prompt",
        "code": "content_filter",
        "status": 400,
        "innererror": {
            "code": "ResponsibleAIPolicyViolation",
            "content_filter_result": {
                "hate": {"filtered": False, "severity": "safe"},
                "violence": {"filtered": True, "severity": "medium"},
            },
        },
    }
}


@pytest.mark.parametrize(
    ("code", "said"),
    [("content_policy_violation", OPENAI_SAYS), ("content_filter", AZURE_SAYS)],
    ids=["openai", "azure"],
)
def test_a_content_filter_refusal_is_a_content_policy_error(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard, code: str, said: str
) -> None:
    """Before: a plain BadRequestError, told from any other 400 only by parsing its body."""
    guard = make_guard(fake, fake2)
    fake.always(Fault(status=400, error_code=code, error_message=said))
    with pytest.raises(ContentPolicyError) as caught:
        guard.chat(USER)
    error = caught.value
    assert isinstance(error, BadRequestError)  # what it was: every except still catches it
    assert error.code == code
    assert error.status_code == 400
    assert error.route == "primary"
    assert said in str(error)
    assert error.retryable is False
    assert fake.stats.requests == 1  # not retried: the same prompt is refused alike
    assert fake2.stats.requests == 0  # and the chain stops, by default


def test_azure_s_innererror_alone_tells_a_content_filter_refusal() -> None:
    body = dict(AZURE_BODY["error"])
    body["code"] = "invalid_request_error"  # the inner code decides
    answer = json.dumps({"error": body}).encode()
    with RawServer(http_response(answer, status="400 Bad Request")) as raw:
        error = raised_by(OpenAICompatibleProvider(raw.base_url, name="azure"), False)
    assert isinstance(error, ContentPolicyError)
    assert error.code == "ResponsibleAIPolicyViolation"
    assert AZURE_SAYS in str(error)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_azure_s_refusal_is_one_over_http_and_inside_a_stream(stream: bool) -> None:
    """An error event naming ``content_filter`` was a retried ProviderUnavailableError (a
    kind no table knew)."""
    answer = json.dumps(AZURE_BODY).encode()
    if stream:
        server = RawServer(sse_head(), (b"data: " + answer + b"\n\n",))
    else:
        server = RawServer(http_response(answer, status="400 Bad Request"))
    with server as raw:
        error = raised_by(OpenAICompatibleProvider(raw.base_url, name="azure"), stream)
    assert type(error) is ContentPolicyError
    assert (error.code, error.status_code, error.retryable) == ("content_filter", 400, False)


def test_moves_on_with_is_route_failure_falls_back_on_a_refusal(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard
) -> None:
    def moves_on(error: ProviderError) -> bool:
        return isinstance(error, ContentPolicyError) or is_route_failure(error)

    guard = make_guard(fake, fake2, moves_on=moves_on)
    fake.always(Fault(status=400, error_code="content_filter", error_message=AZURE_SAYS))
    assert guard.chat(USER).route == "backup"
    assert fake.stats.requests == 1  # not retried on the route that refused it

    fake2.always(Fault(status=400, error_code="content_policy_violation"))
    with pytest.raises(AllRoutesFailedError) as caught:
        guard.chat(USER)
    assert [type(e) for e in caught.value.errors.values()] == [ContentPolicyError] * 2


def _seam(guard: Guard) -> openai.OpenAI:
    return openai.OpenAI(
        api_key="sk-x", base_url="http://guard.test/v1", http_client=http_client(guard)
    )


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("code", ["content_policy_violation", "content_filter"])
def test_the_seam_answers_a_refusal_with_the_provider_s_status_and_code(
    fake: FakeProvider, make_guard: MakeGuard, code: str, stream: bool
) -> None:
    """Before: a 400 with ``code: null``: openai's BadRequestError without the code that
    code written against the provider tells a refusal by."""
    fake.always(Fault(status=400, error_code=code, error_message=OPENAI_SAYS))
    guard = make_guard(fake)
    with pytest.raises(openai.BadRequestError) as caught:
        _seam(guard).chat.completions.create(model="m", messages=USER, stream=stream)
    assert caught.value.status_code == 400
    assert caught.value.code == code
    assert OPENAI_SAYS in caught.value.message
    assert caught.value.response.headers["x-llmguard-error"] == "ContentPolicyError"
    with pytest.raises(openai.BadRequestError) as answered:
        _seam(guard).responses.create(model="m", input="hello there", stream=stream)
    assert answered.value.code == code


def test_the_drop_in_client_raises_both_errors_with_the_code(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard
) -> None:
    fake.always(Fault(status=400, error_code="content_policy_violation", error_message=OPENAI_SAYS))
    client = make_guard(fake, fake2).client()
    with pytest.raises(ContentPolicyError) as caught:
        client.chat.completions.create(model="m", messages=USER)
    assert isinstance(caught.value, openai.BadRequestError)
    assert caught.value.code == "content_policy_violation"
    assert caught.value.status_code == 400
