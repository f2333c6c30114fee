"""A batch route's calls name their provider and server as a plain route's do: the API the
batch goes to (``gen_ai.provider.name`` ``openai`` or ``anthropic``) and the host and port of
its base URL, on the call's span, its attempt's and its duration and token points. They said
``batchprovider`` (the class's name, a value no GenAI backend knows) and no server.

Real OpenTelemetry SDK with in-memory exporters, FakeProvider's batch APIs on loopback."""

from __future__ import annotations

from typing import Literal

import pytest

from llmguard_sdk import Guard
from llmguard_sdk.providers.batch import BatchProvider
from llmguard_sdk.testing import FakeProvider

from .conftest import USER
from .test_telemetry import Exported, attempts_of, call_span, otel
from .test_telemetry_operation import port_of

__all__ = ["otel"]  # (the fixture, imported for its name)


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_a_batch_routes_call_names_its_api_and_server(
    fake: FakeProvider, otel: Exported, api: Literal["openai", "anthropic"]
) -> None:
    route = BatchProvider(
        fake.base_url, api=api, model="fake-model", window=0.05, poll_interval=0.02
    )
    assert (route.server_address, route.server_port) == ("127.0.0.1", port_of(fake))
    guard = Guard([route], telemetry=otel.telemetry, environ={})
    try:
        guard.chat(USER)
    finally:
        guard.close()
    span = call_span(otel)
    server = {"server.address": "127.0.0.1", "server.port": port_of(fake)}
    assert span.attributes is not None
    assert span.attributes["gen_ai.provider.name"] == api
    assert {k: span.attributes.get(k) for k in server} == server
    (attempt,) = attempts_of(otel, span)
    assert attempt.attributes is not None
    assert {k: attempt.attributes.get(k) for k in server} == server
    for name in ("gen_ai.client.operation.duration", "gen_ai.client.token.usage"):
        for point in otel.points(name):
            assert point.attributes["gen_ai.provider.name"] == api
            assert {k: point.attributes.get(k) for k in server} == server


def test_a_batch_routes_server_is_its_base_urls() -> None:
    route = BatchProvider("https://api.anthropic.com/v1", api="anthropic")
    try:
        assert (route.provider_name, route.server_address, route.server_port) == (
            "anthropic",
            "api.anthropic.com",
            443,
        )
    finally:
        route.close()
