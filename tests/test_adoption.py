"""Adopting the SDK without rewriting calls: @guard.protect and the drop-in client."""

from __future__ import annotations

import contextvars
import functools
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import anyio
import openai
import pytest
from openai.types.chat import ChatCompletion as OpenAIChatCompletion
from openai.types.chat import ChatCompletionChunk as OpenAIChatCompletionChunk

from llmguard_sdk import (
    AsyncGuardedClient,
    CallEvent,
    ConfigurationError,
    Guard,
    GuardedClient,
    ProviderTimeoutError,
    RateLimitedError,
    RequestValidationError,
    RetryPolicy,
    classify_exception,
    scoped,
    usage_from_result,
)
from llmguard_sdk.context import current_scope
from llmguard_sdk.testing import FakeProvider, Fault

from .conftest import USER

MakeGuard = Callable[..., Guard]


def test_protect_reads_usage_from_the_real_openai_client(fake: FakeProvider) -> None:
    events: list[CallEvent] = []
    guard = Guard(hooks=[events.append], environ={})
    client = openai.OpenAI(base_url=fake.base_url, api_key="sk-x", max_retries=0)

    @guard.protect(feature="faq")
    def ask(question: str) -> Any:
        return client.chat.completions.create(
            model="gpt-test", messages=[{"role": "user", "content": question}]
        )

    with scoped(tenant="acme"):
        completion = ask("what is up")
    assert completion.choices[0].message.content == "Echo: what is up"  # returned unchanged
    event = events[-1]
    assert event.kind == "protect"
    assert event.outcome == "ok"
    assert event.model == "gpt-test"
    assert event.usage is not None
    assert event.usage.input_tokens == completion.usage.prompt_tokens
    assert event.usage.output_tokens == completion.usage.completion_tokens == 4
    assert (event.scope.tenant, event.scope.feature) == ("acme", "faq")
    client.close()


@pytest.mark.parametrize("kind", ["staticmethod", "classmethod"])
def test_protect_above_a_staticmethod_or_classmethod_is_called_through_instances(
    fake: FakeProvider, kind: str
) -> None:
    """``@guard.protect`` stacked above ``@staticmethod`` passed the instance as the first
    argument when called through an instance (TypeError); above ``@classmethod`` the wrapped
    object got no class."""
    events: list[CallEvent] = []
    guard = Guard(hooks=[events.append], environ={}, retry=RetryPolicy(attempts=2))
    client = openai.OpenAI(base_url=fake.base_url, api_key="sk-x", max_retries=0)

    def complete(question: str) -> str:
        completion = client.chat.completions.create(
            model="gpt-test", messages=[{"role": "user", "content": question}]
        )
        return completion.choices[0].message.content or ""

    def of_class(cls: type, question: str) -> str:
        assert cls.__name__ == "Assistant"
        return complete(question)

    method: Any = staticmethod(complete) if kind == "staticmethod" else classmethod(of_class)

    class Assistant:
        answer = guard.protect(feature="faq")(method)

    fake.script(Fault(status=503))
    assert Assistant().answer("hi") == "Echo: hi"
    assert Assistant.answer("there") == "Echo: there"
    assert [event.outcome for event in events] == ["ok", "ok"]
    assert len(fake.requests) == 3  # the first call retried once
    client.close()


def test_protect_lets_provider_errors_through_and_classifies_them(fake: FakeProvider) -> None:
    events: list[CallEvent] = []
    guard = Guard(hooks=[events.append], environ={})
    client = openai.OpenAI(base_url=fake.base_url, api_key="sk-x", max_retries=0)

    @guard.protect
    def ask() -> Any:
        return client.chat.completions.create(model="m", messages=USER)

    fake.script(Fault(status=429, retry_after=30))  # beyond the retry cap: not retried
    with pytest.raises(openai.RateLimitError):
        ask()
    error = events[-1].error
    assert isinstance(error, RateLimitedError)
    assert error.retry_after == 30.0
    assert events[-1].outcome == "error"
    assert events[-1].attempts == 1
    assert fake.stats.requests == 1
    client.close()


@pytest.mark.anyio
async def test_protect_bounds_an_async_call_by_its_timeout(fake: FakeProvider) -> None:
    events: list[CallEvent] = []
    guard = Guard(hooks=[events.append], environ={})
    client = openai.AsyncOpenAI(base_url=fake.base_url, api_key="sk-x", max_retries=0)

    # 3 s: room for the first call's client setup on a busy machine; the slow call would
    # take 30 s, so only the timeout can end it in time.
    @guard.protect(timeout=3.0)
    async def ask() -> Any:
        return await client.chat.completions.create(model="m", messages=USER)

    answer = await ask()
    assert answer.choices[0].message.content == "Echo: hello there"
    assert events[-1].usage is not None
    fake.script(Fault(latency=30))
    started = time.monotonic()
    with pytest.raises(ProviderTimeoutError):
        await ask()
    assert time.monotonic() - started < 20  # the timeout ended it, not the answer
    assert isinstance(events[-1].error, ProviderTimeoutError)
    await client.close()


def test_a_cancelled_protected_call_is_reported_cancelled_not_failed() -> None:
    # a caller that gave up (a cancelled task, Ctrl-C) was reported as the call's error
    # (outcome "error", CancelledError as its route's error, an error span): Guard.chat
    # reports the same as "cancelled", with no error
    events: list[CallEvent] = []
    guard = Guard(hooks=[events.append], environ={})

    @guard.protect
    async def ask(started: anyio.Event) -> None:
        started.set()
        await anyio.sleep(30)

    @guard.protect
    def interrupted() -> None:
        raise KeyboardInterrupt

    async def run() -> None:
        started = anyio.Event()
        with anyio.fail_after(10):
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(ask, started)
                await started.wait()
                tasks.cancel_scope.cancel()

    anyio.run(run)
    with pytest.raises(KeyboardInterrupt):
        interrupted()
    assert [(e.outcome, e.error, e.route_errors) for e in events] == [("cancelled", None, ())] * 2
    guard.close()


def test_usage_from_plain_dicts_and_anthropic_shapes() -> None:
    openai_like = {
        "usage": {
            "prompt_tokens": 10,
            "completion_tokens": 2,
            "prompt_tokens_details": {"cached_tokens": 4},
        }
    }
    usage = usage_from_result(openai_like)
    assert usage is not None
    assert (usage.input_tokens, usage.output_tokens, usage.cached_input_tokens) == (10, 2, 4)
    anthropic_like = {
        "usage": {
            "input_tokens": 6,
            "output_tokens": 3,
            "cache_read_input_tokens": 4,
            "cache_creation_input_tokens": 5,
        }
    }
    usage = usage_from_result(anthropic_like)
    assert usage is not None
    assert (usage.input_tokens, usage.cached_input_tokens) == (15, 4)
    assert usage.cache_write_input_tokens == 5
    assert usage_from_result({"no": "usage"}) is None
    assert usage_from_result("text") is None


def test_classify_exception_leaves_bugs_alone() -> None:
    assert classify_exception(KeyError("x")) is None
    assert isinstance(classify_exception(TimeoutError()), ProviderTimeoutError)


def test_drop_in_client_matches_openais_shape(fake: FakeProvider, make_guard: MakeGuard) -> None:
    client = make_guard(fake).client()
    completion = client.chat.completions.create(
        model="ignored-by-pinned-route", messages=USER, max_tokens=20, frequency_penalty=0.5
    )
    assert isinstance(completion, object)
    parsed = OpenAIChatCompletion.model_validate(completion.model_dump())
    assert parsed.choices[0].message.content == "Echo: hello there"
    assert parsed.usage is not None
    assert parsed.usage.completion_tokens == 3
    assert completion.llmguard is not None  # type: ignore[attr-defined]
    assert completion.llmguard.route == "primary"  # type: ignore[attr-defined]
    body = fake.requests[-1].body
    assert body is not None
    assert body["frequency_penalty"] == 0.5  # unknown parameters pass through


def test_drop_in_client_streams_openai_shaped_chunks(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    client = make_guard(fake).client()
    options: dict[str, Any] = {"stream": True, "stream_options": {"include_usage": True}}
    chunks = list(client.chat.completions.create(model="m", messages=USER, **options))
    parsed = [OpenAIChatCompletionChunk.model_validate(c.model_dump()) for c in chunks]
    text = "".join(c.choices[0].delta.content or "" for c in parsed if c.choices)
    assert text == "Echo: hello there"
    assert parsed[-1].choices == []
    assert parsed[-1].usage is not None
    assert parsed[-1].usage.completion_tokens == 3


def test_drop_in_client_refuses_n_above_one(fake: FakeProvider, make_guard: MakeGuard) -> None:
    with pytest.raises(RequestValidationError, match="n must be 1"):
        make_guard(fake).client().chat.completions.create(model="m", messages=USER, n=2)


def test_async_drop_in_client(fake: FakeProvider, make_guard: MakeGuard) -> None:
    guard = make_guard(fake)

    async def run() -> tuple[str, str]:
        client = guard.aclient()
        completion = await client.chat.completions.create(model="m", messages=USER)
        stream = await client.chat.completions.create(model="m", messages=USER, stream=True)
        pieces = [c.choices[0].delta.content async for c in stream if c.choices]
        await guard.aclose()
        return completion.choices[0].message.content, "".join(p or "" for p in pieces)  # type: ignore[return-value]

    assert anyio.run(run) == ("Echo: hello there", "Echo: hello there")


def test_an_answers_message_object_goes_back_into_the_next_call(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    # openai's habit: messages.append(completion.choices[0].message), a model object, not a dict
    guard = make_guard(fake)
    client = GuardedClient(guard)
    first = client.chat.completions.create(model="m", messages=USER)
    history: list[Any] = [*USER, first.choices[0].message, {"role": "user", "content": "and then"}]
    second = client.chat.completions.create(model="m", messages=history)
    assert second.choices[0].message.content == "Echo: and then"
    third = guard.chat([*USER, openai_message("Echo: hello there"), USER[0]])  # openai's own
    assert third.text == "Echo: hello there"
    assert fake.requests[-1].body["messages"][1] == {
        "role": "assistant",
        "content": "Echo: hello there",
    }


def openai_message(text: str) -> Any:
    from openai.types.chat import ChatCompletionMessage

    return ChatCompletionMessage(role="assistant", content=text)


def test_look_alike_streams_usage_only_when_asked(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    # as openai's own client (and the provider): without stream_options.include_usage no last
    # chunk without choices, so `chunk.choices[0]` on every chunk works
    guard = make_guard(fake)
    plain = list(
        GuardedClient(guard).chat.completions.create(model="m", messages=USER, stream=True)
    )
    assert "".join(c.choices[0].delta.content or "" for c in plain) == "Echo: hello there"
    assert all(c.usage is None for c in plain)
    options: Any = {"stream": True, "stream_options": {"include_usage": True}}
    counted = list(
        GuardedClient(guard).chat.completions.create(model="m", messages=USER, **options)
    )
    assert counted[-1].choices == []
    assert counted[-1].usage is not None

    async def run() -> list[Any]:
        stream = await AsyncGuardedClient(guard).chat.completions.create(
            model="m", messages=USER, stream=True
        )
        return [c async for c in stream]

    assert all(c.choices for c in anyio.run(run))


@pytest.mark.parametrize("timeout", [0, -1, float("nan"), float("inf"), "5", True])
def test_protect_refuses_a_bad_timeout_when_it_decorates(timeout: Any) -> None:
    # it decorated, then every call failed (a ConfigurationError out of the retry loop, or an
    # untyped ValueError / TypeError out of an async call, unreported); True was a 1 s timeout
    guard = Guard(environ={})
    with pytest.raises(ConfigurationError, match="timeout"):

        @guard.protect(timeout=timeout)
        async def ask() -> None: ...

    with pytest.raises(ConfigurationError, match="timeout"):
        guard.protect(lambda: None, timeout=timeout)
    guard.close()


def test_protect_treats_an_object_with_an_async_call_as_async() -> None:
    # wrapped as a sync function, its coroutine came back unawaited: no retry, no timeout,
    # and an "ok" event before the call had even run
    events: list[CallEvent] = []
    guard = Guard(hooks=[events.append], environ={})

    class Client:
        calls = 0

        async def __call__(self) -> str:
            Client.calls += 1
            if Client.calls < 2:
                raise RateLimitedError("busy", retry_after=0.0)
            return "ok"

    assert anyio.run(guard.protect(Client())) == "ok"
    assert Client.calls == 2
    assert [e.attempts for e in events] == [2]


@pytest.mark.anyio
async def test_protect_treats_an_async_sdk_method_as_async(fake: FakeProvider) -> None:
    # openai's AsyncOpenAI().chat.completions.create is a plain function (a decorator's
    # wrapper) returning a coroutine: it was protected as sync, reported "ok" (no usage) before
    # the request was sent, and neither retried nor bounded
    events: list[CallEvent] = []
    guard = Guard(hooks=[events.append], retry=RetryPolicy(attempts=2, base=0.01), environ={})
    client = openai.AsyncOpenAI(base_url=fake.base_url, api_key="sk-x", max_retries=0)
    create = guard.protect(client.chat.completions.create)
    assert create.__doc__ == client.chat.completions.create.__doc__
    fake.script(Fault(status=503))
    completion = await create(model="gpt-test", messages=USER)
    assert completion.choices[0].message.content == "Echo: hello there"
    assert len(fake.requests) == 2
    event = events[-1]
    assert (event.outcome, event.attempts, event.model) == ("ok", 2, "gpt-test")
    assert event.usage is not None
    assert completion.usage is not None
    assert event.usage.output_tokens == completion.usage.completion_tokens
    await client.close()


def test_protect_keeps_a_wrapped_async_function_that_answers_synchronously() -> None:
    # a sync decorator around an async function (it runs it to completion) stays sync
    events: list[CallEvent] = []
    guard = Guard(hooks=[events.append], environ={})

    async def answer() -> str:
        return "ok"

    @functools.wraps(answer)
    def run_answer() -> str:
        return anyio.run(answer)

    assert guard.protect(run_answer)() == "ok"
    assert [e.outcome for e in events] == ["ok"]


def test_a_scope_reaches_tasks_and_threads_given_its_context() -> None:
    # scoped() said "threads and tasks alike", but a thread does not inherit the scope: the
    # docstring now says so, and how to hand it over
    seen: list[str | None] = []

    async def note() -> None:
        seen.append(current_scope().tenant)

    async def in_a_task() -> None:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(note)

    with scoped(tenant="acme"), ThreadPoolExecutor(1) as pool:
        anyio.run(in_a_task)
        seen.append(pool.submit(lambda: current_scope().tenant).result())
        seen.append(pool.submit(contextvars.copy_context().run, current_scope).result().tenant)
    assert seen == ["acme", None, "acme"]
