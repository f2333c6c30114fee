"""A Claude batch call's params are the body a plain Anthropic call sends for the same
request: sampling parameters the model refuses left out (and a call refused for one sent
again in the next batch without it), openai's cache breakpoints as Claude's
``cache_control`` (FakeProvider's Message Batches)."""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest

from llmguard_sdk import BadRequestError, ChatRequest
from llmguard_sdk.providers.batch import BatchProvider
from llmguard_sdk.testing import FakeProvider

_REFUSAL = "`temperature` is deprecated for this model."


def _params(fake: FakeProvider) -> list[dict[str, Any]]:
    """The params of each call of each batch created, in order."""
    return [
        item["params"]
        for r in fake.requests
        if r.method == "POST" and r.path.endswith("/messages/batches")
        for item in (r.body or {})["requests"]
    ]


def _refuse_temperature(fake: FakeProvider, message: str = _REFUSAL) -> None:
    """The fake's batches answer a call whose params hold ``temperature`` as newer Claude
    models do: an errored row, a 400 saying ``message`` ("`temperature` is deprecated for
    this model.")."""

    def row(found: dict[str, Any]) -> dict[str, Any]:
        (created,) = [r for r in fake.requests[-1:] if r.path.endswith("/messages/batches")]
        sent = {i["custom_id"]: i["params"] for i in (created.body or {})["requests"]}
        if "temperature" not in sent[found["custom_id"]]:
            return found
        error = {"type": "invalid_request_error", "message": message}
        result = {"type": "errored", "error": {"type": "error", "error": error}}
        return {"custom_id": found["custom_id"], "result": result}

    fake.batch_rows = row


def _request(**options: Any) -> ChatRequest:
    return ChatRequest.model_validate({"messages": [{"role": "user", "content": "hi"}], **options})


def test_a_refused_sampling_parameter_is_left_out_of_later_batches(
    fake: FakeProvider, caplog: pytest.LogCaptureFixture
) -> None:
    """A Claude model that refuses ``temperature`` failed every batch call that asked for
    one, each time (the plain route sends the attempt again without it and leaves it out
    from then on): the call refused is sent again in the next batch without it, with one
    warning, and later calls to that model leave it out from the first."""
    _refuse_temperature(fake)
    route = BatchProvider(fake.base_url, api="anthropic", window=0.05, poll_interval=0.02)
    try:
        with caplog.at_level(logging.WARNING, logger="llmguard_sdk"):
            first = route.complete(
                _request(temperature=0.3, top_p=0.9),
                model="claude-next",
                deadline=time.monotonic() + 20,
            )
            second = route.complete(
                _request(temperature=0.3), model="claude-next", deadline=time.monotonic() + 20
            )
            other = route.complete(
                _request(temperature=0.3), model="claude-other", deadline=time.monotonic() + 20
            )
    finally:
        route.close()
    assert first.text == second.text == other.text == "Echo: hi"
    sent = _params(fake)
    assert [p.get("temperature") for p in sent] == [0.3, None, None, 0.3, None]
    assert [p.get("top_p") for p in sent[:2]] == [0.9, 0.9]  # nothing else left out
    warned = [r for r in caplog.records if "refused temperature" in r.getMessage()]
    assert len(warned) == 2  # once per model


def test_a_refusal_other_than_a_sampling_parameter_s_is_not_sent_again(
    fake: FakeProvider,
) -> None:
    """Only a refusal naming a sampling parameter the model refuses as such is sent again."""
    _refuse_temperature(fake, "`temperature` may only be set to 1 when thinking is enabled")
    route = BatchProvider(fake.base_url, api="anthropic", window=0.05, poll_interval=0.02)
    try:
        with pytest.raises(BadRequestError, match="thinking is enabled"):
            route.complete(_request(temperature=0.2), model="m", deadline=time.monotonic() + 20)
    finally:
        route.close()
    assert len(_params(fake)) == 1


def test_a_batch_call_s_breakpoints_reach_claude_as_its_cache_control(fake: FakeProvider) -> None:
    """openai's ``prompt_cache_breakpoint`` on a content part is Claude's ``cache_control``
    in a batch call's params too, as in a plain call's body."""
    part = {"type": "text", "text": "the handbook", "prompt_cache_breakpoint": {"mode": "explicit"}}
    request = ChatRequest.model_validate(
        {"messages": [{"role": "system", "content": [part]}, {"role": "user", "content": "hi"}]}
    )
    route = BatchProvider(fake.base_url, api="anthropic", window=0.05, poll_interval=0.02)
    try:
        route.complete(request, model="m", deadline=time.monotonic() + 20)
    finally:
        route.close()
    (params,) = _params(fake)
    assert params["system"] == [
        {"type": "text", "text": "the handbook", "cache_control": {"type": "ephemeral"}}
    ]
