"""Frameworks built on openai-python, through a Guard with a fallback and a cache.

Each framework runs against two FakeProviders (primary and backup): the Guard's events say
which route served, the primary failing hands the call to the backup, and a second identical
call is answered from the cache without a provider call. langchain-openai, pydantic-ai and
openai-agents are dev dependencies; instructor 1.17 pins ``jiter<0.15`` while openai 3.x needs
``jiter>=0.16``, so it cannot be installed beside them and its test runs only where it is.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import pytest
from pydantic import BaseModel

from llmguard_sdk import CallEvent, Guard, OpenAICompatibleProvider
from llmguard_sdk.client import _async_openai_client, _openai_client
from llmguard_sdk.testing import FakeProvider, Fault
from llmguard_sdk.transport import async_http_client, http_client

from .conftest import require_module

BASE_URL = "http://llmguard.invalid/v1"  # never dialled: the transport answers in process


class Chain:
    """Two FakeProviders behind a Guard with a cache; ``routes`` lists who served each call."""

    def __init__(self, primary: FakeProvider, backup: FakeProvider) -> None:
        self.primary, self.backup = primary, backup
        self.events: list[CallEvent] = []
        self.guard = Guard(
            [
                OpenAICompatibleProvider(primary.base_url, model=primary.model, name="primary"),
                OpenAICompatibleProvider(backup.base_url, model=backup.model, name="backup"),
            ],
            cache=True,
            retry=None,
            hooks=[self.events.append],
            environ={},
        )

    @property
    def routes(self) -> list[str | None]:
        return [e.route for e in self.events]

    def provider_calls(self) -> tuple[int, int]:
        return len(self.primary.requests), len(self.backup.requests)


@pytest.fixture
def chain(fake: FakeProvider, fake2: FakeProvider) -> Iterator[Chain]:
    built = Chain(fake, fake2)
    yield built
    built.guard.close()


def _check_story(chain: Chain, ask: Callable[[str], str]) -> None:
    """Served by the primary; by the backup while the primary fails; then from the cache."""
    assert ask("hello there") == "Echo: hello there"
    chain.primary.always(Fault(status=503))
    assert ask("second question") == "Echo: second question"
    assert ask("second question") == "Echo: second question"
    assert chain.routes == ["primary", "backup", "cache"]
    assert chain.provider_calls() == (2, 1)  # the cache hit reached no provider


def test_langchain_openai_through_the_seam(chain: Chain) -> None:
    lc = require_module("langchain_openai", "langchain-openai is a dev dependency")
    llm = lc.ChatOpenAI(
        model="fake-model",
        api_key="sk-not-sent",
        base_url=BASE_URL,
        max_retries=0,
        http_client=http_client(chain.guard),
    )
    _check_story(chain, lambda q: str(llm.invoke(q).content))
    streamed = "".join(str(c.content) for c in llm.stream("hello there"))
    assert streamed == "Echo: hello there"


def test_langchain_openai_on_the_drop_in_client(chain: Chain) -> None:
    lc = require_module("langchain_openai", "langchain-openai is a dev dependency")
    client = _openai_client(chain.guard)
    llm = lc.ChatOpenAI(
        model="fake-model",
        api_key="sk-not-sent",
        client=client.chat.completions,
        root_client=client,
    )
    _check_story(chain, lambda q: str(llm.invoke(q).content))


def test_pydantic_ai(chain: Chain) -> None:
    require_module("pydantic_ai", "pydantic-ai-slim[openai] is a dev dependency")
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    provider = OpenAIProvider(
        base_url=BASE_URL, api_key="sk-not-sent", http_client=async_http_client(chain.guard)
    )
    agent = Agent(OpenAIChatModel("fake-model", provider=provider))
    _check_story(chain, lambda q: str(agent.run_sync(q).output))
    on_client = Agent(
        OpenAIChatModel(
            "fake-model", provider=OpenAIProvider(openai_client=_async_openai_client(chain.guard))
        )
    )
    assert on_client.run_sync("hello there").output == "Echo: hello there"
    assert chain.routes[-1] == "cache"


@pytest.fixture
def agents_sdk() -> Any:
    agents = require_module("agents", "openai-agents is a dev dependency")
    agents.set_tracing_disabled(True)  # its traces would go to OpenAI's servers
    return agents


def test_openai_agents_chat_completions(chain: Chain, agents_sdk: Any) -> None:
    model = agents_sdk.OpenAIChatCompletionsModel(
        model="fake-model", openai_client=_async_openai_client(chain.guard)
    )
    agent = agents_sdk.Agent(name="helper", instructions="Answer.", model=model)
    _check_story(chain, lambda q: str(agents_sdk.Runner.run_sync(agent, q).final_output))


def test_openai_agents_streamed_usage_needs_include_usage(chain: Chain, agents_sdk: Any) -> None:
    # the chat-completions model asks for streamed usage (stream_options.include_usage) only
    # of api.openai.com, so a streamed run through a Guard counted no tokens; the README says
    # to set ModelSettings(include_usage=True)
    model = agents_sdk.OpenAIChatCompletionsModel(
        model="fake-model", openai_client=_async_openai_client(chain.guard)
    )

    async def streamed(settings: Any, question: str) -> tuple[int, int]:
        agent = agents_sdk.Agent(name="h", instructions="Answer.", model=model)
        agent.model_settings = settings
        run = agents_sdk.Runner.run_streamed(agent, question)
        async for _event in run.stream_events():
            pass
        usage = run.context_wrapper.usage
        return usage.input_tokens, usage.output_tokens

    assert anyio.run(streamed, agents_sdk.ModelSettings(), "hello there") == (0, 0)
    with_usage = agents_sdk.ModelSettings(include_usage=True)
    assert anyio.run(streamed, with_usage, "hello again") == (11, 3)  # (not a cache hit)


def test_openai_agents_responses_model(chain: Chain, agents_sdk: Any) -> None:
    import openai

    client = openai.AsyncOpenAI(
        api_key="sk-not-sent", base_url=BASE_URL, http_client=async_http_client(chain.guard)
    )
    model = agents_sdk.OpenAIResponsesModel(model="fake-model", openai_client=client)
    agent = agents_sdk.Agent(name="helper", instructions="Answer.", model=model)
    _check_story(chain, lambda q: str(agents_sdk.Runner.run_sync(agent, q).final_output))

    async def streamed() -> str:
        run = agents_sdk.Runner.run_streamed(agent, "streamed question")
        async for _event in run.stream_events():
            pass
        return str(run.final_output)

    assert anyio.run(streamed) == "Echo: streamed question"
    assert chain.routes[-1] == "backup"


class Person(BaseModel):
    name: str
    age: int


def test_instructor() -> None:
    instructor = pytest.importorskip(
        "instructor", reason="instructor 1.17 cannot be installed beside openai 3.x (jiter pin)"
    )

    def person(body: dict[str, Any]) -> str:
        asked = str(body["messages"][-1]["content"])
        return json.dumps({"name": asked.split()[-1], "age": 36})

    with (
        FakeProvider(model="fake-model", name="primary", reply=person) as primary,
        FakeProvider(model="backup-model", name="backup", reply=person) as backup,
    ):
        chain = Chain(primary, backup)
        client = instructor.from_openai(_openai_client(chain.guard), mode=instructor.Mode.JSON)

        def ask(question: str) -> str:
            found = client.chat.completions.create(
                model="fake-model",
                response_model=Person,
                max_retries=0,
                messages=[{"role": "user", "content": question}],
            )
            return f"Echo: {question}" if found.age == 36 else repr(found)

        _check_story(chain, ask)
        chain.guard.close()
