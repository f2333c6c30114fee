"""``llmguard check`` refuses what ``Guard.from_config`` refuses in the same environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmguard_sdk import ConfigurationError, Guard
from llmguard_sdk.cli import main

ROUTES = '[[routes]]\nmodel = "vllm/m"\nbase_url = "http://127.0.0.1:9/v1"\n'


@pytest.mark.parametrize(
    ("variable", "value"),
    [("LLMGUARD_TIMEOUT", "abc"), ("LLMGUARD_RETRY_ATTEMPTS", "0"), ("LLMGUARD_STORE", "mem")],
)
def test_a_bad_llmguard_variable_the_file_leaves_fails_the_check_as_the_guard(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    variable: str,
    value: str,
) -> None:
    """The check said the file was good; the Guard it describes then refused to be built."""
    path = tmp_path / "guard.toml"
    path.write_text(ROUTES, encoding="utf-8")
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigurationError, match=variable):
        Guard.from_config(path)
    assert main(["check", str(path)]) == 2
    assert f"environment variable {variable}" in capsys.readouterr().err


def test_a_variable_the_file_sets_is_not_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "guard.toml"
    path.write_text("timeout = 5\n" + ROUTES, encoding="utf-8")
    monkeypatch.setenv("LLMGUARD_TIMEOUT", "abc")
    assert main(["check", str(path)]) == 0
    assert "timeout: 5.0" in capsys.readouterr().out
