"""The layout stays readable: no module over 600 lines, no function over 80 (issue 16)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SOURCE = Path(__file__).resolve().parent.parent / "src" / "llmguard_sdk"
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80


def _modules() -> list[Path]:
    return sorted(SOURCE.rglob("*.py"))


def test_the_source_tree_is_found() -> None:
    assert len(_modules()) > 100


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(SOURCE)))
def test_no_module_is_over_600_lines(path: Path) -> None:
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_MODULE_LINES, f"{path.name}: {lines} lines"


def test_no_function_is_over_80_lines() -> None:
    long: list[str] = []
    for path in _modules():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                assert node.end_lineno is not None
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                length = node.end_lineno - first + 1
                if length > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(SOURCE)}:{node.lineno} {node.name} {length}")
    assert long == []
