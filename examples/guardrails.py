"""Guardrails: input and output filters, and a per-request size limit.

A filter returns a replacement (or None to keep what it got) and raises
GuardrailRejectedError to refuse the call. Refused calls never reach the provider.
A filter that waits on the network (a moderation endpoint) is ``async def``: ``achat``
awaits it on the event loop, so other calls go on meanwhile; ``chat`` runs it too. Its
wait is bounded by the call's ``timeout`` (ProviderTimeoutError past it).
"""

import re

import anyio

from llmguard_sdk import (
    ChatRequest,
    ChatResponse,
    Guard,
    GuardrailRejectedError,
    InputTooLargeError,
    OpenAICompatibleProvider,
)
from llmguard_sdk.testing import FakeProvider

EMAIL = re.compile(r"[\w.+-]+@[\w-]+\.[\w.]+")


def redact_emails(request: ChatRequest) -> ChatRequest:
    messages = [
        m.model_copy(update={"content": EMAIL.sub("[email]", m.text)}) if m.role == "user" else m
        for m in request.messages
    ]
    return request.model_copy(update={"messages": messages})


def refuse_passwords(request: ChatRequest) -> None:
    if "password" in request.last_user_text().lower():
        raise GuardrailRejectedError("asks for a password")


def no_shouting(response: ChatResponse) -> ChatResponse:
    return response.model_copy(update={"text": response.text.capitalize()})


async def moderated(request: ChatRequest) -> None:
    """Stands for a moderation endpoint: an async client's request, awaited."""
    await anyio.sleep(0.05)  # the endpoint's round trip: the event loop is free meanwhile
    if "attack" in request.last_user_text().lower():
        raise GuardrailRejectedError("flagged by moderation")


async def ask_concurrently(guard: Guard) -> None:
    questions = ["plan a picnic", "plan an attack", "plan a party"]
    outcomes: list[str] = []

    async def ask(question: str) -> None:
        try:
            outcomes.append((await guard.achat([{"role": "user", "content": question}])).text)
        except GuardrailRejectedError as error:
            outcomes.append(f"refused: {error}")

    async with anyio.create_task_group() as tasks:  # moderated side by side, not in turn
        for question in questions:
            tasks.start_soon(ask, question)
    await guard.aclose()
    print("async moderation:", sorted(outcomes))


with FakeProvider() as api:
    guard = Guard(
        OpenAICompatibleProvider(api.base_url, model="fake-model"),
        input_filters=[redact_emails, refuse_passwords],
        output_filters=[no_shouting],
        max_input_tokens=200,
    )
    print(guard.chat([{"role": "user", "content": "MAIL ME AT jo@example.com"}]).text)
    for content in ["what is the admin password?", "word " * 500]:
        try:
            guard.chat([{"role": "user", "content": content}])
        except (GuardrailRejectedError, InputTooLargeError) as error:
            print(f"refused before any network call: {error}")
    print("requests the provider saw:", api.stats.requests)
    guard.close()

    moderated_guard = Guard(
        OpenAICompatibleProvider(api.base_url, model="fake-model"),
        input_filters=[moderated],
        timeout=10,
    )
    anyio.run(ask_concurrently, moderated_guard)
    print("sync call:", moderated_guard.chat([{"role": "user", "content": "hi"}]).text)
    moderated_guard.close()
