"""The OpenAI Agents SDK through a Guard, on the Responses API.

``OpenAIResponsesModel`` calls ``responses.create``; with ``openai_client=guard.aclient()``
the Guard answers it, whatever its routes speak (here chat-completions servers), so fallback,
cache, budgets and telemetry apply as for chat. Tracing is switched off: its exporter would
send traces to OpenAI's servers. Printed: which route served each run, the backup taking over
while the primary fails, and a repeated question answered from the cache.
"""

from agents import Agent, OpenAIResponsesModel, Runner, set_tracing_disabled

from llmguard_sdk import Guard, OpenAICompatibleProvider
from llmguard_sdk.testing import FakeProvider, Fault

set_tracing_disabled(True)

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
    model = OpenAIResponsesModel(model="gpt-4o-mini", openai_client=guard.aclient())
    agent = Agent(name="helper", instructions="Answer briefly.", model=model)
    print(
        Runner.run_sync(agent, "What is a circuit breaker?").final_output,
        "| served by:",
        served[-1],
    )
    primary.always(Fault(status=503))
    print(Runner.run_sync(agent, "And a fallback?").final_output, "| served by:", served[-1])
    print(Runner.run_sync(agent, "And a fallback?").final_output, "| served by:", served[-1])
    guard.close()
