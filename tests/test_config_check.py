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


@pytest.mark.parametrize(
    ("store", "said"),
    [
        ('store = "redis://127.0.0.1:6379/0?timeout=abc"\n', "bad Redis URL"),
        ('store = "redis+cluster://"\n', "bad Redis Cluster URL"),
        ('store = "redis+cluster://127.0.0.1:7000/3"\n', "only database 0"),
        ("", "bad Redis URL"),  # LLMGUARD_STORE, which the file leaves
    ],
)
def test_a_store_url_the_guard_cannot_open_fails_the_check(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    store: str,
    said: str,
) -> None:
    """Only the URL's scheme was checked: the check passed a store the Guard then refused
    to open (no connection is made: the URL is read as the Guard reads it)."""
    path = tmp_path / "guard.toml"
    path.write_text(store + ROUTES, encoding="utf-8")
    monkeypatch.setenv("LLMGUARD_STORE", "redis://127.0.0.1:1/0?max_connections=many")
    with pytest.raises(ConfigurationError, match=said):
        Guard.from_config(path).close()
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert said in err
    assert err.startswith(f"llmguard check: {path}: ")


@pytest.mark.parametrize("as_json", [False, True])
def test_a_good_store_url_passes_without_a_connection(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], as_json: bool
) -> None:
    path = tmp_path / "guard.toml"
    path.write_text('store = "redis://127.0.0.1:1/0"\n' + ROUTES, encoding="utf-8")  # no server
    assert main(["check", str(path), *(["--json"] if as_json else [])]) == 0
    assert "redis://127.0.0.1:1/0" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("model", "variable"),
    [
        ("openai/gpt-4o-mini", "OPENAI_API_KEY"),
        ("anthropic/claude-3-5-haiku-latest", "ANTHROPIC_API_KEY"),
        ("groq/llama-3.1-8b-instant", "GROQ_API_KEY"),
    ],
)
def test_a_route_without_a_key_names_the_variable_that_is_not_set(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    model: str,
    variable: str,
) -> None:
    """``key no key`` left the reader to guess which variable the route would read: every
    call to a hosted provider then failed with 401."""
    monkeypatch.delenv(variable, raising=False)
    path = tmp_path / "guard.toml"
    path.write_text(f'[[routes]]\nmodel = "{model}"\n', encoding="utf-8")
    assert main(["check", str(path)]) == 0  # (unset: the route sends no key, as before)
    assert f"key no key ({variable} is not set)" in capsys.readouterr().out
    monkeypatch.setenv(variable, "sk-test-value")
    assert main(["check", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"key ${{{variable}}}" in out
    assert "sk-test-value" not in out


def test_a_route_whose_provider_reads_no_key_says_no_more(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "guard.toml"
    path.write_text('[[routes]]\nmodel = "ollama/llama3.2"\n', encoding="utf-8")
    assert main(["check", str(path)]) == 0
    assert capsys.readouterr().out.rstrip().endswith("; key no key")


def test_check_reads_the_file_llmguard_config_names_when_given_none(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """As ``Guard.from_config()`` does: ``llmguard check`` needed the path again."""
    path = tmp_path / "guard.toml"
    path.write_text(ROUTES, encoding="utf-8")
    monkeypatch.setenv("LLMGUARD_CONFIG", str(path))
    assert main(["check"]) == 0
    assert "vllm m at http://127.0.0.1:9/v1" in capsys.readouterr().out
    monkeypatch.setenv("LLMGUARD_CONFIG", str(tmp_path / "missing.toml"))
    assert main(["check"]) == 2
    assert "missing.toml" in capsys.readouterr().err
    for unset in ("", None):  # empty: not set, as the Guard reads it
        if unset is None:
            monkeypatch.delenv("LLMGUARD_CONFIG")
        else:
            monkeypatch.setenv("LLMGUARD_CONFIG", unset)
        assert main(["check"]) == 2
        said = capsys.readouterr().err
        assert "no configuration given and LLMGUARD_CONFIG is not set" in said
