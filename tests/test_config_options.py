"""``Guard.from_config``'s own arguments: the options it passes on to the Guard, the source and
the environment, each of the wrong kind a ConfigurationError naming it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from llmguard_sdk import ConfigurationError, Guard, OpenAICompatibleProvider, TaskRouter

ROUTE = {"model": "vllm/m", "name": "a", "base_url": "http://127.0.0.1:9/v1"}
CONFIG: dict[str, Any] = {"routes": [ROUTE], "timeout": 5, "store": "memory"}
TASKS = {"tiers": {"small": ["a"]}}


@pytest.mark.parametrize("name", ["providers", "routes", "release"])
def test_an_option_that_would_replace_the_files_routes_says_where_routes_go(name: str) -> None:
    """``providers=`` was a bare ``TypeError`` ("got multiple values for argument"),
    ``routes=`` one about an unexpected keyword, ``release=`` "pass providers or release=,
    not both" (the caller passed no providers)."""
    route = OpenAICompatibleProvider("http://127.0.0.1:9/v1", model="m", name="b")
    with pytest.raises(ConfigurationError, match=f"takes no {name}=: the configuration's routes"):
        Guard.from_config(CONFIG, environ={}, **{name: [route]})


@pytest.mark.parametrize(
    ("name", "expected"),
    [("timeuot", "unknown option timeuot=; did you mean timeout=?"), ("bogus", "bogus=")],
)
def test_an_option_the_guard_does_not_take_is_named_before_the_file_is_read(
    tmp_path: Path, name: str, expected: str
) -> None:
    """It was Python's ``TypeError`` about ``Guard.__init__``, after the file was read."""
    missing = tmp_path / "absent.toml"
    with pytest.raises(ConfigurationError, match=expected.replace("?", r"\?")):
        Guard.from_config(missing, environ={}, **{name: 3})


def test_tasks_beside_the_files_tasks_table_is_refused_and_alone_it_is_used() -> None:
    """The file's ``[tasks]`` table was dropped without a word for ``tasks=``."""
    router = TaskRouter({"only": ["a"]})
    with pytest.raises(ConfigurationError, match="tasks= and the configuration's tasks table"):
        Guard.from_config({**CONFIG, "tasks": TASKS}, environ={}, tasks=router)
    with Guard.from_config(CONFIG, environ={}, tasks=router, telemetry=False) as guard:
        assert guard._stages.tasks is not None
    with Guard.from_config({**CONFIG, "tasks": TASKS}, environ={}, tasks=None) as guard:
        assert guard._stages.tasks is not None  # None: the file's table


def test_none_for_a_setting_the_file_gives_keeps_the_files() -> None:
    """``timeout=None`` (a wrapper passing its own default on) replaced the file's 5 s with
    the Guard's 60 s default; ``None`` is the Guard's "not given"."""
    with Guard.from_config(CONFIG, environ={}, timeout=None, store=None) as guard:
        assert guard.settings.timeout == 5
        assert guard.settings.store == "memory"
    with Guard.from_config(CONFIG, environ={}, timeout=7, providers=None) as guard:
        assert guard.settings.timeout == 7  # a value still wins over the file's


@pytest.mark.parametrize("source", [5, b"guard.toml", ["guard.toml"]])
def test_a_source_of_the_wrong_kind_is_a_configuration_error(source: Any) -> None:
    """A number, bytes or a list raised ``TypeError`` from ``pathlib``."""
    with pytest.raises(ConfigurationError, match="a configuration is a file's path"):
        Guard.from_config(source, environ={})


def test_an_environ_that_is_not_a_mapping_is_a_configuration_error() -> None:
    """A list raised ``AttributeError`` (``'list' object has no attribute 'get'``)."""
    with pytest.raises(ConfigurationError, match="environ= must be a mapping"):
        Guard.from_config(CONFIG, environ=["OPENAI_API_KEY=sk"])  # type: ignore[arg-type]


@pytest.mark.parametrize("environ", [{"GW_KEY": 5}, {7: "k"}])
def test_an_environ_with_a_value_or_name_that_is_not_text_is_refused_by_name(
    environ: dict[Any, Any],
) -> None:
    """A number where a reference read it raised ``TypeError`` ("sequence item 0: expected
    str instance, int found"); only the names are said, never a value (it may be a key)."""
    route = {**ROUTE, "api_key": "${GW_KEY}"}
    with pytest.raises(ConfigurationError, match="variables are names and text") as caught:
        Guard.from_config({"routes": [route]}, environ=environ)
    assert "5" not in str(caught.value)


def test_a_variable_set_to_nothing_is_said_to_be_unset_or_empty() -> None:
    route = {**ROUTE, "api_key": "${GW_KEY}"}
    with pytest.raises(ConfigurationError, match="GW_KEY is not set \\(or empty\\)"):
        Guard.from_config({"routes": [route]}, environ={"GW_KEY": ""})


def test_a_subclass_taking_its_own_keywords_gets_them() -> None:
    """A subclass's own arguments are the Guard's it is built as (**kwargs passes any on)."""

    class Tagged(Guard):
        def __init__(self, *args: Any, team: str = "", **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.team = team

    with Tagged.from_config(CONFIG, environ={}, team="search", telemetry=False) as guard:
        assert isinstance(guard, Tagged)
        assert guard.team == "search"
        assert guard.settings.timeout == 5
    with pytest.raises(ConfigurationError, match="takes no providers="):
        Tagged.from_config(CONFIG, environ={}, providers=[ROUTE])
