"""A newcomer's mistakes in a configuration file, as ``llmguard check`` and ``load_config``
say them: a misspelled key names the key it resembles (among the keys its own table takes),
and a value that should be a table of keys but is not (an empty YAML file, a route written as
its model alone) says so in the file's words, not by pydantic's class names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmguard_sdk import ConfigurationError
from llmguard_sdk._config_file import load_config
from llmguard_sdk.cli import main

ROUTE = {"model": "vllm/m", "base_url": "http://127.0.0.1:9/v1"}


TIERS = {"s": ["vllm"], "l": ["vllm"]}
EXTRA = "Extra inputs are not permitted"


@pytest.mark.parametrize(
    ("config", "where", "meant"),
    [
        ({"timout": 30, "routes": [ROUTE]}, "timout", "timeout"),
        ({"route": [ROUTE]}, "route", "routes"),
        ({"routes": [{**ROUTE, "nmae": "a"}]}, "routes.0.nmae", "name"),
        ({"routes": [{"group": "g", "stratgy": "latency", "deployments": [ROUTE]}]},
         "routes.0.stratgy", "strategy"),
        ({"routes": [{"group": "g", "deployments": [{**ROUTE, "api_verison": "1"}]}]},
         "routes.0.deployments.0.api_verison", "api_version"),
        ({"routes": [ROUTE], "tasks": {"tiers": TIERS, "defualt": "s"}},
         "tasks.defualt", "default"),
        ({"routes": [ROUTE], "tasks": {"tiers": TIERS, "rules": [{"tier": "s", "tool": True}]}},
         "tasks.rules.0.tool", "tools"),
        ({"routes": [ROUTE], "tasks": {"tiers": TIERS,
          "cascades": {"c": {"tiers": ["s", "l"], "chekcs": ["json"]}}}},
         "tasks.cascades.c.chekcs", "checks"),
    ],
)  # fmt: skip
def test_a_misspelled_key_names_the_key_of_its_table_it_resembles(
    config: dict[str, object], where: str, meant: str
) -> None:
    """``routes.0.modle: Extra inputs are not permitted`` said which key was wrong, not
    which was meant (a misspelled ``LLMGUARD_*`` variable names its setting)."""
    with pytest.raises(ConfigurationError) as caught:
        load_config(config)
    assert f"{where}: {EXTRA} (did you mean {meant}?)" in str(caught.value)


def test_a_key_like_no_key_of_its_table_gets_no_guess() -> None:
    """Only the keys the table takes are guessed from: ``weight`` in a route is like no
    route key (``weights`` is a group's)."""
    with pytest.raises(ConfigurationError) as caught:
        load_config({"routes": [{**ROUTE, "weight": 2}]})
    message = str(caught.value)
    assert message.endswith(f"routes.0.weight: {EXTRA}")


def test_check_names_the_key_meant_too(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "guard.toml"
    path.write_text('[[routes]]\nmodle = "openai/gpt-4o-mini"\n', encoding="utf-8")
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"routes.0.modle: {EXTRA} (did you mean model?)" in err
    assert err.count("\n") == 1


TABLE = "Input should be a table of keys, got"


@pytest.mark.parametrize(
    ("name", "text", "said"),
    [
        ("guard.yaml", "", f"configuration: {TABLE} nothing (an empty file?)"),
        ("guard.yaml", "# routes: to come\n", f"configuration: {TABLE} nothing"),
        ("guard.json", "[]", f"configuration: {TABLE} a list"),
        ("guard.yaml", "routes:\n  - openai/gpt-4o-mini\n", f"routes.0: {TABLE} text"),
        ("guard.toml", 'routes = ["openai/gpt-4o-mini"]\n', f"routes.0: {TABLE} text"),
        ("guard.toml", 'tasks = "auto"\n[[routes]]\nmodel = "ollama/m"\n', f"tasks: {TABLE} text"),
    ],
)
def test_a_value_that_is_no_table_says_so_without_class_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, text: str, said: str
) -> None:
    """``Input should be a valid dictionary or instance of ConfigFile`` (or RouteConfig,
    TasksConfig): names of our classes the file never shows."""
    if name.endswith(".yaml"):
        pytest.importorskip("yaml")
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert said in err
    assert "instance of" not in err
    assert "Config" not in err


ENDPOINT, VERSION = "base_url (or AZURE_OPENAI_ENDPOINT)", "api_version (or OPENAI_API_VERSION)"


@pytest.mark.parametrize(
    ("route", "environ", "missing"),
    [
        ({"api_version": "2024-10-21"}, {}, ENDPOINT),
        ({}, {"AZURE_OPENAI_ENDPOINT": "https://r.openai.azure.com"}, VERSION),
        ({"base_url": "https://r.openai.azure.com"}, {}, VERSION),
        ({}, {}, f"{ENDPOINT} and {VERSION}"),
    ],
)
def test_an_azure_route_names_only_what_it_lacks(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    route: dict[str, str],
    environ: dict[str, str],
    missing: str,
) -> None:
    """The example file's azure route, its ``api_version`` given, was refused for needing
    ``base_url ... and api_version``: the user looked for a mistake in the version."""
    for name in ("AZURE_OPENAI_ENDPOINT", "OPENAI_API_VERSION", "AZURE_OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    path = tmp_path / "guard.json"
    path.write_text(json.dumps({"routes": [{"model": "azure/prod", **route}]}), encoding="utf-8")
    assert main(["check", str(path)]) == 2
    assert capsys.readouterr().err == f"llmguard check: {path}: routes.0: azure/ needs {missing}\n"


@pytest.mark.parametrize(
    ("model", "said"),
    [
        ("openia/gpt-4o-mini", "'openia' is no shortcut (did you mean openai/gpt-4o-mini?)"),
        ("antropic/claude-3-5-haiku-latest", "(did you mean anthropic/claude-3-5-haiku-latest?)"),
        ("gpt-4o-mini", "'gpt-4o-mini' names no shortcut"),
        ("openai/", "'openai/' names no model"),
    ],
)
def test_a_model_of_no_shortcut_names_the_shortcut_meant(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], model: str, said: str
) -> None:
    """The shortcuts were listed as a Python tuple (``('openai', 'openrouter', ...)``), and
    nothing said which one was meant."""
    path = tmp_path / "guard.toml"
    path.write_text(f'[[routes]]\nmodel = "{model}"\n', encoding="utf-8")
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        f"llmguard check: {path}: routes.0.model: model must be <shortcut>/<model>"
    )
    assert said in err
    assert "('openai'" not in err
    assert "openai, openrouter, groq" in err  # the shortcuts, as words
    assert err.count("\n") == 1


NAMED_A = {**ROUTE, "name": "a"}


@pytest.mark.parametrize(
    ("routes", "said"),
    [
        ([NAMED_A, {**NAMED_A, "model": "vllm/n"}], "two routes are named 'a'"),
        ([NAMED_A, {"group": "a", "deployments": [{**ROUTE, "name": "b"}]}],
         "a route and a group are named 'a'"),
        ([NAMED_A, NAMED_A, NAMED_A], "three routes are named 'a'"),
    ],
)  # fmt: skip
def test_routes_named_alike_are_said_so_without_asking_for_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], routes: list[dict[str, object]], said: str
) -> None:
    """Two routes both named ``a``: ``repeated: ['a'] (give each a name)``, though each had
    one."""
    path = tmp_path / "guard.json"
    path.write_text(json.dumps({"routes": routes}), encoding="utf-8")
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert err == f"llmguard check: {path}: routes: {said}: route and group names must be unique\n"


def test_routes_named_after_their_shortcut_are_asked_for_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two ``vllm/`` routes without a name are both named ``vllm``: the file should name
    them."""
    path = tmp_path / "guard.json"
    path.write_text(json.dumps({"routes": [ROUTE, {**ROUTE, "model": "vllm/n"}]}), encoding="utf-8")
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert "routes: two routes are named 'vllm'" in err
    assert "a route without a name is named after its shortcut: give each a name" in err


@pytest.mark.parametrize(
    ("config", "where"),
    [
        ({"routes": [{**ROUTE, "timeout": 3}]}, "routes.0.timeout"),
        ({"routes": [{**ROUTE, "store": "memory"}]}, "routes.0.store"),
        ({"routes": [{"group": "g", "deployments": [{**ROUTE, "attempt_timeout": 1}]}]},
         "routes.0.deployments.0.attempt_timeout"),
    ],
)  # fmt: skip
def test_a_top_level_setting_in_a_table_is_said_to_be_one(
    config: dict[str, object], where: str
) -> None:
    """``routes.0.timeout: Extra inputs are not permitted``: nothing said that ``timeout`` is
    a setting of the whole file."""
    key = where.rsplit(".", 1)[1]
    with pytest.raises(ConfigurationError) as caught:
        load_config(config)
    assert f"{where}: {EXTRA} ({key} is a top-level key, not one of this table's)" in str(
        caught.value
    )
