"""A configuration file's text as data: TOML, YAML or JSON, by its suffix.

A syntax error is one line naming the file (YAML's too), a key given twice is refused in
every format (``json`` and PyYAML kept the last one), and a format whose reader is not
installed (PyYAML) is said by name.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

from .errors import ConfigurationError

__all__ = ["read_data"]


def read_data(path: Path) -> Any:
    """The data of the file at ``path`` (its format from its suffix); a problem raises
    :class:`ConfigurationError` naming the file."""
    try:
        text = path.read_text(encoding="utf-8-sig")  # a BOM (Windows editors) is no text
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigurationError(f"cannot read the configuration {path}: {exc}") from None
    suffix = path.suffix.lower()
    readers = {".toml": ("tomllib", "tomli"), ".yaml": ("yaml",), ".yml": ("yaml",)}
    try:
        if suffix == ".json":
            return json.loads(text, object_pairs_hook=_unique_keys)
        if suffix in readers:
            module = _first_module(readers[suffix], f"{path}: reading {suffix} needs")
            return _yaml_load(module, text) if suffix != ".toml" else module.loads(text)
    except ConfigurationError:
        raise
    except Exception as exc:  # a syntax error of the format
        raise ConfigurationError(f"{path}: {_one_line(exc)}") from None
    raise ConfigurationError(f"{path}: a configuration is a .toml, .yaml, .yml or .json file")


def _one_line(exc: Exception) -> str:
    """A format's syntax error in one line: YAML's (a problem, then the text it is in, over
    several lines) as its problem and ``(at line L, column C)``, as TOML's errors end."""
    problem, mark = getattr(exc, "problem", None), getattr(exc, "problem_mark", None)
    if isinstance(problem, str) and mark is not None:
        return f"{problem} (at line {mark.line + 1}, column {mark.column + 1})"
    return " ".join(str(exc).split())


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys are unique (``json`` kept the last of two equal keys: a
    second ``"routes"`` dropped the first list without a word; TOML refuses it)."""
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise ValueError(f"the key {key!r} is given twice")
        found[key] = value
    return found


def _yaml_load(yaml: Any, text: str) -> Any:
    """``yaml.safe_load`` that refuses a mapping's key given twice, as :func:`_unique_keys`."""

    class UniqueKeyLoader(yaml.SafeLoader):  # type: ignore[misc]
        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            seen = []
            for key_node, _value in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":  # "<<: *base" (merged keys
                    continue  # are the base's; the mapping's own may override them)
                key = self.construct_object(key_node, deep=deep)
                if key in seen:
                    line = key_node.start_mark.line + 1
                    raise ValueError(f"the key {key!r} is given twice (line {line})")
                seen.append(key)
            return super().construct_mapping(node, deep=deep)

    return yaml.load(text, Loader=UniqueKeyLoader)


def _first_module(names: tuple[str, ...], needs: str) -> Any:
    """The first of ``names`` that imports (tomllib, else tomli on Python 3.10; PyYAML)."""
    for name in names:
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise ConfigurationError(f"{needs} {' or '.join(names)}")
