"""The SDK's timeout through the transport seam, and the per-call ``attempt_timeout`` it uses.

httpx's read timeout bounds each wait for the next byte, not the whole response: through the
seam it bounds a stream's silence (each route's wait for its first chunk and between chunks)
while the Guard's ``timeout`` stays the call's total; a plain answer's bytes come only when
the Guard's call ends, so there it bounds the call.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import anyio
import openai
import pytest

from llmguard_sdk import Guard
from llmguard_sdk.client import AsyncGuardedClient, GuardedClient
from llmguard_sdk.errors import ProviderTimeoutError, RequestValidationError
from llmguard_sdk.testing import FakeProvider, Fault
from llmguard_sdk.transport import async_http_client, http_client
from llmguard_sdk.transport._exchange import plan
from llmguard_sdk.transport._wire import Call, Incoming

from .conftest import USER

MakeGuard = Callable[..., Guard]

# three content pieces ("Echo:", " hello", " there"), each after a gap of GAP seconds: the
# stream lasts about 3 * GAP, longer than the SDK's timeout, each gap well within it
GAP = 0.5
SDK_TIMEOUT = 1.0
SLOW_STREAM = Fault(first_token_delay=GAP, inter_token_delay=GAP)


def _sdk(client: Any, **options: Any) -> openai.OpenAI:
    return openai.OpenAI(
        api_key="sk-not-sent", base_url="http://guard.test/v1", http_client=client, **options
    )


@pytest.mark.parametrize("library", ["httpx2", "httpx"])
def test_a_stream_longer_than_the_sdk_s_timeout_runs_to_its_end(
    fake: FakeProvider, make_guard: MakeGuard, library: Any
) -> None:
    # the SDK's read timeout was the call's total: a stream whose every gap was well within
    # it was cut at SDK_TIMEOUT, where pointed straight at the provider it ran to the end
    fake.always(SLOW_STREAM)
    seam = _sdk(http_client(make_guard(fake, retry=None, timeout=10), library=library))
    started = time.monotonic()
    stream = seam.chat.completions.create(
        model="m", messages=USER, stream=True, timeout=SDK_TIMEOUT
    )
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text == "Echo: hello there"
    assert time.monotonic() - started > SDK_TIMEOUT  # it did outlast the SDK's timeout
    assert fake.stats.requests == 1


def test_an_async_stream_longer_than_the_sdk_s_timeout_runs_to_its_end(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    fake.always(SLOW_STREAM)
    guard = make_guard(fake, retry=None, timeout=10)

    async def run() -> str:
        client = openai.AsyncOpenAI(
            api_key="sk-x",
            base_url="http://guard.test/v1",
            http_client=async_http_client(guard),
            timeout=SDK_TIMEOUT,
        )
        stream = await client.chat.completions.create(model="m", messages=USER, stream=True)
        text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
        await guard.aclose()
        return text

    assert anyio.run(run) == "Echo: hello there"


def test_a_route_silent_past_the_sdk_s_timeout_loses_the_stream_to_the_next(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard
) -> None:
    # the Guard has no attempt_timeout: the SDK's is the only bound on a route's silence
    fake.always(Fault(first_token_delay=5))
    seam = _sdk(http_client(make_guard(fake, fake2, retry=None, timeout=10)), timeout=0.5)
    started = time.monotonic()
    stream = seam.chat.completions.create(model="m", messages=USER, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == (
        "Echo: hello there"
    )
    assert (fake.stats.succeeded, fake2.stats.succeeded) == (0, 1)  # the backup's answer
    assert time.monotonic() - started < 3  # cut at the SDK's 0.5 s, not the Guard's 10 s


def test_a_stream_silent_mid_way_past_the_sdk_s_timeout_is_cut(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    fake.always(Fault(inter_token_delay=5))
    seam = _sdk(http_client(make_guard(fake, retry=None, timeout=10)), timeout=0.5)
    started = time.monotonic()
    pieces: list[str | None] = []
    stream = seam.chat.completions.create(model="m", messages=USER, stream=True)
    with pytest.raises(openai.APIError, match="stream timed out"):
        pieces.extend(c.choices[0].delta.content for c in stream if c.choices)
    assert pieces == ["", "Echo:"]  # what came before the silence reached the caller
    assert time.monotonic() - started < 3


def test_a_plain_call_is_still_bounded_by_the_sdk_s_timeout(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard
) -> None:
    # a plain answer's bytes come when the Guard's call ends: the SDK's read timeout bounds
    # the whole call, the Guard's retries and fallback included (as before)
    fake.always(Fault(latency=5))
    fake2.always(Fault(latency=5))
    seam = _sdk(http_client(make_guard(fake, fake2, retry=None, timeout=10)), timeout=0.5)
    started = time.monotonic()
    with pytest.raises(openai.APIStatusError) as caught:
        seam.chat.completions.create(model="m", messages=USER)
    assert caught.value.status_code == 504
    assert time.monotonic() - started < 3


def _planned(guard: Guard, *, read: float | None, stream: bool) -> dict[str, Any]:
    body = f'{{"model": "m", "messages": [], "stream": {str(stream).lower()}}}'
    incoming = Incoming("POST", "/v1/chat/completions", [], {}, body.encode(), timeout=read)
    call = plan(guard, incoming)
    assert isinstance(call, Call)
    return call.arguments


def test_what_the_sdk_s_timeout_becomes(fake: FakeProvider, make_guard: MakeGuard) -> None:
    guard = make_guard(fake, timeout=60, attempt_timeout=20)
    # a stream: a shorter read timeout bounds silence, the call's total stays the Guard's
    assert _planned(guard, read=5, stream=True)["timeout"] is None
    assert _planned(guard, read=5, stream=True)["attempt_timeout"] == 5
    # openai's default (600 s), or one past the Guard's own bounds: the call as it was
    for read in (600.0, 20.0, None):
        arguments = _planned(guard, read=read, stream=True)
        assert (arguments["timeout"], "attempt_timeout" in arguments) == (None, False)
    assert "attempt_timeout" not in _planned(make_guard(fake), read=600, stream=True)
    # a plain call: the call's total, when shorter than the Guard's
    assert _planned(guard, read=5, stream=False)["timeout"] == 5
    assert _planned(guard, read=600, stream=False)["timeout"] == 60
    assert "attempt_timeout" not in _planned(guard, read=5, stream=False)


# -- the per-call attempt_timeout itself ------------------------------------------------------


def test_a_call_s_attempt_timeout_lets_the_next_route_answer(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard
) -> None:
    guard = make_guard(fake, fake2, timeout=10, retry=None)  # no attempt_timeout of its own
    fake.script(Fault(hang=True), Fault(first_token_delay=5))
    started = time.monotonic()
    assert guard.chat(USER, attempt_timeout=0.5).route == "backup"
    with guard.chat(USER, stream=True, attempt_timeout=0.5) as stream:
        assert "".join(chunk.text for chunk in stream) == "Echo: hello there"
    assert stream.response.route == "backup"
    assert time.monotonic() - started < 5


def test_a_call_s_attempt_timeout_replaces_the_guard_s(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    guard = make_guard(fake, timeout=10, attempt_timeout=0.3, retry=None)
    fake.always(Fault(first_token_delay=0.8))
    with pytest.raises(ProviderTimeoutError):
        "".join(chunk.text for chunk in guard.chat(USER, stream=True))
    stream = guard.chat(USER, stream=True, attempt_timeout=3)  # a slow model: longer
    assert "".join(chunk.text for chunk in stream) == "Echo: hello there"


@pytest.mark.parametrize("streamed", [False, True])
def test_a_hedge_race_honours_the_call_s_attempt_timeout(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard, streamed: bool
) -> None:
    # the first leg is silent: cut at the call's attempt_timeout, long before hedge_after,
    # the second starts then and wins
    guard = make_guard(fake, fake2, timeout=4, retry=None)
    fake.always(Fault(hang=True) if not streamed else Fault(first_token_delay=5))

    async def run() -> tuple[str | None, float]:
        started = time.monotonic()
        if streamed:
            stream = await guard.achat(USER, stream=True, hedge_after=3, attempt_timeout=0.4)
            async with stream:
                async for _ in stream:
                    pass
            route = stream.response.route
        else:
            answer = await guard.achat(USER, hedge_after=3, attempt_timeout=0.4)
            route = answer.route
        await guard.aclose()
        return route, time.monotonic() - started

    route, took = anyio.run(run)
    assert route == "backup"
    assert took < 2.5  # not hedge_after (3 s), nor the deadline (4 s)


@pytest.mark.parametrize("bad", [0, -1, "5", True, float("inf"), float("nan")])
def test_a_bad_attempt_timeout_is_refused_before_any_call(
    fake: FakeProvider, make_guard: MakeGuard, bad: Any
) -> None:
    guard = make_guard(fake)
    with pytest.raises(RequestValidationError, match="attempt_timeout"):
        guard.chat(USER, attempt_timeout=bad)
    assert fake.stats.requests == 0


# -- guard.client(): openai's own over the seam, and the look-alike without openai -----------


@pytest.mark.parametrize("lookalike", [False, True])
def test_guard_client_s_timeout_bounds_a_stream_s_silence_not_its_length(
    fake: FakeProvider, make_guard: MakeGuard, lookalike: bool
) -> None:
    # the look-alike made a stream's timeout its total, as the seam did
    guard = make_guard(fake, retry=None, timeout=10)
    client: Any = GuardedClient(guard) if lookalike else guard.client()
    fake.always(SLOW_STREAM)
    stream = client.chat.completions.create(
        model="m", messages=USER, stream=True, timeout=SDK_TIMEOUT
    )
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == (
        "Echo: hello there"
    )
    fake.always(Fault(first_token_delay=5))
    started = time.monotonic()
    with pytest.raises((ProviderTimeoutError, openai.APIError)):
        list(client.chat.completions.create(model="m", messages=USER, stream=True, timeout=0.5))
    assert time.monotonic() - started < 3


@pytest.mark.parametrize("bad", [0, -1, True, float("nan")])
def test_the_look_alike_refuses_a_bad_stream_timeout(
    fake: FakeProvider, make_guard: MakeGuard, bad: Any
) -> None:
    client = GuardedClient(make_guard(fake))
    with pytest.raises(RequestValidationError, match="timeout"):
        client.chat.completions.create(model="m", messages=USER, stream=True, timeout=bad)

    async def run() -> None:
        aclient = AsyncGuardedClient(client.guard)
        await aclient.chat.completions.create(model="m", messages=USER, stream=True, timeout=bad)

    with pytest.raises(RequestValidationError, match="timeout"):
        anyio.run(run)
    assert fake.stats.requests == 0
