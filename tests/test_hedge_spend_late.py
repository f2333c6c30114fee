"""A hedge loser whose answer came as the race stopped it (after the winner's, before its own
end) is charged what it used, in both drivers: the sync driver charged its estimate (its
prompt and the winner's output) when its thread ended after the race had decided; the async
driver, when its task ended after being cancelled. A stream's loser that reported usage in the
chunks it streamed is charged that usage (its provider's input count; its output at least)."""

from __future__ import annotations

import threading
from collections.abc import AsyncGenerator, Generator, Iterator
from typing import Any

import anyio
import anyio.to_thread
import pytest

from llmguard_sdk import ChatRequest, ChatResponse, Guard, OpenAICompatibleProvider, StreamChunk
from llmguard_sdk.providers._abort import sleep
from llmguard_sdk.testing import FakeProvider, Fault

from .conftest import chat_in_mode
from .test_budget_unserved import BUDGETS, _spent  # (fake-model: $100/$200 a million)

USAGE = {"prompt_tokens": 50, "completion_tokens": 40, "total_tokens": 90}
LOSER_USD = (50 * 100 + 40 * 200) / 1e6  # the primary's own usage, priced


class _Late:
    """The SDK's provider over a FakeProvider whose answer, once come, is handed over only as
    the race stops the leg: sync, it waits (a wait the race's abort cuts short); async, its
    request runs in a worker thread (a sync client's: a cancellation waits for it)."""

    def __init__(self, server: FakeProvider) -> None:
        self.inner = OpenAICompatibleProvider(server.base_url, model=server.model, name=server.name)
        self.name: str = server.name
        self.model: str | None = server.model
        self.answered = threading.Event()

    def complete(self, request: ChatRequest, *, model: str, deadline: float) -> ChatResponse:
        answer = self.inner.complete(request, model=model, deadline=deadline)
        self.answered.set()
        sleep(30)  # (ended by the race's abort)
        return answer

    async def acomplete(self, request: ChatRequest, *, model: str, deadline: float) -> ChatResponse:
        def work() -> ChatResponse:
            return self.inner.complete(request, model=model, deadline=deadline)

        return await anyio.to_thread.run_sync(work)

    def stream(self, request: ChatRequest, **options: Any) -> Generator[StreamChunk, None, None]:
        return self.inner.stream(request, **options)

    def astream(self, request: ChatRequest, **options: Any) -> AsyncGenerator[StreamChunk, None]:
        return self.inner.astream(request, **options)

    def close(self) -> None:
        self.inner.close()

    async def aclose(self) -> None:
        await self.inner.aclose()


@pytest.fixture
def primary() -> Iterator[FakeProvider]:
    with FakeProvider(model="fake-model", name="primary", usage=lambda b, c: USAGE) as server:
        yield server


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_loser_whose_answer_came_as_it_was_stopped_is_charged_its_usage(
    primary: FakeProvider, fake2: FakeProvider, mode: str
) -> None:
    late = _Late(primary)
    backup = OpenAICompatibleProvider(fake2.base_url, model=fake2.model, name=fake2.name)
    if mode == "async":
        primary.always(Fault(latency=1.0))  # (the backup answers first)
    guard = Guard(
        [late, backup], budgets=BUDGETS, hedge_after=0.05, timeout=20, retry=None, environ={}
    )
    with guard:
        answer = chat_in_mode(guard, mode, max_tokens=100)
        assert answer.route == "backup"
        assert primary.stats.succeeded == 1
        usage = answer.usage
        assert usage is not None
        backup_usd = (usage.input_tokens * 10 + usage.output_tokens * 20) / 1e6
        assert answer.cost_usd == pytest.approx(backup_usd + LOSER_USD)
        assert _spent(guard) == pytest.approx(answer.cost_usd)
