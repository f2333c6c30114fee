"""Wiring: the Guard's arguments turned into its configured stages (the routes, the state
backends for its store, telemetry, spend control, the cache)."""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from .._callers import caller_level
from .._decorating import is_async_callable
from .._whole_counts import count_problem
from ..breaker import (
    BreakerBackend,
    BreakerHook,
    BreakerPolicy,
    Breakers,
    MemoryBreakerBackend,
    RedisBreakerBackend,
)
from ..budget import Budget, Budgets, PriceTable, SpendControl
from ..config import GuardSettings, _check_default_key
from ..errors import ConfigurationError, RateLimitConfigWarning
from ..providers.base import Provider
from ..providers.openai_compat import OpenAICompatibleProvider
from ..ratelimit import LimitsConfig, MemoryRateLimiter, RedisRateLimiter
from ..ratelimit._rules import unsized_calls_never_fit
from ..retry import (
    MemoryRetryBudget,
    RedisRetryBudget,
    RetryBudget,
    RetryBudgetPolicy,
    RetryPolicy,
)
from ..router import DeploymentGroup, TaskRouter
from ..store import RedisStore, Store
from .probes import Prober
from .routing import Routing, flatten, members
from .tasks import TaskRouting

if TYPE_CHECKING:
    from ..cache import ResponseCache
    from ..releases import Release, ReleaseControl, ReleasePlan
    from ..telemetry import Telemetry

__all__ = [
    "arguments",
    "breakers",
    "cache",
    "callables",
    "chain",
    "limiter",
    "releases",
    "retry_budget",
    "retry_policy",
    "routes",
    "spend",
    "tasks",
    "telemetry",
]


F = TypeVar("F", bound=Callable[..., Any])


def callables(name: str, fns: Sequence[F], *, awaited: bool = False) -> tuple[F, ...]:
    """The Guard's ``name`` (hooks, filters): a list of callables, else a
    :class:`ConfigurationError`; plain ones unless ``awaited`` (filters: an async one is
    awaited), as an async hook would be called and never awaited, its work never done."""
    if callable(fns) or isinstance(fns, (str, bytes)) or not isinstance(fns, Sequence):
        raise ConfigurationError(f"Guard {name} must be a list of callables, got {fns!r:.80}")
    for fn in fns:
        if not callable(fn):
            raise ConfigurationError(f"Guard {name}: {fn!r:.80} is not callable")
        if not awaited and is_async_callable(fn):
            raise ConfigurationError(
                f"Guard {name} are called, never awaited: none may be async, got {fn!r:.80}"
            )
    return tuple(fns)


def arguments(
    *,
    environ: object,
    store: object,
    breaker: object,
    moves_on: object,
    degraded: object,
    continue_streams: object,
    hedge_after: object,
) -> None:
    """Check the Guard's arguments that no stage checks, before any is used: each of the
    wrong kind is a :class:`ConfigurationError` (found out otherwise at a failure, after the
    call went out, or never: a ``store`` of another kind kept the state in memory)."""
    kinds: list[tuple[str, object, tuple[type, ...], str]] = [
        ("environ", environ, (Mapping, type(None)), "a mapping of variables or None"),
        ("store", store, (str, Store, type(None)), "'memory', a Redis URL or a Store"),
        ("breaker", breaker, (BreakerPolicy, Breakers, type(None)), "a BreakerPolicy"),
        ("degraded", degraded, (str, type(None)), "a string or None"),
        ("continue_interrupted_streams", continue_streams, (bool,), "True or False"),
    ]
    for name, value, allowed, kind in kinds:
        if not isinstance(value, allowed):
            raise ConfigurationError(f"Guard {name}= must be {kind}, got {value!r:.80}")
    if hedge_after is not None and not (
        isinstance(hedge_after, (int, float))
        and not isinstance(hedge_after, bool)
        and 0 <= hedge_after < math.inf
    ):
        raise ConfigurationError(
            f"Guard hedge_after= must be seconds >= 0, got {hedge_after!r:.80}"
        )
    if moves_on is not None and (not callable(moves_on) or is_async_callable(moves_on)):
        raise ConfigurationError(
            f"Guard moves_on= must be a plain function of the error, got {moves_on!r:.80}"
        )


def chain(release: Release | ReleasePlan | None, providers: Entries) -> Entries:
    """The Guard's chain: ``providers``, or with a ``release`` its releases' routes."""
    if release is None:
        return providers
    if providers is not None:
        raise ConfigurationError("pass providers or release=, not both")
    from ..releases.control import entries

    return entries(_plan(release))


def _plan(release: Release | ReleasePlan) -> ReleasePlan:
    from ..releases import Release, ReleasePlan  # (a Guard without a release imports none)

    return ReleasePlan(release) if isinstance(release, Release) else release


def _plan_prices(release: Release | ReleasePlan | None) -> PriceTable | None:
    if release is None:
        return None
    from ..releases import ReleasePlan

    return release.prices if isinstance(release, ReleasePlan) else None


def price_table(
    prices: PriceTable | None,
    budgets: object,
    release: Release | ReleasePlan | None,
) -> PriceTable | None:
    """The Guard's one price table (None: the default one): the table ``Guard(prices=)``,
    ``Budgets(prices=)`` or ``ReleasePlan(prices=)`` names. It prices the budgets, the answers
    and the releases alike; where two of them name tables that are not the same (one object,
    or one built alike), which one a call would be priced at is no guess the Guard makes: a
    :class:`~llmguard_sdk.errors.ConfigurationError`."""
    if prices is not None and not isinstance(prices, PriceTable):
        raise ConfigurationError(f"prices must be a PriceTable, got {prices!r:.80}")
    named = {
        "Guard(prices=)": prices,
        "Budgets(prices=)": budgets.prices if isinstance(budgets, Budgets) else None,
        "ReleasePlan(prices=)": _plan_prices(release),
    }
    given = {where: table for where, table in named.items() if table is not None}
    if not given:
        return None
    (first, table), *others = given.items()
    differ = [where for where, other in others if not table._same_as(other)]
    if differ:
        raise ConfigurationError(
            f"{first} and {', '.join(differ)} name different price tables: give the table "
            "once (the Guard's prices= prices its budgets and releases too), or the same one"
        )
    return table


def releases(
    release: Release | ReleasePlan | None,
    store: Store,
    prices: PriceTable | None,
    observer: Telemetry | None,
    budgets: object = None,
) -> ReleaseControl | None:
    """The Guard's releases at work (None: no ``release=``), priced at the Guard's one
    table (:func:`price_table`)."""
    if release is None:
        return None
    from ..releases import ReleaseControl

    return ReleaseControl(_plan(release), store, price_table(prices, budgets, release), observer)


def spend(
    budgets: Budgets | Sequence[Budget] | None,
    prices: PriceTable | None,
    routes: Sequence[Provider],
    store: Store,
    observer: Telemetry | None = None,
    release: Release | ReleasePlan | None = None,
) -> SpendControl:
    """The Guard's spend control, priced at its one table (:func:`price_table`)."""
    prices = price_table(prices, budgets, release)
    if budgets is None:
        config = Budgets(prices=prices)
    elif isinstance(budgets, Budgets):
        config = budgets if prices is None else dataclasses.replace(budgets, prices=prices)
    elif isinstance(budgets, Budget) or (
        isinstance(budgets, Sequence) and all(isinstance(b, Budget) for b in budgets)
    ):
        config = Budgets(budgets, prices=prices)
    else:
        raise ConfigurationError("budgets must be a Budgets or a list of Budget")
    if observer is not None and config.budgets:  # budget events reach the telemetry too
        config = dataclasses.replace(config, on_event=(*config.on_event, observer.on_budget_event))
    return SpendControl(config, routes, store)


def limiter(
    limits: LimitsConfig | None, store: Store, routes: Sequence[Provider]
) -> MemoryRateLimiter | RedisRateLimiter | None:
    """The routes' rate limiter (None: no limits); a limit keyed by a name that is no
    route's (a typo, a deployment group's name) would never apply, so it is refused. A
    token limit too small for the output a call without ``max_tokens`` reserves is warned
    about (:class:`~llmguard_sdk.RateLimitConfigWarning`): every such call would be refused."""
    if limits is None:
        return None
    limiter: MemoryRateLimiter | RedisRateLimiter = (
        RedisRateLimiter(store, limits)
        if isinstance(store, RedisStore)
        else MemoryRateLimiter(limits)
    )
    names = [route.name for route in routes]
    unknown = sorted(set(limiter.limits) - set(names))
    if unknown:
        raise ConfigurationError(
            f"rate_limits names routes the Guard does not have: {unknown} (its routes: "
            f"{names}; a deployment group's limits are its deployments')"
        )
    for key, rules in limiter.limits.items():
        why = unsized_calls_never_fit(key, rules)
        if why is not None:
            warnings.warn(why, RateLimitConfigWarning, stacklevel=caller_level())
    return limiter if limiter.limits else None


def telemetry(telemetry: Telemetry | bool) -> Telemetry | None:
    """The Guard's telemetry (OpenTelemetry is imported here, with the first one: a Guard
    with ``telemetry=False`` never imports it)."""
    if telemetry is False:
        return None
    from ..telemetry import Telemetry  # (after the first time: a dict lookup)

    if telemetry is True:
        return Telemetry()
    if not isinstance(telemetry, Telemetry):
        raise ConfigurationError(f"telemetry must be a Telemetry or a bool, got {telemetry!r}")
    return telemetry


def propagated(
    telemetry: Telemetry | None, providers: Entries, routes: tuple[Provider, ...]
) -> bool | frozenset[str]:
    """The routes whose requests carry their attempt's trace context: ``propagate``'s names
    resolved in the chain (a group's name stands for its deployments)."""
    if telemetry is None:
        return False
    chain = members(_entries(providers) or routes)
    return telemetry.propagated_routes(
        {name: [route.name for route in named] for name, named in chain.items()}
    )


def cache(cache: ResponseCache | bool | None, store: Store) -> ResponseCache | None:
    if cache is None or cache is False:
        return None
    from ..cache.core import ResponseCache  # (a Guard without a cache imports none of it)

    if cache is True:
        return ResponseCache(store)
    if not isinstance(cache, ResponseCache):
        raise ConfigurationError(f"cache must be a ResponseCache or True, got {cache!r}")
    return cache


def breakers(
    policy: BreakerPolicy | Breakers | None,
    hooks: Sequence[BreakerHook],
    store: Store,
    telemetry: Telemetry | None = None,
) -> Breakers | None:
    """The Guard's breakers (``telemetry`` counts their transitions: one more hook)."""
    if policy is None or isinstance(policy, Breakers):
        return policy
    if telemetry is not None:
        hooks = [*hooks, telemetry.on_breaker_transition]
    backend: BreakerBackend
    if isinstance(store, RedisStore):
        backend = RedisBreakerBackend(store, policy)
    else:
        backend = MemoryBreakerBackend(policy)
    return Breakers(backend, hooks)


def retry_policy(
    retry: RetryPolicy | None, budget: RetryBudgetPolicy | None, attempts: int | None
) -> RetryPolicy | None:
    """The Guard's ``retry`` with the settings' ``attempts`` (when set); a
    :class:`ConfigurationError` for a ``retry`` or ``retry_budget`` of the wrong kind (found
    out otherwise at a call's first failure, after it went out)."""
    for name, value, kind in (
        ("retry", retry, RetryPolicy),
        ("retry_budget", budget, RetryBudgetPolicy),
    ):
        if value is not None and not isinstance(value, kind):
            raise ConfigurationError(
                f"Guard {name}= must be a {kind.__name__} or None, got {value!r}"
            )
    if retry is None or attempts is None:
        return retry
    return dataclasses.replace(retry, attempts=attempts)


def retry_budget(policy: RetryBudgetPolicy | None, store: Store) -> RetryBudget | None:
    if policy is None:
        return None
    if isinstance(store, RedisStore):
        return RedisRetryBudget(store, policy)
    return MemoryRetryBudget(policy)


Entries = Provider | DeploymentGroup | Sequence[Provider | DeploymentGroup] | None


def routes(
    providers: Entries, settings: GuardSettings, blank: Collection[str] = ()
) -> tuple[Provider, ...]:
    """The chain's routes, each deployment group's deployments in its place; without
    ``providers``, the route ``LLMGUARD_BASE_URL`` names (its key refused when
    ``LLMGUARD_API_KEY`` is among ``blank``, the variables the settings' read found set but
    empty)."""
    if providers is None:
        if settings.base_url is None:
            return ()
        _check_default_key(settings, blank)
        return (
            OpenAICompatibleProvider(
                settings.base_url, api_key=settings.api_key, model=settings.model
            ),
        )
    for entry in _entries(providers):
        if not isinstance(entry, (Provider, DeploymentGroup)):
            raise ConfigurationError(f"{entry!r} is not a Provider or a DeploymentGroup")
    routes = flatten(_entries(providers))
    for route in routes:  # (a custom provider's: ours check it as they are built)
        window = getattr(route, "context_window", None)
        problem = None if window is None else count_problem(window)
        if problem is not None:
            raise ConfigurationError(
                f"route {route.name!r}: context_window {problem} (or None: unknown)"
            )
    # a group's name keys its shared load and names it in task tiers, as a route's name does
    groups = [entry.name for entry in _entries(providers) if isinstance(entry, DeploymentGroup)]
    names = [route.name for route in routes] + groups
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ConfigurationError(
            f"route and deployment group names must be unique; repeated: {duplicates}"
        )
    return routes


def prober(breakers: Breakers | None) -> Prober | None:
    """Background probes of open routes, unless breakers or their probes are off."""
    if breakers is None or breakers.policy.probe_every is None:
        return None
    return Prober(breakers, breakers.policy.probe_every)


def routing(providers: Entries, store: Store) -> Routing | None:
    """The per-call ranking of the chain's deployment groups (None: no group)."""
    entries = _entries(providers)
    if not any(isinstance(e, DeploymentGroup) for e in entries):
        return None
    return Routing(entries, store)


def tasks(
    router: TaskRouter | None, providers: Entries, routes: tuple[Provider, ...]
) -> TaskRouting | None:
    """The task router bound to the chain (its tiers name routes and groups of it)."""
    if router is None:
        return None
    return TaskRouting(router, _entries(providers) or routes)


def _entries(providers: Entries) -> tuple[Provider | DeploymentGroup, ...]:
    if providers is None:
        return ()
    if isinstance(providers, (Provider, DeploymentGroup)):
        return (providers,)
    one_pass = isinstance(providers, Iterator)  # (read more than once: a generator was empty)
    if one_pass or isinstance(providers, (str, bytes)) or not isinstance(providers, Iterable):
        raise ConfigurationError(  # (a string was read as its characters, each "no Provider")
            "providers must be a Provider, a DeploymentGroup or a list of them, "
            f"got {providers!r:.80}"
        )
    return tuple(providers)
