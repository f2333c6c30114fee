"""``llmguard drill --config FILE``: an outage rehearsed on a configuration's own routes, the
faults injected in front of its primary in the client, its backup (a loopback FakeProvider)
answering; the command fails when the fallback path does.

Latency is not asserted (timing claims live in bench/); the checks are about who served.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from llmguard_sdk.cli import main
from llmguard_sdk.testing import FakeProvider
from llmguard_sdk.testing.config_drill import run_config_drill

PHASES = ["before", "refused", "503", "hang", "after"]
QUICK = ["--rate", "10", "--before", "0.5", "--outage", "0.5", "--after", "0.5"]


@pytest.fixture
def servers() -> Iterator[tuple[FakeProvider, FakeProvider]]:
    with (
        FakeProvider(model="primary-model", name="primary") as primary,
        FakeProvider(model="backup-model", name="backup") as backup,
    ):
        yield primary, backup


def _config(tmp_path: Path, primary_url: str, backup_url: str, *, attempt_timeout: int = 1) -> Path:
    path = tmp_path / "guard.toml"
    path.write_text(
        f"""
timeout = 10
attempt_timeout = {attempt_timeout}

[[routes]]
model = "vllm/primary-model"
name = "main"
base_url = "{primary_url}"

[[routes]]
model = "vllm/backup-model"
name = "spare"
base_url = "{backup_url}"
"""
    )
    return path


def test_the_backup_answers_every_call_while_the_primary_is_down(
    servers: tuple[FakeProvider, FakeProvider], tmp_path: Path
) -> None:
    primary, backup = servers
    path = _config(tmp_path, primary.base_url, backup.base_url)
    report = run_config_drill(path, rate=10, before=0.5, outage=0.5, after=0.5, environ={})
    data = report.as_dict()
    assert report.fallback_ok
    assert data["answered_share"] == 1.0
    assert (data["primary"], data["routes"]) == ("main", ["main", "spare"])
    assert list(data["phases"]) == PHASES
    for name in ("refused", "503", "hang"):
        assert set(data["phases"][name]["served_by"]) == {"spare"}
    assert data["phases"]["before"]["served_by"].get("main", 0) >= 1  # (a slow first call
    # on a loaded machine may still move on to the spare)
    assert sum(data["primary_attempts"][p] for p in ("refused", "503", "hang")) > 0
    received = primary.stats.requests  # the faults never reach the primary's server
    assert received == data["primary_attempts"]["before"] + data["primary_attempts"]["after"]
    assert backup.stats.requests >= 15


def test_the_command_fails_when_the_fallback_path_does(
    servers: tuple[FakeProvider, FakeProvider],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    primary, backup = servers
    good = _config(tmp_path, primary.base_url, backup.base_url)
    assert main(["drill", "--config", str(good), *QUICK]) == 0
    assert "fallback path OK" in capsys.readouterr().out
    backup.stop()  # the backup is down too: nothing answers during the outage
    assert main(["drill", "--config", str(good), "--json", *QUICK]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["fallback_ok"] is False
    assert data["phases"]["refused"]["served_by"] == {"failed": 5}
    assert data["failures"]


def test_config_without_a_file_drills_the_one_llmguard_config_names(
    servers: tuple[FakeProvider, FakeProvider],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``llmguard drill --config`` needed the path even with ``LLMGUARD_CONFIG`` set (as the
    Guard reads it); a plain ``llmguard drill`` is the built-in drill whatever it names."""
    monkeypatch.delenv("LLMGUARD_CONFIG", raising=False)
    assert main(["drill", "--config", *QUICK]) == 2
    assert "no configuration given and LLMGUARD_CONFIG is not set" in capsys.readouterr().err
    good = _config(tmp_path, *(s.base_url for s in servers))
    monkeypatch.setenv("LLMGUARD_CONFIG", str(good))
    assert main(["drill", "--config", "--json", *QUICK]) == 0
    assert json.loads(capsys.readouterr().out)["routes"] == ["main", "spare"]


def test_a_bad_config_or_primary_exits_2(
    servers: tuple[FakeProvider, FakeProvider],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    good = _config(tmp_path, *(s.base_url for s in servers))
    assert main(["drill", "--config", str(good), "--primary", "nope", *QUICK]) == 2
    assert "'nope'" in capsys.readouterr().err
    bad = tmp_path / "bad.toml"
    bad.write_text('[[routes]]\nmodel = "vllm/x"\nbase_url = "http://127.0.0.1:9/v1"\nkey = 1\n')
    assert main(["drill", "--config", str(bad), *QUICK]) == 2
    assert "routes.0.key" in capsys.readouterr().err


def test_the_drill_keeps_a_primarys_group_as_the_file_gives_it() -> None:
    """The group around the fault injector was rebuilt without the file's ``regions`` and
    ``region``: the drill ranked its deployments without the region preference the Guard
    uses."""
    from llmguard_sdk import DeploymentGroup
    from llmguard_sdk._config_file import load_config, resolve
    from llmguard_sdk.testing.config_drill import _with_outage

    deployments = [
        {"model": "vllm/m", "name": name, "base_url": "http://127.0.0.1:9/v1"}
        for name in ("east", "west")
    ]
    group = {"group": "g", "deployments": deployments, "region": "us-west",
             "regions": {"east": "us-east", "west": "us-west"}}  # fmt: skip
    entries, _ = resolve(load_config({"routes": [group]}), {})
    swapped, outage = _with_outage(entries, "east")
    before, after = entries[0], swapped[0]
    assert isinstance(before, DeploymentGroup)
    assert isinstance(after, DeploymentGroup)
    assert after.deployments[0] is outage
    assert (after.regions, after.region) == (("us-east", "us-west"), "us-west")
    assert (after.strategy, after.half_life_s, after.slack) == (
        before.strategy, before.half_life_s, before.slack,
    )  # fmt: skip
    for route in before.deployments:
        route.close()


def test_a_primary_that_gets_no_traffic_is_said_so_not_ok(
    servers: tuple[FakeProvider, FakeProvider],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--primary spare`` named the backup: ``main`` answered every call, the fault injector
    in front of ``spare`` saw none, and the drill said "fallback path OK" (exit 0)."""
    primary, backup = servers  # (main's calls never move on to spare, however slow)
    good = _config(tmp_path, primary.base_url, backup.base_url, attempt_timeout=10)
    assert main(["drill", "--config", str(good), "--primary", "spare", *QUICK]) == 1
    out = capsys.readouterr().out
    assert "fallback path OK" not in out
    assert "the primary route 'spare' got no traffic" in out
    assert backup.stats.requests == 0
    assert main(["drill", "--config", str(good), "--primary", "spare", "--json", *QUICK]) == 1
    data = json.loads(capsys.readouterr().out)
    assert (data["fallback_ok"], data["primary_got_traffic"]) == (False, False)
