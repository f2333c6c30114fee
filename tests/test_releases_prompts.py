"""A release's prompt over a PromptBuilder's request: what is sent and what the request's
metadata says about it (prefix hash, static messages, the history's breakpoint) agree."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from llmguard_sdk import AnthropicProvider, Guard, OpenAICompatibleProvider, PromptBuilder
from llmguard_sdk.prompts import (
    CACHE_HISTORY_KEY,
    PREFIX_HASH_KEY,
    STATIC_MESSAGES_KEY,
    TEMPLATE_KEY,
)
from llmguard_sdk.providers.anthropic import anthropic_params
from llmguard_sdk.releases import CanaryPolicy, Release, ReleasePlan
from llmguard_sdk.testing import FakeProvider

from .test_telemetry import Exported, exporting

otel = pytest.fixture(exporting, name="otel")

TOOL = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}
STATIC = " ".join(f"Rule {i}: answer from the handbook and cite the rule." for i in range(40))
RELEASED = " ".join(f"Rule {i}: answer in one sentence, cite nothing." for i in range(40))
ROUTE_A = OpenAICompatibleProvider("http://127.0.0.1:9", model="m-2025-01-01", name="a")
HISTORY = [
    {"role": "user", "content": "My bike squeaks. " * 20},
    {"role": "assistant", "content": "Oil the chain. " * 20},
]


@pytest.fixture
def api() -> Iterator[FakeProvider]:
    with FakeProvider(model="claude-fake-2025-01-01", prefix_cache=True) as server:
        yield server


def release(api: FakeProvider | None = None) -> Release:
    url = api.base_url if api is not None else "http://127.0.0.1:9"
    route = AnthropicProvider(url, api_key="k", model="claude-fake-2025-01-01")
    return Release("support", "v2", route, system_prompt=RELEASED)


def test_a_replaced_static_part_is_described_by_the_prefix_hash_sent() -> None:
    built = PromptBuilder(
        "support", instructions=STATIC, tools=[TOOL], examples=[("Q", "A")], drift=None
    ).build("Which oil?")
    applied = release().apply(built.request())
    assert applied.messages[0].content == RELEASED
    # the hash a builder whose static part is the release's prompt (and the same tools) has
    expected = PromptBuilder("other", instructions=RELEASED, tools=[TOOL], drift=None)
    assert applied.metadata is not None
    assert applied.metadata[PREFIX_HASH_KEY] == expected.prefix_hash != built.prefix_hash
    assert applied.metadata[STATIC_MESSAGES_KEY] == "1"


def test_a_release_prompt_before_a_builders_history_keeps_its_breakpoints() -> None:
    built = PromptBuilder("chat", drift=None).build("Which oil?", history=HISTORY)
    assert built.static_messages == 0
    applied = release().apply(built.request(cache_history=True))
    assert applied.metadata is not None
    assert (
        applied.metadata[PREFIX_HASH_KEY]
        == PromptBuilder("x", instructions=RELEASED, drift=None).prefix_hash
    )
    assert (applied.metadata[STATIC_MESSAGES_KEY], applied.metadata[CACHE_HISTORY_KEY]) == (
        "1", "3"
    )  # fmt: skip
    params = anthropic_params(applied)
    assert params["system"][0]["cache_control"] == {"type": "ephemeral"}  # the release's prompt
    assert "cache_control" not in str(params["messages"][0])
    assert params["messages"][1]["content"][-1]["cache_control"] == {"type": "ephemeral"}


def test_a_guard_serving_a_release_caches_the_prompt_it_sends(api: FakeProvider) -> None:
    builder = PromptBuilder("chat", drift=None)
    with Guard(release=release(api), timeout=10, retry=None, environ={}) as guard:
        answers = [
            guard.chat(request=builder.build(q, history=HISTORY).request(cache_history=True))
            for q in ("Which oil?", "How often?")
        ]
    body = api.requests[-1].body
    assert body["system"][0] == {
        "type": "text", "text": RELEASED, "cache_control": {"type": "ephemeral"}
    }  # fmt: skip
    assert body["messages"][1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    usage = answers[-1].usage
    assert usage is not None
    assert usage.cached_input_tokens >= len(RELEASED.split()) + 2 * 4 + 3 * 20 + 3 * 20


def test_a_request_not_built_by_a_builder_gets_no_prompt_metadata() -> None:
    from llmguard_sdk import ChatRequest, Message

    plain = ChatRequest(messages=[Message(role="user", content="hi")])
    assert release().apply(plain).metadata is None


# -- a release's parameters where the call (or its builder) set some -----------------------------


@pytest.mark.parametrize(
    ("released", "own"),
    [("max_completion_tokens", "max_tokens"), ("max_tokens", "max_completion_tokens")],
)
def test_a_calls_own_output_limit_wins_under_either_name(released: str, own: str) -> None:
    with FakeProvider(model="m-2025-01-01") as fake:
        route = OpenAICompatibleProvider(fake.base_url, model="m-2025-01-01", name="a")
        bound = Release("bot", "v1", route, parameters={released: 100})
        with Guard(release=bound, environ={}, telemetry=False, retry=None) as guard:
            limit: dict[str, Any] = {own: 3}
            guard.chat([{"role": "user", "content": "hi"}], **limit)
            guard.chat([{"role": "user", "content": "hi"}])
    mine, theirs = (r.body for r in fake.requests)
    assert mine[own] == 3
    assert released not in mine  # the call's limit is the limit: the release sets no other
    assert theirs[released] == 100


def test_a_releases_extra_body_and_metadata_join_a_builders_request() -> None:
    bound = Release(
        "bot", "v1", ROUTE_A,
        parameters={
            "extra_body": {"service_tier": "flex", "prompt_cache_key": "release"},
            "metadata": {"tags": "release-v1"},
        },
    )  # fmt: skip
    request = PromptBuilder("support", instructions="Be kind.", drift=None).build("Hi?").request()
    applied = bound.apply(request)
    assert request.extra_body is not None
    assert applied.extra_body == {
        "service_tier": "flex",
        "prompt_cache_key": request.extra_body["prompt_cache_key"],  # the request's own wins
    }
    assert applied.metadata is not None
    assert applied.metadata["tags"] == "release-v1"
    assert applied.metadata[TEMPLATE_KEY] == "support"


# -- telemetry ------------------------------------------------------------------------------------


def test_a_calls_span_carries_its_releases_prompt_version(otel: Exported) -> None:
    with FakeProvider(model="m-2025-01-01") as fake:
        route = OpenAICompatibleProvider(fake.base_url, model="m-2025-01-01", name="a")
        versioned = Release("bot", "v1", route, system_prompt="Be kind.", prompt_version="p7")
        with Guard(release=versioned, environ={}, telemetry=otel.telemetry) as guard:
            guard.chat([{"role": "user", "content": "hi"}])
        with Guard(release=Release("bot", "v2", route), environ={}, telemetry=otel.telemetry) as g:
            g.chat([{"role": "user", "content": "hi"}])
    first, second = (
        dict(s.attributes or {}) for s in otel.finished() if "llmguard.kind" in (s.attributes or {})
    )
    assert (first["llmguard.release"], first["llmguard.release.prompt_version"]) == (
        "bot@v1", "p7"
    )  # fmt: skip
    assert "llmguard.release.prompt_version" not in second  # a release without one


# -- moves by hand --------------------------------------------------------------------------------


@pytest.mark.parametrize("move", ["promote", "rollback"])
def test_a_canary_moves_by_hand_before_the_guards_first_call(move: str) -> None:
    with FakeProvider(model="m-2025-01-01") as a, FakeProvider(model="m-2025-02-01") as b:
        current = Release(
            "bot", "v1", OpenAICompatibleProvider(a.base_url, name="a", model="m-2025-01-01")
        )
        candidate = Release(
            "bot", "v2", OpenAICompatibleProvider(b.base_url, name="b", model="m-2025-02-01")
        )
        policy = CanaryPolicy(stages=(0.5, 1.0), flush_interval=60.0)
        plan = ReleasePlan(current, candidate=candidate, canary=policy)
        with Guard(release=plan, environ={}, telemetry=False) as guard:
            assert guard.releases is not None
            stage = getattr(guard.releases, move)()  # it raised LookupError: no canary stored
            answer = guard.chat([{"role": "user", "content": "hi"}], user="u1")
    assert (stage.status, stage.candidate) == (
        ("promoted", "bot@v2") if move == "promote" else ("rolled_back", "bot@v2")
    )
    assert answer.route == ("b" if move == "promote" else "a")
