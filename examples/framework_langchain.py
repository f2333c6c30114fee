"""LangChain through a Guard: ``ChatOpenAI(http_client=guard.http_client())``.

LangChain builds its own openai client; the Guard's transport answers every request that
client sends, so the fallback chain, the cache and the rest of the pipeline apply unchanged.
Printed: which route served each call (the Guard's hooks see every call), the backup taking
over while the primary fails, and a repeated question answered from the cache.
"""

from langchain_openai import ChatOpenAI

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
    llm = ChatOpenAI(
        model="gpt-4o-mini",
        api_key="unused",  # never sent: the Guard's routes hold the real keys
        base_url="http://llmguard.invalid/v1",
        http_client=guard.http_client(),
    )
    print(llm.invoke("What is a circuit breaker?").content, "| served by:", served[-1])
    primary.always(Fault(status=503))
    print(llm.invoke("And a fallback?").content, "| served by:", served[-1])
    print(llm.invoke("And a fallback?").content, "| served by:", served[-1])
    print("streamed:", "".join(str(c.content) for c in llm.stream("Stream this")))
    guard.close()
