"""A token-metered rate limit around any call, no Guard needed (in place of ``aiolimiter``
or LiteLLM Router's rpm / tpm): ``reserve`` before the call, send it after the grant's
``wait``, ``settle`` to the tokens it used.

``reserve`` does not sleep for the rate: a call allowed to wait (``max_wait``) gets the next
free slot, first come first served, and is told how long to ``wait`` before sending; a
refusal says when there is room (``retry_after``), or ``"never"`` for a call larger than the
limit lets through at once. ``RedisRateLimiter(store, limits)`` shares the same limits
between processes.
"""

import math
import time

import anyio
import openai

from llmguard_sdk.ratelimit import Grant, MemoryRateLimiter, RateLimit
from llmguard_sdk.testing import FakeProvider

MAX_TOKENS = 50
limiter = MemoryRateLimiter(
    {
        "openai": [
            # one call every 2 s, two at once; a call may wait 3 s for its slot
            RateLimit(rpm=30, tpm=60_000, burst=2 / 30, max_wait=3),
            RateLimit(rpm=2, per_tenant=True),  # and each tenant 2 a minute
        ]
    }
)


def reserved(question: str) -> int:
    """What a call reserves: its input tokens (an estimate) and all of its max_tokens."""
    return len(question.split()) + 4 + MAX_TOKENS


def refusal(grant: Grant) -> str:
    if grant.reason == "never":
        return "refused: never fits"
    return f"refused ({grant.reason}), room in {math.ceil(grant.retry_after)} s"


def when(grant: Grant) -> str:
    return "sent after its wait" if grant.wait > 0 else "sent at once"


with FakeProvider() as api:
    client = openai.OpenAI(base_url=api.base_url, api_key="sk-example", max_retries=0)

    def ask(question: str, tenant: str) -> str:
        tokens = reserved(question)
        grant = limiter.reserve("openai", tenant=tenant, tokens=tokens)
        if not grant.allowed:
            return refusal(grant)
        time.sleep(grant.wait)  # its slot: not before
        try:
            completion = client.chat.completions.create(
                model="gpt-4o-mini",
                messages=[{"role": "user", "content": question}],
                max_tokens=MAX_TOKENS,
            )
        except openai.APIError:
            # it failed: the tokens go back (a call sent and billed would settle its usage)
            limiter.settle("openai", tenant=tenant, token_delta=-tokens, lease=grant.lease)
            raise
        used = completion.usage.total_tokens if completion.usage else tokens
        limiter.settle("openai", tenant=tenant, token_delta=used - tokens, lease=grant.lease)
        return f"{when(grant)}, {used} tokens"

    for n, tenant in enumerate(["acme", "acme", "globex", "acme"], start=1):
        print(f"call {n} ({tenant}): {ask('hello there', tenant)}")

    grant = limiter.reserve("openai", tenant="initech", tokens=100_000)  # over tpm
    print(f"a 100k-token call: {refusal(grant)}")

    async def ask_async(tenant: str) -> str:
        tokens = reserved("hello again")
        grant = await limiter.areserve("openai", tenant=tenant, tokens=tokens)
        if not grant.allowed:
            return refusal(grant)
        await anyio.sleep(grant.wait)
        ...  # await the async client's call here, then settle what it used:
        await limiter.asettle("openai", tenant=tenant, token_delta=-40, lease=grant.lease)
        return when(grant)

    print(f"async (umbrella): {anyio.run(ask_async, 'umbrella')}")
