"""Anthropic names an error's cause in ``error.details.error_code`` (anthropic-python reads
it there: ``APIStatusError.error_code``, and picks the exception class by status and code).
One such cause is a timeout, not a bad request: ``request_body_timeout``, a 400 whose body
did not arrive in time ("nothing was done. Send a smaller body, or send it over a faster
connection": anthropic-python's ``BetaRequestBodyTimeoutError``). It is HTTP's 408 in all
but its status, and another attempt may well arrive in time: a retryable
:class:`~llmguard_sdk.errors.ProviderTimeoutError`, wherever it is named."""

from __future__ import annotations

import json
from typing import Any

import pytest

from llmguard_sdk import (
    AnthropicProvider,
    BadRequestError,
    Guard,
    ProviderTimeoutError,
)
from llmguard_sdk.classify import classify_exception
from llmguard_sdk.retry import RetryPolicy
from llmguard_sdk.testing import FakeProvider, Fault

from .conftest import USER, require_module
from .rawserver import RawServer, http_response, raised_by, sse_head

BODY_TIMEOUT = Fault(status=400, error_code="request_body_timeout")
_NO_RETRY = {"x-should-retry": "false"}


def _claude(url: str) -> AnthropicProvider:
    return AnthropicProvider(url, api_key="sk-ant", model="claude-x", name="claude")


@pytest.mark.parametrize("streaming", [False, True])
def test_a_request_body_timeout_is_a_retryable_timeout(fake: FakeProvider, streaming: bool) -> None:
    """It was a BadRequestError, not retried: the call failed where a second attempt may
    well have arrived in time."""
    fake.script(BODY_TIMEOUT)
    raised = raised_by(_claude(fake.base_url), streaming)
    assert type(raised) is ProviderTimeoutError
    assert raised.retryable is True
    assert raised.status_code == 400  # the answer's own status
    assert "request_body_timeout" in (raised.body or "")


@pytest.mark.parametrize("streaming", [False, True])
def test_a_guard_retries_a_request_body_timeout_on_its_route(
    fake: FakeProvider, streaming: bool
) -> None:
    fake.script(BODY_TIMEOUT)
    retry = RetryPolicy(attempts=2, base=0.01, cap=0.05)
    with Guard(_claude(fake.base_url), retry=retry, environ={}) as guard:
        if streaming:
            with guard.chat(USER, stream=True) as stream:
                text = "".join(chunk.text for chunk in stream)
        else:
            text = guard.chat(USER).text
    assert text.startswith("Echo:")
    assert fake.stats.requests == 2


def test_the_server_s_word_still_wins(fake: FakeProvider) -> None:
    fake.script(Fault(status=400, error_code="request_body_timeout", headers=_NO_RETRY))
    raised = raised_by(_claude(fake.base_url), False)
    assert type(raised) is ProviderTimeoutError
    assert raised.retryable is False


@pytest.mark.parametrize(
    "fault", [Fault(status=400), Fault(status=400, error_code="bundle_on_call")]
)
def test_other_bad_requests_stay_bad_requests(fake: FakeProvider, fault: Fault) -> None:
    """Only the timeout changed: a plain 400, or one another cause names, is not retried."""
    fake.script(fault)
    raised = raised_by(_claude(fake.base_url), False)
    assert type(raised) is BadRequestError
    assert raised.retryable is False


def test_the_fake_names_the_cause_where_anthropic_s_sdk_reads_it(fake: FakeProvider) -> None:
    """FakeProvider's Messages endpoint puts ``Fault.error_code`` in
    ``error.details.error_code``, as Anthropic does: anthropic-python raises the exception of
    that code, and the SDK's reading of that exception (``guard.protect`` of anthropic's own
    calls) is the same retryable timeout."""
    anthropic = require_module("anthropic", "anthropic is a dev dependency")
    fake.script(BODY_TIMEOUT)
    sdk = anthropic.Anthropic(api_key="sk-ant", base_url=fake.url, max_retries=0)
    with pytest.raises(anthropic.BadRequestError) as caught:
        sdk.messages.create(model="claude-x", max_tokens=20, messages=USER)
    assert caught.value.error_code == "request_body_timeout"
    assert type(caught.value).__name__ == "BetaRequestBodyTimeoutError"
    judged = classify_exception(caught.value, route="claude")
    assert type(judged) is ProviderTimeoutError
    assert judged.retryable is True


def _error(code: str) -> dict[str, Any]:
    return {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "the request body did not arrive in time",
            "details": {"error_code": code},
        },
    }


@pytest.mark.parametrize("mode", ["200 answer", "stream event"])
def test_a_request_body_timeout_named_in_a_200_answer_is_a_timeout(mode: str) -> None:
    """A gateway's 200 error answer, or an error event, naming the cause: the 408 it stands
    for (it stood for the 400 of its ``type``)."""
    data = json.dumps(_error("request_body_timeout")).encode()
    if mode == "stream event":
        server = RawServer(sse_head(), (b"event: error\ndata: " + data + b"\n\n",))
    else:
        server = RawServer(http_response(data))
    with server as raw:
        raised = raised_by(_claude(raw.base_url), mode == "stream event")
    assert type(raised) is ProviderTimeoutError
    assert (raised.status_code, raised.retryable) == (408, True)
