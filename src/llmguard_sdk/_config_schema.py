"""The keys a configuration takes: pydantic models of a whole file, its routes and groups.

::

    timeout = 30                                  # any Guard setting (see config.py)

    [[routes]]
    model = "openai/gpt-4o-mini"                  # provider shortcut / model
    api_key = "${OPENAI_API_KEY}"                 # optional: a reference, never the key
    send_cache_key = false                        # optional: a PromptBuilder's prompt_cache_key
                                                  # sent or not (left out: by the URL)

    [[routes]]
    group = "claude"                              # a DeploymentGroup
    strategy = "latency"
    deployments = [
      { model = "anthropic/claude-3-5-haiku-latest", name = "anthropic" },
      { model = "openrouter/anthropic/claude-3.5-haiku", name = "openrouter" },
    ]

    [[routes]]
    model = "local/bundled"                       # the bundled llama.cpp model, or a .gguf path
                                                  # (~: home; relative: from the file's folder)

    [tasks]                                       # optional: task routing and cascades
    tiers = { small = ["openai"], large = ["claude"] }     # (see _config_tasks.py)

The shortcuts are in ``_config_shortcuts.py``. A ``${NAME}`` reference is read in
``api_key``, ``base_url``, ``headers`` and ``store`` only (``_config_references.py``): one in
any other key is refused (it would be taken as written); an ``api_key`` given as plain text
is refused, as is a credential header's value (``Authorization``, a header named ``...Key``,
``...Token``) without a reference, so keys never sit in the file.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    PrivateAttr,
    Tag,
    ValidationInfo,
    field_validator,
    model_validator,
)

from ._config_references import CREDENTIAL_HEADER, EMBEDDED, REFERENCE, read_references
from ._config_shortcuts import SHORTCUTS
from ._config_tasks import TasksConfig
from ._problems import resembled
from ._whole_counts import read_count
from .config import _bad_store, _literal, _not_a_bool
from .errors import ConfigurationError
from .router import Strategy
from .router.groups import TUNING, _weights, check_tuning

__all__ = ["ConfigFile", "GroupConfig", "RouteConfig"]


def _token_count(value: object) -> object:
    """A count of tokens (``context_window``, ``max_input_tokens``): no bool, and a whole number
    from 1 to 2**31 - 1 (:func:`~llmguard_sdk._whole_counts.read_count`; 1e30 said pydantic's
    "Unable to parse input string as an integer, exceeded maximum size"; 3e9 passed, larger
    than any model's context)."""
    return read_count(_not_a_bool(value))


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
    send_cache_key: bool | None = None  # None: by the route's URL (OpenAICompatibleProvider's)

    _numbers = field_validator("context_window", mode="before")(_token_count)
    _literals = field_validator("model", "name", "api_version", mode="before")(_literal)

    @field_validator("model")
    @classmethod
    def _check_model(cls, model: str) -> str:
        shortcut, slash, name = model.partition("/")
        if shortcut in SHORTCUTS and name.strip():
            return model
        if shortcut in SHORTCUTS:  # "openai/": every call sent ""
            problem = f"{model!r} names no model"
        elif not slash:  # "gpt-4o-mini"
            problem = f"{model!r} names no shortcut"
        else:
            near = resembled(shortcut, SHORTCUTS)
            meant = f" (did you mean {near}/{name}?)" if near else ""
            problem = f"{shortcut!r} is no shortcut{meant}"
        raise ValueError(
            f"model must be <shortcut>/<model>, the shortcut one of {', '.join(SHORTCUTS)}: "
            + problem
        )

    @field_validator("send_cache_key", mode="before")
    @classmethod
    def _check_send_cache_key(cls, value: object) -> object:
        """true or false: pydantic read ``"yes"``, ``"true"`` and ``1`` as true."""
        if value is not None and not isinstance(value, bool):
            raise ValueError(
                f"must be true or false (left out: by the route's URL), got {value!r:.40}"
            )
        return value

    @field_validator("api_key")
    @classmethod
    def _check_key(cls, api_key: str | None) -> str | None:
        if api_key is not None and not REFERENCE.match(api_key):
            raise ValueError("api_key must be a ${VARIABLE} reference, never the key itself")
        return api_key

    @field_validator("headers")
    @classmethod
    def _check_headers(cls, headers: dict[str, str] | None) -> dict[str, str] | None:
        """A credential header (``Authorization``, ``X-Gateway-Key`` ...) is a reference,
        as ``api_key`` is: a key written in the file was accepted there."""
        for name, value in (headers or {}).items():
            if CREDENTIAL_HEADER.search(name) and not EMBEDDED.search(value):
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
        if shortcut in ("anthropic", "local") and self.send_cache_key is not None:
            unused.append("send_cache_key")  # (no OpenAI hint is sent there)
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
    # the ``latency`` strategy's tuning (None: the group's default), checked as it checks it
    half_life_s: float | None = None
    penalty_s: float | None = None
    slack: float | None = None
    buffer: float | None = None
    deployments: list[RouteConfig] = Field(min_length=1)

    _literals = field_validator("group", "regions", "region", mode="before")(_literal)

    @field_validator("half_life_s", "penalty_s", "slack", "buffer", mode="before")
    @classmethod
    def _check_tuning(cls, value: object, info: ValidationInfo) -> object:
        """The constructor's own check and words (``true`` was read as 1.0, ``nan`` kept)."""
        if value is not None:
            assert info.field_name is not None
            check_tuning(info.field_name, value)
        return value

    def tuning(self) -> dict[str, Any]:
        """The tuning settings the group sets, as keyword arguments of
        :class:`~llmguard_sdk.DeploymentGroup` (those left out: its defaults)."""
        return {name: getattr(self, name) for name in TUNING if getattr(self, name) is not None}

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
        if self.weights is not None:  # as the group checks them: for ``weighted`` only
            _weights(self.weights, len(self.deployments), self.strategy)
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

    _numbers = field_validator("timeout", "attempt_timeout", mode="before")(_not_a_bool)
    _tokens = field_validator("max_input_tokens", mode="before")(_token_count)
    _folder: Path | None = PrivateAttr(default=None)

    @property
    def folder(self) -> Path | None:
        """The folder of the file this was read from (None: built from a mapping): a
        ``local/`` route's relative GGUF path is read from it."""
        return self._folder

    def found_in(self, folder: Path) -> ConfigFile:
        """This configuration, as read from a file in ``folder`` (an absolute path): it."""
        self._folder = folder
        return self

    @field_validator("store")
    @classmethod
    def _check_store(cls, store: str | None) -> str | None:
        """The stores the Guard opens (checked here too, so ``llmguard check`` says so)."""
        if store is not None and not EMBEDDED.search(store):  # (with a reference: when read)
            _store_problem(store)
        return store

    def settings(self, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
        """The Guard keyword arguments the file sets (besides its routes); a ``${NAME}``
        ``store`` is read from ``environ`` (without it: as written, for display)."""
        names = ("store", "key_prefix", "timeout", "attempt_timeout", "max_input_tokens")
        found = {n: getattr(self, n) for n in names if getattr(self, n) is not None}
        if environ is not None and "store" in found:
            found["store"] = read_references(found["store"], environ, "store")
            try:
                _store_problem(found["store"])
            except ValueError as exc:
                raise ConfigurationError(f"store (from the environment): {exc}") from None
        return found


def _store_problem(store: str) -> None:
    """Raise ``ValueError`` unless ``store`` names a store the Guard opens."""
    problem = _bad_store(store)
    if problem is not None:
        raise ValueError(problem)
