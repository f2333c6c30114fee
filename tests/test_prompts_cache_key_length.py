"""OpenAI's ``prompt_cache_key`` holds 64 characters at most (a longer one is a 400,
``string_above_max_length``, on every call): a builder's key stays within it whatever the
template's name, with a tenant or without."""

from __future__ import annotations

import pytest

from llmguard_sdk import Guard, OpenAICompatibleProvider, PromptBuilder
from llmguard_sdk.prompts import prompt_cache_key
from llmguard_sdk.testing import FakeProvider

OPENAI_MOST = 64  # characters of a prompt_cache_key OpenAI accepts

NAMES = [
    "support",
    "s" * 47,
    "s" * 48,  # a safe name of 48: kept whole, then the tenant's digest made 65
    "customer-support-assistant-for-enterprise-billing-v2",  # cut: 35 + digest, then 65
    "support bot for the enterprise billing department, v2",  # rewritten and cut
    "客服" * 40,
]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("tenant", [None, "acme", "t" * 200])
def test_a_cache_key_is_never_longer_than_openai_takes(name: str, tenant: str | None) -> None:
    key = prompt_cache_key(name, tenant)
    assert len(key) <= OPENAI_MOST, key
    assert key == prompt_cache_key(name, tenant)  # stable
    if tenant is not None:
        assert key != prompt_cache_key(name, tenant + "x")  # and per tenant


def test_short_names_keep_the_keys_they_had() -> None:
    """Keys of names that fitted stay as they were (no cache written under them is lost)."""
    assert prompt_cache_key("support") == "support"
    assert prompt_cache_key("support", "acme").startswith("support:")
    assert len(prompt_cache_key("s" * 47, "acme")) == OPENAI_MOST
    assert prompt_cache_key("s" * 47, "acme").startswith("s" * 47 + ":")


def test_a_long_template_name_sends_a_key_openai_accepts() -> None:
    name = "customer-support-assistant-for-enterprise-billing-v2"
    builder = PromptBuilder(name, instructions="Answer briefly.", min_cache_tokens=None)
    with FakeProvider() as api:
        route = OpenAICompatibleProvider(
            api.base_url, model="m", name="openai", send_cache_key=True
        )
        with Guard(route, environ={}) as guard:
            prompt = builder.build("Where is my order?", tenant="acme")
            guard.chat(request=prompt.request(max_tokens=20))
        sent = api.requests[0].body["prompt_cache_key"]
    assert sent == prompt.cache_key
    assert len(sent) <= OPENAI_MOST, sent
