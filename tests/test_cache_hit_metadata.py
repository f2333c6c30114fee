"""What an answer served from the cache says of itself: its cost came from the cache
(``cost_source="cached"``, not the stored answer's ``"estimated"`` / ``"reported"`` next to
``cost_usd=0.0``), a replayed stream's first token came when its one chunk was delivered,
and each serving has an id of its own."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from llmguard_sdk import CallEvent, Guard, Price, PriceTable, UsageRecorder
from llmguard_sdk.cache import ResponseCache
from llmguard_sdk.retry import waits_off
from llmguard_sdk.testing import FakeProvider, Fault

from .conftest import USER
from .test_telemetry import Exported, call_span, exporting

otel = pytest.fixture(exporting, name="otel")
MakeGuard = Callable[..., Guard]
PRICES = PriceTable.default_table().with_prices({"fake-model": Price(input=1.0, output=2.0)})


def test_a_hit_says_its_cost_came_from_the_cache(
    fake: FakeProvider, make_guard: MakeGuard, tmp_path: Path
) -> None:
    """A hit kept its stored answer's ``cost_source`` ("estimated", or "reported" for an
    answer whose provider reported its cost) beside ``cost_usd=0.0``: the usage file and the
    cost metric read a free answer as a priced estimate. It now says ``"cached"``, on the
    answer, its CallEvent and its usage record."""
    events: list[CallEvent] = []
    path = tmp_path / "usage.jsonl"
    recorder = UsageRecorder(path)
    guard = make_guard(fake, cache=True, prices=PRICES, hooks=[events.append, recorder])
    first = guard.chat(USER)
    hit = guard.chat(USER)
    with guard.chat(USER, stream=True) as stream:
        list(stream)
    assert first.cost_source == "estimated"
    assert (hit.route, hit.cost_usd, hit.cost_source) == ("cache", 0.0, "cached")
    assert (stream.response.cost_usd, stream.response.cost_source) == (0.0, "cached")
    assert [e.cost_source for e in events] == ["estimated", "cached", "cached"]
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["cost_source"] for r in records] == ["estimated", "cached", "cached"]


def test_a_stale_answer_says_so_too(fake: FakeProvider, make_guard: MakeGuard) -> None:
    guard = make_guard(fake, cache=ResponseCache(ttl=0.2, stale_ttl=60), breaker=None)
    guard.chat(USER)
    time.sleep(0.3)
    fake.always(Fault(status=503))
    with waits_off():
        stale = guard.chat(USER)
    assert (stale.metadata["cache"], stale.cost_usd, stale.cost_source) == ("stale", 0.0, "cached")


def test_the_cost_source_of_a_hit_on_its_span(
    fake: FakeProvider, make_guard: MakeGuard, otel: Exported
) -> None:
    guard = make_guard(fake, cache=True, prices=PRICES, telemetry=otel.telemetry)
    guard.chat(USER)
    otel.spans.clear()  # (the miss's span)
    guard.chat(USER)
    attributes = call_span(otel).attributes
    assert attributes is not None
    assert (attributes["llmguard.cost_usd"], attributes["llmguard.cost_source"]) == (0.0, "cached")


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_replayed_stream_has_its_first_token_time(
    fake: FakeProvider, make_guard: MakeGuard, mode: str
) -> None:
    """A replayed stream's ``timings.first_token_s`` was ``None`` (and its CallEvent's): the
    time to first token read off a cache hit was missing. It is when its chunk was delivered."""
    events: list[CallEvent] = []
    guard = make_guard(fake, cache=True, hooks=[events.append])
    guard.chat(USER)
    if mode == "sync":
        with guard.chat(USER, stream=True) as stream:
            list(stream)
        response = stream.response
    else:
        import anyio

        async def replay() -> object:
            astream = await guard.achat(USER, stream=True)
            async with astream:
                [chunk async for chunk in astream]
            await guard.aclose()
            return astream.response

        response = anyio.run(replay)  # type: ignore[assignment]
    assert response.route == "cache"
    first = response.timings.first_token_s
    assert first is not None
    assert 0 <= first <= response.timings.total_s
    assert events[-1].first_token_s == first


def test_each_hit_has_an_id_of_its_own(fake: FakeProvider, make_guard: MakeGuard) -> None:
    """Every hit gave the stored answer's id (``chatcmpl-fake-1``) to every caller it served:
    logs, traces and spend records keyed on ids merged the callers' answers into one. Each
    serving (plain, streamed, stale, through either drop-in client) now has an id of its own,
    begun as the stored one is; the stored one is in ``metadata["cached_id"]``."""
    from llmguard_sdk import GuardedClient

    guard = make_guard(fake, cache=ResponseCache(ttl=1.0, stale_ttl=60), breaker=None)
    clients: list[Any] = [guard.client(), GuardedClient(guard)]  # (openai imported first)
    first = guard.chat(USER)
    stored = time.monotonic()
    assert first.id == "chatcmpl-fake-1"
    hits = [guard.chat(USER), guard.chat(USER)]
    with guard.chat(USER, stream=True) as stream:
        streamed = {chunk.id for chunk in stream}
    served = [*hits, stream.response]
    ids = [str(response.id) for response in served]
    for client in clients:
        completion = client.chat.completions.create(model=fake.model, messages=USER)
        assert completion.llmguard.route == "cache"
        ids.append(completion.id)
    time.sleep(max(0.0, 1.1 - (time.monotonic() - stored)))
    fake.always(Fault(status=503))
    with waits_off():
        stale = guard.chat(USER)
    assert stale.metadata["cache"] == "stale"
    ids.append(str(stale.id))
    assert len(set(ids)) == len(ids)
    assert first.id not in ids
    assert all(i.startswith("chatcmpl-llmguard-cache-") for i in ids)
    assert all(r.metadata["cached_id"] == first.id for r in [*served, stale])
    assert streamed == {stream.response.id}  # (the replayed chunk carries it: the seam's does)
