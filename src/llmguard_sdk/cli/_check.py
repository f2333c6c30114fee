"""``llmguard check CONFIG``: validate a configuration file and print its resolved routes."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .._config_file import config_source, load_config, naming, redacted, resolve, tasks_of
from .._config_shortcuts import key_variable
from ..config import ENV_PREFIX, GuardSettings
from ..store import open_store
from ._command import Command

if TYPE_CHECKING:
    from .._config_tasks import TasksConfig
    from ..router import TaskRouter

__all__ = ["CHECK"]

# the settings a Guard built from a file uses (its routes are the file's: no LLMGUARD_BASE_URL,
# LLMGUARD_API_KEY or LLMGUARD_MODEL route), in the order they are shown
_USED = ("store", "key_prefix", "timeout", "attempt_timeout", "max_input_tokens", "retry_attempts")


def _arguments(check: argparse.ArgumentParser) -> None:
    check.add_argument(
        "config", nargs="?", help="the configuration file (default: the one LLMGUARD_CONFIG names)"
    )
    check.add_argument(
        "--json", action="store_true", help="print the settings, tasks and routes as JSON"
    )


def _run(args: argparse.Namespace) -> int:
    """Run ``llmguard check``: 0 when the configuration is good, 2 when it is not."""
    source = config_source(args.config, os.environ)
    with naming(source):
        config = load_config(source)
        entries, routes = resolve(config, os.environ)
        settings = config.settings(os.environ)  # a ${NAME} store is read and names a store
        guard = GuardSettings.from_env(os.environ, **settings)  # the LLMGUARD_* ones it leaves
        open_store(guard.store, key_prefix=guard.key_prefix).close()  # its URL read, no connection
        tasks = tasks_of(config, entries)  # tiers name routes of the file
    for entry in entries:
        close = getattr(entry, "close", None)
        if close is not None:
            close()
    # never a password (a Redis URL's, a URL's user:password@, ?password=, ?key=): nor keys
    rows = [{**route.__dict__, "base_url": _shown(route.base_url)} for route in routes]
    settings, sources = _effective(config.settings(), guard, os.environ)
    if args.json:
        shown = _tasks_shown(config.tasks, tasks)
        found = {"settings": settings, "settings_from": sources, "tasks": shown, "routes": rows}
        print(json.dumps(found))
        return 0
    for key, value in settings.items():
        source = f"environment {ENV_PREFIX}{key.upper()}" if sources[key] == "environment" else ""
        print(f"{key}: {value} ({source or sources[key]})")
    if tasks is not None:
        print(f"tasks: {tasks!r}")
    for row in rows:
        group = f" (group {row['group']})" if row["group"] else ""
        if row["base_url"] is None:  # the local model: no URL, no key
            print(f"{row['name']}{group}: {row['kind']} {row['model']} in this process")
            continue
        key = row["key_from"] or _no_key(row["kind"])
        print(f"{row['name']}{group}: {row['kind']} {row['model']} at {row['base_url']}; key {key}")
    return 0


def _effective(
    given: dict[str, Any], guard: GuardSettings, environ: Mapping[str, str]
) -> tuple[dict[str, Any], dict[str, str]]:
    """The settings the Guard uses (those left unset aside) and where each comes from:
    ``file`` (as written: a ``${NAME}`` store is shown as its reference), ``environment``
    (its ``LLMGUARD_*`` variable) or ``default``. Only the file's were shown: a value from
    the environment was checked, and not said."""
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for name in _USED:
        if name in given:
            values[name], sources[name] = given[name], "file"
        elif environ.get(f"{ENV_PREFIX}{name.upper()}", "").strip():
            values[name], sources[name] = getattr(guard, name), "environment"
        elif getattr(guard, name) is not None:
            values[name], sources[name] = getattr(guard, name), "default"
    return {key: _shown(value) for key, value in values.items()}, sources


def _no_key(shortcut: str) -> str:
    """What a route without a key says: the variable it reads, unset (a hosted provider
    answers 401 to every call without one)."""
    variable = key_variable(shortcut)
    return "no key" if variable is None else f"no key ({variable} is not set)"


def _tasks_shown(config: TasksConfig | None, router: TaskRouter | None) -> Any:
    """The ``[tasks]`` table as the Guard reads it (every key, the default resolved), or
    None without one."""
    if config is None or router is None:
        return None
    return {**config.model_dump(mode="json"), "default": router.default}


def _shown(value: Any) -> Any:
    return redacted(value) if isinstance(value, str) else value


CHECK = Command(
    "check",
    "validate a configuration file and print the routes it resolves to",
    _arguments,
    _run,
    description="Read a Guard configuration (TOML, YAML or JSON), check every key and "
    "environment reference, and print each route: its name, provider, model, URL and "
    "where its key comes from (the variable's name, never the key).",
)
