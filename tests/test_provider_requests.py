"""The provider's requests, built once per route and library (``providers/_requests.py``):
what reaches the server is what ``client.stream`` sent, cookies and query parameters too."""

from __future__ import annotations

import json
import socket
import time

import anyio
import httpx
import httpx2
import pytest

from llmguard_sdk import ChatRequest, OpenAICompatibleProvider
from llmguard_sdk.errors import ProviderUnavailableError
from llmguard_sdk.providers._ahttp11 import AnyioTransport
from llmguard_sdk.providers._http11 import StdlibTransport
from llmguard_sdk.providers._requests import Pool
from llmguard_sdk.testing import FakeProvider, Fault

from .providercalls import LIBRARIES, send_calls


def _request(**extra: object) -> ChatRequest:
    return ChatRequest.model_validate(
        {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, **extra}
    )


@pytest.mark.parametrize("library", LIBRARIES)
@pytest.mark.parametrize("stream", [False, True])
def test_a_cookie_the_provider_set_is_sent_back(
    fake: FakeProvider, library: str, stream: bool
) -> None:
    provider = OpenAICompatibleProvider(fake.base_url, api_key="sk-test", name="p")
    fake.script(Fault(headers={"set-cookie": "__lb=blue; Path=/"}))
    send_calls(provider, library, [_request(), _request()], stream)
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
    send_calls(provider, library, [plain, queried], stream=False)
    first, second = fake.requests[-2], fake.requests[-1]
    assert first.headers["authorization"] == "Bearer sk-call"  # the call's, not the route's
    assert (first.headers["x-trace"], first.headers["x-team"]) == ("t1", "search")
    assert first.headers["content-type"] == "application/json"
    assert first.headers["accept"] == "application/json"
    assert first.headers["host"] == fake.base_url.split("//")[1].split("/")[0]
    assert int(first.headers["content-length"]) > 0  # the server read that many bytes:
    assert first.body == {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 8,
    }
    assert first.path.endswith("/chat/completions")
    assert second.path.endswith("/chat/completions?api-version=2024-10-21")
    assert second.headers["authorization"] == "Bearer sk-test"
    provider.close()


def _pool(provider: OpenAICompatibleProvider, library: str) -> Pool:
    """The pool a call of ``library`` uses (an async one made on a throwaway loop)."""
    if library == "sync":
        return provider._sync_pool()
    provider._async_library = library  # type: ignore[assignment]

    async def make() -> Pool:
        return provider._new_async_pool()

    return anyio.run(make)


@pytest.mark.parametrize("library", LIBRARIES)
def test_requests_go_to_the_providers_own_transport_without_proxies_in_the_environment(
    fake: FakeProvider, library: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("all_proxy", raising=False)
    provider = OpenAICompatibleProvider(fake.base_url, name="p", max_connections=3)
    pool = _pool(provider, library)
    if library == "sync":  # the standard library's HTTP/1.1, with the pool's limits
        assert isinstance(pool.transport, StdlibTransport)
        assert pool.transport._max == 3
    else:  # ours over anyio, with the pool's limits, answering the library's responses
        module = httpx if library == "httpx" else httpx2
        assert isinstance(pool.transport, AnyioTransport)
        assert pool.transport._module is module
        assert pool.transport._max == 3
    send_calls(provider, library, [_request(), _request()], stream=False)
    assert len(fake.requests) == 2


@pytest.mark.parametrize("library", LIBRARIES)
def test_with_proxies_in_the_environment_the_client_sends_and_honours_no_proxy(
    fake: FakeProvider, library: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every proxy here is a closed port, and only NO_PROXY for the loopback address lets the
    calls through: async clients resolve proxies themselves; the sync one goes to the
    provider's own transport, directly (the proxy named for its URL: none)."""
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    provider = OpenAICompatibleProvider(fake.base_url, name="p")
    transport = _pool(provider, library).transport
    if library == "sync":
        assert isinstance(transport, StdlibTransport)
        assert transport._proxy is None
    else:
        assert transport is None
    send_calls(provider, library, [_request(), _request()], stream=True)
    assert len(fake.requests) == 2
    monkeypatch.setenv("NO_PROXY", "example.invalid")  # now the loopback goes to the proxy
    proxied = OpenAICompatibleProvider(fake.base_url, name="p")
    with pytest.raises(ProviderUnavailableError):
        send_calls(proxied, library, [_request()], stream=False)
    assert len(fake.requests) == 2


@pytest.mark.parametrize("library", LIBRARIES)
def test_a_connection_error_from_the_transport_names_its_request(library: str) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    provider = OpenAICompatibleProvider(f"http://127.0.0.1:{port}/v1", name="p")
    with pytest.raises(ProviderUnavailableError) as caught:
        send_calls(provider, library, [_request()], stream=False)
    cause = caught.value.__cause__
    assert cause is not None
    assert cause.request.url == f"http://127.0.0.1:{port}/v1/chat/completions"  # type: ignore[attr-defined]


def test_a_closed_pool_refuses_to_send_and_the_provider_opens_a_new_one(
    fake: FakeProvider,
) -> None:
    provider = OpenAICompatibleProvider(fake.base_url, name="p")
    pool = provider._sync_pool()
    provider.close()
    built = provider._build(
        pool.client, _request(), "m", stream=False, deadline=time.monotonic() + 5
    )
    with pytest.raises(RuntimeError, match="closed"):
        pool.send(built)
    assert provider.complete(_request(), model="m", deadline=time.monotonic() + 5).text
    assert provider._sync_pool() is not pool


def test_a_transport_of_the_users_reads_the_request_as_sent() -> None:
    """A custom transport (here httpx's MockTransport) gets a request whose content is
    readable and whose automatic headers are those httpx would have added."""
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(
            200,
            json={
                "choices": [
                    {"message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
                ],
                "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
            },
        )

    provider = OpenAICompatibleProvider(
        "https://llm.example.invalid/v1", name="p", transport=httpx.MockTransport(answer)
    )
    reply = provider.complete(
        _request(extra_headers={"Idempotency-Key": "k1"}), model="m", deadline=time.monotonic() + 5
    )
    assert reply.text == "ok"
    (request,) = seen
    assert json.loads(request.content)["messages"] == [{"role": "user", "content": "hi"}]
    assert request.headers["host"] == "llm.example.invalid"
    assert request.headers["content-length"] == str(len(request.content))
    assert request.headers["idempotency-key"] == "k1"
    assert request.headers.get_list("content-type") == ["application/json"]
