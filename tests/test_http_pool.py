"""The async path's HTTP library (httpx2 where installed, else httpx) and the pools sized by a
route's concurrency cap."""

from __future__ import annotations

import importlib.util
import time

import anyio
import httpx
import pytest

from llmguard_sdk import ChatRequest, ConfigurationError, Guard, OpenAICompatibleProvider
from llmguard_sdk.ratelimit import RateLimit
from llmguard_sdk.testing import FakeProvider, Fault

REQUEST = ChatRequest.model_validate({"messages": [{"role": "user", "content": "hi"}]})
HAS_HTTPX2 = importlib.util.find_spec("httpx2") is not None
NOWHERE = "http://127.0.0.1:9/v1"  # never called


def _concurrent_calls(provider: OpenAICompatibleProvider, calls: int) -> None:
    async def run() -> None:
        deadline = time.monotonic() + 30
        try:
            async with anyio.create_task_group() as tasks:
                for _ in range(calls):
                    tasks.start_soon(
                        lambda: provider.acomplete(REQUEST, model="m", deadline=deadline)
                    )
        finally:
            await provider.aclose()

    anyio.run(run)


def test_async_calls_use_httpx2_where_installed_else_httpx() -> None:
    provider = OpenAICompatibleProvider(NOWHERE)
    assert provider._async_library == ("httpx2" if HAS_HTTPX2 else "httpx")
    chosen = OpenAICompatibleProvider(NOWHERE, http_library="httpx")
    assert chosen._async_library == "httpx"


def test_an_async_transport_decides_the_library() -> None:
    mock = httpx.MockTransport(lambda request: httpx.Response(200))
    provider = OpenAICompatibleProvider(NOWHERE, async_transport=mock)
    assert provider._async_library == "httpx"
    with pytest.raises(ConfigurationError, match="httpx's"):
        OpenAICompatibleProvider(NOWHERE, async_transport=mock, http_library="httpx2")


def test_an_unknown_library_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="library"):
        OpenAICompatibleProvider(NOWHERE, http_library="requests")  # type: ignore[arg-type]


@pytest.mark.parametrize("library", ["httpx", "httpx2"])
def test_pools_are_sized_by_the_routes_concurrency_cap(fake: FakeProvider, library: str) -> None:
    if library == "httpx2" and not HAS_HTTPX2:
        pytest.skip("httpx2 is not installed")
    provider = OpenAICompatibleProvider(fake.base_url, name="primary", http_library=library)  # type: ignore[arg-type]
    assert provider.pool_size == 100
    guard = Guard(provider, rate_limits={"primary": RateLimit(concurrency=3)}, environ={})
    try:
        assert provider.pool_size == 3
        fake.always(Fault(latency=0.2))  # every call overlaps the others
        _concurrent_calls(provider, 12)  # past the Guard, straight to the pool
    finally:
        guard.close()
    assert fake.stats.requests == 12
    assert fake.stats.connections == 3


def test_an_explicit_pool_size_wins_and_per_tenant_caps_do_not_count() -> None:
    explicit = OpenAICompatibleProvider(NOWHERE, name="a", max_connections=40)
    tenants = OpenAICompatibleProvider(NOWHERE, name="b")
    limits: dict[str, RateLimit | list[RateLimit]] = {
        "a": RateLimit(concurrency=5),
        "b": [RateLimit(concurrency=4, per_tenant=True), RateLimit(rpm=100)],
    }
    Guard([explicit, tenants], rate_limits=limits, environ={}).close()
    assert (explicit.pool_size, tenants.pool_size) == (40, 100)


def test_guards_sharing_a_provider_size_its_pools_to_the_largest_cap() -> None:
    shared = OpenAICompatibleProvider(NOWHERE, name="shared")
    for cap in (8, 20, 5):
        Guard(shared, rate_limits={"shared": RateLimit(concurrency=cap)}, environ={}).close()
    assert shared.pool_size == 20
