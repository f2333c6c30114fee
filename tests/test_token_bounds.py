"""The Guard's counts have the bound a configuration file's ``max_input_tokens`` has, 2**31 - 1,
and say so in the file's words wherever they are given: ``LLMGUARD_MAX_INPUT_TOKENS`` and
``LLMGUARD_RETRY_ATTEMPTS`` (naming the variable), an argument, ``GuardSettings``, JSON.
(A provider's ``context_window``: tests/test_provider_counts.py.)"""

from __future__ import annotations

from typing import Any

import pytest

from llmguard_sdk import ConfigurationError, Guard, GuardSettings, OpenAICompatibleProvider

URL = "http://127.0.0.1:9/v1"
BOUND = "from 1 to 2147483647, got "
UNITS = {"LLMGUARD_MAX_INPUT_TOKENS": "tokens", "LLMGUARD_RETRY_ATTEMPTS": "attempts"}


@pytest.mark.parametrize("variable", sorted(UNITS))
@pytest.mark.parametrize(
    "text", ["1e30", "1e400", "2147483648", "99999999999999999999999", "nan", "1.5", "0", "many"]
)
def test_a_variable_out_of_bounds_says_the_bound_and_names_the_variable(
    variable: str, text: str
) -> None:
    """``1e30`` said pydantic's "unable to parse string as an integer"; 99999999999999999999999
    and 2147483648 were taken (a larger input limit than any model's context)."""
    with pytest.raises(ConfigurationError) as caught:
        GuardSettings.from_env({variable: text})
    message = str(caught.value)
    expected = f"environment variable {variable}: must be a whole number of {UNITS[variable]} "
    assert f"{expected}{BOUND}{text!r}" in message
    assert "parse" not in message
    assert "Value error" not in message


@pytest.mark.parametrize(
    ("text", "read"), [("2147483647", 2147483647), (" 1e3 ", 1000), ("64.0", 64), ("1_000", 1000)]
)
def test_a_whole_number_within_the_bound_is_read(text: str, read: int) -> None:
    """``1e3`` is a whole number, as it is in a JSON or TOML file (it was refused as text)."""
    for variable in UNITS:
        settings = GuardSettings.from_env({variable: text})
        assert getattr(settings, variable.removeprefix("LLMGUARD_").lower()) == read


@pytest.mark.parametrize("value", [10**30, 2**31, 1e30, float("nan")])
def test_a_huge_count_given_in_code_or_json_is_refused_with_the_bound(value: Any) -> None:
    with pytest.raises(ConfigurationError, match=f"argument max_input_tokens=: must be .*{BOUND}"):
        Guard(OpenAICompatibleProvider(URL, model="m"), environ={}, max_input_tokens=value)
    for field in ("max_input_tokens", "retry_attempts"):
        with pytest.raises(ConfigurationError, match=f"{field}: must be a whole number .*{BOUND}"):
            GuardSettings(**{field: value})
    with pytest.raises(ConfigurationError, match=f"max_input_tokens: must be .*{BOUND}"):
        GuardSettings.model_validate_json('{"max_input_tokens": 1e30}')
