"""classify_exception on what today's SDKs raise: openai 3.x and anthropic build on httpx2."""

from __future__ import annotations

import json
import socket

import openai
import pytest

from llmguard_sdk import (
    MalformedResponseError,
    ProviderTimeoutError,
    ProviderUnavailableError,
    classify_exception,
)
from llmguard_sdk.testing import FakeProvider, Fault

from .conftest import USER

httpx2 = pytest.importorskip("httpx2")


def closed_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_httpx2_errors_are_classified_as_httpx_ones(fake: FakeProvider) -> None:
    # httpx2.ConnectError (a refused connection, safe to send again) was no provider failure
    # at all (None): a protected call on httpx2 was never retried
    with pytest.raises(httpx2.ConnectError) as refused:
        httpx2.post(f"http://127.0.0.1:{closed_port()}/v1/chat/completions", json={})
    error = classify_exception(refused.value)
    assert isinstance(error, ProviderUnavailableError)
    assert error.request_sent is False
    fake.script(Fault(latency=5))
    with pytest.raises(httpx2.ReadTimeout) as slow:
        httpx2.post(f"{fake.base_url}/chat/completions", json={"messages": USER}, timeout=0.2)
    error = classify_exception(slow.value)
    assert isinstance(error, ProviderTimeoutError)
    assert error.request_sent is True


def test_openai_3_errors_are_classified_from_their_cause(fake: FakeProvider) -> None:
    # a malformed answer parsed by openai over httpx2 was no provider failure (None), and a
    # refused connection was taken for one the request may have reached
    client = openai.OpenAI(base_url=fake.base_url, api_key="sk-x", max_retries=0)
    fake.script(Fault(malformed_json=True))
    with pytest.raises(json.JSONDecodeError) as parsed:
        client.chat.completions.create(model="m", messages=USER)
    assert isinstance(classify_exception(parsed.value), MalformedResponseError)
    client.close()
    refusing = openai.OpenAI(
        base_url=f"http://127.0.0.1:{closed_port()}/v1", api_key="sk-x", max_retries=0
    )
    with pytest.raises(openai.APIConnectionError) as refused:
        refusing.chat.completions.create(model="m", messages=USER)
    error = classify_exception(refused.value)
    assert isinstance(error, ProviderUnavailableError)
    assert error.request_sent is False
    refusing.close()
