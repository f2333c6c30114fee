"""A configuration's route takes ``send_cache_key`` (true or false; left out: by the route's
URL, as ``OpenAICompatibleProvider(send_cache_key=None)`` decides), as code does: a route
from a file to a gateway that takes OpenAI's ``prompt_cache_key`` could not be told to send a
builder's key, nor one on OpenAI's host told not to. Any other value is refused naming the
key, as is the key on a route that sends no such hint (``anthropic/``, ``local/``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from llmguard_sdk import ConfigurationError, DeploymentGroup, Guard, PromptBuilder
from llmguard_sdk._config_file import load_config, resolve
from llmguard_sdk.providers.openai_compat import OpenAICompatibleProvider
from llmguard_sdk.testing import FakeProvider


def _sent_key(fake: FakeProvider, route: dict[str, Any]) -> object:
    """The ``prompt_cache_key`` a builder's request sent through the file's ``route``."""
    builder = PromptBuilder("support", instructions="Answer briefly.", min_cache_tokens=None)
    prompt = builder.build("Where is my order?", tenant="acme")
    config = {"routes": [{"model": "vllm/fake-model", "base_url": fake.base_url, **route}]}
    with Guard.from_config(config, environ={}) as guard:
        guard.chat(request=prompt.request(max_tokens=20))
    body = fake.requests[-1].body
    assert isinstance(body, dict)
    return body.get("prompt_cache_key")


def test_a_route_from_a_file_sends_the_key_where_told() -> None:
    with FakeProvider() as fake:
        assert _sent_key(fake, {}) is None  # (a loopback host: left out)
        assert isinstance(_sent_key(fake, {"send_cache_key": True}), str)
        assert _sent_key(fake, {"send_cache_key": False}) is None


def _providers(text: str, tmp_path: Path, name: str) -> list[OpenAICompatibleProvider]:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    entries, _ = resolve(load_config(path), {})
    assert all(isinstance(entry, OpenAICompatibleProvider) for entry in entries)
    return [entry for entry in entries if isinstance(entry, OpenAICompatibleProvider)]


def test_toml_and_yaml_files_set_it_on_routes_and_deployments(tmp_path: Path) -> None:
    toml = """
[[routes]]
model = "openai/gpt-4o-mini"
send_cache_key = false

[[routes]]
model = "openai/gpt-4o"
name = "default"

[[routes]]
model = "vllm/m"
base_url = "http://gateway.internal/v1"
send_cache_key = true
"""
    assert [p.send_cache_key for p in _providers(toml, tmp_path, "g.toml")] == [
        False, True, True,
    ]  # fmt: skip
    yaml = """
routes:
  - group: g
    deployments:
      - {model: vllm/m, name: a, base_url: "http://gateway.internal/v1", send_cache_key: true}
      - {model: vllm/m, name: b, base_url: "http://gateway.internal/v1"}
"""
    path = tmp_path / "g.yaml"
    path.write_text(yaml, encoding="utf-8")
    entries, _ = resolve(load_config(path), {})
    (group,) = entries
    assert isinstance(group, DeploymentGroup)
    assert [getattr(p, "send_cache_key", None) for p in group.deployments] == [True, False]


@pytest.mark.parametrize("value", ["true", "yes", 1, 0, 1.0, "${SEND}", [True], {"on": True}])
def test_a_value_other_than_true_or_false_is_refused_naming_the_key(value: object) -> None:
    config = {"routes": [{"model": "openai/gpt-4o-mini", "send_cache_key": value}]}
    with pytest.raises(ConfigurationError, match=r"routes\.0\.send_cache_key: .*true or false"):
        Guard.from_config(config, environ={})


@pytest.mark.parametrize("model", ["anthropic/claude-3-5-haiku-latest", "local/bundled"])
def test_a_route_that_sends_no_openai_hints_refuses_it(model: str) -> None:
    config = {"routes": [{"model": model, "send_cache_key": True}]}
    with pytest.raises(ConfigurationError, match=r"routes\.0: .*take no .*send_cache_key"):
        load_config(config)


def test_left_out_or_null_it_goes_by_the_url() -> None:
    for route in ({}, {"send_cache_key": None}):
        config = {"routes": [{"model": "openai/gpt-4o-mini", **route}]}
        (provider,), _ = resolve(load_config(config), {})
        assert isinstance(provider, OpenAICompatibleProvider)
        assert provider.send_cache_key is True
