"""Routes and settings as data: a dict, or a TOML, YAML or JSON file (``Guard.from_config``).

The entry points the Guard, ``llmguard check`` and ``llmguard drill`` use, over private
modules that each hold one part:

- ``_config_schema.py``: the keys a file takes (pydantic models) and an example file;
- ``_config_formats.py``: a file's text as data (TOML, YAML, JSON);
- ``_config_shortcuts.py``: the provider shortcuts (``openai/`` ...) and the environment
  variables each reads;
- ``_config_references.py``: ``${NAME}`` references and the secrets shown nowhere;
- ``_config_routes.py``: the routes built into providers and deployment groups;
- ``_config_tasks.py``: the ``[tasks]`` table.
"""

from __future__ import annotations

import contextlib
import difflib
import os
from collections.abc import Collection, Iterator, Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ._config_formats import read_data
from ._config_references import redacted
from ._config_routes import ResolvedRoute, resolve
from ._config_schema import ConfigFile
from ._problems import problems
from .errors import ConfigurationError
from .providers.base import Provider
from .router import DeploymentGroup, TaskRouter

__all__ = [
    "CONFIG_ENV",
    "ConfigFile",
    "config_source",
    "ResolvedRoute",
    "load_config",
    "naming",
    "options_for",
    "redacted",
    "resolve",
    "tasks_of",
]

CONFIG_ENV = "LLMGUARD_CONFIG"


def config_source(
    source: str | os.PathLike[str] | Mapping[str, Any] | None, environ: Mapping[str, str]
) -> str | os.PathLike[str] | Mapping[str, Any]:
    """``source``, or when it is None the file :data:`CONFIG_ENV` names in ``environ`` (set
    but empty: not set), as ``Guard.from_config()``, ``llmguard check`` and ``llmguard drill
    --config`` read it; neither is a :class:`ConfigurationError`."""
    if source is None:
        source = environ.get(CONFIG_ENV) or None
        if source is None:
            raise ConfigurationError(f"no configuration given and {CONFIG_ENV} is not set")
    return source


def load_config(source: str | os.PathLike[str] | Mapping[str, Any]) -> ConfigFile:
    """Read and validate a configuration; errors name the file and the bad key. A file's
    ``local/`` routes read a relative GGUF path from the file's folder (a mapping's: from the
    working directory)."""
    where = "configuration"
    if isinstance(source, Mapping):
        data: Any = dict(source)
    elif not isinstance(source, (str, os.PathLike)):  # a number raised TypeError from Path
        raise ConfigurationError(
            f"a configuration is a file's path (str or os.PathLike) or a mapping, got "
            f"{type(source).__name__}"
        )
    else:
        path = Path(source)
        where = str(path)
        data = read_data(path)
    try:
        config = ConfigFile.model_validate(data)
    except ValidationError as exc:
        found = problems(
            exc, "configuration", skip=("RouteConfig", "GroupConfig"), model=ConfigFile
        )
        raise ConfigurationError(f"{where}: " + "; ".join(found)) from None
    if isinstance(source, Mapping):  # (a local/ route's relative path: the working directory)
        return config
    return config.found_in(Path(source).absolute().parent)


@contextlib.contextmanager
def naming(source: str | os.PathLike[str] | Mapping[str, Any]) -> Iterator[None]:
    """A :class:`ConfigurationError` raised in the block names the file ``source`` first, as
    :func:`load_config`'s own do: the routes are built (their ``${NAME}`` references read,
    their tasks checked) after the file was read, and a Guard built from ``LLMGUARD_CONFIG``
    said which key was wrong but not in which file. (A subclass is raised as it is.)"""
    try:
        yield
    except ConfigurationError as exc:
        where = str(Path(source)) if isinstance(source, (str, os.PathLike)) else None
        if where is None or type(exc) is not ConfigurationError or where in str(exc):
            raise
        raise ConfigurationError(f"{where}: {exc}") from None


def tasks_of(config: ConfigFile, entries: list[Provider | DeploymentGroup]) -> TaskRouter | None:
    """The configuration's :class:`~llmguard_sdk.TaskRouter`, its tiers checked against the
    chain's ``entries`` (None without a ``tasks`` table)."""
    if config.tasks is None:
        return None
    from ._core.tasks import TaskRouting

    router = config.tasks.build()
    try:
        TaskRouting(router, entries)
    except ConfigurationError as exc:
        raise ConfigurationError(f"tasks: {exc}") from None
    return router


_CHAIN = {  # options that would replace the file's routes, and what to do instead
    "providers": "add the route to its routes, or build Guard(providers, ...) in code",
    "routes": "add the route to its routes, or build Guard(providers, ...) in code",
    "release": "a release's routes replace them: build Guard(release=...) in code",
}


def options_for(
    options: Mapping[str, Any],
    accepted: Collection[str] | None,
    config: ConfigFile | None = None,
) -> dict[str, Any]:
    """The :class:`~llmguard_sdk.Guard` arguments ``options`` (``from_config``'s keywords)
    add to what the file gives. One the Guard does not take, one that would replace the
    file's routes (``providers``, ``release``) and ``tasks`` beside the file's ``[tasks]``
    are :class:`ConfigurationError`s naming the option (the first two raised a bare
    ``TypeError``, the last dropped the file's table); without ``config`` only the names are
    checked. ``None`` for a setting the file gives keeps the file's (``None`` is the Guard's
    "not given"), as ``providers=None`` and ``release=None`` are nothing given."""
    for name, value in options.items():
        if name in _CHAIN and value is not None:
            raise ConfigurationError(
                f"Guard.from_config takes no {name}=: the configuration's routes are the "
                f"chain ({_CHAIN[name]})"
            )
        if name in _CHAIN:  # None: not given
            continue
        if accepted is not None and name not in accepted:  # (None: a **kwargs subclass's)
            near = difflib.get_close_matches(name, sorted(accepted), n=1)
            hint = f"did you mean {near[0]}=?" if near else "it takes the Guard's arguments"
            raise ConfigurationError(f"Guard.from_config got an unknown option {name}=; {hint}")
    if config is None:
        return dict(options)
    if options.get("tasks") is not None and config.tasks is not None:
        raise ConfigurationError(
            "Guard.from_config: tasks= and the configuration's tasks table both route the "
            "calls: give one of them"
        )
    given = {*config.settings(), *_CHAIN, *(("tasks",) if config.tasks is not None else ())}
    return {k: v for k, v in options.items() if v is not None or k not in given}
