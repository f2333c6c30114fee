"""The provider's requests, built once per route and library (``providers/_requests.py``):
what reaches the server is what ``client.stream`` sent, cookies and query parameters too."""

from __future__ import annotations

import time

import anyio
import pytest

from llmguard_sdk import ChatRequest, OpenAICompatibleProvider
from llmguard_sdk.testing import FakeProvider, Fault

LIBRARIES = ["sync", "httpx2", "httpx"]


def _request(**extra: object) -> ChatRequest:
    return ChatRequest.model_validate(
        {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, **extra}
    )


def _two_calls(
    provider: OpenAICompatibleProvider, library: str, requests: list[ChatRequest], stream: bool
) -> None:
    """Send ``requests`` one after another over one client of ``library``."""
    if library == "sync":
        for request in requests:
            deadline = time.monotonic() + 5
            if stream:
                list(provider.stream(request, model="m", deadline=deadline))
            else:
                provider.complete(request, model="m", deadline=deadline)
        return
    provider._async_library = library  # type: ignore[assignment]

    async def run() -> None:
        try:
            for request in requests:
                deadline = time.monotonic() + 5
                if stream:
                    [c async for c in provider.astream(request, model="m", deadline=deadline)]
                else:
                    await provider.acomplete(request, model="m", deadline=deadline)
        finally:
            await provider.aclose()

    anyio.run(run)


@pytest.mark.parametrize("library", LIBRARIES)
@pytest.mark.parametrize("stream", [False, True])
def test_a_cookie_the_provider_set_is_sent_back(
    fake: FakeProvider, library: str, stream: bool
) -> None:
    provider = OpenAICompatibleProvider(fake.base_url, api_key="sk-test", name="p")
    fake.script(Fault(headers={"set-cookie": "__lb=blue; Path=/"}))
    _two_calls(provider, library, [_request(), _request()], stream)
    first, second = fake.requests[-2], fake.requests[-1]
    assert "cookie" not in first.headers
    assert second.headers["cookie"] == "__lb=blue"
    provider.close()


@pytest.mark.parametrize("library", LIBRARIES)
def test_the_call_headers_override_the_provider_headers_and_queries_reach_the_url(
    fake: FakeProvider, library: str
) -> None:
    provider = OpenAICompatibleProvider(
        fake.base_url, api_key="sk-test", name="p", headers={"x-team": "search"}
    )
    plain = _request(extra_headers={"authorization": "Bearer sk-call", "x-trace": "t1"})
    queried = _request(extra_query={"api-version": "2024-10-21"})
    _two_calls(provider, library, [plain, queried], stream=False)
    first, second = fake.requests[-2], fake.requests[-1]
    assert first.headers["authorization"] == "Bearer sk-call"  # the call's, not the route's
    assert (first.headers["x-trace"], first.headers["x-team"]) == ("t1", "search")
    assert first.headers["content-type"] == "application/json"
    assert first.headers["accept"] == "application/json"
    assert first.path.endswith("/chat/completions")
    assert second.path.endswith("/chat/completions?api-version=2024-10-21")
    assert second.headers["authorization"] == "Bearer sk-test"
    provider.close()
