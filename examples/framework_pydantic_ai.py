"""Pydantic AI through a Guard: ``OpenAIProvider(openai_client=guard.aclient())``.

``guard.aclient()`` is openai's own ``AsyncOpenAI`` whose requests the Guard answers, so a
Pydantic AI agent runs on it as on any OpenAI client. Printed: which route served each run,
the backup taking over while the primary fails, and a repeated question answered from the
cache.
"""

from pydantic_ai import Agent
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from llmguard_sdk import Guard, OpenAICompatibleProvider
from llmguard_sdk.testing import FakeProvider, Fault

with (
    FakeProvider(name="primary") as primary,
    FakeProvider(name="backup", model="backup-model") as backup,
):
    served: list[str | None] = []
    guard = Guard(
        [
            OpenAICompatibleProvider(primary.base_url, name="primary"),
            OpenAICompatibleProvider(backup.base_url, name="backup", model="backup-model"),
        ],
        cache=True,
        hooks=[lambda event: served.append(event.route)],
    )
    model = OpenAIChatModel("gpt-4o-mini", provider=OpenAIProvider(openai_client=guard.aclient()))
    agent = Agent(model, instructions="Answer briefly.")
    print(agent.run_sync("What is a circuit breaker?").output, "| served by:", served[-1])
    primary.always(Fault(status=503))
    print(agent.run_sync("And a fallback?").output, "| served by:", served[-1])
    print(agent.run_sync("And a fallback?").output, "| served by:", served[-1])
    guard.close()
