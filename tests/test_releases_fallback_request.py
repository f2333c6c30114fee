"""Releases: a canary call whose candidate refused its request as wrong (400, 422) falls
back to the current release's routes. The candidate sends its own request (its prompt,
parameters, model): its refusal says nothing of the current release's, so the pipeline's
"a 400 would fail everywhere" holds within the arm only. The candidate's routes left are
skipped (they would refuse it too), the call counts as the candidate's failure; on the
control arm, with the fallback off, and for the Guard's own refusals, nothing changes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from llmguard_sdk import Guard, RateLimit
from llmguard_sdk.errors import BadRequestError, ContentPolicyError, GuardrailRejectedError
from llmguard_sdk.models import ChatRequest
from llmguard_sdk.releases import Release
from llmguard_sdk.retry import RetryPolicy
from llmguard_sdk.testing import FakeProvider, Fault

from .test_releases_fallback import INSIDE, OUTSIDE, USER, _candidate_figures, _guard, route


@pytest.fixture(name="fakes")
def _fakes() -> Iterator[tuple[FakeProvider, FakeProvider, FakeProvider]]:
    with FakeProvider(name="a") as a, FakeProvider(name="b") as b, FakeProvider(name="c") as c:
        yield a, b, c


def _ask(guard: Guard, how: str, user: str) -> str | None:
    """The route that served one call, made ``how`` (plain, streamed, async)."""
    import anyio

    async def ask() -> str | None:
        return (await guard.achat(USER, user=user)).route

    if how == "stream":
        chunks = list(guard.chat(USER, user=user, stream=True))
        return next(c.route for c in chunks if c.route)
    if how == "async":
        return anyio.run(ask)
    return guard.chat(USER, user=user).route


@pytest.mark.parametrize("status", [400, 422])
@pytest.mark.parametrize("how", ["plain", "stream", "async"])
def test_a_candidates_request_error_falls_back_to_the_current_release(
    fakes: Any, how: str, status: int
) -> None:
    """The candidate's 400 (a parameter its new model refuses, say) was raised to the
    canary's users until the canary rolled back, though the current release was healthy."""
    a, b, c = fakes
    b.always(Fault(status=status))
    current = Release("bot", "v1", route(a), system_prompt="v1 prompt")
    candidate = Release(
        "bot", "v2", [route(b), route(c)], system_prompt="v2", parameters={"temperature": 0.2}
    )
    with _guard(current, candidate) as guard:
        served = _ask(guard, how, INSIDE)
        figures = _candidate_figures(guard)
    assert served == "a"
    # the candidate's other route would refuse the same request: skipped
    assert (len(b.requests), len(c.requests), len(a.requests)) == (1, 0, 1)
    assert a.requests[0].body["messages"][0]["content"] == "v1 prompt"
    assert "temperature" not in a.requests[0].body  # the current release's own request
    assert figures == (1, 1.0)  # the candidate's failure, counted on its arm


def test_the_current_releases_own_refusal_is_the_calls_error(fakes: Any) -> None:
    a, b, _ = fakes
    a.always(Fault(status=400))
    b.always(Fault(status=400))
    current, candidate = Release("bot", "v1", route(a)), Release("bot", "v2", route(b))
    with _guard(current, candidate) as guard, pytest.raises(BadRequestError) as raised:
        guard.chat(USER, user=INSIDE)
    assert raised.value.route == "a"
    assert (len(b.requests), len(a.requests)) == (1, 1)


def test_a_hedged_canary_call_falls_back_after_its_race(fakes: Any) -> None:
    """A race between the candidate's routes, both refusing the request, raised the
    refusal: the current release's route was never tried (nor is the candidate's third)."""
    a, b, c = fakes
    b.always(Fault(status=400))
    c.always(Fault(status=400))
    with FakeProvider(name="d") as d:
        current = Release("bot", "v1", route(a))
        candidate = Release("bot", "v2", [route(b), route(c), route(d)])
        with _guard(current, candidate, guard_args={"hedge_after": 0.0}) as guard:
            assert guard.chat(USER, user=INSIDE).route == "a"
    assert (len(b.requests), len(c.requests), len(d.requests), len(a.requests)) == (1, 1, 0, 1)


@pytest.mark.parametrize("arm", ["control", "fallback off"])
def test_a_request_error_stops_the_call_without_a_canary_fallback(fakes: Any, arm: str) -> None:
    a, b, c = fakes
    for fake in fakes:
        fake.always(Fault(status=400))
    current = Release("bot", "v1", [route(a), route(c)])
    candidate = Release("bot", "v2", route(b))
    control = arm == "control"  # (its fallback left on: a canary's only)
    user = OUTSIDE if control else INSIDE
    unguarded = _guard(current, candidate, fallback_to_current=control)
    with unguarded as guard, pytest.raises(BadRequestError):
        guard.chat(USER, user=user)
    sent = (len(a.requests), len(b.requests), len(c.requests))
    assert sent == ((1, 0, 0) if control else (0, 1, 0))


def test_the_guards_own_refusal_of_the_input_does_not_fall_back(fakes: Any) -> None:
    """An input filter's rejection is the caller's input, whatever the release."""
    a, b, _ = fakes

    def refuse(request: ChatRequest) -> ChatRequest:
        raise GuardrailRejectedError("no", stage="input")

    current, candidate = Release("bot", "v1", route(a)), Release("bot", "v2", route(b))
    filtered = _guard(current, candidate, guard_args={"input_filters": [refuse]})
    with filtered as guard, pytest.raises(GuardrailRejectedError):
        guard.chat(USER, user=INSIDE)
    assert (len(a.requests), len(b.requests)) == (0, 0)


def test_a_content_filters_refusal_goes_to_no_other_provider(fakes: Any) -> None:
    """A content filter's refusal stops the chain so the prompt goes to no other provider:
    a canary call keeps that rule (``moves_on=`` can hand it on)."""
    a, b, _ = fakes
    b.always(Fault(status=400, error_code="content_policy_violation"))
    current, candidate = Release("bot", "v1", route(a)), Release("bot", "v2", route(b))
    with _guard(current, candidate) as guard, pytest.raises(ContentPolicyError):
        guard.chat(USER, user=INSIDE)
    assert (len(b.requests), len(a.requests)) == (1, 0)


def test_a_candidates_retry_refused_by_its_rate_limit_falls_back_past_its_other_routes(
    fakes: Any,
) -> None:
    """The candidate's first route fails (503, a request error for this chain's
    ``moves_on``) and its retry is refused by the route's rate limit: the call falls back to
    the current release, its other candidate route skipped, as when the failure is the
    route's last attempt (it went to that other candidate route)."""
    a, b, c = fakes
    b.always(Fault(status=503))
    current = Release("bot", "v1", route(a))
    candidate = Release("bot", "v2", [route(b), route(c)])
    retried = {
        "moves_on": lambda error: False,
        "rate_limits": {"b": RateLimit(rpm=1, batch_headroom=0)},
        "retry": RetryPolicy(base=0.01),
        "timeout": 5.0,
    }
    with _guard(current, candidate, guard_args=retried) as guard:
        assert guard.chat(USER, user=INSIDE).route == "a"
    assert (len(b.requests), len(c.requests), len(a.requests)) == (1, 0, 1)
