"""A stream its reader drops unclosed (``break`` out of ``async for``, or the reading task
cancelled while it waits for something else) gives back what it holds when the last reference
goes, not at some later garbage collection: the concurrency slot, the spend hold and the
connection (as one closed by ``async with`` does when its reading task is cancelled)."""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import anyio
import pytest

from llmguard_sdk import CallEvent, Guard, OpenAICompatibleProvider
from llmguard_sdk.budget import Budget, Budgets, Price, PriceTable
from llmguard_sdk.ratelimit import RateLimit
from llmguard_sdk.store import RedisStore
from llmguard_sdk.testing import FakeProvider, Fault

from .conftest import USER

PRICES = PriceTable.default_table().with_prices({"fake-model": Price(input=100.0, output=200.0)})
SLOW_STREAM = Fault(inter_token_delay=0.2)  # six chunks over about a second


@pytest.fixture
def events() -> list[CallEvent]:
    """The CallEvents the ``guard`` fixture's hook receives."""
    return []


@pytest.fixture
def guard(
    request: pytest.FixtureRequest, fake: FakeProvider, store: str, events: list[CallEvent]
) -> Iterator[Guard]:
    built_store = None
    if store == "redis":
        url, prefix = request.getfixturevalue("redis_url"), request.getfixturevalue("redis_prefix")
        built_store = RedisStore(url, key_prefix=prefix)
    route = OpenAICompatibleProvider(fake.base_url, model=fake.model, name="primary")
    built = Guard(
        route,
        environ={},
        store=built_store,
        budgets=Budgets([Budget(limit_usd=100.0)], prices=PRICES),
        rate_limits={"primary": RateLimit(concurrency=4)},
        hooks=[events.append],
    )
    yield built
    built.close()


def held(guard: Guard) -> tuple[int, float]:
    """The route's calls in flight (concurrency slots) and the USD the budget holds."""
    limiter: Any = guard.rate_limiter
    held = sum(row["held_usd"] for row in guard.budget_status())
    return int(limiter.in_flight("primary")), held


async def _settles(guard: Guard) -> tuple[int, float]:
    """What ``guard`` holds once nothing more is given back (about 3 s at most)."""
    for _ in range(150):
        if held(guard) == (0, 0.0):
            break
        await anyio.sleep(0.02)
    return held(guard)


async def _break_out(guard: Guard) -> None:
    stream = await guard.achat(USER, max_tokens=10, stream=True)
    async for _ in stream:
        break  # no aclose(), no async with: the stream is dropped on return


async def _cancelled_reader(guard: Guard) -> None:
    """The reading task cancelled while it waits outside the stream (sending a chunk on), the
    stream in ``async with`` as the docs ask: closed by the block's end."""
    started = anyio.Event()

    async def read() -> None:
        async with await guard.achat(USER, max_tokens=10, stream=True) as stream:
            async for _ in stream:
                started.set()
                await anyio.sleep(30)

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(read)
        await started.wait()
        tasks.cancel_scope.cancel()


async def _dropped_in_a_cycle(guard: Guard) -> None:
    """A stream read once, then dropped in a reference cycle (as a traceback or a callback
    can hold one): only the cyclic collector finds it, along with the generators it iterates
    (the driver's, the provider's, the HTTP body's)."""
    stream = await guard.achat(USER, max_tokens=10, stream=True)
    await stream.__anext__()
    cycle: list[Any] = [stream]
    cycle.append(cycle)
    del stream, cycle
    gc.collect()


ASYNC_RUNS = [("memory", "asyncio"), ("memory", "trio"), ("redis", "asyncio"), ("redis", "trio")]


@pytest.mark.usefixtures("no_collection")
@pytest.mark.parametrize(("store", "backend"), ASYNC_RUNS)
@pytest.mark.parametrize(
    "drop",
    [_break_out, _cancelled_reader, _dropped_in_a_cycle],
    ids=["break", "cancelled", "cycle"],
)
def test_a_dropped_stream_gives_back_its_holds_at_once_without_errors(
    guard: Guard, fake: FakeProvider, backend: str, drop: Callable[[Guard], Any]
) -> None:
    if backend == "trio":
        pytest.importorskip("trio")
    loop_errors: list[dict[str, Any]] = []

    async def scenario() -> tuple[int, float]:
        if backend == "asyncio":
            asyncio.get_running_loop().set_exception_handler(lambda _, c: loop_errors.append(c))
        fake.always(SLOW_STREAM)
        await drop(guard)
        try:
            return await _settles(guard)
        finally:
            await guard.aclose()

    assert anyio.run(scenario, backend=backend) == (0, 0.0)
    assert [context.get("exception") or context["message"] for context in loop_errors] == []
    fake.always(None)
    assert guard.chat(USER, max_tokens=10).route == "primary"  # the route works on


@pytest.mark.usefixtures("no_collection")
@pytest.mark.parametrize("store", ["memory", "redis"])
def test_a_sync_stream_dropped_gives_back_its_holds_at_once(
    guard: Guard, fake: FakeProvider
) -> None:
    fake.always(SLOW_STREAM)

    def break_out() -> None:
        for _ in guard.chat(USER, max_tokens=10, stream=True):
            break  # no close(), no with: the stream is dropped on return

    break_out()
    assert held(guard) == (0, 0.0)


@pytest.mark.parametrize(("store", "backend"), ASYNC_RUNS)
def test_a_stream_abandoned_as_its_event_loop_ends_is_closed_cleanly(
    guard: Guard,
    fake: FakeProvider,
    events: list[CallEvent],
    caplog: pytest.LogCaptureFixture,
    backend: str,
) -> None:
    """A stream read part-way and still unclosed when the event loop's main task returns:
    under asyncio its generator is closed in a task that the loop's shutdown cancels before
    it starts; on CPython before 3.13 the generator then had a second GeneratorExit thrown in
    at its first await, which unwound the provider's cancel scopes half-way and logged
    "Attempted to exit a cancel scope that isn't the current tasks's current cancel scope"
    during ``asyncio.run()`` shutdown, and the call was never reported."""
    if backend == "trio":
        pytest.importorskip("trio")
    fake.always(SLOW_STREAM)

    async def abandon() -> None:
        stream = await guard.achat(USER, max_tokens=10, stream=True)
        await stream.__anext__()  # ... and the stream is dropped as the run ends

    assert logged_running(abandon, backend, caplog) == []
    assert held(guard) == (0, 0.0)
    assert [(event.kind, event.outcome) for event in events] == [("stream", "cancelled")]
    fake.always(None)
    assert guard.chat(USER, max_tokens=10).route == "primary"  # the route works on


def logged_running(
    main: Callable[[], Coroutine[Any, Any, None]], backend: str, caplog: pytest.LogCaptureFixture
) -> list[str]:
    """What is logged (warnings and errors) while ``main`` runs in an event loop of
    ``backend`` of its own, to the loop's end (``asyncio.run()``'s shutdown included)."""
    with caplog.at_level(logging.WARNING):
        if backend == "asyncio":
            asyncio.run(main())
        else:
            anyio.run(main, backend=backend)
    return [record.getMessage() for record in caplog.records]
