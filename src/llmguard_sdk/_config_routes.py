"""A configuration's routes built: providers and deployment groups, their keys and URLs read
from the environment (``resolve``), and a description of each for ``llmguard check``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ._config_references import EMBEDDED, REFERENCE, read_references, redacted
from ._config_schema import ConfigFile, GroupConfig, RouteConfig
from ._config_shortcuts import api_root, key_variable
from .errors import ConfigurationError
from .providers.anthropic import AnthropicProvider
from .providers.base import Provider
from .providers.openai_compat import OpenAICompatibleProvider
from .router import DeploymentGroup

__all__ = ["ResolvedRoute", "resolve"]


@dataclass(frozen=True)
class ResolvedRoute:
    """A route as built, for ``llmguard check``: its name, kind, model and where it goes
    (its URL's ``${NAME}`` references as written, never their values)."""

    name: str
    kind: str
    model: str | None
    base_url: str | None
    key_from: str | None
    group: str | None = None


def resolve(
    config: ConfigFile, environ: Mapping[str, str]
) -> tuple[list[Provider | DeploymentGroup], list[ResolvedRoute]]:
    """The chain's entries, and a description of each route (keys never shown)."""
    entries: list[Provider | DeploymentGroup] = []
    described: list[ResolvedRoute] = []
    for index, entry in enumerate(config.routes):
        if isinstance(entry, GroupConfig):
            built = [
                _route(route, environ, f"routes.{index}.deployments.{i}", config.folder)
                for i, route in enumerate(entry.deployments)
            ]
            try:
                group = DeploymentGroup(
                    entry.group,
                    [provider for provider, _ in built],
                    strategy=entry.strategy,
                    weights=entry.weights,
                    regions=entry.regions,
                    region=entry.region,
                    **entry.tuning(),
                )
            except ConfigurationError as exc:  # its own keys ("weights: ..."), in routes.N
                raise ConfigurationError(f"routes.{index}: {exc}") from None
            entries.append(group)
            described += [_in_group(info, entry.group) for _, info in built]
        else:
            provider, info = _route(entry, environ, f"routes.{index}", config.folder)
            entries.append(provider)
            described.append(info)
    repeated = _repeated_names(config, described)
    if repeated:  # the Guard's rule: the file says which routes to name
        raise ConfigurationError(f"routes: {repeated}: route and group names must be unique")
    return entries, described


_COUNTS = {1: "a", 2: "two", 3: "three"}


def _repeated_names(config: ConfigFile, described: list[ResolvedRoute]) -> str | None:
    """``two routes are named 'a'`` (``a route and a group ...``) for each name given more
    than once (tiers name routes and groups alike), and, where a route without a name took
    its shortcut's, that it should be given one; None when each is unique."""
    groups = [entry.group for entry in config.routes if isinstance(entry, GroupConfig)]
    routes = [info.name for info in described]
    names = routes + groups
    given = [*groups]  # the names the file wrote (a route without one: its shortcut's)
    for entry in config.routes:
        deployments = entry.deployments if isinstance(entry, GroupConfig) else [entry]
        given += [route.name for route in deployments if route.name is not None]
    said = []
    for name in sorted({name for name in names if names.count(name) > 1}):
        counted = [
            f"{_COUNTS.get(count, count)} {kind}{'s' if count > 1 else ''}"
            for kind, count in (("route", routes.count(name)), ("group", groups.count(name)))
            if count
        ]
        unnamed = given.count(name) < names.count(name)
        why = " (a route without a name is named after its shortcut: give each a name)"
        said.append(f"{' and '.join(counted)} are named {name!r}{why if unnamed else ''}")
    return "; ".join(said) or None


def _in_group(info: ResolvedRoute, group: str) -> ResolvedRoute:
    return ResolvedRoute(info.name, info.kind, info.model, info.base_url, info.key_from, group)


def _route(
    route: RouteConfig, environ: Mapping[str, str], where: str, folder: Path | None
) -> tuple[Provider, ResolvedRoute]:
    shortcut, model = route.model.split("/", 1)
    if shortcut == "local":
        return _local(route, model, where, folder)
    key_from = _key_from(route.api_key, key_variable(shortcut), environ, f"{where}.api_key")
    api_key = read_references(key_from, environ, f"{where}.api_key")
    given = read_references(route.base_url, environ, f"{where}.base_url")
    base_url = api_root(shortcut, model, route, environ, where, given)
    headers = {
        key: read_references(value, environ, f"{where}.headers.{key}") or ""
        for key, value in (route.headers or {}).items()
    }
    name = route.name or shortcut
    shown = base_url  # a ${NAME} in it is shown as written: it may hold a key (?key=${KEY})
    if route.base_url is not None and EMBEDDED.search(route.base_url):
        shown = api_root(shortcut, model, route, environ, where, route.base_url)
    try:
        provider: Provider
        if shortcut == "anthropic":
            provider = AnthropicProvider(
                base_url, api_key=api_key, model=model, name=name, headers=headers,
                context_window=route.context_window,
            )  # fmt: skip
        else:
            if shortcut == "azure" and api_key is not None:
                headers["api-key"] = api_key
                api_key = None
            provider = OpenAICompatibleProvider(
                base_url, api_key=api_key, model=model,
                name=name, headers=headers, context_window=route.context_window,
                send_cache_key=route.send_cache_key,
            )  # fmt: skip
    except ConfigurationError as exc:  # its URL as written, never a reference's value
        problem = str(exc).replace(base_url, redacted(shown))  # ("got 'ftp://h/?key=sk-..'")
        raise ConfigurationError(f"{where}: {problem}") from None
    return provider, ResolvedRoute(name, shortcut, model, shown, key_from)


def _key_from(
    api_key: str | None, variable: str | None, environ: Mapping[str, str], where: str
) -> str | None:
    """The ``${NAME}`` reference the route's key is read from: its ``api_key``, else its
    shortcut's ``variable`` where it is set (unset: the route sends no key, a local server's).
    A variable set is meant to be the key: one set but empty or blank (``OPENAI_API_KEY=""``,
    a compose file passing on a variable the host lacks), or with whitespace around the key
    (a ``.env`` file's line end), is refused naming it; it went as no key, or was refused as
    an ``api_key`` without saying which variable, and the first call failed with 401."""
    implicit = api_key is None and variable is not None and variable in environ
    if implicit:
        api_key = f"${{{variable}}}"
    match = REFERENCE.match(api_key or "")  # (a route's api_key is one reference)
    value = environ.get(match.group(1)) if match else None
    if match is None or value is None or (value == "" and not implicit):
        return api_key  # (a reference unset or empty is said when it is read)
    if not value.strip():
        no_key = ", or unset it for a route that sends no key" if implicit else ""
        raise ConfigurationError(
            f"{where}: the environment variable {match.group(1)} is set but empty: set it to "
            f"the key{no_key}"
        )
    if value != value.strip():
        raise ConfigurationError(
            f"{where}: the environment variable {match.group(1)} has whitespace around the "
            "key (a line end from a .env file?): remove it"
        )
    return api_key


def _local(
    route: RouteConfig, model: str, where: str, folder: Path | None
) -> tuple[Provider, ResolvedRoute]:
    """The ``local/`` route: the bundled model, or a GGUF file (``~`` the home folder; a
    relative path in a file read from the file's ``folder``; built in Python, from the
    working directory)."""
    from .providers.local import LocalProvider

    path = None if model == "bundled" else _gguf_path(model, where, folder)
    try:
        provider = LocalProvider(path, name=route.name or "local")
    except ConfigurationError as exc:
        raise ConfigurationError(f"{where}: {exc}") from None
    shown = model if path is None else str(path)  # (llmguard check: the file it loads)
    return provider, ResolvedRoute(provider.name, "local", shown, None, None)


def _gguf_path(model: str, where: str, folder: Path | None) -> Path:
    """A ``local/`` route's GGUF path: ``~`` expanded, then read from ``folder`` when relative
    (an absolute path is kept)."""
    try:
        path = Path(model).expanduser()
    except RuntimeError:  # ("~nobody/m.gguf", or no home folder known)
        raise ConfigurationError(
            f"{where}: cannot expand ~ in {model!r}: no such user, or no home folder"
        ) from None
    return path if folder is None else folder / path
