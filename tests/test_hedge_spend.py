"""What a hedged call's budget is charged for its race: a loser whose answer had arrived too
by the time the race was decided is charged what it used (it was charged an estimate: its
prompt and the winner's output), a stream's loser its first content counted, reasoning
included (it was charged its prompt alone); and the winner's usage is read once."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable, Generator, Iterator
from typing import Any

import anyio
import pytest

from llmguard_sdk import (
    ChatRequest,
    ChatResponse,
    Guard,
    Message,
    OpenAICompatibleProvider,
    StreamChunk,
)
from llmguard_sdk._core import limits
from llmguard_sdk.testing import FakeProvider, Fault
from llmguard_sdk.tokens import TokenCount, count_request_tokens, count_text_tokens

from .conftest import USER, chat_in_mode
from .test_budget_unserved import BUDGETS, _spent  # (fake-model: $100/$200 a million)

MakeGuard = Callable[..., Guard]

# the primary's own usage: a reasoning model's (most of its output hidden reasoning)
PRIMARY_USAGE = {
    "prompt_tokens": 50,
    "completion_tokens": 40,
    "total_tokens": 90,
    "completion_tokens_details": {"reasoning_tokens": 35},
}
REASONING = "The user greets me; a short greeting back will do."
PROMPT = count_request_tokens([Message(**m) for m in USER]).tokens  # as the Guard counts it


class _Gate:
    """An event of the test's event loop (made in it), as a route waits for or opens it."""

    def __init__(self) -> None:
        self.event: anyio.Event | None = None

    def open(self) -> None:
        assert self.event is not None
        self.event.set()

    async def wait(self) -> None:
        assert self.event is not None
        await self.event.wait()


class _Route:
    """The SDK's own provider over a FakeProvider (a route as a user's provider object could
    be) whose answer, or a stream's first content, waits for ``waits`` and opens ``opens``:
    the two legs of a race answer in an order the test sets, both before the race reads the
    first. ``reasoning``: its stream's first content carries a piece of reasoning too (as a
    DeepSeek route's ``reasoning_content``)."""

    def __init__(
        self,
        server: FakeProvider,
        *,
        waits: _Gate | None = None,
        opens: _Gate | None = None,
        reasoning: str = "",
    ) -> None:
        self.inner = OpenAICompatibleProvider(server.base_url, model=server.model, name=server.name)
        self.name, self.model = server.name, server.model
        self.waits, self.opens, self.reasoning = waits, opens, reasoning
        self.first: list[StreamChunk] = []  # the chunks its stream sent up to its first content

    def complete(self, request: ChatRequest, *, model: str, deadline: float) -> ChatResponse:
        return self.inner.complete(request, model=model, deadline=deadline)

    async def acomplete(self, request: ChatRequest, *, model: str, deadline: float) -> ChatResponse:
        answer = await self.inner.acomplete(request, model=model, deadline=deadline)
        await self._turn()
        return answer

    async def _turn(self) -> None:
        if self.waits is not None:
            await self.waits.wait()
        if self.opens is not None:
            self.opens.open()  # (its answer goes to the race at once: no await after this)

    def stream(self, request: ChatRequest, **options: Any) -> Generator[StreamChunk, None, None]:
        return self.inner.stream(request, **options)

    async def astream(
        self, request: ChatRequest, **options: Any
    ) -> AsyncGenerator[StreamChunk, None]:
        started = False
        async for chunk in self.inner.astream(request, **options):
            if not started and chunk.text:
                started = True
                if self.reasoning:
                    chunk = chunk.model_copy(update={"metadata": {"reasoning": self.reasoning}})
                await self._turn()
            if not started or not self.first or not self.first[-1].text:
                self.first.append(chunk)
            yield chunk

    def close(self) -> None:
        self.inner.close()

    async def aclose(self) -> None:
        await self.inner.aclose()


def _both_answer(
    fake: FakeProvider, fake2: FakeProvider, **loser: Any
) -> tuple[list[Any], _Route, Callable[[], None]]:
    """A race's routes where the backup wins (its answer comes first) and the primary (the
    first leg) has answered too before the race reads the backup's: the primary waits for
    the backup's answer; and what makes their gates in the test's event loop."""
    gate = _Gate()
    primary = _Route(fake, waits=gate, **loser)
    backup = _Route(fake2, opens=gate)

    def made() -> None:
        gate.event = anyio.Event()

    return [primary, backup], primary, made


def _guard(routes: list[Any]) -> Guard:
    return Guard(routes, budgets=BUDGETS, hedge_after=0.05, timeout=10, retry=None, environ={})


def _achat(
    guard: Guard, made: Callable[[], None], *, stream: bool = False, max_tokens: int = 100
) -> ChatResponse:
    """:data:`USER` through ``guard.achat`` (a stream: read whole) in an event loop of its
    own, its routes' gates ``made`` in it first."""

    async def call() -> ChatResponse:
        made()
        try:
            if not stream:
                return await guard.achat(USER, max_tokens=max_tokens)
            chunks = await guard.achat(USER, stream=True, max_tokens=max_tokens)
            async with chunks:
                async for _ in chunks:
                    pass
            return chunks.response
        finally:
            await guard.aclose()

    return anyio.run(call)


@pytest.fixture
def closing() -> Iterator[list[Guard]]:
    guards: list[Guard] = []
    yield guards
    for guard in guards:
        guard.close()


@pytest.fixture
def reasoner() -> Iterator[FakeProvider]:
    """The primary, reporting :data:`PRIMARY_USAGE` for every answer."""
    with FakeProvider(
        model="fake-model", name="primary", usage=lambda body, counted: PRIMARY_USAGE
    ) as server:
        yield server


def test_a_hedge_loser_that_answered_too_is_charged_its_own_usage(
    reasoner: FakeProvider, fake2: FakeProvider, closing: list[Guard]
) -> None:
    """Both legs answered; the primary, which lost, reported its usage (a reasoning model's:
    40 output tokens, 35 of them reasoning): it is charged that, not the winner's output."""
    fake = reasoner
    routes, _, made = _both_answer(fake, fake2)
    guard = _guard(routes)
    closing.append(guard)

    answer = _achat(guard, made)
    assert answer.route == "backup"
    assert fake.stats.succeeded == 1  # the primary's answer came whole
    usage = answer.usage
    assert usage is not None
    backup_usd = (usage.input_tokens * 10 + usage.output_tokens * 20) / 1e6
    loser_usd = (50 * 100 + 40 * 200) / 1e6  # its own usage: reasoning included
    assert answer.cost_usd == pytest.approx(backup_usd + loser_usd)
    assert _spent(guard) == pytest.approx(answer.cost_usd)


def test_a_streamed_hedge_loser_that_answered_too_is_charged_its_reasoning_and_text(
    fake: FakeProvider, fake2: FakeProvider, closing: list[Guard]
) -> None:
    """Both streams reached their first content; the primary's, which lost, had streamed a
    piece of reasoning and text: both are counted beside its prompt (it was charged its
    prompt alone, as a loser that had streamed nothing)."""
    routes, primary, made = _both_answer(fake, fake2, reasoning=REASONING)
    guard = _guard(routes)
    closing.append(guard)

    response = _achat(guard, made, stream=True)
    assert response.route == "backup"
    usage = response.usage
    assert usage is not None
    backup_usd = (usage.input_tokens * 10 + usage.output_tokens * 20) / 1e6
    (first,) = [chunk for chunk in primary.first if chunk.text]
    assert first.metadata == {"reasoning": REASONING}
    output = count_text_tokens(first.text + REASONING, "fake-model").tokens
    loser_usd = (PROMPT * 100 + output * 200) / 1e6
    assert response.cost_usd == pytest.approx(backup_usd + loser_usd)
    assert _spent(guard) == pytest.approx(response.cost_usd)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_hedge_winners_usage_is_counted_once(
    fake: FakeProvider,
    fake2: FakeProvider,
    make_guard: MakeGuard,
    monkeypatch: pytest.MonkeyPatch,
    mode: str,
) -> None:
    """The winner reported no usage: its text is counted once, for its settle, its price and
    the loser's estimate alike (it was counted twice on the call's path)."""
    counted: list[str] = []

    def counting(text: str, model: str | None = None) -> TokenCount:
        counted.append(text)
        return count_text_tokens(text, model)

    monkeypatch.setattr(limits, "count_text_tokens", counting)
    guard = make_guard(fake, fake2, budgets=BUDGETS, hedge_after=0.05, timeout=10, retry=None)
    fake.always(Fault(latency=1.0))
    fake2.always(Fault(omit_usage=True))
    answer = chat_in_mode(guard, mode, max_tokens=10)
    assert answer.route == "backup"
    assert answer.usage is not None
    assert answer.usage.estimated
    assert counted == [answer.text]
    loser_usd = (PROMPT * 100 + answer.usage.output_tokens * 200) / 1e6
    assert answer.cost_usd == pytest.approx(
        (answer.usage.input_tokens * 10 + answer.usage.output_tokens * 20) / 1e6 + loser_usd
    )


TOOLS: Any = [
    {
        "type": "function",
        "function": {
            "name": "plan",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "string"}},
                "required": ["city", "days"],
            },
        },
    }
]


def test_a_stream_without_usage_counts_its_reasoning_as_the_loser_does(
    fake: FakeProvider, closing: list[Guard]
) -> None:
    """A stream that reported no usage is estimated from what it streamed: its reasoning
    pieces count as output, as a streamed loser's do (only its text counted)."""
    fake.always(Fault(omit_usage=True))
    route = _Route(fake, reasoning=REASONING)
    guard = _guard([route])
    closing.append(guard)
    response = _achat(guard, lambda: None, stream=True)
    usage = response.usage
    assert usage is not None
    assert usage.estimated
    assert response.metadata.get("reasoning") == REASONING
    (first,) = [chunk for chunk in route.first if chunk.text]  # (the reasoning came with it)
    assert first.metadata == {"reasoning": REASONING}
    # counted from the assembled answer (no second copy of the stream): text, then reasoning
    streamed = response.text + REASONING
    assert usage.output_tokens == count_text_tokens(streamed, "fake-model").tokens


def test_a_stream_without_usage_counts_its_tool_calls_arguments(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    """A streamed tool call's arguments are output the provider bills: a stream without
    usage that called a tool was estimated at 0 output tokens."""
    fake.always(Fault(omit_usage=True))
    guard = make_guard(fake, budgets=BUDGETS, retry=None)
    with guard.chat(
        USER, stream=True, max_tokens=100, tools=TOOLS, tool_choice="required"
    ) as stream:
        list(stream)
    response = stream.response
    (call,) = response.tool_calls or []
    arguments = call["function"]["arguments"]
    assert arguments
    usage = response.usage
    assert usage is not None
    assert usage.estimated
    assert usage.output_tokens == count_text_tokens(response.text + arguments, "fake-model").tokens
    assert usage.output_tokens > 0


def _reasoned(body: dict[str, Any], counted: dict[str, Any]) -> dict[str, Any]:
    """A reasoning model's usage: 6 hidden reasoning tokens before its answer's."""
    output = counted["completion_tokens"] + 6
    return {
        **counted,
        "completion_tokens": output,
        "completion_tokens_details": {"reasoning_tokens": 6},
    }


@pytest.fixture
def thinker() -> Iterator[FakeProvider]:
    """The backup, a reasoning model (:func:`_reasoned`)."""
    with FakeProvider(model="backup-model", name="backup", usage=_reasoned) as server:
        yield server


@pytest.mark.parametrize(("mode", "max_tokens"), [("sync", 100), ("async", 100), ("sync", 4)])
def test_a_streamed_hedge_loser_is_charged_the_hidden_reasoning_the_winner_did(
    fake: FakeProvider, thinker: FakeProvider, make_guard: MakeGuard, mode: str, max_tokens: int
) -> None:
    """The winner's first content came after 6 hidden reasoning tokens; the loser, cut off
    then with no content, had been reasoning too (the same request, as long at least when it
    started first): it is charged as many, up to ``max_tokens``, beside its prompt, as a
    plain call's loser is charged the winner's output. It was charged its prompt alone."""
    guard = make_guard(fake, thinker, budgets=BUDGETS, hedge_after=0.05, timeout=10, retry=None)
    fake.always(Fault(first_token_delay=1.0))
    if mode == "sync":
        with guard.chat(USER, stream=True, max_tokens=max_tokens) as stream:
            list(stream)
        response = stream.response
    else:
        response = _achat(guard, lambda: None, stream=True, max_tokens=max_tokens)
    assert response.route == "backup"
    usage = response.usage
    assert usage is not None
    assert usage.reasoning_tokens == 6
    backup_usd = (usage.input_tokens * 10 + usage.output_tokens * 20) / 1e6
    loser_usd = (PROMPT * 100 + min(6, max_tokens) * 200) / 1e6
    assert response.cost_usd == pytest.approx(backup_usd + loser_usd)
    assert _spent(guard) == pytest.approx(response.cost_usd)


def _deep_thinker(body: dict[str, Any], counted: dict[str, Any]) -> dict[str, Any]:
    """A reasoning model's usage: 300 hidden reasoning tokens before its answer's."""
    output = counted["completion_tokens"] + 300
    return {
        **counted,
        "completion_tokens": output,
        "completion_tokens_details": {"reasoning_tokens": 300},
    }


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_streamed_hedge_loser_is_not_charged_the_next_routes_reasoning(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard, mode: str
) -> None:
    """The race's winning stream breaks after its first content; a third route, a reasoning
    model, continues it. The race's silent loser is charged its prompt alone: the winner
    never reported its reasoning, and the third route's 300 reasoning tokens are its own
    (the loser was charged them as the third route's stream ended)."""
    with FakeProvider(model="backup-model", name="third", usage=_deep_thinker) as third:
        guard = make_guard(
            fake,
            fake2,
            third,
            budgets=BUDGETS,
            hedge_after=0.05,
            timeout=10,
            retry=None,
            continue_interrupted_streams=True,
        )
        fake.always(Fault(first_token_delay=1.0))
        fake2.script(Fault(cut_stream_after=2))
        if mode == "sync":
            with guard.chat(USER, stream=True, max_tokens=400) as stream:
                list(stream)
            response = stream.response
        else:
            response = _achat(guard, lambda: None, stream=True, max_tokens=400)
    assert response.route == "third"
    usage = response.usage
    assert usage is not None
    assert usage.reasoning_tokens == 300
    third_usd = (usage.input_tokens * 10 + usage.output_tokens * 20) / 1e6
    # the backup's prompt and the text it streamed ("Echo: hello") before it broke
    backup_usd = (PROMPT * 10 + count_text_tokens("Echo: hello").tokens * 20) / 1e6
    loser_usd = PROMPT * 100 / 1e6  # the primary's prompt, nothing more
    assert response.cost_usd == pytest.approx(third_usd + backup_usd + loser_usd)
    assert _spent(guard) == pytest.approx(response.cost_usd)
