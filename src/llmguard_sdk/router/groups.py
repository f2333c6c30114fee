"""Deployment groups: one logical model served by several deployments, ranked per call.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .._state.steps import Step
from ..errors import ConfigurationError
from ..models import ChatRequest
from ..providers.base import Provider
from .fit import (
    Headroom,
    by_region,
    exhausted,
    fits,
    headroom_from,
    needs,
    rank_by_cost,
    rank_by_headroom,
    share_at,
)
from .leases import LeaseAsk, Leases, MemoryLeases
from .policy import (
    EXPLORE_EVERY,
    Latency,
    Strategy,
    estimate,
    explored,
    observe,
    outlasted,
    predicted,
    rank_by_latency,
    rank_by_load,
    rank_by_weight,
    rotate,
    stale,
)

if TYPE_CHECKING:
    from ..budget.prices import PriceTable

__all__ = ["CallFacts", "DeploymentGroup"]

_STRATEGIES = (
    "latency",
    "least_outstanding",
    "headroom",
    "cheapest",
    "round_robin",
    "weighted",
    "ordered",
)
_TOKENS_SMOOTHING = 0.1  # the weight of a new answer's length in the group's typical length
_DEFAULT_ANSWER_TOKENS = 256  # the answer length assumed before any answer came
_REFUSED_S = 1.0  # the longest a refusal sends a deployment after the others


def _finite(value: object) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)


TUNING: Mapping[str, tuple[str, Callable[[float], bool]]] = {
    "half_life_s": ("number of seconds > 0", lambda v: v > 0),
    "penalty_s": ("number of seconds >= 0", lambda v: v >= 0),
    "slack": ("number >= 1", lambda v: v >= 1),
    "buffer": ("number >= 0", lambda v: v >= 0),
}
"""The ``latency`` strategy's tuning settings: what each must be, and its range (a config
file's group takes them too, checked by :func:`check_tuning`)."""


def check_tuning(name: str, value: object) -> None:
    """Refuse a tuning setting (one of :data:`TUNING`) that is no finite number in its
    range (inf or NaN: a group that never explores, a band that admits any deployment, a
    ranking of NaNs)."""
    what, within = TUNING[name]
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not (math.isfinite(value) and within(value))
    ):
        raise ConfigurationError(f"{name} must be a finite {what}, got {value!r}")


def _deployments(name: object, deployments: object) -> tuple[Provider, ...]:
    """The group's deployments (any iterable of them), once its name and they are checked."""
    if not isinstance(name, str) or not name:
        raise ConfigurationError(f"a deployment group's name is a non-empty string, got {name!r}")
    listed = tuple(deployments) if isinstance(deployments, Iterable) else ()
    if not listed or not all(isinstance(d, Provider) for d in listed):
        raise ConfigurationError(f"group {name!r} needs one or more Provider deployments")
    return listed


def _weights(weights: object, count: int, strategy: str) -> tuple[float, ...]:
    """The deployments' weights, checked (all 1 for ``None``): only ``weighted`` reads them."""
    if weights is None:
        return (1.0,) * count
    if strategy != "weighted":  # (taken, they would never be used)
        raise ConfigurationError(
            f"weights are for strategy='weighted'; this group's is {strategy!r}"
        )
    listed = tuple(weights) if isinstance(weights, Iterable) else ()
    numbers = all(_finite(w) and not isinstance(w, bool) and w >= 0 for w in listed)
    if len(listed) != count or not numbers or not any(listed):
        raise ConfigurationError("weights: one finite number >= 0 per deployment, not all 0")
    return listed


@dataclass(frozen=True)
class CallFacts:
    """What a ranking may read of the call: its request, its input tokens (counted only for
    ``cheapest``), the region it prefers, the Guard's price table, and ``counts``: the input
    tokens by deployment name as that deployment's own model counts them (models count with
    different encodings; a deployment not in it takes ``input_tokens``)."""

    request: ChatRequest | None = None
    input_tokens: float = 0.0
    region: str | None = None
    prices: PriceTable | None = None
    counts: Mapping[str, float] | None = None

    def tokens_on(self, deployment: Provider) -> float:
        """The call's input tokens as ``deployment`` counts them."""
        counts = self.counts or {}
        return counts.get(deployment.name, self.input_tokens)


class DeploymentGroup:
    """Several deployments of one model (regions, providers, keys, a self-hosted server)
    that take one place in a Guard's fallback chain.

    ::

        guard = Guard([
            DeploymentGroup("gpt-4o-mini", [east, west, azure], strategy="latency"),
            LocalProvider(),                      # after every deployment of the group
        ])

    Each call ranks the deployments with the group's ``strategy`` (see
    :data:`~llmguard_sdk.router.policy.Strategy`): the first one gets the call, the others
    are its failover order, before the chain's next route. Every deployment is a route of its
    own: its breaker, retries, rate limits, budgets and telemetry work as for any route, and
    its name must be unique in the Guard. A deployment its breaker or its rate limit refused
    goes after the others for a moment (:meth:`refused`). ``weights`` (one per deployment,
    numbers >= 0) are for ``weighted`` only (another strategy refuses them); ``half_life_s``
    (> 0), ``penalty_s`` (>= 0), ``slack`` (>= 1) and ``buffer`` (>= 0), finite numbers,
    tune ``latency`` (see :mod:`llmguard_sdk.router.policy`): the power of two choices
    picks either of two deployments whose costs lie within ``buffer`` (0.2: 20 %) of each
    other, so that equal deployments share the load (0: the cheaper, always);
    ``seed`` makes the random draws repeatable; ``clock`` is injectable for tests. A
    deployment that has neither answered nor led a call for ``half_life_s`` is due for
    exploring: it leads a call (a trickle of exploration), at most one call in
    :data:`~llmguard_sdk.router.policy.EXPLORE_EVERY` (10) of the group, the one due the
    longest first. ``regions`` tags deployments (by name; else a
    deployment's own ``region`` attribute): the call's ``region=`` (else the group's
    ``region``) goes first, then the other regions as failover. Latencies, headroom and the
    typical answer length are kept in this process; the calls in flight that
    ``least_outstanding`` counts are shared through the Guard's store (Redis: every
    process).

    A call whose ``model=`` is the group's name (``guard.chat(..., model="gpt-4o-mini")``, as
    a LiteLLM Router's ``model_name``) starts at the group: its deployments as ranked, then
    the chain's routes after it (the entries before it are not tried); so does one whose
    ``model=`` is the own model of one of its deployments, when no route before it
    serves that model; see :class:`~llmguard_sdk.ChatOptions`.
    """

    def __init__(
        self,
        name: str,
        deployments: Iterable[Provider],
        *,
        strategy: Strategy = "latency",
        weights: Iterable[float] | None = None,
        half_life_s: float = 10.0,
        penalty_s: float = 10.0,
        slack: float = 2.0,
        buffer: float = 0.2,
        regions: Mapping[str, str] | None = None,
        region: str | None = None,
        seed: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if strategy not in _STRATEGIES:
            raise ConfigurationError(f"strategy must be one of {_STRATEGIES}, got {strategy!r}")
        deployments = _deployments(name, deployments)
        self.weights = _weights(weights, len(deployments), strategy)
        check_tuning("half_life_s", half_life_s)
        check_tuning("penalty_s", penalty_s)
        check_tuning("slack", slack)
        check_tuning("buffer", buffer)
        if regions is not None and not (
            isinstance(regions, Mapping) and all(isinstance(r, str) for r in regions.values())
        ):
            raise ConfigurationError("regions: a mapping of deployment names to regions")
        if region is not None and not isinstance(region, str):
            raise ConfigurationError(f"region: a region's name or None, got {region!r}")
        if not callable(clock):
            raise ConfigurationError(f"clock: a callable returning seconds, got {clock!r}")
        self.name = name
        self.deployments = tuple(deployments)
        self.strategy: Strategy = strategy
        self.half_life_s = half_life_s
        self.penalty_s = penalty_s
        self.slack = slack
        self.buffer = buffer
        self.names = tuple(d.name for d in deployments)
        unknown = sorted(set(regions or ()) - set(self.names))
        if unknown:
            raise ConfigurationError(f"regions: no deployment named {unknown} in {name!r}")
        self.regions = tuple(
            (regions or {}).get(d.name) or getattr(d, "region", None) for d in deployments
        )
        self.region = region
        self.local_leases = MemoryLeases(clock=clock)
        self._clock = clock
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._latency = {d.name: Latency() for d in deployments}
        self._led: dict[str, float] = {}  # when each deployment last led a call
        self._calm = EXPLORE_EVERY - 1  # calls taken since the last exploring one
        self._exploring: dict[str, int] = {}  # the turn each was last ranked to explore at
        self._tokens = 0.0  # the group's typical answer length (output tokens)
        self._loads = [0] * len(deployments)  # calls in flight at the last shared decision
        self._headroom: dict[str, Headroom] = {}
        self._refused: dict[str, float] = {}  # until when each refused deployment goes last
        self._turn = 0

    def __repr__(self) -> str:
        return (
            f"DeploymentGroup({self.name!r}, [{', '.join(self.names)}], strategy={self.strategy!r})"
        )

    def ranked(self, facts: CallFacts | None = None) -> list[Provider]:
        """The deployments in the order the next call (``facts``) tries them: the call's
        region first, then the others; in each, those not refused a moment ago (see
        :meth:`refused`) ranked by the strategy, then the refused ones as failover. The call
        is taken: the next one ranks a turn further (``round_robin``), and the first
        deployment has led a call (``latency``). A Guard ranks with :meth:`ranking` and
        takes the call with :meth:`reach`, once the call reaches the group."""
        order, _ = self._rank(facts or CallFacts(), None, take=True)
        return [self.deployments[i] for i in order]

    def ranking(self, facts: CallFacts | None = None) -> tuple[list[Provider], int]:
        """The order :meth:`ranked` gives the call ``facts``, and the turn it was ranked at,
        without taking the call: a call that never reaches the group (an earlier route
        answered, another tier served it) moves none of its state."""
        order, turn = self._rank(facts or CallFacts(), None, take=False)
        return [self.deployments[i] for i in order], turn

    def reach(
        self, routes: Sequence[Provider], turn: int, facts: CallFacts | None = None
    ) -> list[Provider]:
        """A call ranked at ``turn`` (see :meth:`ranking`) reaches the group: ``routes`` are
        its deployments of the group still to try, in its order, the first the one it goes
        to. The call is taken (as by :meth:`ranked`); when another call took a turn since
        this one was ranked, ``routes`` are ranked anew (calls ranked together do not all
        take the same turn) and their new order is returned."""
        with self._lock:
            fresh = turn == self._turn + 1 or self.strategy == "least_outstanding"
            if fresh:  # (least_outstanding: the lease decided where the call goes)
                self._turn += 1
                if self.strategy == "latency":
                    self._led[routes[0].name] = self._clock()
                    self._took(self._exploring.get(routes[0].name) == turn)
                return list(routes)
        order, _ = self._rank(facts or CallFacts(), {r.name for r in routes}, take=True)
        return [self.deployments[i] for i in order]

    def _rank(self, facts: CallFacts, among: set[str] | None, take: bool) -> tuple[list[int], int]:
        """The deployments (``among``: of those names only) in the call's order, and the
        turn ranked at; ``take``: the call is taken (the turn and the leader kept)."""
        in_flight = self.local_leases.counts(self.name, self.names)
        with self._lock:
            turn = self._turn + 1
            now = self._clock()
            refused = self._refused_at(now)
            if all(name in refused for name in self.names):
                refused = set()  # (all were: the strategy ranks them all)
            order: list[int] = []
            explorer: int | None = None  # the deployment the call explores
            for part in by_region(self.regions, facts.region or self.region):
                part = [i for i in part if among is None or self.names[i] in among]
                ready = [i for i in part if self.names[i] not in refused]
                ranked = self._order(ready, facts, now, in_flight, turn) if ready else []
                if ranked and not order and self._may_explore():  # (the call's leader)
                    explorer = explored(ranked, self._due(now))
                    if explorer is not None:
                        ranked = [explorer] + [i for i in ranked if i != explorer]
                order += ranked + [i for i in part if self.names[i] in refused]
            if explorer is not None:
                self._exploring[self.names[explorer]] = turn
            if take:
                self._turn = turn
                if self.strategy == "latency" and order:
                    self._led[self.names[order[0]]] = now
                    self._took(explorer is not None)
        return order, turn

    def _may_explore(self) -> bool:
        """Whether the next call may explore (``latency``): at most one call in
        :data:`~llmguard_sdk.router.policy.EXPLORE_EVERY` of the group does (the lock
        held)."""
        return self.strategy == "latency" and self._calm >= EXPLORE_EVERY - 1

    def _took(self, exploring: bool) -> None:
        """The group took a call (``latency``), ``exploring`` or not (the lock held)."""
        self._calm = 0 if exploring else self._calm + 1

    def _due(self, now: float) -> list[float | None]:
        """How long each deployment has neither answered nor led a call, where it is due
        for exploring (else None): see :func:`~llmguard_sdk.router.policy.stale`."""
        due: list[float | None] = []
        for name in self.names:
            state, led = self._latency[name], self._led.get(name, 0.0)
            fed = max(state.updated, led)
            due.append(now - fed if stale(state, led, now, self.half_life_s) else None)
        return due

    def _order(
        self, among: list[int], facts: CallFacts, now: float, in_flight: list[int], turn: int
    ) -> list[int]:
        """The deployments ``among`` (indexes) in the strategy's order for the call ranked
        at ``turn``."""
        if self.strategy == "round_robin":
            local = rotate(len(among), turn - 1)
        elif self.strategy == "weighted":
            local = rank_by_weight([self.weights[i] for i in among], self._rng)
        elif self.strategy == "latency":
            tokens = self._answer_tokens(facts.request)
            local = self._by_latency(among, [in_flight[i] for i in among], tokens)
        elif self.strategy == "least_outstanding":  # a guess: the lease decides
            local = rank_by_load([self._loads[i] for i in among], turn)
        elif self.strategy == "headroom":
            shares = [share_at(self._headroom.get(self.names[i]), now) for i in among]
            local = rank_by_headroom(shares, turn)
        elif self.strategy == "cheapest":
            local = self._by_cost(among, facts, turn)
        else:
            local = list(range(len(among)))
        return [among[j] for j in local]

    def lease_steps(
        self,
        order: Sequence[Provider],
        leases: Leases,
        call_id: str,
        lease_s: float,
    ) -> Step[list[Provider]]:
        """Lease the call on the deployment it goes to; the call's order of the deployments
        in ``order`` (this call's, ranked). ``least_outstanding`` decides with the lease: the
        one with the fewest calls in flight among those in ``order`` of the first one's region
        (the call's region when it has any)."""
        shared = self.strategy == "least_outstanding"
        first = self.names.index(order[0].name)
        if not shared:
            ask = LeaseAsk(self.name, self.names, first, self._turn + 1, call_id, lease_s)
            yield from leases.take_steps(ask)
            return list(order)
        mine = {route.name for route in order}  # a task's tier may hold some deployments only
        with self._lock:
            refused = self._refused_at(self._clock())
        if self.names[first] not in refused:  # (else all were: the strategy ranked them all)
            mine -= refused
        among = [
            i
            for i, name in enumerate(self.names)
            if name in mine and self.regions[i] == self.regions[first]
        ]
        names = [self.names[i] for i in among]
        ask = LeaseAsk(self.name, names, None, self._turn + 1, call_id, lease_s)
        index, counts = yield from leases.take_steps(ask)
        counts[index] += 1
        with self._lock:
            for i, count in zip(among, counts, strict=True):
                self._loads[i] = count
        leased = self.deployments[among[index]]
        return [leased] + [route for route in order if route is not leased]

    def observe(
        self,
        deployment: str,
        seconds: float,
        *,
        failed: bool,
        first_s: float | None = None,
        tokens: int = 0,
    ) -> None:
        """Feed an attempt on ``deployment`` (a name of this group) that took ``seconds`` in
        all; a stream passes ``first_s`` (to its first token); ``tokens``: output tokens."""
        with self._lock:
            state = self._latency.get(deployment)
            if state is None:
                return
            self._latency[deployment] = observe(
                state,
                seconds,
                self._clock(),
                failed=failed,
                penalty_s=self.penalty_s,
                half_life_s=self.half_life_s,
                first_s=first_s,
                tokens=tokens,
            )
            if not failed:
                self._refused.pop(deployment, None)  # it answers: back in the ranking
            if tokens > 0 and not failed:  # the first answer's length, then an average
                self._tokens += (_TOKENS_SMOOTHING if self._tokens else 1.0) * (
                    tokens - self._tokens
                )

    def outlasted(self, deployment: str, seconds: float) -> None:
        """An attempt on ``deployment`` was stopped unanswered after ``seconds``: another
        won a hedge race. It took at least that long (unmeasured, a deployment that turned
        slow kept its fast average and led every call, each waiting out ``hedge_after``)."""
        with self._lock:
            state = self._latency.get(deployment)
            if state is not None:
                self._latency[deployment] = outlasted(state, seconds, self._clock())

    def refused(self, deployment: str, retry_after: float) -> None:
        """``deployment``'s breaker or its own rate limit refused a call, for ``retry_after``
        seconds: until then, a second at most, it goes after the group's other deployments
        (their strategy shares its calls among them), then it is asked again (its breaker
        may half-open sooner: a probe ends its open wait in every process). An answer from
        it brings it back at once."""
        if deployment not in self.names:
            return
        wait = retry_after if 0 < retry_after < _REFUSED_S else _REFUSED_S  # NaN: a second
        with self._lock:
            self._refused[deployment] = self._clock() + wait

    def _refused_at(self, now: float) -> set[str]:
        """The deployments refused until after ``now`` (the lock held)."""
        return {name for name, until in self._refused.items() if until > now}

    def learn_headroom(
        self,
        deployment: str,
        headers: Mapping[str, str] | None,
        *,
        pause_s: float | None = None,
        limited: bool = False,
    ) -> None:
        """What an answer's rate-limit ``headers`` said of ``deployment``'s headroom; a 429
        (``limited``) leaves it none for ``pause_s``."""
        if deployment not in self.names:
            return
        now = self._clock()
        learnt = exhausted(pause_s, now) if limited else headroom_from(headers or {}, now)
        if learnt is not None:
            with self._lock:
                self._headroom[deployment] = learnt

    def latencies(self) -> dict[str, float | None]:
        """Each deployment's predicted latency in seconds for the group's typical answer,
        drifted toward the best (None: not measured)."""
        with self._lock:
            estimates = self._estimates()
            return {
                name: (None if self._latency[name].first_s is None else estimates[i])
                for i, name in enumerate(self.names)
            }

    def _by_latency(self, among: list[int], in_flight: list[int], tokens: float) -> list[int]:
        """Positions in ``among`` (indexes), best first; ``in_flight``: their calls."""
        estimates = self._estimates(tokens)
        states = [self._latency[self.names[i]] for i in among]
        measured = [state.first_s is not None for state in states]
        known = [estimates[i] for i, seen in zip(among, measured, strict=True) if seen]
        best = min(known, default=0.0)
        # one never measured costs nothing while idle (so it is measured early), and as the
        # best does once it has calls in flight (not a whole burst while none came back)
        costs = [
            (estimates[i] if seen else best if n else 0.0) * (1 + n)
            for i, seen, n in zip(among, measured, in_flight, strict=True)
        ]
        return rank_by_latency(costs, self._rng, slack=self.slack, buffer=self.buffer)

    def _by_cost(self, among: list[int], facts: CallFacts, turn: int) -> list[int]:
        """Positions in ``among`` (indexes): those that fit the call first, each by the
        call's price on it."""
        request = facts.request
        limit = request.output_limit if request is not None else None
        output = self._answer_tokens(request) or limit or _DEFAULT_ANSWER_TOKENS
        wanted = needs(request) if request is not None else frozenset()
        routes = [self.deployments[i] for i in among]
        fit = [fits(d, facts.tokens_on(d) + (limit or 0), wanted) for d in routes]
        costs = [self._price(d, facts, output) for d in routes]
        return rank_by_cost(costs, fit, turn)

    @staticmethod
    def _price(route: Provider, facts: CallFacts, output: float) -> float:
        """The call's price on ``route``, per million calls (inf: no price known): its
        tokens, and its fee per request."""
        if facts.prices is None or not route.model:
            return math.inf
        try:
            price = facts.prices.price(route.model, provider=route.name)
        except ConfigurationError:  # an unknown model without a default price
            return math.inf
        tokens = facts.tokens_on(route)
        price = price.for_input(tokens)
        fee = (price.per_request or 0.0) * 1_000_000
        return tokens * price.input + output * price.output + fee

    def _answer_tokens(self, request: ChatRequest | None) -> float:
        """The output tokens a call is expected to produce: the group's typical answer
        (0: none seen yet), never more than the call allows."""
        limit = request.output_limit if request is not None else None
        return min(self._tokens, limit) if limit else self._tokens

    def _estimates(self, tokens: float | None = None) -> list[float]:
        """Each deployment's predicted latency for an answer of ``tokens`` (default: the
        group's typical one)."""
        now = self._clock()
        tokens = self._tokens if tokens is None else tokens
        means = [predicted(self._latency[name], tokens) for name in self.names]
        best = min((m for m in means if m is not None), default=0.0)
        return [
            estimate(
                self._latency[name],
                now,
                toward=best,
                half_life_s=self.half_life_s,
                tokens=tokens,
                drift_s=self.half_life_s,  # (then due: explored, as rationed)
            )
            for name in self.names
        ]
