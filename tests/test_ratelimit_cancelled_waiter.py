"""A Guard call cancelled while it waits for its rate-limit slot (``max_wait``) was never
sent: its request comes back with its tokens, so the next call takes the slot it left (the
request stayed counted, so every later call waited one slot longer)."""

from __future__ import annotations

import time
from collections.abc import Callable

import anyio
import pytest

from llmguard_sdk import Guard
from llmguard_sdk.ratelimit import RateLimit
from llmguard_sdk.testing import FakeProvider

from .conftest import USER, run_closing

# one request every 2 s, none ahead: the n-th call waiting goes 2n seconds after the first
EVERY_2_S = RateLimit(rpm=30, burst=1 / 30, max_wait=30, batch_headroom=0)


@pytest.mark.parametrize("shared", [False, True], ids=["memory", "redis"])
def test_a_waiter_cancelled_gives_its_slot_to_the_next_call(
    fake: FakeProvider,
    make_guard: Callable[..., Guard],
    redis_url: str,
    redis_prefix: str,
    shared: bool,
) -> None:
    store = {"store": redis_url, "key_prefix": redis_prefix} if shared else {}
    guard = make_guard(fake, rate_limits={"primary": EVERY_2_S}, **store)
    make_guard(fake).chat(USER)  # token counting and the client warmed up: no limit
    answered: dict[str, float] = {}

    async def call(name: str) -> None:
        await guard.achat(USER)
        answered[name] = time.monotonic() - started

    async def main() -> None:
        async with anyio.create_task_group() as calls:
            calls.start_soon(call, "first")  # now
            await anyio.sleep(0.05)
            calls.start_soon(call, "second")  # its slot: 2 s
            await anyio.sleep(0.05)
            async with anyio.create_task_group() as waiting:
                waiting.start_soon(call, "cancelled")  # its slot: 4 s
                await anyio.sleep(0.3)
                waiting.cancel_scope.cancel()  # cancelled while it waits for its slot
            calls.start_soon(call, "next")  # the cancelled call's slot: 4 s, not 6 s

    started = time.monotonic()
    run_closing(guard, main)
    assert set(answered) == {"first", "second", "next"}
    assert fake.stats.requests == 1 + 3  # the warm-up, then all but the cancelled call
    assert 3.8 < answered["next"] < 5.5
