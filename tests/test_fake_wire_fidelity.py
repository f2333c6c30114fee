"""FakeProvider answers as the real APIs do, read by the official ``openai`` and
``anthropic`` clients: Anthropic error bodies carry their request id, forced tool calls carry
arguments their schema accepts, batches go through each API's phases, and the batch settings
are declared (typed) parts of the provider."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import anthropic
import httpx
import openai
import pytest
from typing_extensions import assert_type

from llmguard_sdk.testing import FakeProvider, Fault

USER: Any = [{"role": "user", "content": "find my order"}]
SCHEMA: Any = {
    "type": "object",
    "properties": {
        "order_id": {"type": "string"},
        "count": {"type": "integer", "minimum": 3},
        "price": {"type": "number", "exclusiveMinimum": 0, "maximum": 0.5},
        "express": {"type": "boolean"},
        "status": {"type": "string", "enum": ["open", "closed"]},
        "kind": {"const": "parcel"},
        "note": {"type": ["null", "string"]},
        "when": {"type": "string", "format": "date-time"},
        "address": {"$ref": "#/$defs/Address"},
        "items": {
            "type": "array",
            "minItems": 2,
            "items": {
                "type": "object",
                "properties": {"sku": {"type": "string"}, "gift": {"type": "boolean"}},
                "required": ["sku"],
            },
        },
        "tags": {"type": "array", "items": {"type": "string"}},
        "either": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
        "left_out": {"type": "string"},
    },
    "required": [
        "order_id", "count", "price", "express", "status", "kind", "note", "when", "address",
        "items", "tags", "either",
    ],
    "$defs": {
        "Address": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "zip": {"type": "string", "minLength": 5}},
            "required": ["city", "zip"],
        }
    },
}  # fmt: skip
ARGUMENTS = {
    "order_id": "x",
    "count": 3,
    "price": 0.5,
    "express": False,
    "status": "open",
    "kind": "parcel",
    "note": None,
    "when": "1970-01-01T00:00:00Z",
    "address": {"city": "x", "zip": "xxxxx"},
    "items": [{"sku": "x"}, {"sku": "x"}],
    "tags": ["x"],
    "either": 0,
}
CHAT_TOOLS: Any = [
    {"type": "function", "function": {"name": "other", "parameters": {"type": "object"}}},
    {"type": "function", "function": {"name": "ship", "parameters": SCHEMA}},
]
CHAT_CHOICE: Any = {"type": "function", "function": {"name": "ship"}}
RESPONSES_TOOLS: Any = [{"type": "function", "name": "ship", "parameters": SCHEMA}]
CLAUDE_TOOLS: Any = [{"name": "ship", "input_schema": SCHEMA}]
CLAUDE_CHOICE: Any = {"type": "tool", "name": "ship"}


@dataclass
class Apis:
    """A fake provider and the official clients of both APIs, pointed at it."""

    fake: FakeProvider
    oai: openai.OpenAI
    claude: anthropic.Anthropic


@pytest.fixture
def apis(fake: FakeProvider) -> Iterator[Apis]:
    fake.batch_seconds = 0.0  # (a batch has ended at its first status read)
    with (
        openai.OpenAI(base_url=fake.base_url, api_key="x", max_retries=0) as oai,
        anthropic.Anthropic(base_url=fake.url, api_key="x", max_retries=0) as claude,
    ):
        yield Apis(fake, oai, claude)


# ---- 1. Anthropic error bodies


def test_anthropic_error_bodies_carry_the_request_id_of_their_header() -> None:
    """Anthropic's error body says ``request_id`` (the ``request-id`` header's value); the
    fake's did not, and its Message Batches answered OpenAI's error body."""
    with (
        FakeProvider(rpm=1) as fake,
        anthropic.Anthropic(base_url=fake.url, api_key="x", max_retries=0) as claude,
    ):
        params: Any = {"model": "m", "max_tokens": 5, "messages": USER}
        raised: list[anthropic.APIStatusError] = []
        fake.script(None, Fault(status=529))
        claude.messages.create(**params)  # (the one request rpm=1 lets through)
        for attempt in (
            lambda: claude.messages.create(**params),  # 529
            lambda: claude.messages.create(**params),  # 429
            lambda: claude.messages.create(**{**params, "max_tokens": 0}),  # 400
            lambda: claude.messages.batches.retrieve("msgbatch_none"),  # 404
        ):
            with pytest.raises(anthropic.APIStatusError) as failed:
                attempt()
            raised.append(failed.value)
        lone = b'{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"\\ud800"}]}'
        headers = {"anthropic-version": "2023-06-01", "content-type": "application/json"}
        refused = httpx.post(f"{fake.url}/v1/messages", content=lone, headers=headers)
        assert refused.status_code == 400
        assert refused.json()["request_id"] == refused.headers["request-id"]
    assert [e.status_code for e in raised] == [529, 429, 400, 404]
    for error in raised:
        assert isinstance(error.body, dict)
        assert error.body["type"] == "error"
        assert error.body["request_id"] == error.request_id
        assert error.request_id
    assert raised[3].body["error"]["type"] == "not_found_error"  # type: ignore[index]


# ---- 4. the batch settings are declared


def test_the_batch_settings_are_typed_constructor_arguments() -> None:
    """``batch_seconds``, ``batch_rows`` and ``batch_outcome`` were undeclared attributes:
    a typed test set them under ``# type: ignore``, and a misspelt one did nothing."""
    seen: list[str] = []

    def rows(row: dict[str, Any]) -> dict[str, Any] | str | None:
        seen.append(row["custom_id"])
        return row

    with (
        FakeProvider(batch_seconds=0.0, batch_rows=rows, batch_outcome="expired") as fake,
        anthropic.Anthropic(base_url=fake.url, api_key="x", max_retries=0) as claude,
    ):
        assert_type(fake.batch_seconds, float)
        assert fake.batch_rows is rows
        assert fake.batch_outcome == "expired"
        params: Any = {"model": "m", "max_tokens": 10, "messages": USER}
        created = claude.messages.batches.create(requests=[{"custom_id": "a", "params": params}])
        (row,) = claude.messages.batches.results(created.id)
        assert (row.result.type, seen) == ("expired", ["a"])
    assert (FakeProvider().batch_seconds, FakeProvider().batch_outcome) == (0.2, None)
    with pytest.raises(ValueError, match="batch_outcome"):
        FakeProvider(batch_outcome="lost")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="batch_seconds"):
        FakeProvider(batch_seconds=-1.0)
