"""``guard.chat`` called inside async code answers, but holds the event loop for the whole call
(no other task runs meanwhile); ``await guard.achat`` does not. The README says which to use
where (it said only "Async is the same with ``await guard.achat(...)``")."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from llmguard_sdk import Guard, OpenAICompatibleProvider
from llmguard_sdk.testing import FakeProvider, Fault

from .conftest import USER

README = " ".join((Path(__file__).parents[1] / "README.md").read_text("utf-8").split())


def test_a_sync_call_in_async_code_holds_the_loop_and_the_readme_says_so() -> None:
    with FakeProvider(model="m") as api:
        api.always(Fault(latency=0.3))
        guard = Guard(OpenAICompatibleProvider(api.base_url, model="m"), environ={})

        async def main() -> tuple[int, int]:
            ticks: list[float] = []

            async def tick() -> None:
                while True:
                    ticks.append(time.monotonic())
                    await asyncio.sleep(0.02)

            ticker = asyncio.create_task(tick())
            await asyncio.sleep(0.05)
            before = len(ticks)
            guard.chat(USER)
            held = len(ticks) - before
            before = len(ticks)
            await guard.achat(USER)
            free = len(ticks) - before
            ticker.cancel()
            return held, free

        with guard:
            held, free = asyncio.run(main())
    assert held == 0  # no other task ran during the 0.3 s call
    assert free >= 5
    assert "`guard.chat` works there too but holds the event loop for the whole call" in README
