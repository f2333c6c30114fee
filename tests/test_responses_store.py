"""Data retention on OpenAI's Responses API: OpenAI stores a response unless it is sent
``store: false``. A Responses caller's ``store`` reaches Responses routes as asked; the
Guard's own calls to a Responses route (``guard.chat``, a chat-completions caller, a
Responses caller who said nothing) ask it to store nothing unless the provider is set to;
chat completions' own ``store`` reaches chat and Responses routes as asked. With nothing
stored a route cannot find an earlier reasoning item by its id alone: such items are left
out, those with their ``encrypted_content`` sent back."""

from __future__ import annotations

import json
from typing import Any, Final

import pytest

from llmguard_sdk import ConfigurationError, Guard, OpenAICompatibleProvider
from llmguard_sdk.providers.responses import OpenAIResponsesProvider
from llmguard_sdk.testing import FakeProvider

from .rawserver import RawServer, sse_head
from .routekinds import guard_over

_USER: Any = [{"role": "user", "content": "hi"}]


def _sent(fake: FakeProvider) -> dict[str, Any]:
    return fake.requests[-1].body or {}


def _responses_guard(fake: FakeProvider, **options: Any) -> Guard:
    route = OpenAIResponsesProvider(fake.base_url, model=fake.model, name=fake.name, **options)
    return Guard(route, environ={}, retry=None)


@pytest.mark.parametrize("store", [False, True])
def test_a_responses_caller_s_store_reaches_a_responses_route(
    fake: FakeProvider, store: bool
) -> None:
    """``store: false`` was dropped at the seam, so the route was sent no ``store`` and
    OpenAI kept (for 30 days at least) the response the caller asked it not to store."""
    with guard_over(fake, "responses") as guard:
        guard.client().responses.create(model="fake-model", input="hi", store=store)
    assert _sent(fake)["store"] is store


@pytest.mark.parametrize("route", ["chat", "anthropic"])
def test_a_responses_caller_s_store_reaches_no_other_route(fake: FakeProvider, route: str) -> None:
    """(Chat completions' ``store`` keeps completions for distillation and evals, another
    thing, and stores nothing when not sent; Claude has no ``store``.)"""
    with guard_over(fake, route) as guard:
        guard.client().responses.create(model="fake-model", input="hi", store=True)
    assert "store" not in _sent(fake)


def test_the_guard_s_own_calls_ask_a_responses_route_to_store_nothing(
    fake: FakeProvider,
) -> None:
    """A Responses route was sent no ``store`` by ``guard.chat`` (or for a caller who said
    nothing), and OpenAI's default keeps every response; the Guard uses no stored response."""
    with guard_over(fake, "responses") as guard:
        guard.chat(_USER)
        list(guard.chat(_USER, stream=True))
        guard.client().responses.create(model="fake-model", input="hi")
        guard.client().chat.completions.create(model="fake-model", messages=_USER)
    assert [r.body and r.body.get("store") for r in fake.requests] == [False] * 4


def test_the_provider_s_store_setting_and_the_caller_s_word(fake: FakeProvider) -> None:
    """``store=True`` on the provider asks OpenAI to store its responses; ``store=None``
    sends no ``store`` (the server's default); a request's own ``store`` wins over either."""
    with _responses_guard(fake, store=True) as guard:
        guard.chat(_USER)
        guard.chat(_USER, extra_body={"store": False})
        guard.client().responses.create(model="fake-model", input="hi", store=False)
    with _responses_guard(fake, store=None) as guard:
        guard.chat(_USER)
    with _responses_guard(fake) as guard:
        guard.chat(_USER, extra_body={"store": True})
    assert [(r.body or {}).get("store", "unsent") for r in fake.requests] == [
        True,
        False,
        False,
        "unsent",
        True,
    ]


@pytest.mark.parametrize("store", ["no", 1])
def test_a_store_setting_that_is_not_a_bool_is_refused(fake: FakeProvider, store: Any) -> None:
    with pytest.raises(ConfigurationError, match="store"):
        OpenAIResponsesProvider(fake.base_url, store=store)


@pytest.mark.parametrize("route", ["chat", "responses", "anthropic"])
@pytest.mark.parametrize("store", [True, False])
def test_a_chat_caller_s_store_reaches_chat_and_responses_routes(
    fake: FakeProvider, route: str, store: bool
) -> None:
    """Chat completions' ``store`` (default false) goes on as asked; Claude has none."""
    with guard_over(fake, route) as guard:
        guard.client().chat.completions.create(model="fake-model", messages=_USER, store=store)
    assert _sent(fake).get("store") == (None if route == "anthropic" else store)


# -- reasoning items sent back when nothing is stored ----------------------------------------

_BY_ID = {"type": "reasoning", "id": "rs_0a", "summary": [{"type": "summary_text", "text": "a"}]}
_SEALED = {"type": "reasoning", "id": "rs_0b", "summary": [], "encrypted_content": "gAAAA-b"}


def _history() -> list[dict[str, Any]]:
    thinking = [dict(_BY_ID), dict(_SEALED)]
    return [
        {"role": "user", "content": "look"},
        {"role": "assistant", "content": "Looked.", "thinking": thinking},
        {"role": "user", "content": "again"},
    ]


@pytest.mark.parametrize("store", [False, True, None])
def test_reasoning_items_a_route_cannot_find_are_not_sent_back(
    fake: FakeProvider, store: bool | None
) -> None:
    """With ``store: false`` OpenAI keeps no item, and one sent back by its id alone is a 404
    ("Items are not persisted when `store` is set to false"): such items are left out; an
    item with its ``encrypted_content`` goes back. With responses stored, every item goes."""
    with _responses_guard(fake, store=store) as guard:
        guard.chat(_history())
    reasoning = [i for i in _sent(fake)["input"] if i.get("type") == "reasoning"]
    assert reasoning == ([_SEALED] if store is False else [_BY_ID, _SEALED])


def test_a_caller_s_store_false_leaves_out_items_found_by_id_alone(fake: FakeProvider) -> None:
    items: Any = [
        {"role": "user", "content": "look"},
        _BY_ID,
        _SEALED,
        {"type": "message", "role": "assistant", "content": "Looked."},
        {"role": "user", "content": "again"},
    ]
    with _responses_guard(fake, store=True) as guard:
        guard.client().responses.create(model="fake-model", input=items, store=False)
    reasoning = [i for i in _sent(fake)["input"] if i.get("type") == "reasoning"]
    assert reasoning == [_SEALED]


# -- reasoning carried across turns without storing --------------------------------------------

_ENCRYPTED: Final = "reasoning.encrypted_content"


def _included(fake: FakeProvider) -> list[Any]:
    return list(_sent(fake).get("include") or [])


@pytest.mark.parametrize(
    ("model", "options"),
    [
        ("fake-model", {"extra_body": {"reasoning": {"effort": "low", "summary": "auto"}}}),
        ("fake-model", {"extra_body": {"reasoning_effort": "high"}}),
        ("gpt-5-mini", {}),
        ("o4-mini", {}),
    ],
    ids=["reasoning", "reasoning_effort", "gpt-5", "o-series"],
)
def test_a_reasoning_call_that_stores_nothing_asks_for_its_encrypted_reasoning(
    fake: FakeProvider, model: str, options: dict[str, Any]
) -> None:
    """With ``store: false`` (the provider's default) OpenAI keeps no reasoning item and gives
    none back sealed unless asked: the next turn had nothing to send back, and a reasoning
    model lost its thoughts between a call and its tool's output."""
    route = OpenAIResponsesProvider(fake.base_url, model=model, name=fake.name)
    with Guard(route, environ={}, retry=None) as guard:
        guard.chat(_USER, **options)
        list(guard.chat(_USER, stream=True, **options))
    assert [(r.body or {}).get("include") for r in fake.requests] == [[_ENCRYPTED]] * 2


def test_reasoning_sent_back_sealed_asks_for_the_next_turn_s_sealed_too(fake: FakeProvider) -> None:
    with _responses_guard(fake) as guard:
        guard.chat(_history())
    assert _included(fake) == [_ENCRYPTED]


def test_encrypted_reasoning_joins_what_the_caller_included(fake: FakeProvider) -> None:
    with _responses_guard(fake) as guard:
        guard.chat(_USER, extra_body={"reasoning_effort": "low", "logprobs": True})
        guard.client().responses.create(
            model="fake-model", input="hi", reasoning={"effort": "low"}, include=[_ENCRYPTED]
        )
    first, second = ((r.body or {}).get("include") for r in fake.requests)
    assert first == ["message.output_text.logprobs", _ENCRYPTED]
    assert second == [_ENCRYPTED]


@pytest.mark.parametrize(
    ("model", "store", "options"),
    [
        ("fake-model", False, {}),  # no reasoning asked, no reasoning model
        ("gpt-5-chat-latest", False, {}),  # gpt-5's chat model does not reason
        ("gpt-4o", False, {}),
        ("fake-model", True, {"extra_body": {"reasoning_effort": "low"}}),  # stored: by id
        ("fake-model", None, {"extra_body": {"reasoning_effort": "low"}}),
    ],
)
def test_no_encrypted_reasoning_is_asked_where_none_is_needed(
    fake: FakeProvider, model: str, store: bool | None, options: dict[str, Any]
) -> None:
    """(A model that does not reason refuses the include; a stored response's items are found
    by their ids.)"""
    route = OpenAIResponsesProvider(fake.base_url, model=model, name=fake.name, store=store)
    with Guard(route, environ={}, retry=None) as guard:
        guard.chat(_USER, **options)
    assert _ENCRYPTED not in _included(fake)


def test_a_caller_s_store_false_asks_for_encrypted_reasoning(fake: FakeProvider) -> None:
    with _responses_guard(fake, store=True) as guard:
        guard.client().responses.create(
            model="fake-model", input="hi", store=False, reasoning={"effort": "low"}
        )
    assert _included(fake) == [_ENCRYPTED]


# -- what the response says of its storing ---------------------------------------------------


def _store(response: Any) -> object:
    """A response's ``store`` (OpenAI's answers have it; openai's ``Response`` type keeps it as
    an extra field)."""
    return response.model_dump().get("store")


def _said_store(guard: Guard, **request: Any) -> tuple[object, object, object]:
    """The ``store`` of the plain answer, and of a stream's created and completed events."""
    client = guard.client()
    plain = client.responses.create(model="fake-model", input="hi", **request)
    events = list(client.responses.create(model="fake-model", input="hi", stream=True, **request))
    created = next(e for e in events if e.type == "response.created")
    completed = next(e for e in events if e.type == "response.completed")
    return _store(plain), _store(created.response), _store(completed.response)


@pytest.mark.parametrize(
    ("options", "request_", "stored"),
    [
        ({"store": True}, {}, True),  # the provider stores
        ({"store": None}, {}, True),  # no store sent: OpenAI's default stores
        ({}, {"store": True}, True),  # the caller asks
        ({}, {}, False),
        ({"store": True}, {"store": False}, False),
    ],
)
def test_a_response_says_whether_the_route_stored_it(
    fake: FakeProvider, options: dict[str, Any], request_: dict[str, Any], stored: bool
) -> None:
    """The response said ``store: false`` whatever the route was sent: a caller whose Responses
    route stored the answer (the provider's ``store=True``, or its own ``store: true``) was
    told it was not."""
    with _responses_guard(fake, **options) as guard:
        assert _said_store(guard, **request_) == (stored, stored, stored)


@pytest.mark.parametrize("route", ["chat", "anthropic"])
def test_a_route_that_stores_nothing_says_store_false(fake: FakeProvider, route: str) -> None:
    with guard_over(fake, route) as guard:
        assert _said_store(guard, store=True) == (False, False, False)


def test_a_cached_answer_says_store_false(fake: FakeProvider) -> None:
    """(The route stored the answer it gave the first caller; a cache hit is stored nowhere.)"""
    route = OpenAIResponsesProvider(fake.base_url, model=fake.model, name=fake.name, store=True)
    with Guard(route, environ={}, retry=None, cache=True) as guard:
        first = guard.client().responses.with_raw_response.create(model="fake-model", input="hi")
        again = guard.client().responses.with_raw_response.create(model="fake-model", input="hi")
    assert _store(first.parse()) is True
    assert again.headers["x-llmguard-route"] == "cache"
    assert _store(again.parse()) is False


def test_a_stream_that_fell_back_says_what_the_answering_route_did(fake: FakeProvider) -> None:
    """A Responses route that stored its response opened its stream and broke before any
    content; a chat route answered: the stream said the first route's ``store: true``."""
    created = {
        "type": "response.created",
        "response": {
            "id": "resp_1",
            "object": "response",
            "created_at": 1,
            "model": "m",
            "status": "in_progress",
            "output": [],
            "store": True,
        },
    }
    with RawServer(sse_head(), (b"data: " + json.dumps(created).encode() + b"\n\n",)) as raw:
        first = OpenAIResponsesProvider(raw.base_url, model="m", name="first", store=True)
        chat = OpenAICompatibleProvider(fake.base_url, model=fake.model, name="chat")
        with Guard([first, chat], environ={}, retry=None, breaker=None) as guard:
            events = list(guard.client().responses.create(model="m", input="hi", stream=True))
    assert raw.received
    assert fake.requests
    said = [
        _store(e.response) for e in events if e.type in ("response.created", "response.completed")
    ]
    assert said == [False, False]  # created, completed
