"""A call the drop-in clients or the transport seam refuse before the Guard sees it (the
look-alike client's checks of ``create()``'s arguments, the seam's of the request an SDK
sent) is reported as the Guard reports a call it refuses: a failed span and duration point,
a failed :class:`~llmguard_sdk.CallEvent`, with the error the caller gets. It had none.

Real OpenTelemetry SDK with in-memory exporters, FakeProviders on loopback, openai's and
anthropic's own clients over the seam."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from opentelemetry.trace import StatusCode

from llmguard_sdk import CallEvent, Guard, RequestValidationError, scoped
from llmguard_sdk.client import AsyncGuardedClient, GuardedClient, anthropic_client
from llmguard_sdk.telemetry._attributes import exception_type
from llmguard_sdk.testing import FakeProvider
from llmguard_sdk.transport import http_client

from .conftest import USER, require_module
from .test_telemetry import Exported, MakeGuard, call_span, exporting

otel = pytest.fixture(exporting, name="otel")
CHAT = "/v1/chat/completions"


def reported(otel: Exported, events: list[CallEvent], error: BaseException, kind: str) -> CallEvent:
    """The one refused call reported for ``error`` (what the caller got): its span, its
    duration point and its CallEvent, each naming the caller's error type; the event."""
    span = call_span(otel)  # (one: a refusal is reported once)
    assert span.status.status_code == StatusCode.ERROR
    assert span.attributes is not None
    assert span.attributes["error.type"] == exception_type(error)
    assert (span.attributes["llmguard.kind"], span.attributes["llmguard.attempts"]) == (kind, 0)
    (duration,) = otel.points("gen_ai.client.operation.duration")
    assert duration.attributes["error.type"] == exception_type(error)
    (event,) = events
    assert (event.kind, event.outcome, event.attempts, event.route) == (kind, "error", 0, None)
    assert event.error is not None
    assert exception_type(event.error) == exception_type(error)
    assert event.latency_s >= 0
    return event


def watched(make_guard: MakeGuard, fake: FakeProvider, otel: Exported) -> tuple[Guard, list[Any]]:
    events: list[CallEvent] = []
    return make_guard(fake, hooks=[events.append], telemetry=otel.telemetry), events


# -- the look-alike client: its own checks of create()'s arguments ---------------------------

LOOK_ALIKE: dict[str, tuple[dict[str, Any], str]] = {
    # what create() is given, how the refused call is reported
    "n": ({"n": 2}, "chat"),
    "timeout": ({"timeout": "soon"}, "chat"),
    "extra_body": ({"extra_body": 5}, "chat"),
    "stream": ({"stream": "yes"}, "chat"),  # (no stream was made)
    "stream-timeout": ({"stream": True, "timeout": -1}, "stream"),
}


@pytest.mark.parametrize("case", LOOK_ALIKE)
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_the_look_alike_client_s_refusals_are_reported(
    fake: FakeProvider, make_guard: MakeGuard, otel: Exported, mode: str, case: str
) -> None:
    """``n=2``, a bad ``timeout`` or ``extra_body``, a bad ``stream=`` raised before the
    Guard saw the call: no span, no duration point, no CallEvent."""
    arguments, kind = LOOK_ALIKE[case]
    guard, events = watched(make_guard, fake, otel)

    def create() -> None:
        chat = dict(model="gpt-x", messages=USER, user="u-1", **arguments)
        if mode == "sync":
            GuardedClient(guard).chat.completions.create(**chat)
            return

        async def acreate() -> None:
            await AsyncGuardedClient(guard).chat.completions.create(**chat)

        anyio.run(acreate)

    with scoped(feature="faq"), pytest.raises(RequestValidationError) as raised:
        create()
    event = reported(otel, events, raised.value, kind)
    assert event.error is raised.value  # the very error the caller got
    assert (event.model, event.scope.feature, event.scope.user) == ("gpt-x", "faq", "u-1")
    assert call_span(otel).attributes["gen_ai.request.model"] == "gpt-x"  # type: ignore[index]
    assert fake.stats.requests == 0


@pytest.mark.parametrize(
    ("given", "user"),
    [({"extra_body": {"user": "u-2"}}, "u-2"), ({"user": 7}, None), ({}, "outer")],
)
def test_a_refusal_s_user_is_the_one_the_guard_would_have_read(
    fake: FakeProvider, make_guard: MakeGuard, otel: Exported, given: dict[str, Any], user: str
) -> None:
    """openai's ``user=`` (or ``extra_body``'s) is the call's user, as the Guard reads it: no
    string, none (the enclosing block's)."""
    guard, events = watched(make_guard, fake, otel)
    with scoped(user="outer"), pytest.raises(RequestValidationError) as raised:
        GuardedClient(guard).chat.completions.create(messages=USER, n=2, **given)
    assert reported(otel, events, raised.value, "chat").scope.user == (user or "outer")


def test_the_look_alike_reports_a_refusal_of_the_guard_s_own_once(
    fake: FakeProvider, make_guard: MakeGuard, otel: Exported
) -> None:
    guard, events = watched(make_guard, fake, otel)
    with pytest.raises(RequestValidationError) as raised:
        GuardedClient(guard).chat.completions.create(messages=USER, temperature="hot")
    reported(otel, events, raised.value, "chat")


# -- the transport seam: what an SDK sent ------------------------------------------------------


def test_openai_s_client_over_the_seam_reports_a_refusal_with_the_error_it_raises(
    fake: FakeProvider, make_guard: MakeGuard, otel: Exported
) -> None:
    """openai's client over the seam gets the Guard's error as openai's too: its span and
    its event name the type the caller catches."""
    openai = require_module("openai", "openai is a dev dependency")
    guard, events = watched(make_guard, fake, otel)
    client = guard.client()
    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(
            model="gpt-x",
            messages=USER,
            n=2,
            user="u-1",
            extra_headers={"x-llmguard-feature": "faq"},
        )
    assert isinstance(raised.value, RequestValidationError)
    event = reported(otel, events, raised.value, "chat")
    assert (event.model, event.scope.feature, event.scope.user) == ("gpt-x", "faq", "u-1")
    assert fake.stats.requests == 0


def test_anthropic_s_client_over_the_seam_reports_a_refusal(
    fake: FakeProvider, make_guard: MakeGuard, otel: Exported
) -> None:
    anthropic = require_module("anthropic", "anthropic is a dev dependency")
    guard, events = watched(make_guard, fake, otel)
    bad: Any = [{"role": "tool", "content": "hello"}]
    with pytest.raises(anthropic.BadRequestError) as raised:
        anthropic_client(guard).messages.create(
            model="claude-x", max_tokens=10, messages=bad, metadata={"user_id": "u-1"}
        )
    event = reported(otel, events, raised.value, "chat")
    assert (event.model, event.scope.user) == ("claude-x", "u-1")
    assert fake.stats.requests == 0


SEAM: dict[str, tuple[bytes, str]] = {
    # the body an SDK sent, how the refused call is reported
    "not-json": (b"{not json", "chat"),
    "stream": (b'{"model": "gpt-x", "messages": [], "stream": "yes", "user": "u-1"}', "chat"),
    "messages": (b'{"model": "gpt-x", "messages": "hi", "stream": true, "user": "u-1"}', "stream"),
}


@pytest.mark.parametrize("case", SEAM)
def test_the_seam_reports_a_request_it_refuses(
    fake: FakeProvider, make_guard: MakeGuard, otel: Exported, case: str
) -> None:
    body, kind = SEAM[case]
    guard, events = watched(make_guard, fake, otel)
    headers = {"x-llmguard-tenant": "acme", "x-llmguard-feature": "faq"}
    with http_client(guard) as client:
        answer = client.post(CHAT, content=body, headers=headers)
    assert answer.status_code == 400
    error = answer.extensions["llmguard_error"]
    assert isinstance(error, RequestValidationError)
    event = reported(otel, events, error, kind)
    assert event.error is error
    assert (event.scope.tenant, event.scope.feature) == ("acme", "faq")
    assert event.scope.user == (None if case == "not-json" else "u-1")  # (the body's)
    assert event.model == (None if case == "not-json" else "gpt-x")
    assert fake.stats.requests == 0


USERS: dict[str, tuple[str, dict[str, Any]]] = {
    # the path, a body that names its user as its API does
    "chat": (CHAT, {"messages": USER, "user": "alice-1234"}),
    "chat-extra": (CHAT, {"messages": USER, "extra_body": {"user": "alice-1234"}}),
    "responses": ("/v1/responses", {"input": "hi", "user": "alice-1234"}),
    "messages": (
        "/v1/messages",
        {"messages": USER, "max_tokens": 8, "metadata": {"user_id": "alice-1234"}},
    ),
}


@pytest.mark.parametrize("case", USERS)
def test_the_seam_reports_a_refusal_with_the_user_its_body_names(
    fake: FakeProvider, make_guard: MakeGuard, otel: Exported, case: str
) -> None:
    """The body's user (``user``, Claude's ``metadata.user_id``) is the refused call's (a
    ``stream`` refused), as it is the Guard's when the call is made: on its event, and
    masked in its span's status."""
    path, body = USERS[case]
    guard, events = watched(make_guard, fake, otel)
    headers = {"x-llmguard-feature": "faq"}
    with scoped(user="outer"), http_client(guard) as client:
        refused = client.post(path, json={**body, "stream": "alice-1234"}, headers=headers)
        assert refused.status_code == 400
        event = reported(otel, events, refused.extensions["llmguard_error"], "chat")
        assert (event.scope.feature, event.scope.user) == ("faq", "alice-1234")
        status = call_span(otel).status.description or ""
        assert "stream must be true or false" in status
        assert "alice-1234" not in status  # (the user's id, masked as the Guard masks it)
        assert client.post(path, json=body, headers=headers).status_code == 200
    assert (events[-1].outcome, events[-1].scope) == ("ok", event.scope)  # (the Guard's)


def test_the_seam_reports_a_refusal_of_the_guard_s_own_once(
    fake: FakeProvider, make_guard: MakeGuard, otel: Exported
) -> None:
    guard, events = watched(make_guard, fake, otel)
    with http_client(guard) as client:
        answer = client.post(CHAT, json={"messages": USER, "temperature": "hot"})
    assert answer.status_code == 400
    reported(otel, events, answer.extensions["llmguard_error"], "chat")


@pytest.mark.parametrize(
    ("method", "path"),
    [("POST", "/v1/embeddings"), ("GET", "/v1/models/unknown-model"), ("GET", "/v1/files")],
)
def test_what_the_seam_does_not_serve_is_no_refused_call(
    fake: FakeProvider, make_guard: MakeGuard, otel: Exported, method: str, path: str
) -> None:
    """A path, method or model the seam does not serve is no chat call: a 404, not
    reported."""
    guard, events = watched(make_guard, fake, otel)
    with http_client(guard) as client:
        assert client.request(method, path, json={}).status_code == 404
    assert otel.finished() == []
    assert otel.points("gen_ai.client.operation.duration") == []
    assert events == []
