"""Routes and settings as data: a dict, or a TOML, YAML or JSON file (``Guard.from_config``).

::

    timeout = 30                                  # any Guard setting (see config.py)

    [[routes]]
    model = "openai/gpt-4o-mini"                  # provider shortcut / model
    api_key = "${OPENAI_API_KEY}"                 # optional: a reference, never the key

    [[routes]]
    group = "claude"                              # a DeploymentGroup
    strategy = "latency"
    deployments = [
      { model = "anthropic/claude-3-5-haiku-latest", name = "anthropic" },
      { model = "openrouter/anthropic/claude-3.5-haiku", name = "openrouter" },
    ]

    [[routes]]
    model = "local/bundled"                       # the bundled llama.cpp model (or a .gguf path)

    [tasks]                                       # optional: task routing and cascades
    tiers = { small = ["openai"], large = ["claude"] }     # (see _config_tasks.py)

Shortcuts and the environment variables they read when the route names no key (or URL):
``openai/`` (``OPENAI_API_KEY``, ``OPENAI_BASE_URL``), ``anthropic/`` (``ANTHROPIC_API_KEY``),
``azure/<deployment>`` (``AZURE_OPENAI_API_KEY``, ``AZURE_OPENAI_ENDPOINT``,
``OPENAI_API_VERSION``), ``openrouter/`` (``OPENROUTER_API_KEY``), ``groq/``
(``GROQ_API_KEY``), ``together/`` (``TOGETHER_API_KEY``), ``ollama/`` (``OLLAMA_HOST``, local
by default), ``vllm/`` (``base_url`` required), ``local/`` (``bundled`` or a GGUF path).
A ``${NAME}`` reference in ``api_key``, ``base_url``, ``headers`` or ``store`` (a Redis URL
with its password, say), the whole value or a part of it (``Bearer ${TOKEN}``), is read from
the environment when the Guard is built (a reference in any other key is refused: it would
be taken as written); an ``api_key`` given
as plain text is refused, as is a credential header's value (``Authorization``, a header
named ``...Key``, ``...Token``) without a reference, so keys never sit in the file. An
``azure/`` route's ``base_url`` is its resource endpoint (as ``AZURE_OPENAI_ENDPOINT``),
unless it is a whole ``.../openai/...`` URL.
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
import json
import os
import re
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    field_validator,
    model_validator,
)

from ._config_tasks import TasksConfig
from ._problems import problems
from ._state.stores import _redacted
from .config import _bad_store, _literal, _not_a_bool
from .errors import ConfigurationError
from .providers.anthropic import AnthropicProvider
from .providers.base import Provider
from .providers.openai_compat import OpenAICompatibleProvider
from .router import DeploymentGroup, Strategy, TaskRouter

__all__ = [
    "CONFIG_ENV",
    "ConfigFile",
    "ResolvedRoute",
    "load_config",
    "naming",
    "options_for",
    "redacted",
    "resolve",
    "tasks_of",
]

CONFIG_ENV = "LLMGUARD_CONFIG"
_REFERENCE = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$")
_EMBEDDED = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")  # "Bearer ${TOKEN}"
_CREDENTIAL_HEADER = re.compile(r"(?i)authorization|key|token|secret|password")
_QUERY_PARAMETER = re.compile(r"([?&])([^=&#]+)=([^&#]*)")

# shortcut -> (base URL or None, environment variable of the key, of the base URL)
_OPENAI_LIKE: dict[str, tuple[str | None, str | None, str | None]] = {
    "openai": ("https://api.openai.com/v1", "OPENAI_API_KEY", "OPENAI_BASE_URL"),
    "openrouter": ("https://openrouter.ai/api/v1", "OPENROUTER_API_KEY", None),
    "groq": ("https://api.groq.com/openai/v1", "GROQ_API_KEY", None),
    "together": ("https://api.together.xyz/v1", "TOGETHER_API_KEY", None),
    "ollama": ("http://127.0.0.1:11434/v1", None, "OLLAMA_HOST"),
    "vllm": (None, "VLLM_API_KEY", None),
}
SHORTCUTS = (*_OPENAI_LIKE, "anthropic", "azure", "local")


class RouteConfig(BaseModel):
    """One route: ``model`` is ``<shortcut>/<model>``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str = Field(min_length=3)
    name: str | None = Field(default=None, min_length=1)
    api_key: str | None = None
    base_url: str | None = None
    api_version: str | None = None  # azure
    context_window: int | None = Field(default=None, gt=0)
    headers: dict[str, str] | None = None

    _numbers = field_validator("context_window", mode="before")(_not_a_bool)
    _literals = field_validator("model", "name", "api_version", mode="before")(_literal)

    @field_validator("model")
    @classmethod
    def _check_model(cls, model: str) -> str:
        shortcut, _, name = model.partition("/")
        if shortcut not in SHORTCUTS or not name.strip():  # "openai/": every call sent ""
            raise ValueError(f"model must be <shortcut>/<model> with a shortcut of {SHORTCUTS}")
        return model

    @field_validator("api_key")
    @classmethod
    def _check_key(cls, api_key: str | None) -> str | None:
        if api_key is not None and not _REFERENCE.match(api_key):
            raise ValueError("api_key must be a ${VARIABLE} reference, never the key itself")
        return api_key

    @field_validator("headers")
    @classmethod
    def _check_headers(cls, headers: dict[str, str] | None) -> dict[str, str] | None:
        """A credential header (``Authorization``, ``X-Gateway-Key`` ...) is a reference,
        as ``api_key`` is: a key written in the file was accepted there."""
        for name, value in (headers or {}).items():
            if _CREDENTIAL_HEADER.search(name) and not _EMBEDDED.search(value):
                raise ValueError(
                    f"header {name!r} carries a credential: a ${{VARIABLE}} reference "
                    '("Bearer ${TOKEN}"), never the key itself'
                )
        return headers

    @model_validator(mode="after")
    def _check(self) -> RouteConfig:
        shortcut = self.model.split("/", 1)[0]
        unused = ["api_version"] if shortcut != "azure" and self.api_version is not None else []
        if shortcut == "local":  # the bundled llama.cpp model: no HTTP, its own context
            keys = ("api_key", "base_url", "headers", "context_window")
            unused += [key for key in keys if getattr(self, key) is not None]
        if unused:  # accepted and never used, it would mislead: refused
            raise ValueError(f"{shortcut}/ routes take no {', '.join(unused)}")
        return self


class GroupConfig(BaseModel):
    """A :class:`~llmguard_sdk.DeploymentGroup` of routes."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    group: str = Field(min_length=1)
    strategy: Strategy = "latency"
    weights: list[float] | None = None
    regions: dict[str, str] | None = None
    region: str | None = None
    deployments: list[RouteConfig] = Field(min_length=1)

    _literals = field_validator("group", "regions", "region", mode="before")(_literal)

    @field_validator("weights", mode="before")
    @classmethod
    def _check_weights(cls, weights: object) -> object:
        """``[true, false]`` was read as ``[1.0, 0.0]``."""
        if isinstance(weights, list):
            for weight in weights:
                _not_a_bool(weight)
        return weights

    @model_validator(mode="after")
    def _check(self) -> GroupConfig:
        if self.weights is not None and self.strategy != "weighted":  # accepted, never used
            raise ValueError(
                f"weights are for strategy = 'weighted'; this group's is {self.strategy!r}"
            )
        return self


def _kind(entry: Any) -> str:
    """Which of a route and a group an entry of ``routes`` is (one with ``group`` is a group):
    its errors then name its own keys, not the other kind's."""
    group = isinstance(entry, GroupConfig) or (isinstance(entry, Mapping) and "group" in entry)
    return "GroupConfig" if group else "RouteConfig"


_Entry = Annotated[
    Annotated[RouteConfig, Tag("RouteConfig")] | Annotated[GroupConfig, Tag("GroupConfig")],
    Discriminator(_kind),
]


class ConfigFile(BaseModel):
    """A whole configuration: Guard settings and the chain's routes."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    store: str | None = None
    key_prefix: str | None = Field(default=None, min_length=1, pattern=r"^[A-Za-z0-9_.:-]+$")
    timeout: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    attempt_timeout: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    max_input_tokens: int | None = Field(default=None, gt=0)
    routes: list[_Entry] = Field(min_length=1)
    tasks: TasksConfig | None = None

    _numbers = field_validator("timeout", "attempt_timeout", "max_input_tokens", mode="before")(
        _not_a_bool
    )

    @field_validator("store")
    @classmethod
    def _check_store(cls, store: str | None) -> str | None:
        """The stores the Guard opens (checked here too, so ``llmguard check`` says so)."""
        if store is not None and not _EMBEDDED.search(store):  # (with a reference: when read)
            _store_problem(store)
        return store

    def settings(self, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
        """The Guard keyword arguments the file sets (besides its routes); a ``${NAME}``
        ``store`` is read from ``environ`` (without it: as written, for display)."""
        names = ("store", "key_prefix", "timeout", "attempt_timeout", "max_input_tokens")
        found = {n: getattr(self, n) for n in names if getattr(self, n) is not None}
        if environ is not None and "store" in found:
            found["store"] = _value(found["store"], environ, "store")
            try:
                _store_problem(found["store"])
            except ValueError as exc:
                raise ConfigurationError(f"store (from the environment): {exc}") from None
        return found


def redacted(url: str) -> str:
    """``url`` as errors and ``llmguard check`` show it: without its password
    (``user:***@``) nor the value of a query parameter named as a credential (``?key=***``,
    ``?password=***``); a ``${NAME}`` reference is shown as written."""

    def parameter(match: re.Match[str]) -> str:
        sign, name, value = match.groups()
        if not _CREDENTIAL_HEADER.search(name) or _REFERENCE.match(value):
            return match.group(0)
        return f"{sign}{name}=***"

    with contextlib.suppress(ValueError):  # (not a URL urlsplit reads: its query still)
        url = _redacted(url)
    return _QUERY_PARAMETER.sub(parameter, url)


def _store_problem(store: str) -> None:
    """Raise ``ValueError`` unless ``store`` names a store the Guard opens."""
    problem = _bad_store(store)
    if problem is not None:
        raise ValueError(problem)


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


def load_config(source: str | os.PathLike[str] | Mapping[str, Any]) -> ConfigFile:
    """Read and validate a configuration; errors name the file and the bad key."""
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
        data = _read(path)
    try:
        return ConfigFile.model_validate(data)
    except ValidationError as exc:
        found = problems(exc, "configuration", skip=("RouteConfig", "GroupConfig"))
        raise ConfigurationError(f"{where}: " + "; ".join(found)) from None


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


def _read(path: Path) -> Any:
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


def resolve(
    config: ConfigFile, environ: Mapping[str, str]
) -> tuple[list[Provider | DeploymentGroup], list[ResolvedRoute]]:
    """The chain's entries, and a description of each route (keys never shown)."""
    entries: list[Provider | DeploymentGroup] = []
    described: list[ResolvedRoute] = []
    for index, entry in enumerate(config.routes):
        if isinstance(entry, GroupConfig):
            built = [
                _route(route, environ, f"routes.{index}.deployments.{i}")
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
                )
            except ConfigurationError as exc:  # its own keys ("weights: ..."), in routes.N
                raise ConfigurationError(f"routes.{index}: {exc}") from None
            entries.append(group)
            described += [_in_group(info, entry.group) for _, info in built]
        else:
            provider, info = _route(entry, environ, f"routes.{index}")
            entries.append(provider)
            described.append(info)
    groups = [entry.group for entry in config.routes if isinstance(entry, GroupConfig)]
    names = [info.name for info in described] + groups  # tiers name either
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:  # the Guard's rule: the file says which routes to name
        raise ConfigurationError(
            f"routes: route and group names must be unique; repeated: {repeated} (give each a name)"
        )
    return entries, described


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


def _in_group(info: ResolvedRoute, group: str) -> ResolvedRoute:
    return ResolvedRoute(info.name, info.kind, info.model, info.base_url, info.key_from, group)


def _value(text: str | None, environ: Mapping[str, str], where: str) -> str | None:
    """``text`` with each ``${NAME}`` reference replaced by the variable it names (a whole
    value, or within one: ``Bearer ${TOKEN}``, ``http://${HOST}/v1``, which were sent as
    written)."""
    if text is None:
        return None

    def read(match: re.Match[str]) -> str:
        value = environ.get(match.group(1))
        if not value:
            raise ConfigurationError(
                f"{where}: the environment variable {match.group(1)} is not set (or empty)"
            )
        return value

    return _EMBEDDED.sub(read, text)


def _route(
    route: RouteConfig, environ: Mapping[str, str], where: str
) -> tuple[Provider, ResolvedRoute]:
    shortcut, model = route.model.split("/", 1)
    if shortcut == "local":
        return _local(route, model, where)
    key_var = _key_variable(shortcut)
    key_from = route.api_key or (f"${{{key_var}}}" if key_var and environ.get(key_var) else None)
    api_key = _value(key_from, environ, f"{where}.api_key")
    given = _value(route.base_url, environ, f"{where}.base_url")
    base_url = _base_url(shortcut, model, route, environ, where, given)
    headers = {
        key: _value(value, environ, f"{where}.headers.{key}") or ""
        for key, value in (route.headers or {}).items()
    }
    name = route.name or shortcut
    shown = base_url  # a ${NAME} in it is shown as written: it may hold a key (?key=${KEY})
    if route.base_url is not None and _EMBEDDED.search(route.base_url):
        shown = _base_url(shortcut, model, route, environ, where, route.base_url)
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
            )  # fmt: skip
    except ConfigurationError as exc:  # its URL as written, never a reference's value
        problem = str(exc).replace(base_url, redacted(shown))  # ("got 'ftp://h/?key=sk-..'")
        raise ConfigurationError(f"{where}: {problem}") from None
    return provider, ResolvedRoute(name, shortcut, model, shown, key_from)


def _key_variable(shortcut: str) -> str | None:
    if shortcut == "anthropic":
        return "ANTHROPIC_API_KEY"
    if shortcut == "azure":
        return "AZURE_OPENAI_API_KEY"
    return _OPENAI_LIKE[shortcut][1]


def _base_url(
    shortcut: str,
    model: str,
    route: RouteConfig,
    environ: Mapping[str, str],
    where: str,
    given: str | None,
) -> str:
    """The route's API root: ``given`` (its ``base_url``), else the shortcut's. An azure/
    ``base_url`` is the resource's endpoint, as ``AZURE_OPENAI_ENDPOINT`` is (the deployment
    and ``api_version`` go on it), unless it is a whole ``.../openai/...`` URL already."""
    if given and (shortcut != "azure" or "/openai/" in urlsplit(given).path + "/"):
        return given
    if shortcut == "anthropic":
        return "https://api.anthropic.com/v1"
    if shortcut == "azure":
        endpoint = given or environ.get("AZURE_OPENAI_ENDPOINT")
        version = route.api_version or environ.get("OPENAI_API_VERSION")
        if not endpoint or not version:
            raise ConfigurationError(
                f"{where}: azure/ needs base_url (or AZURE_OPENAI_ENDPOINT) and api_version "
                "(or OPENAI_API_VERSION)"
            )
        return f"{endpoint.rstrip('/')}/openai/deployments/{model}?api-version={version}"
    default, _key, url_variable = _OPENAI_LIKE[shortcut]
    given = environ.get(url_variable) if url_variable else None
    if shortcut == "ollama" and given:
        given = given.rstrip("/") + "/v1" if not given.rstrip("/").endswith("/v1") else given
        given = given if "://" in given else f"http://{given}"
    if given:
        return given
    if default is None:
        raise ConfigurationError(f"{where}: {shortcut}/ needs base_url")
    return default


def _local(route: RouteConfig, model: str, where: str) -> tuple[Provider, ResolvedRoute]:
    from .providers.local import LocalProvider

    path = None if model == "bundled" else model
    try:
        provider = LocalProvider(path, name=route.name or "local")
    except ConfigurationError as exc:
        raise ConfigurationError(f"{where}: {exc}") from None
    return provider, ResolvedRoute(provider.name, "local", model, None, None)
