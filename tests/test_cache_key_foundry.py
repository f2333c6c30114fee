"""Azure AI Foundry resources (``<resource>.services.ai.azure.com``,
``<resource>.cognitiveservices.azure.com``) serve two APIs: Azure OpenAI's under ``/openai/``
(``/openai/deployments/<name>/...``, ``/openai/v1/...``), whose models take OpenAI's
``prompt_cache_key``, and the model inference API under ``/models`` serving other vendors'
models, which refuses a parameter it does not define unless told otherwise (its
``extra-parameters`` header defaults to ``error``). A builder's key goes by that path: it
went to neither (the host was not OpenAI's or ``*.openai.azure.com``)."""

from __future__ import annotations

import json

import httpx

from llmguard_sdk import Guard, OpenAICompatibleProvider, PromptBuilder
from llmguard_sdk.providers import OpenAIResponsesProvider
from llmguard_sdk.providers._route_options import takes_cache_key
from llmguard_sdk.providers.batch import BatchProvider

from .rawserver import RawServer, chat_answer
from .test_prompts_cache_key_routes import StrictFields

URLS = [
    ("https://res.services.ai.azure.com/openai/deployments/gpt-4o?api-version=2024-10-21", True),
    ("https://res.services.ai.azure.com/openai/v1", True),
    ("https://res.services.ai.azure.com/openai/v1/", True),
    ("https://RES.Services.AI.Azure.com./OpenAI/v1", True),
    ("https://res.cognitiveservices.azure.com/openai/deployments/gpt-4o?api-version=1", True),
    ("https://res.cognitiveservices.azure.com/openai/v1", True),
    ("https://res.services.ai.azure.com/models", False),
    ("https://res.services.ai.azure.com/models?api-version=2024-05-01-preview", False),
    ("https://res.cognitiveservices.azure.com/models", False),
    ("https://res.services.ai.azure.com/api/projects/p", False),
    ("https://res.services.ai.azure.com", False),
    ("https://res.services.ai.azure.com/v1/openai", False),  # (not Azure OpenAI's path)
    ("https://services.ai.azure.com.example.com/openai/v1", False),
    ("https://example.com/openai/v1", False),
    ("https://api.groq.com/openai/v1", False),
    ("https://api.openai.com/v1", True),
    ("https://res.openai.azure.com/openai/v1", True),
]


def test_foundry_urls_take_the_key_by_their_path() -> None:
    for url, sent in URLS:
        assert takes_cache_key(url) is sent, url
        assert OpenAICompatibleProvider(url).send_cache_key is sent, url
        assert OpenAIResponsesProvider(url).send_cache_key is sent, url
        batch = BatchProvider(url)  # (its OpenAI batches' bodies: chat completions')
        assert batch._hints is sent, url
        batch.close()


def _sent(server: RawServer, base_url: str) -> dict[str, object]:
    """The body a builder's request sent to a route to ``base_url``, its requests going to
    ``server`` as a forward proxy gets them (the route's answer: ``ok``)."""
    builder = PromptBuilder("support", instructions="Answer briefly.", min_cache_tokens=None)
    prompt = builder.build("Where is my order?", tenant="acme")
    proxy = httpx.HTTPTransport(proxy=f"http://127.0.0.1:{server.port}")
    route = OpenAICompatibleProvider(base_url, model="m", transport=proxy)
    with Guard(route, environ={}, retry=None) as guard:
        assert guard.chat(request=prompt.request(max_tokens=20)).text == "ok"
    body = json.loads(server.received[-1])
    assert isinstance(body, dict)
    return body


KEY = PromptBuilder("support", instructions="Answer briefly.").build("-", tenant="acme").cache_key


def test_a_builder_request_to_foundry_sends_the_key_to_azure_openai_only() -> None:
    with RawServer(chat_answer("ok")) as azure_openai:  # (takes any field)
        sent = _sent(azure_openai, "http://res.services.ai.azure.com/openai/v1")
        assert sent["prompt_cache_key"] == KEY  # (was left out)
    with StrictFields(b"") as models:  # (a 400 for a field it does not know)
        sent = _sent(models, "http://res.services.ai.azure.com/models")
        assert "prompt_cache_key" not in sent
