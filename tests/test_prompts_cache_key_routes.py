"""A builder's ``prompt_cache_key`` is OpenAI's routing hint: other OpenAI-compatible servers
refuse fields they do not know (Groq answers 400, Mistral 422). A builder's request that
fails over to such a route is answered there: the hint goes only to routes whose API takes
it (OpenAI's own, Azure OpenAI's; any route with ``send_cache_key=True``)."""

from __future__ import annotations

import json

from llmguard_sdk import Guard, OpenAICompatibleProvider, PromptBuilder

from .rawserver import RawServer, chat_answer, http_response


class StrictFields(RawServer):
    """An OpenAI-compatible server that answers a body with a field it does not know with a
    400 naming it, as Groq does; else "ok"."""

    def respond(self, body: bytes) -> bytes:
        unknown = sorted(set(json.loads(body)) - {"model", "messages", "max_tokens"})
        if unknown:
            error = {"error": {"message": f"property '{unknown[0]}' is unsupported",
                               "type": "invalid_request_error"}}  # fmt: skip
            return http_response(json.dumps(error).encode(), status="400 Bad Request")
        return chat_answer("ok")


DOWN = http_response(b'{"error": {"message": "down"}}', status="503 Service Unavailable")


def test_a_builder_request_failing_over_is_answered_by_a_strict_route() -> None:
    builder = PromptBuilder("support", instructions="Answer briefly.", min_cache_tokens=None)
    prompt = builder.build("Where is my order?", tenant="acme")
    with RawServer(DOWN) as first, StrictFields(b"") as second:
        routes = [
            OpenAICompatibleProvider(first.base_url, model="m", name="first"),
            OpenAICompatibleProvider(second.base_url, model="m", name="second"),
        ]
        with Guard(routes, environ={}, retry=None) as guard:
            answer = guard.chat(request=prompt.request(max_tokens=20))
        assert answer.text == "ok"
        assert answer.route == "second"
        assert "prompt_cache_key" not in json.loads(second.received[-1])


def test_a_route_told_to_sends_the_key_and_openai_hosts_do() -> None:
    builder = PromptBuilder("support", instructions="Answer briefly.", min_cache_tokens=None)
    prompt = builder.build("Where is my order?", tenant="acme")
    with RawServer(chat_answer("ok")) as api:
        route = OpenAICompatibleProvider(api.base_url, model="m", send_cache_key=True)
        with Guard(route, environ={}) as guard:
            guard.chat(request=prompt.request(max_tokens=20))
        assert json.loads(api.received[-1])["prompt_cache_key"] == prompt.cache_key
    for url, sent in [
        ("https://api.openai.com/v1", True),
        ("https://my-resource.openai.azure.com/openai/deployments/d?api-version=1", True),
        ("https://api.groq.com/openai/v1", False),
        ("https://api.mistral.ai/v1", False),
        ("http://127.0.0.1:8000/v1", False),
    ]:
        assert OpenAICompatibleProvider(url).send_cache_key is sent, url
    assert not OpenAICompatibleProvider(
        "https://api.openai.com/v1", send_cache_key=False
    ).send_cache_key


def test_a_callers_own_key_is_sent_where_asked() -> None:
    """A ``prompt_cache_key`` the caller put in ``extra_body`` is theirs: sent as given."""
    builder = PromptBuilder("support", instructions="Answer briefly.", min_cache_tokens=None)
    prompt = builder.build("Where is my order?")
    with RawServer(chat_answer("ok")) as api:
        with Guard(OpenAICompatibleProvider(api.base_url, model="m"), environ={}) as guard:
            guard.chat(request=prompt.request(extra_body={"prompt_cache_key": "mine"}))
        assert json.loads(api.received[-1])["prompt_cache_key"] == "mine"
