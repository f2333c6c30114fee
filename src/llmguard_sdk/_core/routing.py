"""The chain's order for one call: each deployment group's deployments ranked by its
strategy, in the group's place among the other routes; the call's leases on the deployments
it goes to (its calls in flight), taken when the call reaches each group and given back at
its end.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .._state.steps import Step
from ..context import CallContext
from ..errors import ProviderError, RateLimitedError, UnknownModelError
from ..providers.base import Provider
from ..router import DeploymentGroup
from ..router.groups import CallFacts
from ..router.leases import Leases, RedisLeases
from ..store import RedisStore, Store
from .limits import route_input_tokens

if TYPE_CHECKING:
    from ..budget.prices import PriceTable

__all__ = ["Lease", "Routing", "flatten", "members"]

_LEASE_MARGIN_S = 5.0  # a lease outlives its call's deadline by this much (then it runs out)


@dataclass(frozen=True)
class Lease:
    """A call's lease on one deployment of a group."""

    group: DeploymentGroup
    leases: Leases
    deployment: str
    call_id: str


class Routing:
    """The chain's entries (routes and groups), ranked anew for each call. Groups that count
    calls in flight across processes (``least_outstanding``) do it in ``store`` when it is
    Redis; every other count stays in this process."""

    def __init__(
        self, entries: Sequence[Provider | DeploymentGroup], store: Store | None = None
    ) -> None:
        self.entries = tuple(entries)
        # the groups by their own names: what a call's model= selects
        self.groups = {e.name: e for e in self.entries if isinstance(e, DeploymentGroup)}
        # each model a route serves: where the chain's first route serving it is, its group
        # or the route itself outside groups (a call starts there). A route without a model
        # of its own serves every model asked: the models no route before it named start
        # where it is (``_serving_rest``)
        self._serving: dict[str, str | None] = {}
        self._serving_rest: str | None = None
        for entry in self.entries:
            start = self._key(entry)
            routes = entry.deployments if isinstance(entry, DeploymentGroup) else (entry,)
            if not all(route.model for route in routes):
                self._serving_rest = start
                break
            for route in routes:
                self._serving.setdefault(route.model or "", start)
        self._groups = {
            deployment.name: entry
            for entry in entries
            if isinstance(entry, DeploymentGroup)
            for deployment in entry.deployments
        }
        shared = RedisLeases(store) if isinstance(store, RedisStore) else None
        self._leases: dict[str, Leases] = {
            entry.name: shared
            if shared is not None and entry.strategy == "least_outstanding"
            else entry.local_leases
            for entry in entries
            if isinstance(entry, DeploymentGroup)
        }
        # what a call ranks, by the group its model= selected (None: every entry): the
        # entries from that group on, and the deployments among them ``cheapest`` prices
        self._starts = {start: self._start(entries) for start, entries in self._suffixes().items()}

    def _key(self, entry: Provider | DeploymentGroup) -> str | None:
        """The name a call that starts at ``entry`` selects it by: a group's name, a route's
        outside groups (None, the chain's start, for one named as a group is)."""
        if isinstance(entry, DeploymentGroup) or entry.name not in self.groups:
            return entry.name
        return None

    def _suffixes(self) -> dict[str | None, tuple[Provider | DeploymentGroup, ...]]:
        """The entries a call ranks, by the group or route outside groups it starts at
        (None: all of them)."""
        suffixes: dict[str | None, tuple[Provider | DeploymentGroup, ...]] = {None: self.entries}
        for i, entry in enumerate(self.entries):
            suffixes.setdefault(self._key(entry), self.entries[i:])
        return suffixes

    @staticmethod
    def _start(
        entries: tuple[Provider | DeploymentGroup, ...],
    ) -> tuple[tuple[Provider | DeploymentGroup, ...], tuple[Provider, ...]]:
        cheapest = tuple(
            route
            for entry in entries
            if isinstance(entry, DeploymentGroup) and entry.strategy == "cheapest"
            for route in entry.deployments
        )
        return entries, cheapest

    def ranked(self, ctx: CallContext, prices: PriceTable | None = None) -> tuple[Provider, ...]:
        """Every route, each group's deployments in the order its strategy gives now for the
        call ``ctx`` (``cheapest`` prices it with ``prices``, each deployment with the input
        tokens its own model counts). A call that selected one of these groups, or a
        route outside groups (``ctx.group``, its ``model=``), starts at it: the entries
        before it are neither ranked nor tried."""
        # the deployments the call counts its input for, each as its own model counts it
        entries, cheapest = self._starts.get(ctx.group, self._starts[None])
        if cheapest:  # the call's count first: a deployment whose encoding took it reuses it
            ctx.input_tokens()
        counts = {route.name: float(route_input_tokens(ctx, route).tokens) for route in cheapest}
        facts = CallFacts(ctx.request, region=ctx.region, prices=prices, counts=counts)
        order: list[Provider] = []
        for entry in entries:
            if isinstance(entry, DeploymentGroup):
                ranked, turn = entry.ranking(facts)  # taken only when the call reaches it
                ctx.unreached[entry] = (turn, facts)
                order += ranked
            else:
                order.append(entry)
        return tuple(order)

    def selected(self, model: str | None) -> str | None:
        """Where a call's ``model=`` starts it: the group of that name, else where the
        chain's first route that serves it is (whose own model it is, or that has none): its
        group, or that route when it is outside groups (by its name); ``None``, the chain
        from its start, when no route serves it."""
        if model is None or model in self.groups:
            return model
        return self._serving.get(model, self._serving_rest)

    def check_model(self, model: str | None, routes: Sequence[Provider]) -> None:
        """Refuse a call's ``model=`` that names none of the groups and that every route of
        ``routes`` would ignore: each has a model of its own, none of them that one
        (:class:`~llmguard_sdk.errors.UnknownModelError`, naming the groups). A name a route
        serves, or any name when a route has no model of its own (it is sent the call's),
        keeps its meaning: the model those routes are asked for."""
        if model is None or model in self.groups or any(not route.model for route in routes):
            return
        served = list(dict.fromkeys(route.model for route in routes if route.model))
        if model not in served:
            raise UnknownModelError(model, list(self.groups), served)

    def reach_steps(
        self,
        ctx: CallContext,
        route: Provider,
        left: list[Provider] | None,
        held: list[Lease],
    ) -> Step[Provider]:
        """The call goes to ``route``: the first time it reaches a deployment of a group
        ranked for it, the group takes the call (its round goes on, the deployment leads:
        see :meth:`DeploymentGroup.reach`), ranking its deployments anew when other calls
        took turns meanwhile, and the call is leased on the deployment it goes to (one that
        decides with the lease, ``least_outstanding``, picks it so); returns the route to
        try, ``left`` (the routes after it) reordered in place. A race's leg (``left``
        None) keeps its route. A group the call never reaches takes no lease.

        ``held`` is the caller's record of the call's leases, kept up to date as the step
        goes: a lease is in it before its take goes out, on each deployment the take may
        land on until its answer tells which. A step closed half-way (its batch cut short
        by a cancellation) cannot give anything back itself; the caller gives back
        ``held``, as it does when the take fails."""
        found = next((g for g in ctx.unreached if route.name in g.names), None)
        if found is None:
            return route
        turn, facts = ctx.unreached.pop(found)
        at = [i for i, r in enumerate(left or ()) if r.name in found.names]
        mine = [route] + [left[i] for i in at] if left is not None else [route]
        shared = found.strategy == "least_outstanding"  # (it decides with the lease)
        if not shared:
            mine = found.reach(mine, turn, facts)
        leases, call_id = self._leases[found.name], uuid.uuid4().hex
        asked = len(held)  # in doubt until the take answers: every deployment asked
        held.extend(Lease(found, leases, other.name, call_id) for other in mine)
        mine = yield from found.lease_steps(mine, leases, call_id, _lease_s(ctx))
        held[asked:] = [Lease(found, leases, mine[0].name, call_id)]
        if shared:
            found.reach(mine, turn, facts)
        if left is not None:
            for i, other in zip(at, mine[1:], strict=True):
                left[i] = other
        return mine[0]

    def give_back_steps(self, leases: Sequence[Lease]) -> Step[None]:
        """End the call's ``leases``."""
        for lease in leases:
            yield from lease.leases.give_back_steps(
                lease.group.name, lease.deployment, lease.call_id
            )

    def can_fail_over(self, route: str, left: Sequence[Provider], failed: Collection[str]) -> bool:
        """Whether another deployment of ``route``'s group is among the routes ``left`` for
        the call, not among the ``failed`` ones (a failure on ``route`` moves on to it rather
        than retrying ``route``; a sibling outside the call's tier is none)."""
        group = self._groups.get(route)
        if group is None:
            return False
        return any(
            other.name != route and other.name in group.names and other.name not in failed
            for other in left
        )

    def refused(self, route: str, retry_after: float) -> None:
        """``route``'s breaker or its own rate limit refused a call for ``retry_after``
        seconds: its group ranks it after its other deployments for a moment (a route
        outside groups: nothing)."""
        group = self._groups.get(route)
        if group is not None:
            group.refused(route, retry_after)

    def outlasted(self, route: str, seconds: float) -> None:
        """An attempt on ``route`` stopped unanswered after ``seconds`` (a hedge race's
        loser): its group learns it takes at least that long (a route outside groups:
        nothing)."""
        group = self._groups.get(route)
        if group is not None:
            group.outlasted(route, seconds)

    def observe(
        self,
        route: str,
        seconds: float,
        *,
        error: ProviderError | None = None,
        first_s: float | None = None,
        tokens: int = 0,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """Feed an attempt on ``route`` to its group (a route outside groups: nothing): its
        time, its answer's rate-limit ``headers``, or its ``error`` (a 429 leaves the route
        no headroom for its wait)."""
        group = self._groups.get(route)
        if group is None:
            return
        failed = error is not None
        group.observe(route, seconds, failed=failed, first_s=first_s, tokens=tokens)
        if isinstance(error, RateLimitedError):
            group.learn_headroom(route, None, pause_s=error.retry_after, limited=True)
        elif headers:
            group.learn_headroom(route, headers)


def _lease_s(ctx: CallContext) -> float:
    """How long the call's leases last at most: its deadline's time left, and a margin."""
    if not math.isfinite(ctx.deadline):
        return 3600.0
    return min(3600.0, max(0.0, ctx.deadline - time.monotonic()) + _LEASE_MARGIN_S)


def flatten(entries: Sequence[Provider | DeploymentGroup]) -> tuple[Provider, ...]:
    """The routes of the chain's entries: each group's deployments in its place."""
    return tuple(
        route
        for entry in entries
        for route in (entry.deployments if isinstance(entry, DeploymentGroup) else (entry,))
    )


def members(entries: Sequence[Provider | DeploymentGroup]) -> dict[str, tuple[Provider, ...]]:
    """The routes each name of the chain stands for: a group's name its deployments, a
    route's (a deployment's too) itself."""
    named: dict[str, tuple[Provider, ...]] = {}
    for entry in entries:
        routes = entry.deployments if isinstance(entry, DeploymentGroup) else (entry,)
        named[entry.name] = tuple(routes)
        for route in routes:
            named.setdefault(route.name, (route,))
    return named
