"""Rate limits as a Guard stage: tenants, concurrency slots given back on every path,
streams learning from their headers, both legs of hedged calls limited, token counts per
route (the model's encoding, a local model's own tokenizer)."""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import anyio
import pytest

from llmguard_sdk import (
    ConfigurationError,
    Guard,
    OpenAICompatibleProvider,
    ProviderUnavailableError,
    RateLimitConfigWarning,
    RateLimitExceededError,
)
from llmguard_sdk._core.limits import provider_counters
from llmguard_sdk.models import ChatRequest, Message
from llmguard_sdk.ratelimit import RateLimit
from llmguard_sdk.testing import FakeProvider, Fault
from llmguard_sdk.tokens import count_request_tokens

from .conftest import USER, answering_route, require_module, run_closing

MakeGuard = Callable[..., Guard]


def _in_flight(guard: Guard, route: str = "primary", tenant: str | None = None) -> int:
    limiter: Any = guard.rate_limiter
    return int(limiter.in_flight(route, tenant=tenant))


def test_limits_per_tenant(fake: FakeProvider, make_guard: MakeGuard) -> None:
    guard = make_guard(
        fake, rate_limits={"primary": [RateLimit(rpm=100), RateLimit(rpm=2, per_tenant=True)]}
    )
    guard.chat(USER, tenant="acme")
    guard.chat(USER, tenant="acme")
    with pytest.raises(RateLimitExceededError) as info:
        guard.chat(USER, tenant="acme")
    assert info.value.retry_after is not None
    assert guard.chat(USER, tenant="globex").route == "primary"
    assert fake.stats.requests == 3


@pytest.mark.parametrize("shared", [False, True], ids=["memory", "redis"])
def test_the_guards_own_reservations_skip_the_public_entry_points_checks(
    fake: FakeProvider,
    make_guard: MakeGuard,
    redis_url: str,
    redis_prefix: str,
    monkeypatch: pytest.MonkeyPatch,
    shared: bool,
) -> None:
    """The limiters checked the keywords and numbers of every reserve, settle and learn of
    every call (about 5 us of a 28 us call), arguments the Guard builds itself; only the
    public entry points check them now, and still refuse bad ones with a typed error."""
    from llmguard_sdk.ratelimit import _rules, memory
    from llmguard_sdk.ratelimit import redis as shared_limits

    checked: list[str] = []
    check_numbers = _rules.check_numbers

    def spy(given: dict[str, object], what: str) -> None:
        checked.append(what)
        check_numbers(given, what)

    for module in (_rules, memory, shared_limits):
        monkeypatch.setattr(module, "check_numbers", spy, raising=False)
    store = {"store": redis_url, "key_prefix": redis_prefix} if shared else {}
    limits = {"primary": RateLimit(rpm=100, tpm=100_000, concurrency=4)}
    guard = make_guard(fake, rate_limits=limits, **store)
    counters = {"x-ratelimit-remaining-requests": "90"}  # the provider's counters learned
    fake.script(Fault(headers=counters))
    assert guard.chat(USER).text
    assert run_closing(guard, lambda: guard.achat(USER)).text
    with guard.chat(USER, stream=True) as stream:
        assert "".join(chunk.text for chunk in stream)
    assert fake.stats.requests == 3
    assert checked == []
    limiter: Any = guard.rate_limiter
    with pytest.raises(ConfigurationError, match="tokens"):
        limiter.reserve("primary", tokens=-1)
    with pytest.raises(ConfigurationError, match="tokns"):
        limiter.settle("primary", tokns=1)
    assert checked == ["reserve"]  # (a misspelt keyword: refused before the numbers)
    assert _in_flight(guard) == 0


def test_a_limit_on_a_route_the_guard_does_not_have_is_a_configuration_error(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    """A misspelt route name (or a deployment group's) was accepted and never applied: the
    route went unlimited."""
    with pytest.raises(ConfigurationError, match=r"\['primray'\].*\['primary'\]"):
        make_guard(fake, rate_limits={"primray": RateLimit(rpm=1, batch_headroom=0)})


def test_a_concurrency_cap_refuses_calls_beyond_it(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    fake.always(Fault(latency=0.5))
    guard = make_guard(fake, rate_limits={"primary": RateLimit(concurrency=1)}, breaker=None)
    outcomes: list[str] = []
    barrier = threading.Barrier(3)

    def call() -> None:
        barrier.wait()
        try:
            outcomes.append(guard.chat(USER).route)
        except RateLimitExceededError as exc:
            outcomes.append("concurrency" if "concurrency" in str(exc) else str(exc))

    threads = [threading.Thread(target=call) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(outcomes) == ["concurrency", "concurrency", "primary"]
    assert fake.stats.requests == 1
    assert _in_flight(guard) == 0  # given back on settle


def test_concurrency_slots_come_back_after_failures_and_cancellation(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    guard = make_guard(
        fake, rate_limits={"primary": RateLimit(concurrency=1)}, breaker=None, retry=None
    )
    fake.script(Fault(status=500))
    with pytest.raises(ProviderUnavailableError):
        guard.chat(USER)
    assert _in_flight(guard) == 0
    fake.always(Fault(latency=5))

    async def cancelled() -> None:
        with anyio.move_on_after(0.3):
            await guard.achat(USER)

    anyio.run(cancelled)
    assert _in_flight(guard) == 0
    fake.always(None)
    assert guard.chat(USER).route == "primary"


def test_streams_give_slots_back_when_closed_early(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    guard = make_guard(fake, rate_limits={"primary": RateLimit(concurrency=1, tpm=10_000)})
    with guard.chat([{"role": "user", "content": "one two three four five"}], stream=True) as s:
        next(iter(s))
        assert _in_flight(guard) == 1
    assert _in_flight(guard) == 0

    async def run() -> None:
        stream = await guard.achat(USER, stream=True)
        async with stream:
            async for _chunk in stream:
                break
        assert _in_flight(guard) == 0

    run_closing(guard, run)


def test_streams_learn_from_their_response_headers(make_guard: MakeGuard) -> None:
    with FakeProvider(name="primary", rpm=2) as strict:
        guard = make_guard(strict, rate_limits={"primary": RateLimit(rpm=100)}, breaker=None)
        for _ in range(2):
            with guard.chat(USER, stream=True) as stream:
                list(stream)
        assert stream.response.headers.get("x-ratelimit-remaining-requests") == "0"
        with pytest.raises(RateLimitExceededError) as info, guard.chat(USER, stream=True) as s:
            list(s)
        assert strict.stats.rate_limited == 0  # refused here, not by a 429 over there
        assert info.value.retry_after is not None
        assert info.value.retry_after > 50


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_anthropics_reset_instants_are_learned_as_openais_resets(
    fake: FakeProvider, make_guard: MakeGuard, mode: str
) -> None:
    # no requests left until an RFC 3339 instant 90 s ahead: the route pauses until then,
    # as for OpenAI's "x-ratelimit-reset-requests: 1m30s" (the counter alone refilled in 0.6 s)
    reset = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=90)
    fake.script(
        Fault(
            headers={
                "anthropic-ratelimit-requests-remaining": "0",
                "anthropic-ratelimit-requests-reset": reset.isoformat().replace("+00:00", "Z"),
            }
        )
    )
    guard = make_guard(fake, rate_limits={"primary": RateLimit(rpm=100)}, breaker=None)

    def call() -> None:
        if mode == "sync":
            guard.chat(USER)
        else:
            run_closing(guard, lambda: guard.achat(USER))

    call()
    with pytest.raises(RateLimitExceededError) as info:
        call()
    assert fake.stats.requests == 1  # refused here, not sent
    assert info.value.retry_after is not None
    assert 80 < info.value.retry_after <= 91


@pytest.mark.parametrize(
    "headers",
    [
        {"retry-after": "1000000000"},  # a 429's hint: 31 years
        {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "9999999h"},
    ],
)
def test_a_far_fetched_wait_hint_pauses_a_route_an_hour_at_most(
    fake: FakeProvider, make_guard: MakeGuard, headers: dict[str, str]
) -> None:
    """A provider's hint is taken as a pause of at most an hour: a bogus one (a 429's
    Retry-After of 1e9 s, a reset in 1,141 years) locked the route out for as long."""
    status = 429 if "retry-after" in headers else None  # (None: an answer)
    fake.script(Fault(status=status, headers=headers))
    guard = make_guard(fake, rate_limits={"primary": RateLimit(rpm=100)}, breaker=None)
    try:
        guard.chat(USER)
    except Exception:  # the 429 itself (no retry fits the hint)
        assert status == 429
    with pytest.raises(RateLimitExceededError) as info:
        guard.chat(USER)
    assert info.value.retry_after is not None
    assert 3000 < info.value.retry_after <= 3601


@pytest.mark.parametrize(
    ("priority", "max_tokens", "says"),
    [
        # larger than the share of the burst a batch call may take, not than the limit: it
        # was "larger than the limit allows at once", though it fits as an interactive call
        ("batch", 900, r"batch call .* 800 tokens .*batch_headroom 0\.2.* as an interactive"),
        ("interactive", 1100, r"tokens .* more than the 1000 tokens .*tpm 1000 x burst 1"),
    ],
)
def test_a_call_larger_than_its_burst_is_refused_at_once_saying_why(
    fake: FakeProvider,
    make_guard: MakeGuard,
    priority: Literal["interactive", "batch"],
    max_tokens: int,
    says: str,
) -> None:
    guard = make_guard(
        fake,
        rate_limits={"primary": RateLimit(tpm=1000, max_wait=30, reserve_output_tokens=500)},
        breaker=None,
    )
    with pytest.raises(RateLimitExceededError, match=says) as info:
        guard.chat(USER, max_tokens=max_tokens, priority=priority)
    assert info.value.retry_after is None  # not "come back later": it never fits here
    assert fake.stats.requests == 0
    assert guard.chat(USER, max_tokens=700, priority="batch").route == "primary"


def test_a_call_without_max_tokens_too_large_for_its_output_reservation_says_so(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    """A call of a few tokens refused as larger than a tenant's tpm=1000 said only "the
    call's 1030 tokens": it set no max_tokens, so it reserved ``reserve_output_tokens``
    (1024) of output; the message says so, and what to set."""
    with pytest.warns(RateLimitConfigWarning, match="reserve_output_tokens=1024"):  # said early
        guard = make_guard(
            fake, rate_limits={"primary": RateLimit(tpm=1000, per_tenant=True)}, breaker=None
        )
    with pytest.raises(RateLimitExceededError) as info:
        guard.chat(USER, tenant="free-tier")
    message = str(info.value)
    assert "set no max_tokens" in message
    assert "reserve_output_tokens=1024" in message
    with pytest.raises(RateLimitExceededError) as sized:  # its own max_tokens: no such hint
        guard.chat(USER, tenant="free-tier", max_tokens=2000)
    assert "max_tokens" not in str(sized.value)
    assert guard.chat(USER, tenant="free-tier", max_tokens=100).route == "primary"


def test_async_streams_learn_from_their_response_headers(make_guard: MakeGuard) -> None:
    with FakeProvider(name="primary", rpm=1) as strict:
        guard = make_guard(strict, rate_limits={"primary": RateLimit(rpm=100)}, breaker=None)

        async def read() -> None:
            stream = await guard.achat(USER, stream=True)
            async with stream:
                async for _chunk in stream:
                    pass

        async def run() -> None:
            await read()
            with pytest.raises(RateLimitExceededError):
                await read()

        run_closing(guard, run)
        assert strict.stats.rate_limited == 0


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("stream", [False, True])
def test_both_legs_of_a_hedged_call_are_limited(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard, mode: str, stream: bool
) -> None:
    fake.always(Fault(latency=0.4, first_token_delay=0.4))
    guard = make_guard(
        fake,
        fake2,
        hedge_after=0.05,
        rate_limits={"primary": RateLimit(rpm=10), "backup": RateLimit(rpm=1, batch_headroom=0)},
        breaker=None,
    )

    def call() -> str:
        return answering_route(guard, stream)

    async def acall() -> str:
        if not stream:
            return (await guard.achat(USER)).route
        chunks = await guard.achat(USER, stream=True)
        async with chunks:
            async for _chunk in chunks:
                pass
        return chunks.response.route

    def one() -> str:
        return call() if mode == "sync" else run_closing(guard, acall)

    assert one() == "backup"  # the hedge had room and won
    assert one() == "primary"  # the backup's one request is used: no hedge, primary answers
    assert fake2.stats.requests == 1


def test_a_hedge_whose_first_route_has_no_room_starts_with_the_next(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard
) -> None:
    guard = make_guard(
        fake,
        fake2,
        hedge_after=0.05,
        rate_limits={"primary": RateLimit(rpm=1, batch_headroom=0)},
        breaker=None,
    )
    assert guard.chat(USER).route == "primary"
    assert guard.chat(USER).route == "backup"
    assert fake.stats.requests == 1


def test_input_tokens_are_counted_for_the_routes_model(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    guard = make_guard(fake, rate_limits={"primary": RateLimit(input_tpm=10_000)})
    long_prompt = [{"role": "user", "content": "word " * 400}]
    guard.chat(long_prompt, max_tokens=5)
    limiter: Any = guard.rate_limiter
    # reserved ~400 input tokens and settled to the provider's count: room for about 24 more
    granted = sum(
        limiter.reserve("primary", input_tokens=400, output_tokens=0).allowed for _ in range(30)
    )
    assert 22 <= granted <= 24


class _OwnTokenizer(OpenAICompatibleProvider):
    """A route with a tokenizer of its own, which counts every request as 1,000 tokens (the
    call's own count, tiktoken's, is a few)."""

    def count_tokens(self, request: ChatRequest) -> int:
        return 1_000


def _room(guard: Guard, route: str) -> int:
    """Input tokens ``route``'s limit has room for now (its 10,000 a day, less what calls
    settled to: a day's limit refills no token within a test)."""
    limiter: Any = guard.rate_limiter
    low, high = 0, 10_000
    while low < high:  # the largest reservation granted at once (refused ones take nothing)
        middle = (low + high + 1) // 2
        grant = limiter.reserve(route, input_tokens=middle, output_tokens=0, max_wait=0)
        if grant.allowed:
            limiter.settle(route, input_delta=-middle, lease=grant.lease)
            low = middle
        else:
            high = middle - 1
    return low


@pytest.mark.parametrize("reported", [True, False], ids=["usage", "no-usage"])
@pytest.mark.parametrize("stream", [False, True], ids=["chat", "stream"])
def test_the_rate_limit_and_the_budget_count_a_calls_input_alike(
    fake: FakeProvider, reported: bool, stream: bool
) -> None:
    """The rate limit settled a call to the provider's usage, else to the input the route
    counted (its own tokenizer's 1,000); the budget charged the provider's usage, else the
    call's own count (tiktoken's): the two disagreed on a call whose provider sent no usage.
    Both count the provider's usage (here its count differs from both of ours), and without
    one the input the route counted."""
    from llmguard_sdk.budget import Budget, Budgets, Price, PriceTable

    if not reported:
        fake.always(Fault(omit_usage=True))
    prices = PriceTable.default_table().with_prices({"fake-model": Price(1.0, 0.0)})
    route = _OwnTokenizer(fake.base_url, model="fake-model", name="primary")
    guard = Guard(
        route,
        rate_limits={"primary": RateLimit(input_tpm=10_000, period=86_400, max_wait=0)},
        budgets=Budgets([Budget(limit_usd=1.0)], prices=prices),
        retry=None,
        environ={},
    )
    with guard:
        if stream:
            with guard.chat(USER, stream=True, max_tokens=5) as chunks:
                list(chunks)
            answer = chunks.response
        else:
            answer = guard.chat(USER, max_tokens=5)
        assert answer.usage is not None
        assert answer.usage.estimated is not reported
        used = answer.usage.input_tokens
        assert used == (fake.stats.input_tokens if reported else 1_000)
        assert 10_000 - _room(guard, "primary") == used  # the rate limit settled to it
        assert guard.budget_status()[0]["spent_usd"] == pytest.approx(used / 1e6)


def test_provider_counters_of_openai_and_anthropic_shapes() -> None:
    assert provider_counters(
        {"X-RateLimit-Remaining-Requests": "5", "x-ratelimit-remaining-tokens": "bad"}
    ) == {"remaining_requests": 5.0}
    assert provider_counters(
        {
            "anthropic-ratelimit-input-tokens-remaining": "100",
            "anthropic-ratelimit-output-tokens-remaining": "7",
        }
    ) == {"remaining_input_tokens": 100.0, "remaining_output_tokens": 7.0}


def test_models_count_with_their_own_encoding_or_say_it_is_an_estimate(tmp_path: Path) -> None:
    request = ChatRequest(messages=[Message(role="user", content="hello there, friend")])
    exact = count_request_tokens(request, model="gpt-4")
    assert (exact.estimated, exact.method) == (False, "cl100k_base")
    other = count_request_tokens(request, model="some-local-model")
    assert other.estimated
    # gpt-4o counts with o200k_base, which is not bundled: with tiktoken's cache empty (and a
    # fresh process, as encodings are looked up once per process) the count says it is an
    # estimate, never that it used o200k_base.
    script = (
        "import json\n"
        "from llmguard_sdk.models import ChatRequest, Message\n"
        "from llmguard_sdk.tokens import count_request_tokens\n"
        "request = ChatRequest(messages=[Message(role='user', content='hello there, friend')])\n"
        "omni = count_request_tokens(request, model='gpt-4o')\n"
        "print(json.dumps([omni.estimated, omni.method]))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        env={**os.environ, "TIKTOKEN_CACHE_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    estimated, method = json.loads(result.stdout)
    assert estimated is True
    assert method != "o200k_base"


@pytest.mark.local_model
def test_the_local_route_counts_with_its_own_tokenizer() -> None:
    require_module("llama_cpp", "the local model extra: pip install 'llmguard-sdk[local]'")
    from llmguard_sdk import LocalProvider
    from llmguard_sdk._core.limits import route_input_tokens
    from llmguard_sdk.context import CallContext, Scope

    local = LocalProvider(n_ctx=512, warm_up=True)
    try:
        assert local.wait_loaded(120)
        request = ChatRequest(
            messages=[Message(role="user", content="Name three colours of the rainbow.")],
            max_tokens=4,
        )
        ctx = CallContext(request=request, scope=Scope(), deadline=1e12)
        counted = route_input_tokens(ctx, local)
        assert not counted.estimated
        answer = local.complete(request, model="m", deadline=time.monotonic() + 60)
        assert answer.usage is not None
        assert counted.tokens == answer.usage.input_tokens
    finally:
        local.close()


def test_a_route_whose_model_counts_like_the_calls_reuses_the_calls_count() -> None:
    from llmguard_sdk import OpenAICompatibleProvider
    from llmguard_sdk._core.limits import route_input_tokens
    from llmguard_sdk.context import CallContext, Scope

    request = ChatRequest(messages=[Message(role="user", content="Where is my parcel?")])
    for model, alike in (("fake-model", True), ("another-unknown-model", True), ("gpt-4", False)):
        route = OpenAICompatibleProvider("http://127.0.0.1:9", model=model, name="r")
        ctx = CallContext(request=request, scope=Scope(), deadline=1e12)
        counted = route_input_tokens(ctx, route)
        # the call counts without a model: an estimate with cl100k_base, as any model
        # tiktoken does not know counts; gpt-4's own encoding is cl100k_base, not an estimate
        assert (counted is ctx.input_tokens()) is alike, model
        assert (model in ctx.route_counts) is not alike, model
        assert counted.tokens == count_request_tokens(request, model).tokens
        assert counted.estimated is alike
        route.close()
