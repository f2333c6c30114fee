"""A streamed answer through the seam names the route that answers it: its headers
(``x-llmguard-route``, the provider's request id and rate-limit headers) and the model its
events report, also when a route sent its opening chunk and then failed before any content
and the Guard fell back to the next."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import openai
import pytest

from llmguard_sdk import Guard
from llmguard_sdk.client import anthropic_client
from llmguard_sdk.testing import FakeProvider, Fault
from llmguard_sdk.transport import async_http_client, http_client

from .conftest import USER, require_module

MakeGuard = Callable[..., Guard]
REMAINING = "x-ratelimit-remaining-requests"


def _falling_back(fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard) -> Guard:
    """A Guard whose first route opens its stream (a role-only chunk, with its headers) and
    breaks before any content; the second answers."""
    fake.always(Fault(cut_stream_after=0, headers={REMAINING: "7"}))
    fake2.always(Fault(headers={REMAINING: "41"}))
    return make_guard(fake, fake2, retry=None, breaker=None)


def _sdk(client: Any) -> openai.OpenAI:
    return openai.OpenAI(api_key="sk-x", base_url="http://guard.test/v1", http_client=client)


def test_a_chat_stream_names_the_route_that_answered(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard
) -> None:
    # the headers came from the stream's first chunk: the failed route's role-only opening
    seam = _sdk(http_client(_falling_back(fake, fake2, make_guard)))
    with seam.chat.completions.with_streaming_response.create(
        model="m", messages=USER, stream=True
    ) as answer:
        headers = answer.headers
        chunks = list(answer.parse())
    assert headers["x-llmguard-route"] == "backup"
    assert headers[REMAINING] == "41"  # the answering provider's, not the failed one's
    assert {c.model for c in chunks} == {"backup-model"}
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Echo: hello there"
    assert (len(fake.requests), len(fake2.requests)) == (1, 1)


def test_an_async_stream_names_the_route_that_answered(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard
) -> None:
    guard = _falling_back(fake, fake2, make_guard)

    async def run() -> tuple[str, set[str]]:
        client = openai.AsyncOpenAI(
            api_key="sk-x", base_url="http://guard.test/v1", http_client=async_http_client(guard)
        )
        async with client.chat.completions.with_streaming_response.create(
            model="m", messages=USER, stream=True
        ) as answer:
            route = answer.headers["x-llmguard-route"]
            models = {chunk.model async for chunk in await answer.parse()}
        await guard.aclose()
        return route, models

    assert anyio.run(run) == ("backup", {"backup-model"})


def test_a_messages_stream_names_the_route_that_answered(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard
) -> None:
    require_module("anthropic", "anthropic is a dev dependency")
    client = anthropic_client(_falling_back(fake, fake2, make_guard))
    with client.messages.with_streaming_response.create(
        model="m", max_tokens=20, messages=USER, stream=True
    ) as answer:
        assert answer.headers["x-llmguard-route"] == "backup"
        events = list(answer.parse())
    assert events[0].type == "message_start"
    assert events[0].message.model == "backup-model"


def test_a_failure_before_any_content_is_an_error_answer(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    # nothing reached the caller: the SDK gets the failure's status, not a 200 whose first
    # event is the failed route's opening and whose last is an error
    fake.always(Fault(cut_stream_after=0))
    seam = _sdk(http_client(make_guard(fake, retry=None, breaker=None)))
    with pytest.raises(openai.APIStatusError) as caught:
        seam.chat.completions.create(model="m", messages=USER, stream=True)
    assert caught.value.status_code >= 500
    assert caught.value.response.headers["x-should-retry"] == "false"


@pytest.mark.parametrize("cut", [1, 2])
def test_a_stream_broken_after_content_still_breaks_in_the_stream(
    fake: FakeProvider, make_guard: MakeGuard, cut: int
) -> None:
    # once content has gone out the route is the answer's: its headers, and the break an
    # error event (the Guard does not replay text)
    fake.always(Fault(cut_stream_after=cut))
    seam = _sdk(http_client(make_guard(fake, retry=None, breaker=None)))
    with seam.chat.completions.with_streaming_response.create(
        model="m", messages=USER, stream=True
    ) as answer:
        assert answer.headers["x-llmguard-route"] == "primary"
        with pytest.raises(openai.APIError, match="stream broke"):
            list(answer.parse())


def test_a_guard_stream_carries_the_answering_route_s_headers(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard
) -> None:
    # the answering route's opening chunk (role only) was skipped as empty, its headers with
    # it: after a fallback no chunk carried the provider's request id or rate-limit headers
    guard = _falling_back(fake, fake2, make_guard)
    with guard.chat(USER, stream=True) as stream:
        chunks = list(stream)
    assert [c.headers.get(REMAINING) for c in chunks if c.headers] == ["7", "41"]
    backup = [c for c in chunks if c.route == "backup"]
    assert backup[0].headers[REMAINING] == "41"
    assert stream.response.headers[REMAINING] == "41"


def test_a_continued_stream_s_headers_name_the_route_that_began_it(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard
) -> None:
    """(The documented limit: the headers left with the first content, before the break; the
    route that finished the stream is named where the wire names a model after that: each
    chat chunk's ``model``, the completed Responses response's ``model``. Anthropic's stream
    names its model once, at ``message_start``.)"""
    require_module("anthropic", "anthropic is a dev dependency")
    fake.always(Fault(cut_stream_after=2))
    guard = make_guard(fake, fake2, retry=None, breaker=None, continue_interrupted_streams=True)
    seam = _sdk(http_client(guard))
    ask: Any = {"model": "m", "stream": True}
    with seam.chat.completions.with_streaming_response.create(messages=USER, **ask) as answer:
        assert answer.headers["x-llmguard-route"] == "primary"
        models = [chunk.model for chunk in answer.parse()]
    assert models[0] == "fake-model"
    assert models[-1] == "backup-model"
    with seam.responses.with_streaming_response.create(input="hello there", **ask) as answer:
        assert answer.headers["x-llmguard-route"] == "primary"
        events = list(answer.parse())
    assert events[-1].type == "response.completed"
    assert events[-1].response.model == "backup-model"
    messages = anthropic_client(guard).messages
    with messages.with_streaming_response.create(max_tokens=50, messages=USER, **ask) as answer:
        assert answer.headers["x-llmguard-route"] == "primary"
        kinds = [event.type for event in answer.parse()]
    assert kinds.count("message_start") == 1  # (its model the first route's)
    assert kinds[-1] == "message_stop"
    assert (len(fake.requests), len(fake2.requests)) == (3, 3)
