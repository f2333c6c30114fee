"""Sync calls' filter loop, given up when a filter's blocking code holds it: a client a filter
kept on the old loop fails on the fresh one with a ConfigurationError that says why (one
kept per loop, ``PerLoop``, serves both), a sync call a filter makes holds the loop without
its being given up, and a call submitted as its loop is given up goes to the fresh one."""

from __future__ import annotations

import sys
import threading
from collections.abc import AsyncIterator, Callable
from types import FrameType
from typing import Any

import httpx
import pytest

from llmguard_sdk import (
    ChatRequest,
    ChatResponse,
    ConfigurationError,
    Guard,
    PerLoop,
    ProviderTimeoutError,
)
from llmguard_sdk._core import filters
from llmguard_sdk.testing import FakeProvider

from .conftest import USER
from .test_async_filters import BOUND_S, checked

MakeGuard = Callable[..., Guard]


def give_up_the_loop(fake: FakeProvider, make_guard: MakeGuard) -> None:
    """Hold the filter loop with an async filter's blocking code until a call waiting behind
    it times out (the loop is given up), then let it go, and wait for the old loop's thread
    to end (its waits ended: the loop stopped and closed)."""
    blocking, release = threading.Event(), threading.Event()
    holder: list[threading.Thread] = []

    async def holds_the_loop(response: ChatResponse) -> None:
        holder.append(threading.current_thread())
        blocking.set()
        release.wait(BOUND_S)  # (blocking code in an async filter)

    blocked = make_guard(fake, output_filters=[holds_the_loop])
    caller = threading.Thread(target=blocked.chat, args=(USER,), kwargs={"timeout": BOUND_S})
    caller.start()
    try:
        assert blocking.wait(BOUND_S)
        with pytest.raises(ProviderTimeoutError, match="checked"):
            make_guard(fake, output_filters=[checked]).chat(USER, timeout=0.5)
    finally:
        release.set()
        caller.join(BOUND_S)
    holder[0].join(BOUND_S)
    assert not holder[0].is_alive()


def test_a_client_kept_on_a_given_up_loop_fails_with_a_configuration_error(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    """A filter's one ``httpx.AsyncClient``, first used on a loop since given up, fails on
    the fresh loop with a ConfigurationError naming the filter and the remedy, the
    client's error as its cause (it was a bare ``RuntimeError: Event loop is closed``); a
    client kept with ``PerLoop`` serves on both loops."""
    moderation = httpx.AsyncClient(timeout=10.0)
    clients = PerLoop(lambda: httpx.AsyncClient(timeout=10.0))

    async def kept(response: ChatResponse) -> None:
        await moderation.get(fake.base_url + "/v1/models")

    async def per_loop(response: ChatResponse) -> None:
        await clients.get().get(fake.base_url + "/v1/models")

    kept_guard = make_guard(fake, output_filters=[kept])
    per_loop_guard = make_guard(fake, output_filters=[per_loop])
    assert kept_guard.chat(USER, timeout=BOUND_S).text == "Echo: hello there"
    assert per_loop_guard.chat(USER, timeout=BOUND_S).text == "Echo: hello there"
    give_up_the_loop(fake, make_guard)
    with pytest.raises(ConfigurationError, match=r"output filter .*kept.*PerLoop") as caught:
        kept_guard.chat(USER, timeout=BOUND_S)
    assert isinstance(caught.value.__cause__, RuntimeError)
    assert per_loop_guard.chat(USER, timeout=BOUND_S).text == "Echo: hello there"


def test_a_sync_call_made_by_a_filter_holds_the_loop_without_its_being_given_up(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    """A long sync call made inside an async filter holds the filter loop (the filter's
    thread runs it): a call waiting behind it times out at its own deadline, but the loop
    is not given up for it, so a client kept on it serves on once the call returns (the
    loop was given up, and the kept client failed: ``Event loop is closed``)."""
    moderation = httpx.AsyncClient(timeout=10.0)
    inside, release = threading.Event(), threading.Event()

    async def moderate(response: ChatResponse) -> None:
        await moderation.get(fake.base_url + "/v1/models")

    def slow_answer(request: ChatRequest) -> None:  # (stands for a slow provider's answer)
        inside.set()
        release.wait(BOUND_S)

    inner = make_guard(fake, input_filters=[slow_answer])

    async def calls_inner(response: ChatResponse) -> ChatResponse:
        text = inner.chat(USER, timeout=BOUND_S).text
        return response.model_copy(update={"text": f"{response.text} [{text}]"})

    kept = make_guard(fake, output_filters=[moderate])
    outer = make_guard(fake, output_filters=[calls_inner])
    assert kept.chat(USER, timeout=BOUND_S).text == "Echo: hello there"
    ended: list[object] = []
    caller = threading.Thread(target=lambda: ended.append(outer.chat(USER, timeout=BOUND_S).text))
    caller.start()
    try:
        assert inside.wait(BOUND_S)
        with pytest.raises(ProviderTimeoutError, match="moderate"):
            kept.chat(USER, timeout=0.5)  # waits behind the nested call: its own deadline
    finally:
        release.set()
        caller.join(BOUND_S)
    assert ended == ["Echo: hello there [Echo: hello there]"]
    assert kept.chat(USER, timeout=BOUND_S).text == "Echo: hello there"


def test_a_wait_submitted_as_its_loop_is_given_up_runs_on_the_fresh_one(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    """A sync call that took the filter loop just before another call gave it up, and whose
    wait reaches it only once it stopped, runs its filter on the fresh loop (it failed with
    ``RuntimeError: Event loop is closed``; a loop stopped but not yet closed left it
    waiting until its deadline). The call is paused there by a trace function."""
    guard = make_guard(fake, output_filters=[checked])
    assert guard.chat(USER, timeout=BOUND_S).text == "Echo: hello there [checked]"
    stopped: list[bool] = []

    def after_taking_the_loop(frame: FrameType, event: str, arg: Any) -> Any:
        if event == "return" and not stopped:  # (another call gives it up meanwhile)
            thread = filters._LOOP._thread
            assert thread is not None
            filters._LOOP.give_up(arg)
            thread.join(BOUND_S)
            stopped.append(not thread.is_alive())
        return after_taking_the_loop

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        taking = event == "call" and frame.f_code is filters._FilterLoop.loop.__code__
        return after_taking_the_loop if taking and not stopped else None

    before = sys.gettrace()
    sys.settrace(tracer)
    try:
        text = guard.chat(USER, timeout=BOUND_S).text
    finally:
        sys.settrace(before)
    assert stopped == [True]
    assert text == "Echo: hello there [checked]"


def test_a_given_up_loop_closes_its_per_loop_clients_and_open_generators(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    """A given-up filter loop shuts down as ``asyncio.run()``'s does before it closes: the
    ``httpx.AsyncClient`` a filter kept there with ``PerLoop`` is closed, and a generator a
    filter left unfinished there runs its ``finally`` (both were only forgotten: the loop
    was closed without ``shutdown_asyncgens()``)."""
    clients = PerLoop(lambda: httpx.AsyncClient(timeout=10.0))
    made: list[httpx.AsyncClient] = []
    ended: list[str] = []
    left_open: list[AsyncIterator[int]] = []

    async def numbers() -> AsyncIterator[int]:
        try:
            yield 1
            yield 2
        finally:
            ended.append("numbers")

    async def per_loop(response: ChatResponse) -> None:
        client = clients.get()
        await client.get(fake.base_url + "/v1/models")
        made.append(client)
        if not left_open:
            left_open.append(numbers())
            assert await anext(left_open[0]) == 1

    guard = make_guard(fake, output_filters=[per_loop])
    assert guard.chat(USER, timeout=BOUND_S).text == "Echo: hello there"
    assert not made[0].is_closed
    give_up_the_loop(fake, make_guard)
    assert made[0].is_closed
    assert ended == ["numbers"]
    assert guard.chat(USER, timeout=BOUND_S).text == "Echo: hello there"
    assert made[1] is not made[0]
    assert not made[1].is_closed
