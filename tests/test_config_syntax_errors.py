"""A configuration file's syntax error is one line that names the file and where (line and
column, as TOML's errors have them), from ``load_config`` and from ``llmguard check``."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmguard_sdk import ConfigurationError
from llmguard_sdk._config_file import load_config
from llmguard_sdk.cli import main


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("a: b: c\n", "line 1, column 5"),
        ("routes:\n  - model: [\n", "line 3, column 1"),
        ("routes:\n\t- model: x\n", "line 2, column 1"),
    ],
)
def test_a_yaml_syntax_error_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, where: str
) -> None:
    pytest.importorskip("yaml")
    path = tmp_path / "guard.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigurationError) as raised:
        load_config(path)
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: ")
    assert where in message
    assert main(["check", "--json", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1
    assert where in err
