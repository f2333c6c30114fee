"""The public API's types as a type checker reads them: ``make typecheck`` runs
``mypy --strict`` over the tests, where an ``assert_type`` that does not hold fails (at run
time it only returns its argument). Each test also runs what it types, on the fake provider.

Before: ``@retry`` and ``@guard.protect`` were typed ``Any`` (a strict user's decorated
function became untyped); the drop-in client's ``create`` was a union with a coroutine; a
``stream`` flag held in a ``bool`` matched no overload of ``Guard.chat``; a generator of
messages or of deployments, which the code takes, was no ``Sequence``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
from typing_extensions import assert_type

from llmguard_sdk import (
    AsyncChatStream,
    ChatResponse,
    ChatStream,
    DeploymentGroup,
    Guard,
    OpenAICompatibleProvider,
)
from llmguard_sdk.client import (
    AsyncChunkStream,
    AsyncGuardedClient,
    ChatCompletion,
    ChunkStream,
    GuardedClient,
)
from llmguard_sdk.retry import retry
from llmguard_sdk.testing import FakeProvider

from .conftest import USER

MakeGuard = Callable[..., Guard]


def test_the_decorators_keep_the_decorated_functions_type() -> None:
    @retry(attempts=2)
    def double(x: int) -> str:
        return str(2 * x)

    assert_type(double(2), str)
    assert double(2) == "4"

    guard = Guard(environ={}, telemetry=False)

    @guard.protect(feature="faq")
    def answer(question: str) -> dict[str, Any]:
        return {"model": "m", "usage": {"prompt_tokens": 3, "completion_tokens": 2}}

    @guard.protect
    async def count() -> int:
        return 3

    assert_type(answer("q"), dict[str, Any])
    assert_type(anyio.run(count), int)
    assert anyio.run(count) == 3
    guard.close()


def test_the_drop_in_clients_answers_are_typed_by_stream(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    client = GuardedClient(make_guard(fake))
    completion = client.chat.completions.create(model="m", messages=USER)
    assert_type(completion, ChatCompletion)
    assert completion.choices[0].message.content == "Echo: hello there"
    with client.chat.completions.create(model="m", messages=USER, stream=True) as chunks:
        assert_type(chunks, ChunkStream)
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Echo: hello there"

    async def run() -> str:
        aclient = AsyncGuardedClient(client.guard)
        stream = await aclient.chat.completions.create(model="m", messages=USER, stream=True)
        assert_type(stream, AsyncChunkStream)
        async with stream:
            pieces = [c.choices[0].delta.content or "" async for c in stream if c.choices]
        await client.guard.aclose()
        return "".join(pieces)

    assert anyio.run(run) == "Echo: hello there"


def test_a_stream_flag_held_in_a_bool_and_messages_in_any_iterable(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    guard = make_guard(fake)
    streamed = False
    answer = guard.chat(iter(USER), stream=streamed)
    assert_type(answer, ChatResponse | ChatStream)
    assert isinstance(answer, ChatResponse)
    assert answer.text == "Echo: hello there"

    async def run() -> ChatResponse | AsyncChatStream:
        try:
            return await guard.achat(m for m in USER)
        finally:
            await guard.aclose()

    assert isinstance(anyio.run(run), ChatResponse)
    route = OpenAICompatibleProvider(fake.base_url, model=fake.model, name="a")
    group = DeploymentGroup("g", iter([route]), strategy="weighted", weights=(w for w in [1.0]))
    assert (group.names, group.weights) == (("a",), (1.0,))
