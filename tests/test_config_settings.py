"""``GuardSettings`` built directly (not through ``Guard`` or ``from_env``) refuses a wrong
value with the SDK's :class:`ConfigurationError`, as ``Guard.from_config`` does; it raised
pydantic's bare ``ValidationError``. The error is both (``SettingsValidationError``), so
``except ValidationError`` written for the old behaviour still catches it."""

from __future__ import annotations

import copy
import pickle
from collections.abc import Callable
from typing import Any

import pytest
from pydantic import ValidationError

from llmguard_sdk import ConfigurationError, GuardSettings
from llmguard_sdk.errors import SettingsValidationError

SECRET = "s3cret-pass"


@pytest.mark.parametrize(
    "build",
    [
        lambda: GuardSettings(timeout=-1),
        lambda: GuardSettings.model_validate({"timeout": -1}),
        lambda: GuardSettings.model_validate_json('{"timeout": -1}'),
        lambda: GuardSettings.model_validate_strings({"timeout": "-1"}),
    ],
    ids=["init", "model_validate", "model_validate_json", "model_validate_strings"],
)
def test_a_wrong_value_is_a_configuration_error_naming_the_field(
    build: Callable[[], GuardSettings],
) -> None:
    with pytest.raises(ConfigurationError) as caught:
        build()
    error = caught.value
    assert isinstance(error, ValidationError)  # the old except clauses still catch it
    assert isinstance(error, SettingsValidationError)
    assert str(error) == "invalid settings: timeout: Input should be greater than 0"
    # pydantic's details are kept
    assert [(e["type"], e["loc"]) for e in error.errors()] == [("greater_than", ("timeout",))]
    assert error.error_count() == 1
    assert error.title == "GuardSettings"


def test_every_problem_and_an_unknown_field_are_named() -> None:
    with pytest.raises(ConfigurationError) as caught:
        GuardSettings(timeout=0, key_prefix="a b", modle="x")  # type: ignore[call-arg]
    message = str(caught.value)
    assert message.startswith("invalid settings: ")
    for field in ("timeout: Input should be greater than 0", "key_prefix: ", "modle: Extra"):
        assert field in message


def test_a_value_that_may_hold_a_secret_is_shown_nowhere() -> None:
    """A store URL with its password (a wrong scheme) is not repeated: not in the message,
    the repr, nor pydantic's error details (logged with ``exc.errors()``)."""
    with pytest.raises(ConfigurationError) as caught:
        GuardSettings(store=f"redys://:{SECRET}@127.0.0.1:6379/0", api_key=5)  # type: ignore[arg-type]
    error = caught.value
    assert isinstance(error, ValidationError)
    assert "store: " in str(error)
    assert "api_key: " in str(error)
    shown = [str(error), repr(error), repr(error.errors()), error.json()]
    assert not any(SECRET in text for text in shown)
    inputs = {e["loc"][0]: e["input"] for e in error.errors()}
    assert inputs == {"store": "redys://:***@127.0.0.1:6379/0", "api_key": "***"}


def test_from_env_still_names_the_variable_and_is_a_validation_error_too() -> None:
    with pytest.raises(ConfigurationError, match="environment variable LLMGUARD_TIMEOUT") as c:
        GuardSettings.from_env({"LLMGUARD_TIMEOUT": "-5"})
    assert isinstance(c.value, ValidationError)
    assert [e["loc"] for e in c.value.errors()] == [("timeout",)]
    with pytest.raises(ConfigurationError, match="argument timeout="):
        GuardSettings.from_env({}, timeout=-1.0)


def test_good_values_still_build() -> None:
    settings = GuardSettings(timeout=5, store="memory")
    assert settings.timeout == 5.0
    assert GuardSettings.model_validate_json('{"timeout": 2}').timeout == 2.0


@pytest.mark.parametrize("clone", [pickle.loads, copy.copy], ids=["pickle", "copy"])
def test_the_error_pickles_and_copies_as_itself(clone: Any) -> None:
    with pytest.raises(SettingsValidationError) as caught:
        GuardSettings(timeout=-1, store="mem")
    error = caught.value
    again = clone(pickle.dumps(error)) if clone is pickle.loads else clone(error)
    assert type(again) is SettingsValidationError
    assert str(again) == str(error)
    assert again.args == error.args
    assert [(e["type"], e["loc"]) for e in again.errors()] == [
        (e["type"], e["loc"]) for e in error.errors()
    ]


@pytest.mark.parametrize(
    "build",
    [
        lambda: GuardSettings.model_validate_json(f'{{"api_key": "{SECRET}", }}'),  # a stray comma
        lambda: GuardSettings.model_validate_json(f'["{SECRET}"]'),
        lambda: GuardSettings.model_validate_strings(f"api_key={SECRET}"),
        lambda: GuardSettings.model_validate([("api_key", SECRET)]),
    ],
    ids=["json_invalid", "json_not_an_object", "strings_not_a_mapping", "not_a_mapping"],
)
def test_a_whole_input_refused_is_not_kept_in_the_details(
    build: Callable[[], GuardSettings],
) -> None:
    """Settings refused as a whole (JSON that does not parse, a value that is no mapping)
    keep pydantic's error at no field, whose input is everything given, the key with it:
    masked, as a field's that may hold a secret is."""
    with pytest.raises(SettingsValidationError) as caught:
        build()
    error = caught.value
    assert [e["loc"] for e in error.errors()] == [()]
    shown = [str(error), repr(error), repr(error.errors()), error.json()]
    assert not any(SECRET in text for text in shown)
    assert error.errors()[0]["input"] == "***"
