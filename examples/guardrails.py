"""Guardrails: input and output filters, and a per-request size limit.

A filter returns a replacement (or None to keep what it got) and raises
GuardrailRejectedError to refuse the call. Refused calls never reach the provider.
"""

import re

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
