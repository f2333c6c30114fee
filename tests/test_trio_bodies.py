"""Under trio, an async route leaves no response body iterator unfinished to the garbage
collector (trio warns of each with a ResourceWarning): a stream that ends at its last event,
a plain call cancelled while its answer is read."""

from __future__ import annotations

import gc
import warnings

import anyio
import pytest

from llmguard_sdk import Guard, OpenAICompatibleProvider
from llmguard_sdk.testing import FakeProvider, Fault

from .conftest import USER


def test_no_body_iterator_is_left_to_the_collector_under_trio(fake: FakeProvider) -> None:
    pytest.importorskip("trio")
    route = OpenAICompatibleProvider(fake.base_url, model=fake.model, name="primary")
    guard = Guard(route, environ={}, retry=None)

    async def scenario() -> list[str]:
        seen = [(await guard.achat(USER)).route]
        async with await guard.achat(USER, stream=True) as stream:
            seen += [chunk.text async for chunk in stream if chunk.text][:1]
        fake.always(Fault(inter_token_delay=0.3))  # a plain call's body comes slowly
        with anyio.move_on_after(0.2):
            await guard.achat(USER)
        await guard.aclose()
        return seen

    gc.collect()  # what earlier tests left to the collector warns now, not below
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert anyio.run(scenario, backend="trio") == ["primary", "Echo:"]
        gc.collect()
    guard.close()
    left = [str(w.message) for w in caught if w.category is ResourceWarning]
    # an asyncio transport cannot be this trio run's (an earlier test's, collected meanwhile)
    assert [text for text in left if "_SelectorSocketTransport" not in text] == []
