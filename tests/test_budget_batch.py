"""Batch endpoints: ``priority="batch"`` calls to a Guard whose route is a
:class:`BatchProvider` go through FakeProvider's emulation of OpenAI's Batch API and
Anthropic's Message Batches, come back to their own callers, are priced at the batch discount
and counted once by budgets."""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from typing import Any, Literal

import pytest

from llmguard_sdk import Guard, OpenAICompatibleProvider
from llmguard_sdk.budget import Budget, BudgetEvent, Budgets, Price, PriceTable
from llmguard_sdk.errors import BudgetExceededError, ConfigurationError, ProviderTimeoutError
from llmguard_sdk.models import ChatRequest, Message
from llmguard_sdk.providers.batch import BatchProvider
from llmguard_sdk.telemetry.redaction import redact_secrets
from llmguard_sdk.testing import FakeProvider

from .conftest import USER
from .test_budget_fixtures import _Recording

# $100 / $200 per million tokens, standard; the batch tier is half of it
PRICES = PriceTable.default_table().with_prices({"fake-model": Price(input=100.0, output=200.0)})


def _guard(fake: FakeProvider, api: Literal["openai", "anthropic"], **kw: Any) -> Guard:
    route = BatchProvider(
        fake.base_url, api=api, model="fake-model", window=0.3, poll_interval=0.05, **kw
    )
    return Guard(
        route,
        budgets=Budgets([Budget(limit_usd=10.0, scope="tenant")], prices=PRICES),
        environ={},
        timeout=30,
        retry=None,
    )


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_a_hundred_batch_calls_come_back_discounted_and_counted_once(
    fake: FakeProvider, api: Literal["openai", "anthropic"]
) -> None:
    guard = _guard(fake, api)
    recording = _Recording()
    spend = guard._stages.spend
    assert spend is not None
    spend.backend = recording
    questions = [f"question number {i}" for i in range(100)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=100) as pool:
        futures = [
            pool.submit(
                guard.chat,
                [{"role": "user", "content": q}],
                max_tokens=20,
                tenant="acme",
                priority="batch",
            )
            for q in questions
        ]
        answers = [f.result(timeout=60) for f in futures]
    (row,) = spend.status(tenant="acme")
    held = recording.held
    assert len(held) == 100
    guard.close()
    batches = [r for r in fake.requests if r.path.rstrip("/").endswith("batches")]
    assert 1 <= len([r for r in batches if r.method == "POST"]) <= 3  # a few batches, not 100
    chat_paths = ("/chat/completions", "/messages")
    assert not any(r.path.endswith(chat_paths) for r in fake.requests)  # batch API only
    total = 0.0
    for question, answer in zip(questions, answers, strict=True):
        assert question.split()[-1] in answer.text  # each caller got its own answer
        assert answer.usage is not None
        assert answer.usage.service_tier == "batch"
        usage = answer.usage
        standard = (usage.input_tokens * 100 + usage.output_tokens * 200) / 1e6
        assert answer.cost_usd == pytest.approx(standard / 2)  # the batch discount
        total += answer.cost_usd or 0.0
    assert row["spent_usd"] == pytest.approx(total, abs=1e-8)  # each call counted once
    assert row["held_usd"] == 0
    # holds are sized at the batch rates: half what the same call holds on a standard route
    standard_guard = Guard(
        OpenAICompatibleProvider(fake.base_url, model="fake-model", name=api),
        budgets=Budgets([Budget(limit_usd=10.0, scope="tenant")], prices=PRICES),
        environ={},
    )
    interactive = _Recording()
    spend = standard_guard._stages.spend
    assert spend is not None
    spend.backend = interactive
    standard_guard.chat([{"role": "user", "content": questions[55]}], max_tokens=20, tenant="acme")
    standard_guard.close()
    assert max(held) * 2 == pytest.approx(interactive.held[0], abs=2)


def test_async_batch_calls(fake: FakeProvider) -> None:
    guard = _guard(fake, "openai")

    async def run() -> list[Any]:
        return await asyncio.gather(
            *(
                guard.achat([{"role": "user", "content": f"async {i}"}], max_tokens=5)
                for i in range(10)
            )
        )

    answers = asyncio.run(run())
    guard.close()
    assert all(a.usage is not None and a.usage.service_tier == "batch" for a in answers)


def test_a_batch_that_does_not_end_in_time_fails_its_calls(fake: FakeProvider) -> None:
    fake.batch_seconds = 30.0
    route = BatchProvider(fake.base_url, model="fake-model", window=0.05, poll_interval=0.05)
    guard = Guard(route, environ={}, timeout=1.0, retry=None)
    with pytest.raises(ProviderTimeoutError):
        guard.chat([{"role": "user", "content": "slow"}], max_tokens=5)
    guard.close()


def test_a_batch_call_that_timed_out_is_not_charged(fake: FakeProvider) -> None:
    """Its batch was cancelled (or never left): batch APIs bill completed requests only, so
    it is no unserved attempt billed its prompt, as a timed-out interactive request is."""
    fake.batch_seconds = 30.0
    route = BatchProvider(fake.base_url, model="fake-model", window=0.05, poll_interval=0.05)
    budgets = Budgets([Budget(limit_usd=10.0)], prices=PRICES)
    guard = Guard(route, budgets=budgets, environ={}, timeout=1.0, retry=None)
    with pytest.raises(ProviderTimeoutError):
        guard.chat([{"role": "user", "content": "slow"}], max_tokens=5, priority="batch")
    (row,) = guard.budget_status()
    guard.close()
    assert (row["spent_usd"], row["held_usd"]) == (0, 0)


@pytest.mark.parametrize("budgeted", [True, False])
def test_priority_batch_calls_take_the_batch_route_and_others_never_do(
    fake: FakeProvider, budgeted: bool
) -> None:
    budgets = Budgets([Budget(limit_usd=10.0, scope="tenant")], prices=PRICES)
    guard = Guard(
        [
            OpenAICompatibleProvider(fake.base_url, model="fake-model", name="openai"),
            BatchProvider(fake.base_url, model="fake-model", window=0.2, poll_interval=0.05),
        ],
        budgets=budgets if budgeted else None,
        prices=None if budgeted else PRICES,
        environ={},
        timeout=30,
    )
    with concurrent.futures.ThreadPoolExecutor(max_workers=20) as pool:
        batch = list(
            pool.map(
                lambda i: guard.chat(
                    [{"role": "user", "content": f"later {i}"}],
                    max_tokens=5,
                    tenant="acme",
                    priority="batch",
                ),
                range(20),
            )
        )
    now = guard.chat([{"role": "user", "content": "now"}], max_tokens=5, tenant="acme")
    guard.close()
    assert {answer.route for answer in batch} == {"openai-batch"}
    assert all(a.usage is not None and a.usage.service_tier == "batch" for a in batch)
    assert now.route == "openai"
    chat_calls = [r for r in fake.requests if r.path.endswith("/chat/completions")]
    assert len(chat_calls) == 1  # only the interactive call used the chat endpoint
    for answer in batch:  # at the batch rates, half the standard ones
        assert answer.usage is not None
        standard = (answer.usage.input_tokens * 100 + answer.usage.output_tokens * 200) / 1e6
        assert answer.cost_usd == pytest.approx(standard / 2)


def test_closing_after_an_async_batch_call_gave_up_does_not_raise(fake: FakeProvider) -> None:
    route = BatchProvider(fake.base_url, model="fake-model", window=30.0, poll_interval=0.05)
    request = ChatRequest(messages=[Message(role="user", content="gave up")], max_tokens=5)

    async def run() -> None:
        with pytest.raises(ProviderTimeoutError):
            await route.acomplete(request, model="fake-model", deadline=time.monotonic() + 0.05)

    asyncio.run(run())
    route.close()  # the waiting call's future was cancelled: closing still fails none
    assert route._http.is_closed


@pytest.mark.parametrize("asynchronous", [False, True])
def test_a_call_whose_caller_gave_up_before_its_batch_left_is_not_sent(
    fake: FakeProvider, asynchronous: bool
) -> None:
    route = BatchProvider(fake.base_url, model="fake-model", window=0.3, poll_interval=0.05)
    request = ChatRequest(messages=[Message(role="user", content="gave up")], max_tokens=5)
    deadline = time.monotonic() + 0.05
    if asynchronous:
        with pytest.raises(ProviderTimeoutError):
            asyncio.run(route.acomplete(request, model="fake-model", deadline=deadline))
    else:
        with pytest.raises(ProviderTimeoutError):
            route.complete(request, model="fake-model", deadline=deadline)
    time.sleep(0.8)  # the window ends: the batch would have been sent by now
    answer = route.complete(request, model="fake-model", deadline=time.monotonic() + 30)
    route.close()
    assert answer.text
    uploads = [r for r in fake.requests if r.path.endswith("/files") and r.method == "POST"]
    assert len(uploads) == 1  # only the call that was still waited for went out


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_a_batch_routes_key_is_checked_and_masked_as_other_routes_keys_are(
    fake: FakeProvider, api: Literal["openai", "anthropic"]
) -> None:
    with pytest.raises(ConfigurationError, match="api_key"):  # its 1st call failed, key shown
        BatchProvider(fake.base_url, api=api, api_key="batch-key-from-a-file\n")
    route = BatchProvider(fake.base_url, api=api, api_key=f"batch-{api}-key-7f3a")
    route.close()
    assert f"batch-{api}-key-7f3a" not in redact_secrets(f"failed: batch-{api}-key-7f3a")


def _answer(outcome: Any) -> Any:
    """The answer of a sync call, or of an async one run to its end."""
    return asyncio.run(outcome) if asyncio.iscoroutine(outcome) else outcome


def _cancelled(fake: FakeProvider) -> list[str]:
    """The batches the route cancelled at the provider (waits a while for the route to)."""
    for _ in range(200):
        found = [r.path for r in fake.requests if r.method == "POST" and r.path.endswith("/cancel")]
        if found:
            return found
        time.sleep(0.05)
    return []


@pytest.mark.parametrize("asynchronous", [False, True])
@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_a_batch_nobody_waits_for_any_more_is_cancelled_at_the_provider(
    fake: FakeProvider, api: Literal["openai", "anthropic"], asynchronous: bool
) -> None:
    """A batch whose callers' deadlines had all passed kept running (and billing) at the
    provider until it ended there; it is cancelled once no caller waits for it."""
    import httpx

    fake.batch_seconds = 60.0
    route = BatchProvider(fake.base_url, api=api, model="fake-model", window=0.05,
                          poll_interval=0.05)  # fmt: skip
    request = ChatRequest(messages=[Message(role="user", content="too slow")], max_tokens=5)
    deadline = time.monotonic() + 0.5  # the batch leaves first, then the caller gives up
    call = route.acomplete if asynchronous else route.complete
    with pytest.raises(ProviderTimeoutError):
        _answer(call(request, model="fake-model", deadline=deadline))
    (cancel,) = _cancelled(fake)
    route.close()
    status = httpx.get(fake.base_url.rstrip("/").removesuffix("/v1") + cancel[: -len("/cancel")])
    if api == "openai":
        assert status.json()["status"] in ("cancelling", "cancelled")
    else:
        assert status.json()["request_counts"]["canceled"] == 1


@pytest.mark.parametrize("policy", ["downgrade", "local_only"])
def test_a_budget_with_no_route_to_send_a_call_to_refuses_it(
    fake: FakeProvider, policy: str
) -> None:
    """The batch route serves batch calls only: a budget whose downgrade route is the batch
    route, or a batch call whose budget says local only, has nowhere to send the call it has
    no room for, so it refuses it (the call went to no route at all, an AllRoutesFailedError
    with no error in it, and the event said it was downgraded)."""
    events: list[BudgetEvent] = []
    batch = BatchProvider(fake.base_url, api="openai", model="fake-model", name="nightly")
    local = OpenAICompatibleProvider(fake.base_url, model="fake-model", name="local")
    budgets = Budgets(
        [Budget(limit_usd=0.0001, on_exhausted=policy)],  # type: ignore[arg-type]
        prices=PRICES,
        downgrade_to=["nightly"] if policy == "downgrade" else (),
        local_routes=["local"] if policy == "local_only" else (),
        on_event=[events.append],
    )
    guard = Guard([local, batch], budgets=budgets, environ={}, timeout=10, retry=None)
    priority: Literal["batch", "interactive"] = "batch" if policy == "local_only" else "interactive"
    try:
        with pytest.raises(BudgetExceededError):
            guard.chat(USER, max_tokens=10, priority=priority)
    finally:
        guard.close()
    assert [e.action for e in events if e.kind == "exhausted"] == ["refused"]
    assert fake.stats.requests == 0
