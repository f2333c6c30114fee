"""A Responses route sends a builder's ``prompt_cache_key`` by the chat routes' rule: where its
API is known to take it (OpenAI's own host, Azure OpenAI's) or it is told to
(``send_cache_key=True``). It went to every host: a server of the Responses API that refuses
fields it does not know failed a builder's request falling back to it."""

from __future__ import annotations

from llmguard_sdk import Guard, PromptBuilder
from llmguard_sdk.providers import OpenAIResponsesProvider
from llmguard_sdk.testing import FakeProvider


def _sent(send_cache_key: bool | None, extra_body: dict[str, str] | None = None) -> object:
    """The ``prompt_cache_key`` a builder's request sent to a Responses route (None: none)."""
    builder = PromptBuilder("support", instructions="Answer briefly.", min_cache_tokens=None)
    prompt = builder.build("Where is my order?", tenant="acme")
    with FakeProvider() as api:
        route = OpenAIResponsesProvider(
            api.base_url, model="gpt-fake", send_cache_key=send_cache_key
        )
        with Guard(route, environ={}) as guard:
            guard.chat(request=prompt.request(max_tokens=20, extra_body=extra_body))
        received = api.requests[-1]
    assert received.path.endswith("/responses")
    assert isinstance(received.body, dict)
    return received.body.get("prompt_cache_key")


KEY = PromptBuilder("support", instructions="Answer briefly.").build("-", tenant="acme").cache_key


def test_a_responses_route_on_another_host_leaves_the_builders_key_out() -> None:
    assert _sent(None) is None  # (was sent to a loopback server)


def test_a_responses_route_told_to_sends_the_builders_key() -> None:
    assert _sent(True) == KEY
    assert _sent(False) is None


def test_a_callers_own_key_is_sent_by_a_responses_route() -> None:
    assert _sent(None, {"prompt_cache_key": "mine"}) == "mine"


def test_a_responses_route_follows_its_host_as_a_chat_route_does() -> None:
    for url, sent in [
        ("https://api.openai.com/v1", True),
        ("https://my-resource.openai.azure.com/openai/v1?api-version=preview", True),
        ("https://api.groq.com/openai/v1", False),
        ("http://127.0.0.1:8000/v1", False),
    ]:
        assert OpenAIResponsesProvider(url).send_cache_key is sent, url
