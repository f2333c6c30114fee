"""Deployment groups: one logical model served by several deployments, ranked per call.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Sequence

from ..errors import ConfigurationError
from ..providers.base import Provider
from .policy import (
    Latency,
    Strategy,
    estimate,
    observe,
    rank_by_latency,
    rank_by_weight,
    rotate,
)

__all__ = ["DeploymentGroup"]

_STRATEGIES = ("latency", "round_robin", "weighted", "ordered")


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
    its name must be unique in the Guard. ``weights`` (one per deployment) are for
    ``weighted``; ``half_life_s`` and ``penalty_s`` tune ``latency`` (see
    :mod:`llmguard_sdk.router.policy`); ``seed`` makes the random draws repeatable; ``clock``
    is injectable for tests. Latencies are kept in this process.
    """

    def __init__(
        self,
        name: str,
        deployments: Sequence[Provider],
        *,
        strategy: Strategy = "latency",
        weights: Sequence[float] | None = None,
        half_life_s: float = 10.0,
        penalty_s: float = 10.0,
        seed: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if strategy not in _STRATEGIES:
            raise ConfigurationError(f"strategy must be one of {_STRATEGIES}, got {strategy!r}")
        if not deployments or not all(isinstance(d, Provider) for d in deployments):
            raise ConfigurationError(f"group {name!r} needs one or more Provider deployments")
        if weights is not None and (
            len(weights) != len(deployments) or not all(w >= 0 for w in weights) or not any(weights)
        ):
            raise ConfigurationError("weights: one >= 0 per deployment, not all 0")
        if not (half_life_s > 0 and penalty_s >= 0):
            raise ConfigurationError("half_life_s must be > 0 and penalty_s >= 0")
        self.name = name
        self.deployments = tuple(deployments)
        self.strategy: Strategy = strategy
        self.weights = tuple(weights) if weights is not None else (1.0,) * len(deployments)
        self.half_life_s = half_life_s
        self.penalty_s = penalty_s
        self._clock = clock
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._latency = {d.name: Latency() for d in deployments}
        self._turn = 0

    def __repr__(self) -> str:
        names = ", ".join(d.name for d in self.deployments)
        return f"DeploymentGroup({self.name!r}, [{names}], strategy={self.strategy!r})"

    def ranked(self) -> list[Provider]:
        """The deployments in the order the next call tries them."""
        with self._lock:
            if self.strategy == "round_robin":
                order = rotate(len(self.deployments), self._turn)
                self._turn += 1
            elif self.strategy == "weighted":
                order = rank_by_weight(self.weights, self._rng)
            elif self.strategy == "latency":
                order = rank_by_latency(self._estimates(), self._rng)
            else:
                order = list(range(len(self.deployments)))
        return [self.deployments[i] for i in order]

    def observe(self, deployment: str, seconds: float, *, failed: bool) -> None:
        """Feed an attempt on ``deployment`` (a name of this group) that took ``seconds``."""
        with self._lock:
            state = self._latency.get(deployment)
            if state is not None:
                self._latency[deployment] = observe(
                    state, seconds, self._clock(), failed=failed, penalty_s=self.penalty_s
                )

    def latencies(self) -> dict[str, float | None]:
        """Each deployment's decayed mean attempt latency in seconds (None: not measured)."""
        with self._lock:
            estimates = self._estimates()
            return {
                d.name: (None if self._latency[d.name].mean_s is None else estimates[i])
                for i, d in enumerate(self.deployments)
            }

    def _estimates(self) -> list[float]:
        now = self._clock()
        means = [s.mean_s for s in self._latency.values() if s.mean_s is not None]
        best = min(means, default=0.0)
        return [
            estimate(self._latency[d.name], now, toward=best, half_life_s=self.half_life_s)
            for d in self.deployments
        ]
