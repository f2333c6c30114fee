"""Task routing and cascades as data: the ``[tasks]`` table of a configuration file.

::

    [tasks]
    default = "auto"                      # a tier or cascade (default: the first tier)
    classifier = "myapp.routing:classify" # optional: module:function(request, scope) -> name

    [tasks.tiers]                         # route or group names of [[routes]], tried in order
    small = ["mini", "local"]
    large = ["big", "local"]

    [tasks.cascades.auto]
    tiers = ["small", "large"]            # cheapest first
    checks = ["finish_reason", "json"]    # built-in checks: finish_reason, json, not_empty
    json_schema = { type = "object", required = ["answer"] }   # optional: the json check's
    validator = "myapp.checks:good"       # optional: module:function(response) -> bool

    [[tasks.rules]]                       # the first rule that matches names the tier
    tier = "large"
    tools = true                          # also: feature, tenant, min_tokens, max_tokens,
                                          # when = "module:function(request, scope) -> bool"
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .config import _literal, _not_a_bool
from .errors import ConfigurationError
from .router import Cascade, Rule, TaskRouter
from .router.cascade import Check, finish_reason, json_schema, not_empty, validator

__all__ = ["TasksConfig"]


class RuleConfig(BaseModel):
    """One :class:`~llmguard_sdk.Rule`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tier: str = Field(min_length=1)
    feature: str | list[str] | None = None
    tenant: str | list[str] | None = None
    min_tokens: int | None = Field(default=None, ge=0)
    max_tokens: int | None = Field(default=None, ge=0)
    tools: bool | None = None
    when: str | None = Field(default=None, pattern=r"^[\w.]+:\w+$")

    _numbers = field_validator("min_tokens", "max_tokens", mode="before")(_not_a_bool)
    _literals = field_validator("tier", "feature", "tenant", mode="before")(_literal)


class CascadeConfig(BaseModel):
    """One :class:`~llmguard_sdk.Cascade`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tiers: list[str] = Field(min_length=2)
    checks: list[Literal["finish_reason", "json", "not_empty"]] = ["finish_reason"]
    finish_reasons: list[str] | None = None
    json_schema: dict[str, Any] | None = None
    validator: str | None = Field(default=None, pattern=r"^[\w.]+:\w+$")
    on_error: bool = True
    on_output_filter: bool = True

    _literals = field_validator("tiers", "finish_reasons", mode="before")(_literal)

    @model_validator(mode="after")
    def _check(self) -> CascadeConfig:
        """A check's settings without the check would be accepted and never used."""
        for key, check in (("finish_reasons", "finish_reason"), ("json_schema", "json")):
            if getattr(self, key) is not None and check not in self.checks:
                raise ValueError(f"{key} is for the {check!r} check, which checks does not list")
        return self


def _no_rules() -> list[RuleConfig]:
    """A fresh empty list: ``default_factory=list`` made pydantic read ``list``'s signature
    from its text, which compiled the tokenizer's patterns (some 20 ms, a third of the
    package's regular expressions together) as the module was imported."""
    return []


class TasksConfig(BaseModel):
    """The ``tasks`` table: a :class:`~llmguard_sdk.TaskRouter`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tiers: dict[str, list[str]] = Field(min_length=1)
    cascades: dict[str, CascadeConfig] = Field(default_factory=dict)
    rules: list[RuleConfig] = Field(default_factory=_no_rules)
    classifier: str | None = Field(default=None, pattern=r"^[\w.]+:\w+$")
    default: str | None = None

    _literals = field_validator("tiers", "default", mode="before")(_literal)

    def build(self) -> TaskRouter:
        """The :class:`~llmguard_sdk.TaskRouter` (its callables imported); a bad name raises
        :class:`~llmguard_sdk.errors.ConfigurationError` naming the key."""
        rules = [
            Rule(
                **rule.model_dump(exclude={"when"}),
                when=_imported(rule.when, f"tasks.rules.{i}.when") if rule.when else None,
            )
            for i, rule in enumerate(self.rules)
        ]
        cascades = {
            name: _cascade(cascade, f"tasks.cascades.{name}")
            for name, cascade in self.cascades.items()
        }
        classifier = _imported(self.classifier, "tasks.classifier") if self.classifier else None
        try:
            return TaskRouter(
                self.tiers,
                cascades=cascades,
                rules=rules,
                classifier=classifier,
                default=self.default,
            )
        except ConfigurationError as exc:
            raise ConfigurationError(f"tasks: {exc}") from None


def _cascade(config: CascadeConfig, where: str) -> Cascade:
    checks: list[Check] = []
    for name in config.checks:
        if name == "finish_reason":
            checks.append(finish_reason(*(config.finish_reasons or ())))
        elif name == "json":
            checks.append(json_schema(config.json_schema))
        else:
            checks.append(not_empty())
    if config.validator is not None:
        checks.append(validator(_imported(config.validator, f"{where}.validator")))
    try:
        return Cascade(
            config.tiers,
            checks=checks,
            on_error=config.on_error,
            on_output_filter=config.on_output_filter,
        )
    except ConfigurationError as exc:
        raise ConfigurationError(f"{where}: {exc}") from None


def _imported(path: str, where: str) -> Callable[..., Any]:
    """The callable ``module:name`` names."""
    module_name, _, attribute = path.partition(":")
    try:
        found = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise ConfigurationError(f"{where}: cannot import {path!r}: {exc}") from None
    except Exception as exc:  # the module failed as it ran: a syntax error, a raise
        problem = f"{type(exc).__name__}: {exc}"
        raise ConfigurationError(f"{where}: importing {path!r} failed: {problem}") from exc
    if not callable(found):
        raise ConfigurationError(f"{where}: {path!r} is not callable")
    return found  # type: ignore[no-any-return]
