"""Task routing: rules and a classifier choose each call's tier.

A *tier* is a named part of the Guard's chain: a list of route and deployment-group names,
tried in that order (``"small": ["gpt-4o-mini", "local"]``). A *cascade* is a tier too: a
list of tiers tried smallest first, escalating when a check rejects an answer
(:class:`~llmguard_sdk.router.cascade.Cascade`). For each call the :class:`TaskRouter` picks
one of them: the first :class:`Rule` that matches the call (its feature, tenant, input token
count, whether it carries tools, a predicate of your own), else the ``classifier``'s answer,
else ``default``.

::

    router = TaskRouter(
        tiers={"small": ["mini", "local"], "large": ["big", "local"]},
        cascades={"auto": Cascade(["small", "large"], checks=[finish_reason(), json_schema()])},
        rules=[Rule("large", tools=True), Rule("large", min_tokens=4000),
               Rule("small", feature="autocomplete")],
        default="auto",
    )
    guard = Guard([mini, big, local], tasks=router)

The choice is pure: :meth:`TaskRouter.choose` reads the request and the call's scope (and
counts the input tokens only when a rule asks for them).

.. versionadded:: 0.2.0
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..context import Scope
from ..errors import ConfigurationError
from ..models import ChatRequest
from ..providers.base import Provider
from .cascade import Cascade
from .groups import DeploymentGroup

if TYPE_CHECKING:
    from typing import TypeAlias

__all__ = ["Classifier", "Predicate", "Rule", "TaskRouter", "TierEntry"]

Classifier = Callable[[ChatRequest, Scope], str | None]
"""Names the tier (or cascade) of a call the rules left open, or ``None`` for the default."""

Predicate = Callable[[ChatRequest, Scope], bool]
"""A condition of your own on the call (a :class:`Rule`'s ``when``)."""

TierEntry: TypeAlias = str | Provider | DeploymentGroup
"""A member of a tier: a route or group name, or the route or group itself."""


def _names(value: str | Sequence[str] | None, what: str) -> frozenset[str] | None:
    if value is None:
        return None
    listed = [value] if isinstance(value, str) else value
    if not isinstance(listed, Iterable):
        raise ConfigurationError(f"rule {what}: a name or a non-empty list of names")
    names = list(listed)
    if not names or not all(isinstance(n, str) and n for n in names):
        raise ConfigurationError(f"rule {what}: a name or a non-empty list of names")
    return frozenset(names)


@dataclass(frozen=True)
class Rule:
    """Send a call to ``tier`` when every condition given holds (a rule without conditions
    matches every call).

    Args:
        tier: the tier or cascade the call goes to.
        feature / tenant: the call's scope names one of these (a name or a list).
        min_tokens / max_tokens: the request's input tokens (as the first route's model
            counts them, estimated) are at least / at most this many.
        tools: ``True``: the request carries tools; ``False``: it carries none.
        when: ``when(request, scope)`` returns true.
    """

    tier: str
    feature: str | Sequence[str] | None = None
    tenant: str | Sequence[str] | None = None
    min_tokens: int | None = None
    max_tokens: int | None = None
    tools: bool | None = None
    when: Predicate | None = None
    _features: frozenset[str] | None = field(init=False, repr=False, compare=False)
    _tenants: frozenset[str] | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.tier, str) or not self.tier:
            raise ConfigurationError(f"rule tier must be a tier's name, got {self.tier!r}")
        for name in ("min_tokens", "max_tokens"):
            value = getattr(self, name)
            if value is not None and (
                not isinstance(value, int) or isinstance(value, bool) or value < 0
            ):
                raise ConfigurationError(f"rule {name} must be an int >= 0, got {value!r}")
        low, high = self.min_tokens, self.max_tokens
        if low is not None and high is not None and low > high:
            raise ConfigurationError(
                f"rule min_tokens {low} is above max_tokens {high}: no call would match"
            )
        if self.tools is not None and not isinstance(self.tools, bool):
            raise ConfigurationError(f"rule tools must be true or false, got {self.tools!r}")
        if self.when is not None and not callable(self.when):
            raise ConfigurationError(f"rule when must be callable, got {self.when!r}")
        object.__setattr__(self, "_features", _names(self.feature, "feature"))
        object.__setattr__(self, "_tenants", _names(self.tenant, "tenant"))

    @property
    def counts_tokens(self) -> bool:
        """Whether the rule needs the request's token count."""
        return self.min_tokens is not None or self.max_tokens is not None

    def matches(self, request: ChatRequest, scope: Scope, tokens: Callable[[], int]) -> bool:
        """Whether the call (``tokens()``: its input token count) meets every condition."""
        if self._features is not None and scope.feature not in self._features:
            return False
        if self._tenants is not None and scope.tenant not in self._tenants:
            return False
        if self.tools is not None and bool(request.tools) != self.tools:
            return False
        if self.counts_tokens:
            count = tokens()
            if self.min_tokens is not None and count < self.min_tokens:
                return False
            if self.max_tokens is not None and count > self.max_tokens:
                return False
        return self.when is None or bool(self.when(request, scope))


def _entry_name(entry: TierEntry) -> str:
    if isinstance(entry, str):
        return entry
    if isinstance(entry, (Provider, DeploymentGroup)):
        return entry.name
    raise ConfigurationError(f"a tier lists route or group names, got {entry!r}")


class TaskRouter:
    """Chooses each call's tier (see the module docs).

    Args:
        tiers: each tier's name and its members, in the order the call tries them (route
            or deployment-group names of the Guard, or the routes and groups themselves).
        cascades: named :class:`~llmguard_sdk.router.cascade.Cascade` s of those tiers.
        rules: tried in order; the first that matches names the call's tier or cascade.
        classifier: asked when no rule matched; returns a tier or cascade name, or ``None``.
        default: the tier or cascade of the remaining calls (default: the first tier).

    A name that is not a tier or cascade raises
    :class:`~llmguard_sdk.errors.ConfigurationError` here (a classifier's answer: at the
    call); the Guard checks that every member names one of its routes or groups.
    """

    def __init__(
        self,
        tiers: Mapping[str, TierEntry | Sequence[TierEntry]],
        *,
        cascades: Mapping[str, Cascade] | None = None,
        rules: Sequence[Rule] = (),
        classifier: Classifier | None = None,
        default: str | None = None,
    ) -> None:
        if not isinstance(tiers, Mapping) or not tiers:
            raise ConfigurationError("a TaskRouter needs a mapping of one or more tiers")
        self.tiers: dict[str, tuple[str, ...]] = {}
        for name, members in tiers.items():
            listed = [members] if isinstance(members, (str, Provider, DeploymentGroup)) else members
            if not isinstance(listed, Sequence) or isinstance(listed, (bytes, bytearray)):
                raise ConfigurationError(  # (5 raised TypeError; a set has no order to try)
                    f"tier {name!r} must list route or group names in order (a list), "
                    f"got {type(members).__name__}"
                )
            if not listed:
                raise ConfigurationError(f"tier {name!r} lists no route")
            self.tiers[name] = tuple(_entry_name(m) for m in listed)
            twice = sorted({n for n in self.tiers[name] if self.tiers[name].count(n) > 1})
            if twice:
                raise ConfigurationError(f"tier {name!r} lists {twice} more than once")
        if not isinstance(cascades or {}, Mapping) or not isinstance(rules, Sequence):
            raise ConfigurationError("cascades: a mapping of names to Cascades; rules: a list")
        self.cascades: dict[str, Cascade] = dict(cascades or {})
        for name, cascade in self.cascades.items():
            if name in self.tiers:
                raise ConfigurationError(f"{name!r} names both a tier and a cascade")
            if not isinstance(cascade, Cascade):
                raise ConfigurationError(f"cascade {name!r} must be a Cascade, got {cascade!r}")
            unknown = [t for t in cascade.tiers if t not in self.tiers]
            if unknown:
                raise ConfigurationError(f"cascade {name!r}: no tier named {unknown[0]!r}")
        self.rules = tuple(rules)
        for index, rule in enumerate(self.rules):
            if not isinstance(rule, Rule):
                raise ConfigurationError(f"rules[{index}] must be a Rule, got {rule!r}")
            self._known(rule.tier, f"rules[{index}].tier")
        if classifier is not None and not callable(classifier):
            raise ConfigurationError(f"classifier must be callable, got {classifier!r}")
        self.classifier = classifier
        self.default = default if default is not None else next(iter(self.tiers))
        self._known(self.default, "default")

    def __repr__(self) -> str:
        names = [*self.tiers, *self.cascades]
        return f"TaskRouter(tiers={names}, rules={len(self.rules)}, default={self.default!r})"

    def _known(self, name: object, where: str) -> str:
        if not isinstance(name, str) or (name not in self.tiers and name not in self.cascades):
            known = sorted([*self.tiers, *self.cascades])
            raise ConfigurationError(f"{where}: {name!r} is not a tier or cascade ({known})")
        return name

    def choose(self, request: ChatRequest, scope: Scope, tokens: Callable[[], int]) -> str:
        """The tier or cascade of a call: the first matching rule's, else the classifier's,
        else the default (``tokens()`` counts the input tokens, asked only if needed)."""
        for rule in self.rules:
            if rule.matches(request, scope, tokens):
                return rule.tier
        if self.classifier is not None:
            named = self.classifier(request, scope)
            if named is not None:
                return self._known(named, f"classifier {self.classifier!r}")
        return self.default
