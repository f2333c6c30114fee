"""A config file's deployment group takes the ``latency`` strategy's tuning (``buffer``,
``slack``, ``half_life_s``, ``penalty_s``), refused as the constructor refuses it."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from llmguard_sdk import ConfigurationError, DeploymentGroup, Guard, OpenAICompatibleProvider
from llmguard_sdk._config_file import load_config, resolve
from llmguard_sdk.testing import FakeProvider

from .conftest import USER

TUNING = ("buffer", "slack", "half_life_s", "penalty_s")
DEPLOYMENTS = [
    {"model": "vllm/a", "name": "a", "base_url": "http://127.0.0.1:9/v1"},
    {"model": "vllm/b", "name": "b", "base_url": "http://127.0.0.1:9/v1"},
]


def _group(**tuning: object) -> dict[str, object]:
    return {"group": "g", "strategy": "latency", "deployments": DEPLOYMENTS, **tuning}


def test_a_groups_tuning_is_read_from_a_file(tmp_path: Path) -> None:
    """``buffer = 0`` in a file was refused (``extra keys are not permitted``): the 0.2
    buffer, the 2.0 slack and the 10 s half-life could only be set in code."""
    with FakeProvider(name="a") as a, FakeProvider(name="b") as b:
        path = tmp_path / "guard.toml"
        path.write_text(
            '[[routes]]\ngroup = "g"\nstrategy = "latency"\n'
            "buffer = 0\nslack = 3.5\nhalf_life_s = 4\npenalty_s = 0.5\n"
            "deployments = [\n"
            f'  {{ model = "vllm/m", name = "a", base_url = "{a.base_url}" }},\n'
            f'  {{ model = "vllm/m", name = "b", base_url = "{b.base_url}" }},\n]\n',
            encoding="utf-8",
        )
        (group,), _ = resolve(load_config(path), {})
        assert isinstance(group, DeploymentGroup)
        assert (group.buffer, group.slack, group.half_life_s, group.penalty_s) == (0, 3.5, 4, 0.5)
        with Guard.from_config(path, environ={}, telemetry=False) as guard:
            assert guard.chat(USER).route in ("a", "b")
    (default,), _ = resolve(load_config({"routes": [_group()]}), {})
    assert isinstance(default, DeploymentGroup)
    assert (default.buffer, default.slack, default.half_life_s, default.penalty_s) == (
        0.2,
        2.0,
        10.0,
        10.0,
    )


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("buffer", -0.1),
        ("buffer", math.inf),
        ("slack", 0.5),
        ("slack", True),
        ("half_life_s", 0),
        ("half_life_s", math.nan),
        ("penalty_s", -1),
        ("penalty_s", "1"),
    ],
)
def test_a_bad_tuning_is_refused_as_the_constructor_refuses_it(name: str, value: object) -> None:
    route = OpenAICompatibleProvider("http://127.0.0.1:9/v1", model="m", name="a")
    with pytest.raises(ConfigurationError) as built:
        DeploymentGroup("g", [route], **{name: value})  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError) as read:
        load_config({"routes": [_group(**{name: value})]})
    assert re.search(rf"routes\.0\.{name}: " + re.escape(str(built.value)), str(read.value))


def test_llmguard_check_refuses_a_bad_tuning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from llmguard_sdk.cli import main

    path = tmp_path / "guard.toml"
    path.write_text(
        '[[routes]]\ngroup = "g"\nslack = nan\ndeployments = [\n'
        '  { model = "vllm/a", name = "a", base_url = "http://127.0.0.1:9/v1" },\n]\n',
        encoding="utf-8",
    )
    assert main(["check", str(path)]) != 0
    assert "routes.0.slack: slack must be a finite number >= 1, got nan" in capsys.readouterr().err
