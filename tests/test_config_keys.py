"""A provider's key variable set to nothing (``OPENAI_API_KEY=""``, a compose file passing on
a variable the host lacks) was taken as no key: the Guard was built and its first call failed
at the provider with 401. A key variable that is set is meant to be the key: set but empty
(or blank, or with a line end around the key) is a ConfigurationError naming the variable
when the Guard is built, and ``llmguard check`` says the same; unset, the route sends no key
(a local server's), as before."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from llmguard_sdk import ConfigurationError, Guard
from llmguard_sdk._config_file import load_config, resolve
from llmguard_sdk.cli import main
from llmguard_sdk.providers.openai_compat import OpenAICompatibleProvider

AZURE = {"AZURE_OPENAI_ENDPOINT": "https://example-resource.openai.azure.com"}
ROUTES: list[tuple[dict[str, Any], str, dict[str, str]]] = [
    ({"model": "openai/gpt-4o-mini"}, "OPENAI_API_KEY", {}),
    ({"model": "anthropic/claude-3-5-haiku-latest"}, "ANTHROPIC_API_KEY", {}),
    ({"model": "azure/prod", "api_version": "2024-10-21"}, "AZURE_OPENAI_API_KEY", AZURE),
    ({"model": "openrouter/x/y"}, "OPENROUTER_API_KEY", {}),
    ({"model": "groq/llama"}, "GROQ_API_KEY", {}),
    ({"model": "together/llama"}, "TOGETHER_API_KEY", {}),
    ({"model": "vllm/m", "base_url": "http://127.0.0.1:9/v1"}, "VLLM_API_KEY", {}),
]
SECRET = "sk-secret-value-123"


@pytest.mark.parametrize("value", ["", "  "], ids=["empty", "blank"])
@pytest.mark.parametrize(("route", "variable", "more"), ROUTES, ids=lambda r: str(r)[:24])
def test_a_key_variable_set_to_nothing_is_refused_naming_it(
    route: dict[str, Any], variable: str, more: dict[str, str], value: str
) -> None:
    environ = {**more, variable: value}
    with pytest.raises(ConfigurationError) as caught:
        Guard.from_config({"routes": [route]}, environ=environ)
    message = str(caught.value)
    assert f"routes.0.api_key: the environment variable {variable} is set but empty" in message
    assert "unset it" in message  # the way to say "no key"


@pytest.mark.parametrize(("route", "variable", "more"), ROUTES, ids=lambda r: str(r)[:24])
def test_an_unset_key_variable_is_still_no_key(
    route: dict[str, Any], variable: str, more: dict[str, str]
) -> None:
    entries, routes = resolve(load_config({"routes": [route]}), more)
    assert routes[0].key_from is None
    entries[0].close()  # type: ignore[union-attr]
    entries, routes = resolve(load_config({"routes": [route]}), {**more, variable: SECRET})
    assert routes[0].key_from == f"${{{variable}}}"
    entries[0].close()  # type: ignore[union-attr]


@pytest.mark.parametrize("value", [f"{SECRET}\r", f" {SECRET}", f"{SECRET}\n"])
@pytest.mark.parametrize("reference", [False, True])
def test_whitespace_around_a_key_names_its_variable(value: str, reference: bool) -> None:
    """It said ``routes.0: api_key is empty or has surrounding whitespace``: which variable?"""
    route = {"model": "openai/m", **({"api_key": "${MY_KEY}"} if reference else {})}
    variable = "MY_KEY" if reference else "OPENAI_API_KEY"
    with pytest.raises(ConfigurationError) as caught:
        Guard.from_config({"routes": [route]}, environ={variable: value})
    message = str(caught.value)
    assert f"routes.0.api_key: the environment variable {variable} has whitespace" in message
    assert SECRET not in message


def test_an_empty_reference_is_still_said_to_be_unset_or_empty() -> None:
    route = {"model": "openai/m", "api_key": "${GW_KEY}"}
    with pytest.raises(ConfigurationError, match=r"GW_KEY is not set \(or empty\)"):
        Guard.from_config({"routes": [route]}, environ={"GW_KEY": "", "OPENAI_API_KEY": "k"})
    with pytest.raises(ConfigurationError, match=r"GW_KEY is set but empty: set it to the key$"):
        Guard.from_config({"routes": [route]}, environ={"GW_KEY": " "})  # (it said api_key)


@pytest.mark.parametrize("base_url", [True, False], ids=["route", "no route"])
@pytest.mark.parametrize("value", ["", " "], ids=["empty", "blank"])
def test_llmguard_api_key_set_to_nothing_beside_llmguard_base_url_is_refused(
    base_url: bool, value: str
) -> None:
    """``LLMGUARD_BASE_URL`` builds a route whose key is ``LLMGUARD_API_KEY``: empty, the
    route went without one (401 at the first call). Without the route it is not read."""
    environ = {"LLMGUARD_API_KEY": value, "LLMGUARD_MODEL": "m"}
    if base_url:
        environ["LLMGUARD_BASE_URL"] = "http://127.0.0.1:9/v1"
        with pytest.raises(ConfigurationError) as caught:
            Guard(environ=environ, telemetry=False)
        message = str(caught.value)
        assert "environment variable LLMGUARD_API_KEY is set but empty" in message
        assert "unset it" in message
    else:
        with Guard(environ=environ, telemetry=False) as guard:
            assert guard.routes == ()


@pytest.mark.parametrize(
    ("model", "environ", "said"),
    [
        ("anthropic/claude-3-5-haiku-latest", {"ANTHROPIC_API_KEY": ""},
         "guard.toml: routes.0.api_key: the environment variable ANTHROPIC_API_KEY is set but"),
    ],
    ids=["route key"],
)  # fmt: skip
def test_llmguard_check_reports_an_empty_key_variable_as_the_guard(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    model: str,
    environ: dict[str, str],
    said: str,
) -> None:
    path = tmp_path / "guard.toml"
    path.write_text(f'[[routes]]\nmodel = "{model}"\n', encoding="utf-8")
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigurationError) as caught:
        Guard.from_config(path)
    assert main(["check", str(path)]) == 2
    assert said in capsys.readouterr().err
    assert said in str(caught.value)
    for name in environ:  # unset: no key, as the check shows
        monkeypatch.delenv(name)
    assert main(["check", str(path)]) == 0
    assert "key no key" in capsys.readouterr().out


def test_llmguard_api_key_set_to_nothing_is_not_read_by_a_guard_of_its_own_routes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``LLMGUARD_BASE_URL``'s route is built only for a Guard given no routes: one given its
    routes, in code or in a configuration file, reads neither variable, and refused to be
    built (and ``llmguard check`` to pass the file) for that unbuilt route's empty key."""
    environ = {"LLMGUARD_BASE_URL": "http://127.0.0.1:9/v1", "LLMGUARD_API_KEY": ""}
    mine = OpenAICompatibleProvider("http://127.0.0.1:9/v1", model="m", name="mine")
    with Guard(mine, environ=environ, telemetry=False) as guard:
        assert [route.name for route in guard.routes] == ["mine"]
    routes = {"routes": [{"model": "ollama/llama3.2"}]}
    with Guard.from_config(routes, environ=environ, telemetry=False) as guard:
        assert [route.name for route in guard.routes] == ["ollama"]
    path = tmp_path / "guard.toml"
    path.write_text('[[routes]]\nmodel = "ollama/llama3.2"\n', encoding="utf-8")
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    assert main(["check", str(path)]) == 0


@pytest.mark.parametrize("api_key", [5, b"sk-bytes"])
@pytest.mark.parametrize("kind", ["chat", "anthropic", "responses", "batch", "embedder"])
def test_a_key_that_is_not_a_string_is_a_configuration_error(kind: str, api_key: Any) -> None:
    """A route given ``api_key=5`` raised AttributeError (``int`` has no ``strip``); given
    bytes, a chat, Responses or batch route sent ``Bearer b'sk-bytes'`` (an Anthropic route
    raised TypeError), and the embedder sent either as its key. Each refuses it as a
    ConfigurationError now."""
    from llmguard_sdk import AnthropicProvider, OpenAIResponsesProvider
    from llmguard_sdk.cache import OpenAIEmbedder
    from llmguard_sdk.providers.batch import BatchProvider

    url = "http://127.0.0.1:9/v1"
    makers: dict[str, Any] = {
        "chat": lambda: OpenAICompatibleProvider(url, api_key=api_key),
        "anthropic": lambda: AnthropicProvider(url, api_key=api_key, model="m"),
        "responses": lambda: OpenAIResponsesProvider(url, api_key=api_key),
        "batch": lambda: BatchProvider(url, api_key=api_key),
        "embedder": lambda: OpenAIEmbedder(url, "m", 8, api_key=api_key),
    }
    with pytest.raises(ConfigurationError, match="api_key must be a string"):
        makers[kind]()
