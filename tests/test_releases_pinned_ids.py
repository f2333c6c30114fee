"""Which model ids a Release takes as pinned: Google's stable Gemini 2.5+ ids, Hugging Face
repositories (``org/name``, ``@commit``) and OpenAI fine-tunes are fixed; aliases still move;
an id whose form says nothing, and an Azure deployment's name, are refused saying why."""

from __future__ import annotations

import pickle

import pytest

from llmguard_sdk import OpenAICompatibleProvider
from llmguard_sdk.errors import ConfigurationError, MovingModelAliasError
from llmguard_sdk.releases import Release, is_moving_alias

AZURE = "https://acme.openai.azure.com/openai/v1"


@pytest.mark.parametrize(
    "model",
    [
        "gemini-2.5-pro",  # Google: a stable id does not change (2.5 has no -001 snapshots)
        "gemini-2.5-flash-lite",
        "gemini-3.5-flash",
        "models/gemini-2.5-flash",  # the Gemini API's resource name
        "meta-llama/Llama-3.1-8B-Instruct",  # served by vLLM under its repository's name
        "meta-llama/Llama-3.1-8B-Instruct@0e9e39f249a16976918f6564b8830bc894c89659",
        "Qwen/Qwen2.5-7B-Instruct",
        "ft:gpt-4o-mini-2024-07-18:acme::AbC123xy",  # an OpenAI fine-tune
    ],
)
def test_fixed_ids_are_pinned(model: str) -> None:
    assert is_moving_alias(model) is False
    route = OpenAICompatibleProvider("http://127.0.0.1:9", model=model, name="r")
    assert Release("bot", "v1", route).id == "bot@v1"


@pytest.mark.parametrize(
    "model",
    [
        "gpt-4o",
        "o3-mini",  # OpenAI's alias of o3-mini-2025-01-31
        "chatgpt-4o-latest",
        "claude-3-5-sonnet-latest",
        "gemini-1.5-pro-latest",
        "gemini-flash-latest",
        "gemini-1.5-pro",  # auto-updated aliases of gemini-1.5-pro-002, gemini-2.0-flash-001
        "gemini-2.0-flash",
        "gemini-3-pro-preview",  # an undated preview
        "gemini-2.5-flash-preview-tts",
        "gemini-2.0-flash-exp",
        "openai/gpt-4o",  # OpenRouter's or LiteLLM's name of an alias is the alias
        "anthropic/claude-sonnet-4-5",
        "meta-llama/Llama-3.1-8B-Instruct@main",  # a branch moves
        "llama3.1:latest",  # Ollama's tag
    ],
)
def test_moving_aliases_are_still_refused_as_such(model: str) -> None:
    assert is_moving_alias(model) is True
    route = OpenAICompatibleProvider("http://127.0.0.1:9", model=model, name="r")
    with pytest.raises(MovingModelAliasError, match="a moving alias") as caught:
        Release("bot", "v1", route)
    assert "allow_alias=True" in str(caught.value)
    assert Release("bot", "v1", route, allow_alias=True).id == "bot@v1"


def test_an_id_of_no_known_form_is_refused_as_unknown_not_as_an_alias() -> None:
    route = OpenAICompatibleProvider("http://127.0.0.1:9", model="support-tuned", name="vllm")
    with pytest.raises(MovingModelAliasError) as caught:
        Release("bot", "v1", route)
    message = str(caught.value)
    assert "cannot tell" in message
    assert "a moving alias" not in message
    assert "allow_alias=True" in message
    assert isinstance(caught.value, ConfigurationError)
    assert (caught.value.model, caught.value.route) == ("support-tuned", "vllm")
    assert is_moving_alias("support-tuned") is True  # (may move: not taken as pinned)
    assert Release("bot", "v1", route, allow_alias=True).id == "bot@v1"


@pytest.mark.parametrize("model", ["deepseek/deepseek-chat", "qwen/qwen-max", "perplexity/sonar"])
def test_a_router_name_without_a_version_is_not_taken_for_a_repository(model: str) -> None:
    # OpenRouter's names for models their providers re-point (DeepSeek moved deepseek-chat
    # between model versions); a repository's name carries a version or size
    route = OpenAICompatibleProvider("http://127.0.0.1:9", model=model, name="router")
    with pytest.raises(MovingModelAliasError, match="cannot tell"):
        Release("bot", "v1", route)


def test_an_azure_deployment_named_for_a_dated_version_is_taken_as_pinned() -> None:
    # the name is the user's: one that names a dated version is taken at its word
    route = OpenAICompatibleProvider(AZURE, model="gpt-4o-2024-08-06", name="azure")
    assert Release("bot", "v1", route).id == "bot@v1"


@pytest.mark.parametrize("deployment", ["prod-chat", "gpt-4o"])
def test_an_azure_deployment_is_refused_naming_its_upgrade_policy(deployment: str) -> None:
    # a deployment's name is the user's; its model version follows the deployment's version
    # upgrade policy, which auto-updates unless set to No Auto Upgrade
    route = OpenAICompatibleProvider(AZURE, model=deployment, name="azure")
    with pytest.raises(MovingModelAliasError, match="Azure deployment") as caught:
        Release("bot", "v1", route)
    assert "upgrade policy" in str(caught.value)
    assert "allow_alias=True" in str(caught.value)
    assert Release("bot", "v1", route, allow_alias=True).id == "bot@v1"


def test_the_reason_survives_pickle() -> None:
    route = OpenAICompatibleProvider(AZURE, model="prod-chat", name="azure")
    with pytest.raises(MovingModelAliasError) as caught:
        Release("bot", "v1", route)
    again = pickle.loads(pickle.dumps(caught.value))
    assert str(again) == str(caught.value)
    assert again.reason == caught.value.reason
