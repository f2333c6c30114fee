"""The transport seam's routes may be any provider: the bundled local model answers an openai
SDK call when the remote route is down."""

from __future__ import annotations

import openai
import pytest

from llmguard_sdk import Guard, LocalProvider, OpenAICompatibleProvider
from llmguard_sdk.testing import FakeProvider, Fault
from llmguard_sdk.transport import http_client

from .localmodel import QUESTION

pytestmark = pytest.mark.local_model


def test_the_local_model_answers_the_openai_sdk(local: LocalProvider) -> None:
    with FakeProvider(name="primary") as primary:
        primary.always(Fault(status=503))
        remote = OpenAICompatibleProvider(primary.base_url, model="gpt-x", name="primary")
        guard = Guard([remote, local], retry=None, timeout=60, environ={})
        sdk = openai.OpenAI(
            api_key="sk-not-sent", base_url="http://guard.test/v1", http_client=http_client(guard)
        )
        raw = sdk.chat.completions.with_raw_response.create(
            model="gpt-x",
            messages=QUESTION,
            temperature=0,
            max_tokens=20,
        )
        assert raw.headers["x-llmguard-route"] == "local"
        completion = raw.parse()
        assert "Paris" in (completion.choices[0].message.content or "")
        assert completion.usage is not None
        assert completion.usage.completion_tokens > 0
        chunks = list(
            sdk.chat.completions.create(
                model="gpt-x",
                messages=QUESTION,
                temperature=0,
                max_tokens=20,
                stream=True,
            )
        )
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text == completion.choices[0].message.content
        remote.close()  # the local model is closed by its fixture (conftest)
