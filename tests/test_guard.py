"""The Guard's pipeline: validation, guardrails, size check, fallback chain, hooks, config."""

from __future__ import annotations

from collections.abc import Callable

import anyio
import pytest

from llmguard_sdk import (
    AllRoutesFailedError,
    BadRequestError,
    CallEvent,
    ChatOptions,
    ChatRequest,
    ChatResponse,
    ConfigurationError,
    Guard,
    GuardrailRejectedError,
    InputTooLargeError,
    Message,
    OpenAICompatibleProvider,
    ProviderTimeoutError,
    ProviderUnavailableError,
    RateLimitedError,
    RequestValidationError,
    StreamInterruptedError,
    count_text_tokens,
    scoped,
)
from llmguard_sdk.testing import FakeProvider, Fault

from .conftest import USER

MakeGuard = Callable[..., Guard]


def test_chat_returns_text_usage_route_and_timings(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    response = make_guard(fake).chat(USER, max_tokens=20)
    assert response.text == "Echo: hello there"
    assert response.route == "primary"
    assert response.model == "fake-model"
    assert response.attempts == 1
    assert response.usage is not None
    assert response.usage.output_tokens == 3
    assert response.timings.total_s > 0
    assert response.timings.first_token_s is None


def test_request_object_and_message_models_are_accepted(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    guard = make_guard(fake)
    request = ChatRequest(messages=[Message(role="user", content="hi")])
    assert guard.chat(request=request).text == "Echo: hi"
    assert guard.chat([Message(role="user", content="yo")]).text == "Echo: yo"
    with pytest.raises(RequestValidationError, match="either request"):
        guard.chat(USER, request=request)


def test_invalid_request_fails_before_any_network_call(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    guard = make_guard(fake)
    with pytest.raises(RequestValidationError, match="temperature"):
        guard.chat(USER, temperature=9)
    with pytest.raises(RequestValidationError, match="timeout"):
        guard.chat(USER, timeout=0)
    assert fake.stats.requests == 0


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_request_or_stream_of_the_wrong_kind_is_a_validation_error(
    fake: FakeProvider, make_guard: MakeGuard, mode: str
) -> None:
    seen: list[ChatRequest] = []
    guard = make_guard(fake, input_filters=[seen.append])

    def chat(messages: object = None, **options: object) -> object:
        if mode == "sync":
            return guard.chat(messages, **options)  # type: ignore[call-overload]
        return anyio.run(lambda: guard.achat(messages, **options))  # type: ignore[call-overload]

    for request in ("hello", 5, [USER]):
        with pytest.raises(RequestValidationError, match="request must be a ChatRequest"):
            chat(request=request)
    for stream in ("no", 1, None):  # ("no" would be true: a stream, not an answer)
        with pytest.raises(RequestValidationError, match="stream must be True or False"):
            chat(USER, stream=stream)
    assert fake.stats.requests == 0
    answer = chat(request={"messages": USER}, model="chosen")  # a mapping of its fields
    assert isinstance(answer, ChatResponse)
    assert [request.model for request in seen] == ["chosen"]


@pytest.mark.parametrize(
    ("messages", "named"),
    [
        (5, "messages must be a list"),  # (TypeError: not iterable)
        ("hello", "messages must be a list"),  # (each character a message)
        ({"role": "user", "content": "hi"}, "messages must be a list"),  # (each key one)
        (Message(role="user", content="hi"), "messages must be a list"),  # (each field one)
        (ChatRequest(messages=[Message(role="user", content="hi")]), "request="),
    ],
)
def test_messages_that_are_not_a_list_of_messages_are_named_so(
    fake: FakeProvider, make_guard: MakeGuard, messages: object, named: str
) -> None:
    guard = make_guard(fake)
    with pytest.raises(RequestValidationError, match=named):
        guard.chat(messages)  # type: ignore[call-overload]
    assert fake.stats.requests == 0
    assert guard.chat(m for m in USER).text == "Echo: hello there"  # any iterable of them


@pytest.mark.parametrize("stream", [False, True])
def test_extra_body_may_not_say_whether_the_answer_streams(
    fake: FakeProvider, make_guard: MakeGuard, stream: bool
) -> None:
    # it overrode the SDK's own: each answer came in the other format, every attempt on every
    # route failed as malformed (retried, and recorded against the routes' breakers)
    guard = make_guard(fake)
    with pytest.raises(RequestValidationError, match=r"extra_body.*stream=True"):
        guard.chat(USER, stream=stream, extra_body={"stream": not stream, "top_k": 3})
    assert fake.stats.requests == 0
    assert guard.chat(USER, extra_body={"top_k": 3}).text == "Echo: hello there"


def test_chat_options_name_every_request_parameter_and_nothing_else(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    call_options = {"request", "tenant", "feature", "user", "timeout", "hedge_after"}
    call_options |= {"attempt_timeout"}
    call_options |= {"priority", "cacheable", "cache_tags", "region"}
    call_options |= {"cache_refresh", "cache_ttl", "cache_max_age"}
    request_params = ChatOptions.__optional_keys__ - call_options
    assert request_params == ChatRequest.model_fields.keys() - {"messages"}
    guard = make_guard(fake)
    with pytest.raises(RequestValidationError, match="max_tokenz"):
        guard.chat(USER, max_tokenz=5)  # type: ignore[call-overload]
    assert fake.stats.requests == 0
    answer = guard.chat(USER, tenant="acme", seed=7, cacheable=False, cache_tags=["a"])
    assert answer.text == "Echo: hello there"
    assert fake.stats.requests == 1


def test_missing_model_is_a_validation_error(fake: FakeProvider) -> None:
    guard = Guard(OpenAICompatibleProvider(fake.base_url), environ={})
    with pytest.raises(RequestValidationError, match="no model"):
        guard.chat(USER)
    assert guard.chat(USER, model="chosen").model == "chosen"
    guard.close()


def test_fallback_chain_serves_from_the_next_route(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard
) -> None:
    events: list[CallEvent] = []
    guard = make_guard(fake, fake2, hooks=[events.append], retry=None)
    fake.script(Fault(status=503))
    response = guard.chat(USER)
    assert response.route == "backup"
    assert response.model == "backup-model"
    assert response.attempts == 2
    assert events[-1].route_errors == (("primary", "llmguard_sdk.errors.ProviderUnavailableError"),)
    assert events[-1].route == "backup"


def test_request_error_does_not_fall_through(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard
) -> None:
    guard = make_guard(fake, fake2)
    fake.script(Fault(status=400))
    with pytest.raises(BadRequestError):
        guard.chat(USER)
    assert fake2.stats.requests == 0


def test_all_routes_failing_raises_all_routes_failed_with_each_error(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard
) -> None:
    guard = make_guard(fake, fake2, retry=None)
    fake.script(Fault(status=429, retry_after=3))
    fake2.script(Fault(status=429, retry_after=1))
    with pytest.raises(AllRoutesFailedError) as info:
        guard.chat(USER)
    assert set(info.value.errors) == {"primary", "backup"}
    assert all(isinstance(e, RateLimitedError) for e in info.value.errors.values())
    assert info.value.retry_after == 1.0


def test_single_route_raises_its_own_error(fake: FakeProvider, make_guard: MakeGuard) -> None:
    fake.script(Fault(status=503))
    with pytest.raises(ProviderUnavailableError):
        make_guard(fake, retry=None).chat(USER)


def test_call_timeout_bounds_a_hung_provider(fake: FakeProvider, make_guard: MakeGuard) -> None:
    fake.always(Fault(hang=True))
    with pytest.raises(ProviderTimeoutError):
        make_guard(fake, timeout=30).chat(USER, timeout=0.3)


def test_stream_falls_back_before_the_first_token(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard
) -> None:
    guard = make_guard(fake, fake2, retry=None)
    fake.script(Fault(status=502))
    with guard.chat(USER, stream=True) as stream:
        text = "".join(chunk.text for chunk in stream)
    assert text == "Echo: hello there"
    assert stream.response.route == "backup"
    assert stream.response.timings.first_token_s is not None
    assert stream.response.usage is not None
    assert not stream.response.usage.estimated


def test_stream_broken_after_content_is_never_replayed(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard
) -> None:
    events: list[CallEvent] = []
    guard = make_guard(fake, fake2, hooks=[events.append])
    fake.script(Fault(cut_stream_after=2))
    seen: list[str] = []
    with pytest.raises(StreamInterruptedError), guard.chat(USER, stream=True) as stream:
        seen.extend(chunk.text for chunk in stream)
    assert "".join(seen) == "Echo: hello"
    assert fake2.stats.requests == 0
    assert events[-1].outcome == "error"


def test_stream_closed_early_reports_cancelled(fake: FakeProvider, make_guard: MakeGuard) -> None:
    events: list[CallEvent] = []
    guard = make_guard(fake, hooks=[events.append])
    stream = guard.chat(USER, stream=True)
    next(stream)
    stream.close()
    assert events[-1].outcome == "cancelled"
    with pytest.raises(RuntimeError, match="not been read"):
        _ = stream.response


@pytest.mark.anyio
async def test_async_call_cancelled_in_flight_is_reported_cancelled(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    events: list[CallEvent] = []
    guard = make_guard(fake, hooks=[events.append], retry=None)
    fake.script(Fault(hang=True))
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(guard.achat, USER)
        for _ in range(1000):  # until the request is in flight (10 s at most)
            if fake.stats.requests:
                break
            await anyio.sleep(0.01)
        tasks.cancel_scope.cancel()
    assert [event.outcome for event in events] == ["cancelled"]
    await guard.aclose()


@pytest.mark.anyio
async def test_async_chat_stream_and_fallback(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard
) -> None:
    guard = make_guard(fake, fake2, retry=None)
    fake.script(Fault(status=503), Fault(reset=True))
    response = await guard.achat(USER, tenant="acme")
    assert response.route == "backup"
    stream = await guard.achat(USER, stream=True)
    async with stream:
        text = "".join([chunk.text async for chunk in stream])
    assert text == "Echo: hello there"
    assert stream.response.route == "backup"
    await guard.aclose()


def test_input_filter_can_rewrite_and_reject(fake: FakeProvider, make_guard: MakeGuard) -> None:
    def redact(request: ChatRequest) -> ChatRequest:
        messages = [
            m.model_copy(update={"content": m.text.replace("secret", "[redacted]")})
            for m in request.messages
        ]
        return request.model_copy(update={"messages": messages})

    def refuse_weapons(request: ChatRequest) -> None:
        if "weapon" in request.last_user_text():
            raise GuardrailRejectedError("weapons are off-topic")

    guard = make_guard(fake, input_filters=[redact, refuse_weapons])
    answer = guard.chat([{"role": "user", "content": "my secret"}])
    assert answer.text == "Echo: my [redacted]"
    with pytest.raises(GuardrailRejectedError) as info:
        guard.chat([{"role": "user", "content": "build a weapon"}])
    assert info.value.stage == "input"
    assert fake.stats.requests == 1


def test_output_filter_can_rewrite_and_reject(fake: FakeProvider, make_guard: MakeGuard) -> None:
    def shout(response: ChatResponse) -> ChatResponse:
        return response.model_copy(update={"text": response.text.upper()})

    def no_echo(response: ChatResponse) -> None:
        if "FORBIDDEN" in response.text:
            raise GuardrailRejectedError("forbidden word")

    guard = make_guard(fake, output_filters=[shout, no_echo])
    assert guard.chat(USER).text == "ECHO: HELLO THERE"
    with pytest.raises(GuardrailRejectedError) as info:
        guard.chat([{"role": "user", "content": "forbidden"}])
    assert info.value.stage == "output"


def test_filter_returning_the_wrong_type_is_a_configuration_error(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    guard = make_guard(fake, input_filters=[lambda request: "oops"])
    with pytest.raises(ConfigurationError, match="input filter"):
        guard.chat(USER)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    ("update", "named"),
    [
        ({"messages": []}, "messages"),
        ({"max_tokens": -5}, "max_tokens"),
        ({"temperature": "hot"}, "temperature"),
    ],
)
def test_an_input_filters_invalid_request_fails_before_any_network_call(
    fake: FakeProvider, make_guard: MakeGuard, stream: bool, update: dict[str, object], named: str
) -> None:
    def rewrite(request: ChatRequest) -> ChatRequest:
        return request.model_copy(update=update)  # (model_copy does not validate)

    guard = make_guard(fake, input_filters=[rewrite])
    with pytest.raises(RequestValidationError, match=f"input filter .*{named}"):
        guard.chat(USER, stream=stream)  # (checked as the call starts, before a stream)
    assert fake.stats.requests == 0


def test_an_input_filters_messages_given_as_dicts_are_validated(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    def redact(request: ChatRequest) -> ChatRequest:
        return request.model_copy(update={"messages": [{"role": "user", "content": "redacted"}]})

    guard = make_guard(fake, input_filters=[redact], max_input_tokens=100)
    assert guard.chat(USER).text == "Echo: redacted"  # (dicts failed: AttributeError)


@pytest.mark.parametrize("stream", [False, True])
def test_an_output_filters_invalid_response_is_a_configuration_error(
    fake: FakeProvider, make_guard: MakeGuard, stream: bool
) -> None:
    def blank(response: ChatResponse) -> ChatResponse:
        return response.model_copy(update={"text": None})  # (model_copy does not validate)

    guard = make_guard(fake, output_filters=[blank])

    def call() -> None:  # (the caller got text=None; the cache's store failed on it)
        if not stream:
            guard.chat(USER)
            return
        with guard.chat(USER, stream=True) as chunks:  # (the error comes as the stream ends)
            list(chunks)

    with pytest.raises(ConfigurationError, match=r"output filter .* invalid response: text"):
        call()


def test_max_input_tokens_refuses_large_requests(fake: FakeProvider, make_guard: MakeGuard) -> None:
    guard = make_guard(fake, max_input_tokens=20)
    assert guard.chat(USER).text
    with pytest.raises(InputTooLargeError) as info:
        guard.chat([{"role": "user", "content": "word " * 100}])
    assert info.value.tokens > 20
    assert info.value.limit == 20
    assert fake.stats.requests == 1


def test_max_input_tokens_counts_a_request_its_bytes_do_not_clear(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    """More bytes than the limit but fewer tokens: counted, and sent."""
    guard = make_guard(fake, max_input_tokens=20)
    text = "hello world " * 3  # 36 bytes, 6 tokens (13 with the framing)
    assert guard.chat([{"role": "user", "content": text}]).text
    assert fake.stats.requests == 1


def test_scope_from_keywords_and_scoped_block(fake: FakeProvider, make_guard: MakeGuard) -> None:
    events: list[CallEvent] = []
    guard = make_guard(fake, hooks=[events.append])
    with scoped(tenant="acme", feature="support"):
        guard.chat(USER, user="u1")
        guard.chat(USER, feature="search")
    guard.chat(USER)
    scopes = [(e.scope.tenant, e.scope.feature, e.scope.user) for e in events]
    assert scopes == [("acme", "support", "u1"), ("acme", "search", None), (None, None, None)]


def test_a_failing_hook_never_breaks_the_call(
    fake: FakeProvider, make_guard: MakeGuard, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(event: CallEvent) -> None:
        raise RuntimeError("hook bug")

    guard = make_guard(fake, hooks=[broken])
    assert guard.chat(USER).text
    assert "hook" in caplog.text


def test_configuration_from_environment(fake: FakeProvider) -> None:
    environ = {
        "LLMGUARD_BASE_URL": fake.base_url,
        "LLMGUARD_MODEL": "env-model",
        "LLMGUARD_API_KEY": "sk-env",
        "LLMGUARD_TIMEOUT": "7.5",
        "LLMGUARD_MAX_INPUT_TOKENS": "1000",
    }
    with Guard(environ=environ) as guard:
        assert guard.settings.timeout == 7.5
        assert guard.settings.max_input_tokens == 1000
        assert guard.chat(USER).model == "env-model"
    assert fake.requests[-1].headers["authorization"] == "Bearer sk-env"
    with Guard(environ=environ, timeout=3) as guard:
        assert guard.settings.timeout == 3  # code wins over the environment


@pytest.mark.parametrize(
    ("environ", "named"),
    [
        ({"LLMGUARD_TIMEOUT": "soon"}, "LLMGUARD_TIMEOUT"),
        ({"LLMGUARD_MAX_INPUT_TOKENS": "-5"}, "LLMGUARD_MAX_INPUT_TOKENS"),
        ({"LLMGUARD_STORE": "mongodb://x"}, "LLMGUARD_STORE"),  # (it said "store must be")
        ({"LLMGUARD_STORE": "memroy"}, "LLMGUARD_STORE"),
        ({"LLMGUARD_BASE_URL": "not a url"}, "LLMGUARD_BASE_URL"),
        ({"LLMGUARD_BASE_URL": "localhost:8000"}, "LLMGUARD_BASE_URL"),
    ],
)
def test_bad_environment_values_name_the_variable(environ: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigurationError, match=named):
        Guard(environ=environ)


async def _async_hook(value: object) -> None:
    """An async callable: a Guard calls its hooks, never awaits them (its filters it awaits:
    see tests/test_async_filters.py)."""


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"hooks": print}, "hooks must be a list"),  # one callable, not a list of them
        ({"input_filters": print}, "input_filters must be a list"),
        ({"output_filters": print}, "output_filters must be a list"),
        ({"breaker_hooks": print}, "breaker_hooks must be a list"),
        ({"hooks": [_async_hook]}, "never awaited"),  # its events were silently dropped
        ({"breaker_hooks": [_async_hook]}, "never awaited"),
        ({"moves_on": 5}, "moves_on"),
        ({"moves_on": _async_hook}, "moves_on"),
        ({"degraded": 5}, "degraded"),
        ({"continue_interrupted_streams": "yes"}, "continue_interrupted_streams"),
        ({"store": 5}, "store"),  # was ignored: the Guard kept its state in memory
        ({"environ": 5}, "environ"),
        ({"breaker": 5}, "breaker"),
        ({"hedge_after": -1}, "hedge_after"),  # (each call was refused, as a bad request)
        ({"hedge_after": "0.5"}, "hedge_after"),
        ({"hedge_after": True}, "hedge_after"),
    ],
)
def test_guard_arguments_of_the_wrong_kind_are_configuration_errors(
    fake: FakeProvider, options: dict[str, object], named: str
) -> None:
    options.setdefault("environ", {})
    provider = OpenAICompatibleProvider(fake.base_url, model=fake.model)
    with pytest.raises(ConfigurationError, match=named):
        Guard(provider, **options)  # type: ignore[arg-type]
    assert fake.stats.requests == 0


def test_guard_without_provider_explains_itself() -> None:
    guard = Guard(environ={})
    with pytest.raises(ConfigurationError, match="LLMGUARD_BASE_URL"):
        guard.chat(USER)


def test_duplicate_route_names_are_refused(fake: FakeProvider) -> None:
    routes = [OpenAICompatibleProvider(fake.base_url, name="same") for _ in range(2)]
    with pytest.raises(ConfigurationError, match="unique"):
        Guard(routes, environ={})
    with pytest.raises(ConfigurationError, match="not a Provider"):
        Guard(["not a provider"], environ={})  # type: ignore[list-item]


@pytest.mark.parametrize("streaming", [False, True])
def test_missing_usage_is_counted_by_the_guard_and_marked_estimated(
    fake: FakeProvider, make_guard: MakeGuard, streaming: bool
) -> None:
    guard = make_guard(fake)
    fake.script(Fault(omit_usage=True), Fault())
    if streaming:
        with guard.chat(USER, stream=True) as stream:
            for _ in stream:
                pass
        first = stream.response
        with guard.chat(USER, stream=True) as stream:
            for _ in stream:
                pass
        reported = stream.response
    else:
        first, reported = guard.chat(USER), guard.chat(USER)
    assert first.usage is not None
    assert reported.usage is not None
    assert first.usage.estimated
    assert not reported.usage.estimated
    assert first.usage.output_tokens == count_text_tokens(first.text).tokens
    assert first.usage.input_tokens > 0


def test_attempt_timeout_lets_the_next_route_answer(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard
) -> None:
    guard = make_guard(fake, fake2, timeout=10, attempt_timeout=1.0, retry=None)
    fake.script(Fault(hang=True), Fault(first_token_delay=3))
    assert guard.chat(USER).route == "backup"
    with guard.chat(USER, stream=True) as stream:
        assert "".join(chunk.text for chunk in stream) == "Echo: hello there"
    assert stream.response.route == "backup"
    assert stream.response.attempts == 2
