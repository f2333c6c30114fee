"""A call's entry remembers what the last call settled (its scope, the header names it
checked) and checks cache options only where they are given: every call still gets its own
scope, and every bad option or header is still refused, and reported, however often."""

from __future__ import annotations

import enum
from typing import Any

import pytest

from llmguard_sdk import CallEvent, Guard, RequestValidationError, scoped
from llmguard_sdk._core.refusals import Refusal
from llmguard_sdk._core.stages import resolve_scope
from llmguard_sdk.context import Scope
from llmguard_sdk.testing import FakeProvider

from .conftest import USER


def _guard(make_guard: Any, fake: FakeProvider, events: list[CallEvent]) -> Guard:
    guard: Guard = make_guard(fake, hooks=[events.append])
    return guard


def test_each_call_gets_its_own_scope_when_calls_repeat(
    make_guard: Any, fake: FakeProvider
) -> None:
    events: list[CallEvent] = []
    guard = _guard(make_guard, fake, events)
    tenant = "".join(["ac", "me"])  # equal to "acme", another object
    calls: list[tuple[dict[str, Any], Scope | None, Scope]] = [
        ({"tenant": "acme", "feature": "f"}, None, Scope("acme", "f")),
        ({"tenant": tenant, "feature": "f"}, None, Scope("acme", "f")),
        ({"tenant": "acme", "feature": "f"}, Scope(user="u1"), Scope("acme", "f", "u1")),
        ({"tenant": "acme", "feature": "f"}, Scope(user="u2"), Scope("acme", "f", "u2")),
        ({"tenant": "acme", "feature": "f"}, None, Scope("acme", "f")),
        ({"tenant": "other"}, None, Scope("other")),
        ({}, Scope(tenant="block"), Scope("block")),
    ]
    for options, block, expected in calls:
        events.clear()
        if block is None:
            guard.chat(USER, **options)
        else:
            with scoped(tenant=block.tenant, user=block.user):
                guard.chat(USER, **options)
        (event,) = events
        assert event.scope == expected, (options, block)


@pytest.mark.parametrize(
    ("options", "refused"),
    [
        ({"tenant": 7}, "tenant must be a string"),
        ({"cache_tags": "ab"}, "cache_tags must be a list of strings"),
        ({"cache_tags": None}, "cache_tags must be a list of strings"),
        ({"cache_tags": [1]}, "cache_tags must be a list of strings"),
        ({"cache_refresh": "no"}, "cache_refresh must be True or False"),
        ({"cache_refresh": 0}, "cache_refresh must be True or False"),
        ({"cache_ttl": 0}, "cache_ttl must be a number of seconds"),
        ({"cache_max_age": -1}, "cache_max_age must be a number of seconds"),
        ({"extra_headers": {"Idempotency-Key": "a\r\nb"}}, "must be a token"),
        ({"extra_headers": {"X-Mine": "ok", "Content-Length": "3"}}, "the body's framing"),
        ({"extra_headers": {"bad name": "ok"}}, "must be a token"),
    ],
)
def test_a_bad_option_is_refused_and_reported_after_good_calls(
    make_guard: Any, fake: FakeProvider, options: dict[str, Any], refused: str
) -> None:
    events: list[CallEvent] = []
    guard = _guard(make_guard, fake, events)
    good: dict[str, Any] = {
        "extra_headers": {"Idempotency-Key": "mine-1", "X-Mine": "ok"},
        "tenant": "acme",
    }
    for _ in range(2):  # what was checked before is remembered: the bad one is not
        guard.chat(USER, **good)
        events.clear()
        with pytest.raises(RequestValidationError, match=refused):
            guard.chat(USER, **options)
        (event,) = events
        assert event.outcome == "error"
        assert event.attempts == 0
    assert len(fake.requests) == 2


def test_given_cache_options_that_are_good_are_taken(make_guard: Any, fake: FakeProvider) -> None:
    events: list[CallEvent] = []
    guard = _guard(make_guard, fake, events)
    options: dict[str, Any] = {
        "cache_tags": ["t1"],
        "cache_refresh": True,
        "cache_ttl": 5,
        "cache_max_age": 0,
    }
    assert guard.chat(USER, **options).text


def test_a_refusal_is_one_small_object(make_guard: Any, fake: FakeProvider) -> None:
    """The checks' context manager is a slots object, no generator (one per call)."""
    guard: Guard = make_guard(fake)
    refusal = Refusal(guard._stages)
    assert not hasattr(refusal, "__dict__")
    with refusal as entered:
        assert entered is refusal


def test_a_remembered_scope_never_hands_a_call_another_calls_kind_of_id() -> None:
    """An enum tenant (a ``str`` subclass, equal to its value) was remembered, and the next
    call naming the plain string got the enum back: its labels read ``Tenant.ACME``."""

    class Tenant(str, enum.Enum):
        ACME = "acme"

    assert resolve_scope(Tenant.ACME, None, None).tenant is Tenant.ACME
    plain = resolve_scope("acme", None, None).tenant
    assert type(plain) is str
    assert f"{plain}" == "acme"
    with scoped(tenant=Tenant.ACME):
        resolve_scope(None, "f", None)
    with scoped(tenant="acme"):
        assert type(resolve_scope(None, "f", None).tenant) is str
