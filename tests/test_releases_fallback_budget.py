"""Releases and spend budgets: a canary call that falls back to the current release sends the
current release's request (its ``max_tokens``, its system prompt), and its spend hold is
sized anew for that request, as the call's reservation sizes it: topped up where the budget
has room, refused as the control arm's call is where it has none (clamped with
``clamp_max_tokens``). The hold was the candidate's: a fallback sent on it spent past the cap."""

from __future__ import annotations

from typing import Any, NamedTuple

import anyio
import pytest

from llmguard_sdk import ChatResponse, Guard
from llmguard_sdk.budget import Budget, Budgets, Price, PriceTable
from llmguard_sdk.errors import BudgetExceededError
from llmguard_sdk.releases import Release
from llmguard_sdk.store import RedisStore
from llmguard_sdk.testing import FakeProvider, Fault

from .test_releases_fallback import INSIDE, OUTSIDE, USER, _guard, route

PRICES = PriceTable.default_table().with_prices(
    {f"fake-{v}-2025-01-01": Price(input=1000.0, output=1000.0) for v in ("a", "b")}
)  # $0.001 a token, in or out
LONG_PROMPT = "Answer briefly and politely. " * 400  # some 2,000 tokens: $2 of input
Sized = dict[str, Any]
BIGGER: dict[str, tuple[Sized, Sized]] = {  # (current release's, candidate's) shaping
    "max_tokens": ({"parameters": {"max_tokens": 5000}}, {"parameters": {"max_tokens": 10}}),
    "prompt": (
        {"system_prompt": LONG_PROMPT, "parameters": {"max_tokens": 10}},
        {"system_prompt": "Be brief.", "parameters": {"max_tokens": 10}},
    ),
}


def _usage(body: dict[str, Any], counted: dict[str, Any]) -> dict[str, Any]:
    """All the output it was allowed, up to 3,000 tokens; the prompt as counted."""
    out = min(3000, body.get("max_tokens") or 3000)
    prompt = int(counted.get("prompt_tokens") or 10)
    return {"prompt_tokens": prompt, "completion_tokens": out, "total_tokens": prompt + out}


@pytest.fixture(params=["memory", "redis"])
def store(request: pytest.FixtureRequest) -> tuple[str, str] | None:
    """None: memory backends; else (Redis URL, this test's key prefix)."""
    if request.param == "memory":
        return None
    return request.getfixturevalue("redis_url"), request.getfixturevalue("redis_prefix")


class Outcome(NamedTuple):
    answer: ChatResponse | BudgetExceededError
    sent: list[dict[str, Any]]  # the bodies route a (the current release's) was sent
    spent: float
    held: float
    candidate: tuple[int, float]  # the candidate's calls and error rate, as the canary counts


def _call(
    store: tuple[str, str] | None,
    bigger: str,
    user: str,
    *,
    limit: float,
    clamp: bool = False,
    how: str = "plain",
) -> Outcome:
    """One call of ``user`` on a fresh Guard whose candidate (route b) always fails with a
    500 (``how``: plain, streamed or async)."""
    current_shape, candidate_shape = BIGGER[bigger]
    with FakeProvider(name="a", usage=_usage) as a, FakeProvider(name="b") as b:
        b.always(Fault(status=500))
        current = Release("bot", "v1", route(a), **current_shape)
        candidate = Release("bot", "v2", route(b), **candidate_shape)
        budgets = Budgets([Budget(limit_usd=limit)], prices=PRICES, clamp_max_tokens=clamp)
        options: dict[str, Any] = {"prices": PRICES, "budgets": budgets}
        if store is not None:  # each call its own budget counters (and canary)
            options["store"] = RedisStore(store[0], key_prefix=f"{store[1]}:{user}")
        with _guard(current, candidate, guard_args=options) as guard:
            assert guard.releases is not None
            answer: ChatResponse | BudgetExceededError
            try:
                answer = _ask(guard, user, how)
            except BudgetExceededError as refused:
                answer = refused
            (row,) = guard.budget_status()
            guard.releases.flush()
            figures = guard.releases.status()["candidate"]
        if "store" in options:
            options["store"].close()
        sent = [r.body for r in a.requests]
        counted = (figures["calls"], figures["error_rate"])
        return Outcome(answer, sent, row["spent_usd"], row["held_usd"], counted)


def _ask(guard: Guard, user: str, how: str) -> ChatResponse:
    if how == "async":

        async def ask() -> ChatResponse:
            return await guard.achat(USER, user=user)

        return anyio.run(ask)
    if how == "stream":
        chunks = list(guard.chat(USER, user=user, stream=True))
        route = next(c.route for c in chunks if c.route)
        return ChatResponse(text="".join(c.text or "" for c in chunks), route=route)
    return guard.chat(USER, user=user)


@pytest.mark.parametrize("how", ["plain", "stream", "async"])
@pytest.mark.parametrize("bigger", sorted(BIGGER))
def test_a_fallback_the_budget_has_no_room_for_is_refused_as_the_control_arm_is(
    store: tuple[str, str] | None, bigger: str, how: str
) -> None:
    """$1 cap: the current release's request never fits it ($5 of output, or $2 of system
    prompt). The control arm's call was refused; the canary's, held for the candidate's small
    request, was sent the current release's on that hold and spent $3.01 (or $2) of $1. The
    candidate's failure still counts on its arm."""
    control = _call(store, bigger, OUTSIDE, limit=1.0, how=how)
    assert isinstance(control.answer, BudgetExceededError)
    assert control.sent == []
    canary = _call(store, bigger, INSIDE, limit=1.0, how=how)
    assert canary.sent == []  # nothing went out past the cap
    assert (canary.spent, canary.held) == (0.0, 0.0)
    refused = canary.answer
    assert isinstance(refused, BudgetExceededError)
    assert "nor ever will" in str(control.answer)
    assert "nor ever will" in str(refused)
    assert (refused.limit_usd, refused.retry_after, refused.budget) == (
        control.answer.limit_usd,
        control.answer.retry_after,
        control.answer.budget,
    )
    assert canary.candidate == (1, 1.0)  # its 500s: the budget refused the current release


@pytest.mark.parametrize("bigger", sorted(BIGGER))
def test_a_fallback_the_budget_has_room_for_is_topped_up_and_served(
    store: tuple[str, str] | None, bigger: str
) -> None:
    """$10 cap: room for the current release's request; the fallback serves the call, and
    every hold, its top-up included, is settled to the spend."""
    canary = _call(store, bigger, INSIDE, limit=10.0)
    answer = canary.answer
    assert isinstance(answer, ChatResponse)
    assert answer.route == "a"
    assert len(canary.sent) == 1
    assert canary.held == 0.0
    assert canary.spent == pytest.approx(answer.cost_usd)
    assert canary.spent <= 10.0
    assert canary.candidate == (1, 1.0)


def test_a_clamped_fallback_is_sent_what_the_budget_allows(
    store: tuple[str, str] | None,
) -> None:
    """``clamp_max_tokens``: the control arm's call was sent the ``max_tokens`` its budget
    allows; the canary's fallback was sent its 5,000 and spent $3.01 of $1."""
    control = _call(store, "max_tokens", OUTSIDE, limit=1.0, clamp=True)
    canary = _call(store, "max_tokens", INSIDE, limit=1.0, clamp=True)
    assert isinstance(control.answer, ChatResponse)
    assert isinstance(canary.answer, ChatResponse)
    assert control.answer.route == canary.answer.route == "a"
    (control_body,), (canary_body,) = control.sent, canary.sent
    assert control_body["max_tokens"] < 1000  # clamped to what $1 allows
    assert abs(canary_body["max_tokens"] - control_body["max_tokens"]) <= 1
    assert canary.spent <= 1.0
    assert canary.held == 0.0
    assert control.spent <= 1.0
