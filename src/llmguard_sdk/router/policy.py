"""How a deployment group ranks its deployments for one call: pure functions of the state
each strategy keeps (time passed in, randomness from the caller's generator).

``latency`` keeps an exponentially weighted mean of each deployment's attempt latency; a
failed attempt counts as ``penalty_s`` (or its own time, when longer). Read back, a mean
drifts toward the group's best one with ``half_life_s`` since it was last fed, so a deployment
that was slow, or failed, a while ago is tried again and can earn its way back. The ranking
takes the power of two choices: two deployments drawn at random, the faster first (a
deployment never measured counts as fastest, so each is measured early); then the others,
fastest first, as the failover order within the group.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "Latency",
    "Strategy",
    "estimate",
    "observe",
    "rank_by_latency",
    "rank_by_weight",
    "rotate",
]

Strategy = Literal["latency", "round_robin", "weighted", "ordered"]
"""``latency``: power of two choices on decayed mean latency; ``round_robin``: each call
starts one further along; ``weighted``: the first drawn in proportion to the weights, then
by weight; ``ordered``: as listed (failover only)."""

SMOOTHING = 0.3
"""The weight of a new latency sample in the mean."""


@dataclass(frozen=True)
class Latency:
    """A deployment's mean attempt latency (``None``: never measured) and when it was last
    fed (a :func:`time.monotonic` instant)."""

    mean_s: float | None = None
    updated: float = 0.0


def observe(
    state: Latency, seconds: float, now: float, *, failed: bool, penalty_s: float
) -> Latency:
    """The state after an attempt that took ``seconds`` (``failed``: it counts as at least
    ``penalty_s``)."""
    sample = max(seconds, penalty_s) if failed else seconds
    if state.mean_s is None:
        return Latency(sample, now)
    return Latency(state.mean_s + SMOOTHING * (sample - state.mean_s), now)


def estimate(state: Latency, now: float, *, toward: float, half_life_s: float) -> float:
    """The mean read at ``now``: drifted toward ``toward`` (the group's best mean), halfway
    each ``half_life_s`` since it was last fed; 0 for a deployment never measured."""
    if state.mean_s is None:
        return 0.0
    kept = math.pow(0.5, max(0.0, now - state.updated) / half_life_s)
    return toward + (state.mean_s - toward) * kept


def rank_by_latency(estimates: Sequence[float], rng: random.Random) -> list[int]:
    """Indexes, best first: the faster of two drawn at random, then the rest by estimate."""
    order = sorted(range(len(estimates)), key=lambda i: estimates[i])
    if len(order) < 2:
        return order
    first, second = rng.sample(range(len(estimates)), 2)
    chosen = first if estimates[first] <= estimates[second] else second
    return [chosen] + [i for i in order if i != chosen]


def rank_by_weight(weights: Sequence[float], rng: random.Random) -> list[int]:
    """Indexes: the first drawn in proportion to ``weights``, then the rest by weight."""
    order = sorted(range(len(weights)), key=lambda i: -weights[i])
    chosen = rng.choices(range(len(weights)), weights=weights)[0]
    return [chosen] + [i for i in order if i != chosen]


def rotate(count: int, turn: int) -> list[int]:
    """Indexes starting at ``turn`` (modulo ``count``), the rest in order after it."""
    start = turn % count if count else 0
    return [(start + i) % count for i in range(count)]
