"""A circuit breaker around any call, no Guard needed: ``@breakers.protect("openai")`` and
``breakers.call(...)`` (``await breakers.acall(...)`` in async code), as pybreaker's
``@breaker`` and ``breaker.call``, one breaker per route name.

Provider failures (5xx, timeouts, connection errors, from openai, httpx or the SDK) count; a
429 pauses the route for its Retry-After; a bug of yours (a ``ValueError``, a 400) does not
count. An open breaker refuses at once with ``CircuitOpenError``, without sending anything.
"""

import contextlib

import openai

from llmguard_sdk.breaker import (
    BreakerPolicy,
    Breakers,
    BreakerTransition,
    MemoryBreakerBackend,
)
from llmguard_sdk.errors import CircuitOpenError
from llmguard_sdk.retry import retry, set_testing
from llmguard_sdk.testing import FakeProvider, Fault


def log_transition(change: BreakerTransition) -> None:
    print(f"  breaker {change.route}: {change.before} -> {change.after}")


policy = BreakerPolicy(window=10, minimum_calls=4, failure_rate=0.5, open_seconds=30)
breakers = Breakers(MemoryBreakerBackend(policy), hooks=[log_transition])

with FakeProvider() as api:
    client = openai.OpenAI(base_url=api.base_url, api_key="sk-example", max_retries=0)

    @breakers.protect("openai")
    def ask(question: str) -> str:
        completion = client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": question}]
        )
        return completion.choices[0].message.content or ""

    print(ask("hello?"))

    def parse(text: str) -> int:
        return int(text)  # a bug of yours, not the provider's: never counted

    for _ in range(5):
        with contextlib.suppress(ValueError):
            breakers.call("openai", parse, "not a number")
    print(f"after 5 ValueErrors: {breakers.state('openai')}")

    api.always(Fault(status=503))
    for n in range(1, 6):
        try:
            ask("still there?")
        except openai.InternalServerError:
            print(f"call {n}: 503 from the provider")
        except CircuitOpenError as refused:
            wait = refused.retry_after or 0
            print(f"call {n}: refused unsent ({refused.state}, retry in {wait:.0f} s)")
    print(f"requests the provider saw: {len(api.requests)}")

    # @retry outside, the breaker inside: each attempt asks the breaker, a refusal ends them
    breakers.reset("openai")
    set_testing(True)  # (no waits in this example)
    ask_again, sent = retry(ask, attempts=10), len(api.requests)
    try:
        ask_again("once more")
    except CircuitOpenError:
        print(f"retried until the breaker opened: {len(api.requests) - sent} attempts sent")
    client.close()
