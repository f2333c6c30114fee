"""The OpenTelemetry API the package declares it works with accepts what the instruments
are created with: ``explicit_bucket_boundaries_advisory`` (the GenAI conventions' buckets)
arrived in opentelemetry-api and -sdk 1.30.0; with 1.27 to 1.29, which ``>=1.27`` allowed,
``Guard(...)`` (``telemetry=True`` by default) raised ``TypeError: _ProxyMeter.create_histogram()
got an unexpected keyword argument 'explicit_bucket_boundaries_advisory'``."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest
from opentelemetry import metrics

from llmguard_sdk._config_formats import read_data

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"
ADVISORY_SINCE = (1, 30)  # opentelemetry-python #4361, released in 1.30.0


def _floors(name: str) -> list[tuple[int, int]]:
    """Every ``name>=X.Y`` floor pyproject.toml declares (dependencies and extras)."""
    project = read_data(PYPROJECT)["project"]
    specs = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        specs.extend(extra)
    found: list[tuple[int, int]] = []
    for spec in specs:
        match = re.fullmatch(rf"{re.escape(name)}>=(\d+)\.(\d+)(?:\.\d+)?", spec.strip())
        if match:
            found.append((int(match[1]), int(match[2])))
    return found


@pytest.mark.parametrize("name", ["opentelemetry-api", "opentelemetry-sdk"])
def test_the_declared_opentelemetry_floor_has_the_bucket_advisory(name: str) -> None:
    floors = _floors(name)
    assert floors, f"pyproject.toml declares no {name}>= floor"
    assert all(floor >= ADVISORY_SINCE for floor in floors), floors


def test_the_installed_api_takes_the_bucket_advisory() -> None:
    create = metrics.get_meter("floor-check").create_histogram
    assert "explicit_bucket_boundaries_advisory" in inspect.signature(create).parameters
