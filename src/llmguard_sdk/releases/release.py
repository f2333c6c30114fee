"""What a release is (:class:`Release`), what a Guard does with one or two of them
(:class:`ReleasePlan`), and what it tells about them (:class:`ReleaseEvent`).

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from pydantic import ValidationError

from .._problems import problems
from ..budget.prices import PriceTable
from ..errors import ConfigurationError, MovingModelAliasError, UnknownModelPriceError
from ..models import ChatRequest
from ..prompts.adapters import (
    CACHE_HISTORY_KEY,
    PREFIX_HASH_KEY,
    STATIC_MESSAGES_KEY,
    static_prefix_hash,
)
from ..providers.base import Provider, is_local
from ..router import DeploymentGroup
from ._pinning import judge, judge_route
from .policy import CanaryPolicy, is_number

if TYPE_CHECKING:
    from .shadow import ShadowPolicy

__all__ = [
    "Arm",
    "Release",
    "ReleaseEvent",
    "ReleaseHook",
    "ReleasePlan",
    "is_moving_alias",
    "read_clock",
    "retirements",
]

Arm = Literal["control", "canary", "shadow"]
"""Which side of a release a call is on."""

logger = logging.getLogger("llmguard_sdk")

_PARAMETERS = frozenset(ChatRequest.model_fields) - {"messages", "model", "extra_headers"}


def is_moving_alias(model: str) -> bool:
    """Whether ``model`` is, or may be, a moving alias: ``...-latest``, an undated preview, a
    provider's bare name (``gpt-4o``, ``claude-sonnet-4-5``, ``gemini-2.0-flash``, also as
    ``openai/gpt-4o``), or an id of no form known to be fixed. Not: a date or version suffix
    (``gpt-4o-2024-08-06``, ``gpt-4-0613``, ``claude-sonnet-4-5-20250929``,
    ``gemini-2.0-flash-001``, ``mistral-large-2407``, ``...-v1:0``, ``...-v0.3``), Google's
    stable Gemini ids from 2.5 on (``gemini-2.5-pro``), an OpenAI fine-tune (``ft:...``), a
    Hugging Face repository (``meta-llama/Llama-3.1-8B-Instruct``, ``...@<commit>``), a
    ``.gguf`` file."""
    return judge(model)[0] != "pinned"


@dataclass(frozen=True, init=False)
class Release:
    """A named, versioned bundle of what defines a feature's behaviour: its routes (providers
    or a :class:`~llmguard_sdk.DeploymentGroup`, each with an exact model id), the prompt
    template's version and system prompt, and request parameters.

    Args:
        name: the feature or bundle's name (``"support-bot"``).
        version: its version (``"2026-03-01"``, ``"v7"``): ``id`` is ``name@version``.
        routes: the fallback chain this release serves from.
        prompt_version: a label of the prompt template it uses (telemetry carries it).
        system_prompt: the system message it sends (replaces the request's first one, or
            goes first when the request has none).
        parameters: request parameters (``temperature``, ``max_tokens`` ...) applied where a
            call sets none (a mapping's keys where the call's lacks them; an output limit
            where the call has neither ``max_tokens`` nor ``max_completion_tokens``);
            validated as a request's (a bad one raises
            :class:`~llmguard_sdk.errors.ConfigurationError`).
        allow_alias: accept moving model aliases (``gpt-4o``); otherwise they raise
            :class:`~llmguard_sdk.errors.MovingModelAliasError`.

    .. versionadded:: 0.2.0
    """

    name: str
    version: str
    routes: tuple[Provider | DeploymentGroup, ...]
    prompt_version: str | None
    system_prompt: str | None
    parameters: Mapping[str, Any]
    allow_alias: bool

    def __init__(
        self,
        name: str,
        version: str,
        routes: Provider | DeploymentGroup | Sequence[Provider | DeploymentGroup],
        *,
        prompt_version: str | None = None,
        system_prompt: str | None = None,
        parameters: Mapping[str, Any] | None = None,
        allow_alias: bool = False,
    ) -> None:
        for label, text in (("name", name), ("version", version)):
            if not isinstance(text, str) or not re.fullmatch(r"[A-Za-z0-9_.:-]{1,64}", text):
                raise ConfigurationError(f"release {label} must be 1-64 of A-Za-z0-9_.:-")
        entries = tuple(routes) if isinstance(routes, Sequence) else (routes,)
        if not entries or not all(isinstance(e, (Provider, DeploymentGroup)) for e in entries):
            raise ConfigurationError(f"release {name!r} needs Provider or DeploymentGroup routes")
        if not isinstance(allow_alias, bool):  # ("no" was true: a moving alias let through)
            raise ConfigurationError(f"allow_alias must be True or False, got {allow_alias!r:.80}")
        for label, given in (("system_prompt", system_prompt), ("prompt_version", prompt_version)):
            if given is not None and not isinstance(given, str):
                raise ConfigurationError(f"release {label} must be a string, got {given!r:.80}")
        unknown = sorted(set(parameters or {}) - _PARAMETERS)
        if unknown:
            raise ConfigurationError(f"release {name!r}: unknown parameters {unknown}")
        checked = _checked_parameters(name, parameters or {})
        set_ = object.__setattr__
        set_(self, "name", name)
        set_(self, "version", version)
        set_(self, "routes", entries)
        set_(self, "prompt_version", prompt_version)
        set_(self, "system_prompt", system_prompt)
        set_(self, "parameters", checked)
        set_(self, "allow_alias", allow_alias)
        for route in self.providers:
            if route.model is None:
                raise ConfigurationError(f"release {self.id}: route {route.name!r} pins no model")
            local = getattr(route, "is_local", False)
            refused = None if allow_alias or local else judge_route(route, route.model)
            if refused is not None:
                raise MovingModelAliasError(route.model, route.name, refused)

    @property
    def id(self) -> str:
        """``name@version``."""
        return f"{self.name}@{self.version}"

    @property
    def providers(self) -> tuple[Provider, ...]:
        """Every route, each group's deployments in its place."""
        return tuple(
            p
            for entry in self.routes
            for p in (entry.deployments if isinstance(entry, DeploymentGroup) else (entry,))
        )

    def apply(self, request: ChatRequest) -> ChatRequest:
        """``request`` with this release's parameters (where unset) and system prompt.

        A mapping (``extra_body``, ``metadata`` ...) joins the request's, whose own keys win;
        a request with an output limit (``max_tokens`` or ``max_completion_tokens``) takes
        neither from the release.

        A :class:`~llmguard_sdk.prompts.PromptBuilder`'s request keeps metadata that describe
        what is sent: its prefix hash is that of the system prompt sent (the release's, or
        the builder's static part) with the tools sent (the request's, or those the release's
        parameters add), the release's prompt counts as static, and the history's breakpoint
        moves with an inserted message."""
        update = _unset_parameters(self.parameters, request)
        if "tools" in update and self.system_prompt is None:  # the builder's static part
            metadata = _prompt_metadata(request, update, None, False)
            if metadata is not None:
                update["metadata"] = metadata
        if self.system_prompt is not None and request.messages:
            messages = list(request.messages)
            first = messages[0]
            system = type(first)(role="system", content=self.system_prompt)
            inserted = first.role != "system"
            if inserted:
                messages.insert(0, system)
            else:
                messages[0] = system
            update["messages"] = messages
            metadata = _prompt_metadata(request, update, self.system_prompt, inserted)
            if metadata is not None:
                update["metadata"] = metadata
        return request.model_copy(update=update) if update else request

    def __repr__(self) -> str:
        return f"Release({self.id!r}, routes={[p.name for p in self.providers]})"


_OUTPUT_LIMITS = ("max_tokens", "max_completion_tokens")


def _unset_parameters(parameters: Mapping[str, Any], request: ChatRequest) -> dict[str, Any]:
    """What ``parameters`` set that ``request`` does not: a mapping's keys it lacks, an output
    limit only when it has neither (a release's ``max_completion_tokens`` beside a call's
    ``max_tokens`` became its limit), any other field where it is unset."""
    update: dict[str, Any] = {}
    for name, value in parameters.items():
        own = getattr(request, name)
        if name in _OUTPUT_LIMITS and request.output_limit is not None:
            continue
        if own is None:
            update[name] = value
        elif isinstance(own, Mapping) and isinstance(value, Mapping):
            update[name] = {**value, **own}  # (a builder's request has both: they were lost)
    return update


def _prompt_metadata(
    request: ChatRequest, update: Mapping[str, Any], system_prompt: str | None, inserted: bool
) -> dict[str, str] | None:
    """A builder's request's ``metadata`` once ``update`` (the release's) applies: with
    ``system_prompt`` leading its messages (``inserted`` before them, or in the place of its
    first), or (None) its own static part kept, the hash is of the system prompt and the
    tools sent. None for a request no builder made."""
    metadata: Mapping[str, str] = update.get("metadata", request.metadata) or {}
    if PREFIX_HASH_KEY not in metadata:
        return None
    updated = dict(metadata)
    static = _count(metadata.get(STATIC_MESSAGES_KEY))
    tools = update.get("tools", request.tools)
    if system_prompt is None:  # the builder's static system message (none: no static text)
        first = request.messages[0] if request.messages else None
        own = first.content if first is not None and first.role == "system" else None
        updated[PREFIX_HASH_KEY] = static_prefix_hash(
            own if static and isinstance(own, str) else "", tools
        )
        return updated
    updated[PREFIX_HASH_KEY] = static_prefix_hash(system_prompt, tools)
    updated[STATIC_MESSAGES_KEY] = str(max(static + inserted, 1))
    history = _count(metadata.get(CACHE_HISTORY_KEY))
    if history:  # the breakpoint stays on the history's last message
        updated[CACHE_HISTORY_KEY] = str(history + inserted)
    return updated


def _count(value: str | None) -> int:
    """A metadata count (a decimal string); 0 when absent or no count."""
    return int(value) if value is not None and value.isascii() and value.isdigit() else 0


def _checked_parameters(name: str, parameters: Mapping[str, Any]) -> dict[str, Any]:
    """``parameters`` as a request holds them (validated as :class:`ChatRequest` does)."""
    try:
        request = ChatRequest.model_validate(
            {"messages": [{"role": "user", "content": "-"}], **parameters}
        )
    except ValidationError as exc:
        found = "; ".join(problems(exc, "parameters"))
        raise ConfigurationError(f"release {name!r}: invalid parameters: {found}") from None
    return {key: getattr(request, key) for key in parameters}


@dataclass(frozen=True)
class ReleaseEvent:
    """What a Guard tells its release hooks: ``retiring`` (a pinned ``model`` retires on
    ``day``), ``promoted`` / ``rolled_back`` / ``stage`` (the canary moved: ``detail`` says
    why), with the ``release`` id concerned."""

    kind: Literal["retiring", "promoted", "rolled_back", "stage"]
    release: str
    detail: str = ""
    model: str | None = None
    day: dt.date | None = None


ReleaseHook = Callable[[ReleaseEvent], None]
"""Receives each :class:`ReleaseEvent` (promotions, rollbacks, retiring models)."""


@dataclass(frozen=True)
class ReleasePlan:
    """A Guard's releases: the one it serves (``release``), optionally a ``candidate``
    under a ``canary`` (a share of traffic, promoted or rolled back by its guardrail metrics)
    and/or a ``shadow`` (a share of calls copied to the candidate, never shown to users).

    Args:
        release: the current release.
        candidate: the next one.
        canary: :class:`~llmguard_sdk.releases.CanaryPolicy` (needs ``candidate``).
        shadow: :class:`~llmguard_sdk.releases.ShadowPolicy` (needs ``candidate``).
        hooks: callables receiving each :class:`ReleaseEvent`.
        warn_days: warn this many days before a pinned model retires.
        retirements: ``{model: retirement day}`` beside the price table's ``retires_on``.
        prices: the table whose ``deprecated_on`` / ``retires_on`` are read (default: the
            Guard's one table, its ``prices=`` or its ``Budgets(prices=)``; a different
            table there is a :class:`~llmguard_sdk.errors.ConfigurationError`).
        clock: wall-clock seconds (``time.time``), injectable for tests; what it returns
            must be Unix seconds (a finite number), else building the Guard raises
            :class:`~llmguard_sdk.errors.ConfigurationError`.
        key: the name the canary's stage is kept under in the store (default: the
            release's name).
        fallback_to_current: a canary call whose candidate routes all failed goes on to
            the current release's routes (those the candidate does not share, each tried
            once), sent what the current release sends (its prompt and parameters, applied
            to the call's own request) and recorded as its answer (telemetry's
            ``llmguard.release``, the prompt version, the cache tag); the canary still counts
            the candidate's failure (the call stays on the ``canary`` arm). ``False``: the
            call ends with the candidate's error (or a degraded or stale answer).

    .. versionadded:: 0.2.0
    """

    release: Release
    candidate: Release | None = None
    canary: CanaryPolicy | None = None
    shadow: ShadowPolicy | None = None
    hooks: Sequence[ReleaseHook] = ()
    warn_days: int = 30
    retirements: Mapping[str, dt.date] = field(default_factory=dict)
    prices: PriceTable | None = None
    clock: Callable[[], float] = time.time
    key: str | None = None
    fallback_to_current: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.release, Release):
            raise ConfigurationError("release must be a Release")
        if self.candidate is not None and not isinstance(self.candidate, Release):
            raise ConfigurationError("candidate must be a Release")
        _check_policies(self)
        if (self.canary is not None or self.shadow is not None) and self.candidate is None:
            raise ConfigurationError("a canary or a shadow needs a candidate release")
        if self.candidate is not None and self.candidate.id == self.release.id:
            raise ConfigurationError("the candidate must differ from the release (its id)")
        if not isinstance(self.hooks, Sequence) or not all(callable(h) for h in self.hooks):
            raise ConfigurationError("release hooks must be a list of callables")
        if isinstance(self.warn_days, bool) or not isinstance(self.warn_days, int):
            raise ConfigurationError(f"warn_days must be an int, got {self.warn_days!r}")
        if not isinstance(self.retirements, Mapping):
            raise ConfigurationError("retirements must be a mapping of model to date")
        object.__setattr__(self, "retirements", _days(self.retirements))
        if self.prices is not None and not isinstance(self.prices, PriceTable):
            raise ConfigurationError(f"prices must be a PriceTable, got {self.prices!r:.80}")

    @property
    def store_key(self) -> str:
        """The name the canary's stage is stored under: ``key``, else the release's name."""
        return self.key or self.release.name


def _days(retirements: Mapping[str, dt.date]) -> dict[str, dt.date]:
    """``retirements`` checked (model names to dates; a datetime is its day), or a
    :class:`ConfigurationError` (a day as text raised TypeError as the Guard started)."""
    days: dict[str, dt.date] = {}
    for model, day in retirements.items():
        if not isinstance(model, str) or not isinstance(day, dt.date):
            raise ConfigurationError(
                f"retirements map model names to dates (datetime.date), got {model!r:.40}: "
                f"{day!r:.40}"
            )
        days[model] = day.date() if isinstance(day, dt.datetime) else day
    return days


def _check_policies(plan: ReleasePlan) -> None:
    """A :class:`ConfigurationError` for a canary or shadow that is no policy, a key that is
    no name, a clock that is no callable (each failed only at a call, deep inside)."""
    from .shadow import ShadowPolicy

    if plan.canary is not None and not isinstance(plan.canary, CanaryPolicy):
        raise ConfigurationError(f"canary must be a CanaryPolicy, got {plan.canary!r:.80}")
    if plan.shadow is not None and not isinstance(plan.shadow, ShadowPolicy):
        raise ConfigurationError(f"shadow must be a ShadowPolicy, got {plan.shadow!r:.80}")
    if plan.key is not None and not (isinstance(plan.key, str) and plan.key.strip()):
        raise ConfigurationError(f"key must be a non-empty string, got {plan.key!r:.80}")
    if not callable(plan.clock):
        raise ConfigurationError(f"clock must be callable, got {plan.clock!r:.80}")
    if not isinstance(plan.fallback_to_current, bool):  # ("no" would be true)
        raise ConfigurationError(
            f"fallback_to_current must be True or False, got {plan.fallback_to_current!r:.80}"
        )


def read_clock(clock: Callable[[], float]) -> float:
    """What a plan's ``clock`` says, Unix seconds, or a :class:`ConfigurationError` naming
    ``clock``: text raised a bare TypeError as the Guard was built, NaN a ValueError, and
    milliseconds (a time no date has) a ValueError about the year."""
    now = clock()
    if is_number(now) and math.isfinite(now):
        try:
            dt.datetime.fromtimestamp(now, dt.timezone.utc)
        except (OverflowError, OSError, ValueError):
            pass
        else:
            return float(now)
    raise ConfigurationError(
        f"clock must return Unix seconds (as time.time() does), got {now!r:.80}"
    )


def retirements(
    plan: ReleasePlan, table: PriceTable, today: dt.date
) -> list[tuple[Release, Provider, dt.date]]:
    """Every pinned model of the plan's releases that retires within ``warn_days`` of
    ``today`` (or has retired): ``(release, route, day)``."""
    found = []
    for release in (r for r in (plan.release, plan.candidate) if r is not None):
        for route in release.providers:
            model = route.model or ""
            day = plan.retirements.get(model)
            if day is None:
                day = table.lifecycle(model, provider=route.name)[1]
            if day is not None and (day - today).days <= plan.warn_days:
                found.append((release, route, day))
    return found


def unpriced_routes(release: Release, prices: PriceTable) -> list[Provider]:
    """``release``'s routes whose model ``prices`` has no price for, local ones aside:
    what their calls cost is not known (their answers carry no cost)."""
    missing = []
    for route in release.providers:
        if route.model is None or is_local(route):
            continue
        try:
            prices.price(route.model, provider=route.name)
        except UnknownModelPriceError:
            missing.append(route)
    return missing


def warn_unpriced(
    releases: Sequence[Release], prices: PriceTable, who: str, consequence: str
) -> None:
    """Log one warning, as the Guard is built, naming each ``route/model`` of ``releases``
    that ``prices`` has no price for: ``who`` (``"shadow"``, ``"canary"``) says what does
    not hold there and what to do (``consequence``)."""
    named = dict.fromkeys(
        f"{route.name}/{route.model}"
        for release in releases
        for route in unpriced_routes(release, prices)
    )
    if named:
        logger.warning("llmguard %s: no price for %s: %s", who, ", ".join(named), consequence)
