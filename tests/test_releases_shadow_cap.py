"""A shadow copy under a spend cap: its output limit lets it answer as long as the served
answer did (so the pair is compared fairly), and its reservation covers the retries its
Guard may make (so they never spend past the cap). FakeProviders on loopback, both models
at $1 per million tokens."""

from __future__ import annotations

from typing import Any

import httpx

from llmguard_sdk import Guard, OpenAICompatibleProvider
from llmguard_sdk.budget import Price, PriceTable
from llmguard_sdk.releases import Release, ReleasePlan, ShadowPolicy
from llmguard_sdk.testing import FakeProvider, Fault

LONG = " ".join(["word"] * 1500)  # a 1,500-token answer
TABLE = PriceTable({"a-2025-01-01": Price(1.0, 1.0), "b-2025-01-01": Price(1.0, 1.0)})
USER = [{"role": "user", "content": "hello"}]


class ShortReads(httpx.BaseTransport):
    """Real HTTP, each read given up after 1 s (a transport's own timeout): an answer
    slower than that (3 s) is an attempt that timed out after its request went out."""

    def __init__(self) -> None:
        self._inner = httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        timeouts = dict(request.extensions.get("timeout") or {})
        request.extensions["timeout"] = {**timeouts, "read": 1.0}
        return self._inner.handle_request(request)

    def close(self) -> None:
        self._inner.close()


def _shadowed(
    a: FakeProvider,
    b: FakeProvider,
    cap: float | None,
    *,
    control: dict[str, Any] | None = None,
    transport: httpx.BaseTransport | None = None,
    messages: list[dict[str, str]] = USER,
    **chat: Any,
) -> dict[str, Any]:
    """The shadow's report after two served calls copied to the candidate ``b``."""
    current = OpenAICompatibleProvider(a.base_url, model="a-2025-01-01", name="a")
    candidate = OpenAICompatibleProvider(
        b.base_url, model="b-2025-01-01", name="b", transport=transport
    )
    plan = ReleasePlan(
        Release("bot", "v1", current, parameters=control or {}),
        candidate=Release("bot", "v2", candidate),
        shadow=ShadowPolicy(share=1.0, rate_per_s=1000, max_cost_usd=cap),
    )
    guard = Guard(release=plan, environ={}, prices=TABLE, telemetry=False)
    try:
        for _ in range(2):
            guard.chat(messages, **chat)
        shadow = guard.releases.shadow  # type: ignore[union-attr]
        assert shadow is not None
        assert shadow.drain(30.0)
        return shadow.report()
    finally:
        guard.close()


def test_a_copy_answers_as_long_as_the_served_answer_did() -> None:
    """The served answer had no limit (1,500 tokens); its copy was sent with 1,024
    (``Budgets.default_output_tokens``), cut short, and every pair disagreed on length and
    text. It is now sent with the served answer's own length and a margin."""
    reply = lambda body: LONG  # noqa: E731
    with FakeProvider(name="a", reply=reply) as a, FakeProvider(name="b", reply=reply) as b:
        report = _shadowed(a, b, 1.0)
        limits = [request.body.get("max_tokens") for request in b.requests]
    assert report["pairs"] == 2
    assert report["agreement"]["length"] == 1.0
    assert report["agreement"]["exact"] == 1.0
    assert all(limit is not None and 1500 < limit <= 2250 for limit in limits), limits


def test_a_copy_gets_the_limit_the_served_call_had_when_it_is_lower() -> None:
    """The release's own ``max_tokens`` (the served call's limit, not the caller's): its
    copy is held to it, as the served answer was, rather than to 1,024."""
    reply = lambda body: LONG  # noqa: E731
    with FakeProvider(name="a", reply=reply) as a, FakeProvider(name="b", reply=reply) as b:
        report = _shadowed(a, b, 1.0, control={"max_tokens": 100})
        limits = [request.body.get("max_tokens") for request in b.requests]
    assert limits == [100, 100]
    assert report["agreement"]["length"] == 1.0


def test_retries_of_a_copy_count_against_the_cap() -> None:
    """A copy reserved one attempt: its first attempt timed out after its request went out
    (billed its prompt), the retry answered, and the copies spent past the cap. A copy now
    reserves the prompt of every attempt its Guard may make; one that does not fit is not
    sent, one that does is retried within the cap."""
    prompt = " ".join(["word"] * 1000)  # about $0.001 a prompt
    chat: dict[str, Any] = {"messages": [{"role": "user", "content": prompt}], "max_tokens": 10}
    with FakeProvider(name="a") as a, FakeProvider(name="b") as b:
        b.script(Fault(latency=3.0), None, Fault(latency=3.0), None)
        tight = _shadowed(a, b, 0.0018, transport=ShortReads(), **chat)
        sent_tight = b.stats.requests
    assert tight["spent_usd"] <= 0.0018, tight
    assert (tight["skipped_budget"], sent_tight) == (2, 0), tight
    with FakeProvider(name="a") as a, FakeProvider(name="b") as b:
        b.script(Fault(latency=3.0), None, Fault(latency=3.0), None)
        roomy = _shadowed(a, b, 0.02, transport=ShortReads(), **chat)
        sent_roomy = b.stats.requests
    assert (roomy["pairs"], sent_roomy) == (2, 4), roomy  # each copy retried once
    assert 0.004 <= roomy["spent_usd"] <= 0.02, roomy  # two prompts a copy counted
