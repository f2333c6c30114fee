"""The tokens a route wrote to its prompt cache (Anthropic's ``cache_creation_input_tokens``,
billed above plain input) reach an SDK behind the seam in OpenAI's words:
``prompt_tokens_details.cache_write_tokens`` in chat completions and
``input_tokens_details.cache_write_tokens`` in the Responses API, which LangChain, Pydantic AI
and the Agents SDK read a call's cache writes from."""

from __future__ import annotations

import json
from typing import Any

from llmguard_sdk import AnthropicProvider, Guard
from llmguard_sdk.transport import http_client

from .conftest import USER, require_module
from .rawserver import RawServer, http_response

ANSWER = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "claude-x",
    "content": [{"type": "text", "text": "Hi."}],
    "stop_reason": "end_turn",
    "usage": {
        "input_tokens": 10,
        "output_tokens": 5,
        "cache_read_input_tokens": 100,
        "cache_creation_input_tokens": 20,
    },
}


def _guard(raw: RawServer) -> Guard:
    route = AnthropicProvider(raw.base_url, api_key="sk-ant", model="claude-x", name="claude")
    return Guard(route, environ={}, retry=None)


def test_cache_writes_reach_the_openai_sdk_and_langchain() -> None:
    openai: Any = require_module("openai", "openai is a dev dependency")
    lc: Any = require_module("langchain_openai", "langchain-openai is a dev dependency")
    with RawServer(http_response(json.dumps(ANSWER).encode())) as raw, _guard(raw) as guard:
        sdk = openai.OpenAI(api_key="sk-x", base_url="http://g/v1", http_client=http_client(guard))
        completion = sdk.chat.completions.create(model="claude-x", messages=USER)
        response = sdk.responses.create(model="claude-x", input="hello there")
        llm = lc.ChatOpenAI(
            model="claude-x",
            api_key="sk-x",
            base_url="http://g/v1",
            max_retries=0,
            http_client=http_client(guard),
        )
        metadata = llm.invoke("hello there").usage_metadata
    assert completion.usage.prompt_tokens == 130
    assert completion.usage.prompt_tokens_details.cached_tokens == 100
    assert completion.usage.prompt_tokens_details.cache_write_tokens == 20
    assert response.usage.input_tokens_details.cached_tokens == 100
    assert response.usage.input_tokens_details.cache_write_tokens == 20
    assert metadata["input_token_details"] == {"cache_read": 100, "cache_creation": 20}


def test_a_route_without_cache_writes_says_none_in_chat_and_0_in_responses() -> None:
    # chat completions' field is optional (OpenAI leaves it out); the Responses API's is not
    openai: Any = require_module("openai", "openai is a dev dependency")
    plain = {**ANSWER, "usage": {"input_tokens": 10, "output_tokens": 5}}
    with RawServer(http_response(json.dumps(plain).encode())) as raw, _guard(raw) as guard:
        sdk = openai.OpenAI(api_key="sk-x", base_url="http://g/v1", http_client=http_client(guard))
        raw_completion = sdk.chat.completions.with_raw_response.create(model="m", messages=USER)
        response = sdk.responses.with_raw_response.create(model="m", input="hello there")
    usage = json.loads(raw_completion.text)["usage"]
    assert usage["prompt_tokens_details"] == {"cached_tokens": 0}
    details = json.loads(response.text)["usage"]["input_tokens_details"]
    assert details == {"cached_tokens": 0, "cache_write_tokens": 0}


def test_the_look_alike_client_says_the_cache_writes_too() -> None:
    from llmguard_sdk.client import GuardedClient

    with RawServer(http_response(json.dumps(ANSWER).encode())) as raw, _guard(raw) as guard:
        completion = GuardedClient(guard).chat.completions.create(model="m", messages=USER)
    assert completion.usage is not None
    assert completion.usage.prompt_tokens_details == {
        "cached_tokens": 100,
        "cache_write_tokens": 20,
    }
