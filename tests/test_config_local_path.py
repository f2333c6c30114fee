"""A ``local/<path>.gguf`` route of a configuration file: a relative path is read from the
file's folder (as a file's users expect, wherever the process starts), an absolute one as it
is; a configuration built in Python (a dict) reads a relative path from the working directory,
as ``LocalProvider(path)`` does."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmguard_sdk import ConfigurationError, Guard, LocalProvider
from llmguard_sdk.cli import main

pytest.importorskip("llama_cpp")


def _folders(tmp_path: Path) -> tuple[Path, Path]:
    """The configuration's folder (with ``models/m.gguf``: the bundled model, linked) and
    another folder to start the process in."""
    from llmguard_sdk.providers.local import bundled_model_path

    config, elsewhere = tmp_path / "conf", tmp_path / "elsewhere"
    (config / "models").mkdir(parents=True)
    elsewhere.mkdir()
    (config / "models" / "m.gguf").symlink_to(bundled_model_path())
    return config, elsewhere


def _route(guard: Guard) -> LocalProvider:
    (route,) = guard.routes
    assert isinstance(route, LocalProvider)
    return route


def test_a_relative_path_is_read_from_the_files_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config, elsewhere = _folders(tmp_path)
    path = config / "guard.toml"
    path.write_text('[[routes]]\nmodel = "local/models/m.gguf"\n', encoding="utf-8")
    monkeypatch.chdir(elsewhere)  # (it was read from here: "no GGUF model at models/m.gguf")
    with Guard.from_config(path, environ={}) as guard:
        assert _route(guard).path == config / "models" / "m.gguf"
    monkeypatch.chdir(config)  # a relative path to the file: its folder from here
    with Guard.from_config("guard.toml", environ={}) as guard:
        assert _route(guard).path == config / "models" / "m.gguf"
    monkeypatch.chdir(elsewhere)
    assert main(["check", str(path)]) == 0  # the file it loads, said
    assert f"local: local {config / 'models' / 'm.gguf'} in this process" in capsys.readouterr().out


def test_a_missing_file_is_named_where_it_was_looked_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config, elsewhere = _folders(tmp_path)
    path = config / "guard.yaml"
    path.write_text("routes:\n  - model: local/models/none.gguf\n", encoding="utf-8")
    monkeypatch.chdir(elsewhere)
    missing = config / "models" / "none.gguf"
    with pytest.raises(ConfigurationError, match=f"routes.0: no GGUF model at {missing}"):
        Guard.from_config(path, environ={})


def test_an_absolute_path_and_a_dicts_relative_path_are_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config, elsewhere = _folders(tmp_path)
    model = config / "models" / "m.gguf"
    path = elsewhere / "guard.json"
    path.write_text(f'{{"routes": [{{"model": "local/{model}"}}]}}', encoding="utf-8")
    with Guard.from_config(path, environ={}) as guard:
        assert _route(guard).path == model
    monkeypatch.chdir(config)  # built in Python: from the working directory, as before
    with Guard.from_config({"routes": [{"model": "local/models/m.gguf"}]}, environ={}) as guard:
        assert _route(guard).path == Path("models/m.gguf")


def test_a_home_path_is_expanded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``local/~/models/m.gguf`` looked for ``<file's folder>/~/models/m.gguf``; a file's and a
    dict's ``~`` are the home folder, as in a shell."""
    home, elsewhere = _folders(tmp_path)
    monkeypatch.setenv("HOME", str(home))
    path = elsewhere / "guard.toml"
    path.write_text('[[routes]]\nmodel = "local/~/models/m.gguf"\n', encoding="utf-8")
    with Guard.from_config(path, environ={}) as guard:
        assert _route(guard).path == home / "models" / "m.gguf"
    with Guard.from_config({"routes": [{"model": "local/~/models/m.gguf"}]}, environ={}) as guard:
        assert _route(guard).path == home / "models" / "m.gguf"


def test_a_home_that_cannot_be_found_is_a_configuration_error(tmp_path: Path) -> None:
    """``~nobody/m.gguf``: pathlib's bare ``RuntimeError`` came out of ``Guard.from_config``."""
    path = tmp_path / "guard.toml"
    path.write_text('[[routes]]\nmodel = "local/~no-such-user-xyz/m.gguf"\n', encoding="utf-8")
    with pytest.raises(
        ConfigurationError, match=r"routes\.0: cannot expand ~ in '~no-such-user-xyz/m\.gguf'"
    ):
        Guard.from_config(path, environ={})
