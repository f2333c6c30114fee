"""The root of the tree and the errors raised before any call: bad configuration, a bad
request (see :mod:`llmguard_sdk.errors`, which exports them)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "ConfigurationError",
    "GuardrailRejectedError",
    "InputTooLargeError",
    "LLMGuardError",
    "MovingModelAliasError",
    "PromptLintError",
    "RequestValidationError",
    "UnknownModelError",
    "UnknownModelPriceError",
    "lint_remedy",
    "rebuilt",
]


class LLMGuardError(Exception):
    """Base class of every exception llmguard-sdk raises itself.

    Every one pickles and copies as itself (attributes included), so it crosses process
    boundaries (process pools, multiprocessing, task queues) intact.
    """

    def __reduce__(self) -> tuple[Any, ...]:
        # Exception's own reduce calls the class with ``args`` (the message alone here), which
        # most of these __init__s do not take: rebuild without __init__, then restore vars.
        return (rebuilt, (type(self), self.args), self.__dict__)


def rebuilt(cls: type[LLMGuardError], args: tuple[Any, ...]) -> LLMGuardError:
    error = cls.__new__(cls, *args)
    error.args = args
    return error


class ConfigurationError(LLMGuardError, ValueError):
    """The Guard, a provider or an environment variable is configured wrongly."""


class UnknownModelPriceError(ConfigurationError):
    """The price table has no price for this model and no default price.

    ``provider`` and ``model`` name what was looked up. A budgeted Guard raises it as it is
    built for a route's own model; for the model a call names on a route without one, at that
    call, before anything is held or sent.

    .. versionadded:: 0.2.0
    """

    def __init__(self, provider: str | None, model: str) -> None:
        where = f"{provider}/{model}" if provider else model
        super().__init__(
            f"no price for model {where!r}: add it with PriceTable.with_prices(...) or give "
            "the table a default price (PriceTable(default=Price(...)))"
        )
        self.provider = provider
        self.model = model


class MovingModelAliasError(ConfigurationError):
    """A :class:`~llmguard_sdk.releases.Release` names a model by a moving alias (``gpt-4o``,
    ``claude-sonnet-4-5``, ``...-latest``) whose behaviour the provider may change under it,
    or by an id the SDK cannot tell is fixed (an Azure deployment's name, an id of no known
    form); pin a dated id or pass ``allow_alias=True``. ``model`` and ``route`` name it,
    ``reason`` says why it was refused (empty: a moving alias).

    .. versionadded:: 0.2.0
    """

    def __init__(self, model: str, route: str, reason: str = "") -> None:
        why = reason or (
            "a moving alias: pin a dated id (gpt-4o-2024-08-06, claude-sonnet-4-5-20250929 "
            "...) or pass allow_alias=True"
        )
        super().__init__(f"route {route!r} names model {model!r}, {why}")
        self.model = model
        self.route = route
        self.reason = reason


class RequestValidationError(LLMGuardError, ValueError):
    """The request is invalid; it was refused before any network call.

    ``details`` holds the individual problems (pydantic's error dicts when a model failed).
    """

    def __init__(self, message: str, details: Sequence[Mapping[str, Any]] = ()) -> None:
        super().__init__(message)
        self.details: list[Mapping[str, Any]] = list(details)


class InputTooLargeError(RequestValidationError):
    """The request has more input tokens than the Guard allows per request."""

    def __init__(self, tokens: int, limit: int, *, estimated: bool) -> None:
        kind = "about " if estimated else ""
        super().__init__(f"request has {kind}{tokens} input tokens, the limit is {limit}")
        self.tokens = tokens
        self.limit = limit
        self.estimated = estimated


class GuardrailRejectedError(RequestValidationError):
    """An input or output filter refused the call.

    Raise it from your own filter to refuse a call with a reason; ``stage`` is ``"input"`` or
    ``"output"`` (the Guard fills it in when a filter left it empty).
    """

    def __init__(self, reason: str, *, stage: str = "") -> None:
        super().__init__(f"guardrail rejected the call: {reason}")
        self.reason = reason
        self.stage = stage


class UnknownModelError(RequestValidationError):
    """A call's ``model=`` names no deployment group of the Guard and no model its routes
    serve, and every route has a model of its own, so the name would have been ignored (the
    call served by whatever the chain's first route is). ``model`` is the name asked for;
    ``groups`` the Guard's deployment-group names (what ``model=`` selects); ``models`` the
    models its routes serve. The transport seam and the drop-in clients answer it 404
    ``model_not_found``, as OpenAI answers an unknown model. Only a Guard with deployment
    groups raises it: one without serves any name with its routes' own models.

    .. versionadded:: 0.2.0
    """

    def __init__(self, model: str, groups: Sequence[str], models: Sequence[str]) -> None:
        super().__init__(
            f"model {model!r} names no deployment group of this Guard ({list(groups)}) and no "
            f"model its routes serve ({list(models)}): every route has a model of its own, so "
            "it would be ignored. Pass a group's name to route within that group, a served "
            "model, or leave model= out"
        )
        self.model = model
        self.groups = list(groups)
        self.models = list(models)


class PromptLintError(RequestValidationError):
    """A strict :class:`~llmguard_sdk.prompts.PromptBuilder` found text in the static part of
    its prompt that would break a provider's prefix cache (a timestamp, a random id ...).

    ``warnings`` holds the :class:`~llmguard_sdk.prompts.LintWarning` findings, each with its
    section and span; ``details`` has the same as dicts. The message ends with what to do
    (per-call values into ``build(context=...)``, or ``lint_ignore``).

    .. versionadded:: 0.1.0
    .. versionchanged:: 0.2.0 the message says what to do.
    """

    def __init__(self, template: str, warnings: Sequence[Any]) -> None:
        shown = "; ".join(str(w) for w in warnings[:5])
        more = f" (and {len(warnings) - 5} more)" if len(warnings) > 5 else ""
        super().__init__(
            f"prompt template {template!r} has cache-breaking static text: {shown}{more}; "
            f"{lint_remedy(warnings)}",
            [
                {"rule": w.rule, "section": w.section, "start": w.start, "end": w.end}
                for w in warnings
            ],
        )
        self.template = template
        self.warnings = list(warnings)


def lint_remedy(warnings: Sequence[Any]) -> str:
    """What to do about prompt lint findings (``warnings``: their ``rule`` names them)."""
    rules = sorted({str(w.rule) for w in warnings})
    return (
        "move what changes per call or per user into build(context=...), the prompt's tail, "
        f"or pass lint_ignore={rules} for text that is the same on every call"
    )
