"""An ``LLMGUARD_*`` variable spelled like a setting but not one (``LLMGUARD_TIMEOT``) was
ignored without a word: the Guard ran with the default the user meant to change. It is still
ignored (a variable is not an error), with an :class:`UnknownSettingWarning` naming the
setting it resembles, once per name; its value is never shown."""

from __future__ import annotations

import subprocess
import sys
import warnings

import pytest

from llmguard_sdk import Guard, GuardSettings, OpenAICompatibleProvider, UnknownSettingWarning


def test_a_misspelled_variable_is_named_with_the_setting_it_resembles() -> None:
    with pytest.warns(UnknownSettingWarning) as caught:
        settings = GuardSettings.from_env({"LLMGUARD_TIMEOT": "5-secret-value"})
    assert settings.timeout == 60.0  # still ignored: the default stands
    message = str(caught[0].message)
    assert "LLMGUARD_TIMEOT" in message
    assert "LLMGUARD_TIMEOUT" in message
    assert "5-secret-value" not in message


def test_each_name_warns_once_and_settings_variables_never() -> None:
    environ = {
        "LLMGUARD_RETRY_ATTEMPT": "2",  # one letter short
        "LLMGUARD_TIMEOUT": "5",  # a setting
        "LLMGUARD_CONFIG": "guard.toml",  # read by Guard.from_config
        "LLMGUARD_MODEL_CACHE": "/tmp/models",  # read by the local model
        "LLMGUARD_CHROMIUM": "/usr/bin/chromium",  # a tool's own: like no setting
        "OTHER_TIMEOT": "1",  # not ours
    }
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        GuardSettings.from_env(environ)
        GuardSettings.from_env(environ)
    named = [str(w.message) for w in caught if w.category is UnknownSettingWarning]
    assert len(named) == 1
    assert "LLMGUARD_RETRY_ATTEMPT " in named[0]
    assert "LLMGUARD_RETRY_ATTEMPTS?" in named[0]


def test_a_name_like_two_settings_names_both() -> None:
    with pytest.warns(UnknownSettingWarning) as caught:
        GuardSettings.from_env({"LLMGUARD_MODEL_NAME": "gpt-4o-mini"})
    assert str(caught[0].message).endswith("did you mean LLMGUARD_MODEL or LLMGUARD_MODEL_CACHE?")


@pytest.mark.parametrize(
    "name", ["LLMGUARD_HOST", "LLMGUARD_PORT", "LLMGUARD_TOKEN", "LLMGUARD_LOG", "LLMGUARD_DEBUG"]
)
def test_a_name_like_no_setting_but_for_the_shared_prefix_is_left_alone(name: str) -> None:
    """Compared whole, the shared ``LLMGUARD_`` made ``..._HOST`` look like ``..._STORE``."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnknownSettingWarning)
        GuardSettings.from_env({name: "x"})


def test_a_longer_name_for_a_setting_names_it() -> None:
    with pytest.warns(UnknownSettingWarning) as caught:
        GuardSettings.from_env({"LLMGUARD_MAX_TOKENS": "100", "LLMGUARD_CONFIG_FILE": "g.toml"})
    said = sorted(str(w.message) for w in caught)
    assert said[0].endswith("did you mean LLMGUARD_CONFIG?")
    assert said[1].endswith("did you mean LLMGUARD_MAX_INPUT_TOKENS?")


def test_the_guard_warns_at_the_line_that_built_it() -> None:
    provider = OpenAICompatibleProvider("http://127.0.0.1:9/v1", model="m")  # (never called)
    with pytest.warns(UnknownSettingWarning) as caught:
        guard = Guard(provider, environ={"LLMGUARD_STOER": "memory"})
    guard.close()
    assert caught[0].filename == __file__  # (stacklevel: the user's own line)
    assert "LLMGUARD_STORE" in str(caught[0].message)


def test_from_env_and_from_config_warn_at_the_line_that_called_them() -> None:
    """The warning's place was a fixed count of frames up: right for ``Guard(...)`` alone;
    ``GuardSettings.from_env`` named its caller's caller, ``Guard.from_config`` a line of
    ``guard.py``."""
    with pytest.warns(UnknownSettingWarning) as caught:
        GuardSettings.from_env({"LLMGUARD_ATTEMPT_TIMOUT": "5"})
    assert caught[0].filename == __file__
    route = {"model": "vllm/m", "base_url": "http://127.0.0.1:9/v1"}  # (never called)
    with pytest.warns(UnknownSettingWarning) as caught:
        guard = Guard.from_config(
            {"routes": [route]}, environ={"LLMGUARD_KEY_PREFIKS": "x"}, telemetry=False
        )
    guard.close()
    assert caught[0].filename == __file__
    assert "LLMGUARD_KEY_PREFIX" in str(caught[0].message)


def test_the_process_environment_is_read_too() -> None:
    code = (
        "import warnings; warnings.simplefilter('error');"
        "from llmguard_sdk import GuardSettings; GuardSettings.from_env()"
    )
    run = subprocess.run(
        [sys.executable, "-c", code],
        env={"LLMGUARD_MAX_INPUT_TOKEN": "100", "PATH": ""},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode != 0
    assert "UnknownSettingWarning" in run.stderr
    assert "LLMGUARD_MAX_INPUT_TOKENS" in run.stderr
