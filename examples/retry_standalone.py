"""Retry any function, no Guard needed: ``from llmguard_sdk.retry import retry``.

Full-jitter backoff, Retry-After honoured, bounded attempts *and* total time, hooks that see
every retry, and a retry budget so that a dead dependency is not hammered. ``set_testing``
turns the waits off in your tests.
"""

import openai

from llmguard_sdk.retry import (
    MemoryRetryBudget,
    RetryBudgetPolicy,
    RetryDetails,
    RetryPolicy,
    retry,
    retry_context,
)
from llmguard_sdk.testing import FakeProvider, Fault


def log_retry(details: RetryDetails) -> None:
    print(
        f"  retry {details.attempt} of {details.name}: {type(details.cause).__name__}, "
        f"waiting {details.wait:.2f} s{' (server hint)' if details.hinted else ''}"
    )


budget = MemoryRetryBudget(RetryBudgetPolicy(ratio=0.1, min_per_second=1.0))

with FakeProvider() as api:
    client = openai.OpenAI(base_url=api.base_url, api_key="sk-example", max_retries=0)

    @retry(
        policy=RetryPolicy(attempts=4, base=0.05, cap=2.0, timeout=10),
        hooks=[log_retry],
        budget=budget,
    )
    def ask(question: str) -> str:
        completion = client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": question}]
        )
        return completion.choices[0].message.content or ""

    api.script(Fault(status=503), Fault(status=429, retry_after_ms=300), Fault(reset=True))
    print(ask("still there?"))

    # The same machinery around a block of code:
    api.script(Fault(status=502))
    for attempt in retry_context(attempts=3, hooks=[log_retry], name="block"):
        with attempt:
            reply = client.chat.completions.create(
                model="gpt-4o-mini", messages=[{"role": "user", "content": "once more"}]
            )
    print(reply.choices[0].message.content)
    client.close()
