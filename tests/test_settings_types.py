"""The Guard's numeric settings: numbers in code, text in the environment and in files."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from llmguard_sdk import ConfigurationError, Guard, GuardSettings, OpenAICompatibleProvider

SETTINGS = [("timeout", "5"), ("attempt_timeout", "2"), ("max_input_tokens", "100")]


def _route() -> OpenAICompatibleProvider:
    return OpenAICompatibleProvider("http://127.0.0.1:9/v1", model="m")


@pytest.mark.parametrize(("name", "text"), SETTINGS)
def test_a_string_where_code_gives_a_number_is_refused_naming_the_setting(
    name: str, text: str
) -> None:
    """``Guard(timeout="5")`` was read as 5 s: a typed library refuses a string for a number,
    as a request's ``max_tokens="5"`` is refused."""
    with pytest.raises(ConfigurationError, match=f"argument {name}=: must be a number") as caught:
        Guard(_route(), environ={}, telemetry=False, **{name: text})  # type: ignore[arg-type]
    assert f"LLMGUARD_{name.upper()}" in str(caught.value)  # where text belongs


@pytest.mark.parametrize(("name", "text"), SETTINGS)
def test_the_environment_and_files_still_give_numbers_as_text(name: str, text: str) -> None:
    with Guard(_route(), environ={f"LLMGUARD_{name.upper()}": text}, telemetry=False) as guard:
        assert getattr(guard.settings, name) == float(text)
    route = {"model": "vllm/m", "base_url": "http://127.0.0.1:9/v1"}
    config = {"routes": [route], name: text}  # (a YAML or JSON file may quote a number)
    with Guard.from_config(config, environ={}, telemetry=False) as guard:
        assert getattr(guard.settings, name) == float(text)
    number: dict[str, Any] = {name: int(text)}
    with Guard(_route(), environ={}, telemetry=False, **number) as guard:
        assert getattr(guard.settings, name) == float(text)


def test_an_environment_value_that_is_not_text_is_a_configuration_error() -> None:
    """``environ={"LLMGUARD_TIMEOUT": 5}`` raised ``AttributeError`` (``.strip()``)."""
    with pytest.raises(ConfigurationError, match="'LLMGUARD_TIMEOUT'"):
        Guard(_route(), environ={"LLMGUARD_TIMEOUT": 5}, telemetry=False)  # type: ignore[dict-item]


@pytest.mark.parametrize(("name", "text"), [*SETTINGS, ("retry_attempts", "2")])
def test_guard_settings_built_in_code_refuse_a_string_for_a_number(name: str, text: str) -> None:
    """``GuardSettings(timeout="5")`` was read as 5 s where ``Guard(timeout="5")`` is refused:
    built in code, numbers are numbers; text (``from_env``, ``model_validate_strings``,
    ``model_validate_json``) is still read as numbers."""
    builds: tuple[Callable[[], object], ...] = (
        lambda: GuardSettings(**{name: text}),  # type: ignore[arg-type]
        lambda: GuardSettings.model_validate({name: text}),
    )
    for build in builds:
        with pytest.raises(ConfigurationError, match=f"{name}: .*must be a number, got a string"):
            build()
    number = float(text)
    given: dict[str, Any] = {name: int(text)}
    assert getattr(GuardSettings(**given), name) == number
    assert getattr(GuardSettings.model_validate_strings({name: text}), name) == number
    assert getattr(GuardSettings.model_validate_json(f'{{"{name}": "{text}"}}'), name) == number
    environ = {f"LLMGUARD_{name.upper()}": text}
    assert getattr(GuardSettings.from_env(environ), name) == number
