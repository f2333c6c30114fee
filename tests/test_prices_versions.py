"""The genai-prices releases the default price table reads: those of pyproject.toml's pin (they
need Python 3.11). Another one (pydantic-ai brings genai-prices 0.1 on Python 3.10) is not
read: the shipped table prices alone, and the table's version says why."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from llmguard_sdk.budget import PriceTable, _genai_table

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def test_the_releases_read_are_the_ones_pyproject_pins() -> None:
    pin = re.search(r'"genai-prices>=([\d.]+),<([\d.]+);', PYPROJECT.read_text(encoding="utf-8"))
    assert pin is not None
    assert pin.groups() == _genai_table.READS


@pytest.mark.parametrize(
    ("release", "read"),
    [
        ("0.1.13", False),
        ("0.2.2", False),
        ("0.2.3", True),
        ("0.2.10", True),
        ("0.3.0", False),
        ("1.0.0", False),
    ],
)
def test_a_release_is_read_only_within_the_pin(release: str, read: bool) -> None:
    assert _genai_table.readable(release) is read


def test_the_default_table_prices_from_the_shipped_table_without_a_release_it_reads() -> None:
    """On Python 3.11+ the installed genai-prices is read; on 3.10 (genai-prices 0.1, or none)
    the default table's prices are the shipped table's, and its version says so."""
    table = PriceTable.default_table()
    installed = _genai_table.version()
    if installed is not None and _genai_table.readable(installed):
        assert table.version.startswith(f"genai-prices {installed} (20")
        return
    shipped = PriceTable.shipped_table()
    assert table.price("gpt-4o", provider="openai") == shipped.price("gpt-4o", provider="openai")
    assert table.models() == shipped.models()
    why = "(not installed)" if installed is None else f"{installed} (not read: this reads >="
    assert table.version.startswith(f"genai-prices {why}")
