"""The key that makes a settle count once lives as long as a settle may be replayed, no more.

Every settled call leaves one key in Redis (``:d:<reservation id>``), so that a settle sent
again from the spend journal (its answer was lost: Redis may have run it) counts once. It was
kept a day past the hold: some 8.6 million keys, about 1.2 GB, at 100 calls a second. It is
kept an hour past the hold now: the journal is replayed by the process's next call that
reaches Redis.
"""

from __future__ import annotations

from llmguard_sdk import Guard, OpenAICompatibleProvider
from llmguard_sdk.budget import Budget, Budgets, Price, PriceTable
from llmguard_sdk.testing import FakeProvider

from .conftest import USER, RawRedis

PRICES = PriceTable.default_table().with_prices({"fake-model": Price(input=1.0, output=2.0)})


def _markers(client: RawRedis, prefix: str) -> list[bytes]:
    return list(client.scan_iter(match=f"{prefix}:budget:*:d:*", count=500))


def test_the_settled_marker_is_kept_an_hour_past_the_hold(
    fake: FakeProvider, redis_url: str, redis_prefix: str
) -> None:
    import redis

    hold_seconds = 30.0
    guard = Guard(
        OpenAICompatibleProvider(fake.base_url, model="fake-model", name="primary"),
        store=redis_url,
        key_prefix=redis_prefix,
        budgets=Budgets([Budget(limit_usd=1.0)], prices=PRICES, hold_seconds=hold_seconds),
        environ={},
    )
    client: RawRedis = redis.Redis.from_url(redis_url)
    try:
        guard.chat(USER, max_tokens=5)
        guard.chat(USER, max_tokens=5)
        markers = _markers(client, redis_prefix)
        assert len(markers) == 2  # one per settled call
        for key in markers:
            ttl = client.ttl(key)
            assert hold_seconds + 3600 - 60 <= ttl <= hold_seconds + 3600
            assert client.memory_usage(key) <= 160  # bytes: < 60 MB an hour at 100 calls/s
    finally:
        guard.close()
        client.close()
