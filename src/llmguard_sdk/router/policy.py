"""How a deployment group ranks its deployments for one call: pure functions of the state
each strategy keeps (time passed in, randomness from the caller's generator).

``latency`` keeps a *peak-sensitive* moving average of each deployment's latency, split in
two as a streamed answer shows it: the time to the first token and the time per further
output token (a plain answer, which shows only its whole time, feeds the first part, less
what its tokens took at the per-token rate learnt from streams). A sample above the average
replaces it at once (fast rise: one slow answer is enough to stop sending traffic there); a
sample below pulls it down by how long the average went unfed (slow fall, halfway per
``half_life_s``), as Finagle's and Linkerd's peak EWMA do. A failed attempt counts as
``penalty_s`` (or its own time, when longer) until the deployment's next answer, which
replaces it: a penalty is no measure, and decayed as one a recovered deployment would be
kept out for log2(penalty / its latency) half-lives. An attempt stopped unanswered (a hedge
race's loser) took at least as long as it ran: it raises the average to that, never lowers
it. The cost of a deployment is its predicted latency for the group's typical answer length
(at most the call's ``max_tokens``), times one plus the calls it has in flight (load x
latency).

Read back, an average drifts toward the group's best one, halfway per ``half_life_s`` since
it was last fed, for one half-life at most (then it is due for exploring, below: the drift
alone brought a deployment that failed back into the band after a few half-lives, and with
calls further apart than that, a hung one took a share of them), so a deployment that was
slow, or failed, a while ago is tried again and can earn its way back. Only a *trickle* goes
there: a deployment whose cost is more than ``slack`` times the best's takes no call from
the ranking (it stays as failover); it is explored instead by one call once it is *due*: it
has neither answered nor led a call for ``explore_s`` (``half_life_s`` by default), and that
one call, when it is still slow, raises its average to the peak again. Exploring also
refreshes an average that one stray sample left high (the best's may have got worse since).
It is rationed: at most one call in :data:`EXPLORE_EVERY` (10) of a group explores, and it
explores the deployment due the longest (unfed the longest), unless the ranking leads with
that one anyway. With calls further apart than ``half_life_s`` every deployment is due at
each call: the one leading the calls is fed by each, the others take turns, so a recovered
one is explored within (deployments - 1) x 10 calls, and a slow or hung one takes a tenth of
the calls at most (exploring the cheapest due one, the best, had left a recovered one out
for good; exploring each due one at once had sent a hung one a share of 1/deployments). A
deployment's first answer pays for its connection (TLS, a cold pool) and is not measured.
Within the band the ranking takes the power of two choices: two deployments drawn at random,
the cheaper first, unless their costs lie within ``buffer`` of each other (a fraction: 0.2
by default, as LiteLLM's ``lowest_latency_buffer``): then either, at random, so that equal
deployments share the load rather than the marginally fastest taking it all (a deployment
never measured costs 0 while it has no call in flight, so each is measured early, and as the
best one once it has: a burst is shared, not all sent there); then the others, cheapest
first, as the failover order within the group.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

__all__ = [
    "EXPLORE_EVERY",
    "Latency",
    "Strategy",
    "estimate",
    "explored",
    "observe",
    "outlasted",
    "predicted",
    "rank_by_latency",
    "rank_by_load",
    "rank_by_weight",
    "rotate",
    "stale",
]

Strategy = Literal[
    "latency", "least_outstanding", "headroom", "cheapest", "round_robin", "weighted", "ordered"
]
"""``latency``: power of two choices on peak-EWMA latency times load, within ``slack`` of the
best (a pair within ``buffer`` of each other: either); ``least_outstanding``: the deployment
with the fewest calls in flight (counted across processes when the Guard's store is Redis);
``headroom``: the most provider rate-limit headroom left; ``cheapest``: the cheapest of those
that fit the call (context window, capabilities); ``round_robin``: each call starts one
further along; ``weighted``: the first drawn in proportion to the weights, then by weight;
``ordered``: as listed (failover only)."""

EXPLORE_EVERY = 10
"""A group's calls per exploring call, at most: after a call explores a deployment, the
next ``EXPLORE_EVERY - 1`` calls of the group follow the ranking."""


@dataclass(frozen=True)
class Latency:
    """A deployment's peak-EWMA latency: ``first_s``, seconds to the first token (a plain
    answer's whole time, less its tokens' share); ``per_token_s``, seconds per further output
    token (learnt from streams); ``None`` until measured; ``updated``: when it was last fed
    (a :func:`time.monotonic` instant); ``answers``: how many answers fed it; ``failed``:
    the last attempt failed (``first_s`` holds its penalty until the next answer)."""

    first_s: float | None = None
    per_token_s: float | None = None
    updated: float = 0.0
    answers: int = 0
    failed: bool = False


def _peak(old: float | None, sample: float, elapsed: float, half_life_s: float) -> float:
    """Peak-sensitive average: a sample above ``old`` replaces it; one below pulls it down by
    how long ``old`` went unfed (halfway per ``half_life_s``)."""
    if old is None or sample >= old:
        return sample
    kept = math.pow(0.5, max(0.0, elapsed) / half_life_s)
    return sample + (old - sample) * kept


def observe(
    state: Latency,
    seconds: float,
    now: float,
    *,
    failed: bool,
    penalty_s: float,
    half_life_s: float = 10.0,
    first_s: float | None = None,
    tokens: int = 0,
) -> Latency:
    """The state after an attempt that took ``seconds`` in all (``failed``: it counts as at
    least ``penalty_s``). A stream passes ``first_s`` (its time to the first token) and the
    ``tokens`` it produced; a plain answer its ``tokens`` only."""
    elapsed = now - state.updated
    per_token = state.per_token_s
    if failed:
        first = max(seconds, penalty_s)
    elif state.answers == 0 and state.first_s is None:
        return Latency(None, None, now, 1)  # the first answer pays for the connection: unmeasured
    elif first_s is not None:
        first = first_s
        if tokens > 1:
            sample = max(0.0, seconds - first_s) / (tokens - 1)
            per_token = _peak(per_token, sample, elapsed, half_life_s)
    else:
        first = max(0.0, seconds - (per_token or 0.0) * max(0, tokens - 1))
    answers = state.answers + (not failed)
    # a penalty stands in for a measure until the next answer, which replaces it
    old = None if state.failed and not failed else state.first_s
    return Latency(_peak(old, first, elapsed, half_life_s), per_token, now, answers, failed)


def outlasted(state: Latency, seconds: float, now: float) -> Latency:
    """The state after an attempt stopped unanswered after ``seconds`` (another attempt won a
    hedge race): it takes at least that long, so its average rises to it, and never falls
    (how long it would have taken is unknown)."""
    first = seconds if state.first_s is None else max(state.first_s, seconds)
    return replace(state, first_s=first, updated=now)


def predicted(state: Latency, tokens: float) -> float | None:
    """The latency ``state`` predicts for an answer of ``tokens`` output tokens (None: never
    measured)."""
    if state.first_s is None:
        return None
    return state.first_s + (state.per_token_s or 0.0) * max(0.0, tokens - 1)


def estimate(
    state: Latency,
    now: float,
    *,
    toward: float,
    half_life_s: float,
    tokens: float = 0.0,
    drift_s: float = math.inf,
) -> float:
    """The predicted latency read at ``now``: drifted toward ``toward`` (the group's best),
    halfway each ``half_life_s`` since it was last fed, for ``drift_s`` at most; 0 for a
    deployment never measured."""
    mean = predicted(state, tokens)
    if mean is None:
        return 0.0
    kept = math.pow(0.5, min(drift_s, max(0.0, now - state.updated)) / half_life_s)
    return toward + (mean - toward) * kept


def stale(state: Latency, led: float, now: float, explore_s: float) -> bool:
    """Whether a measured deployment has neither answered nor led a call (``led``: when it
    last did) for ``explore_s``: it is due for exploring (see :func:`explored`)."""
    return state.first_s is not None and now - max(state.updated, led) >= explore_s


def rank_by_latency(
    costs: Sequence[float],
    rng: random.Random,
    *,
    slack: float = math.inf,
    buffer: float = 0.0,
) -> list[int]:
    """Indexes, best first: the cheaper of two drawn at random among those within ``slack``
    times the lowest cost (the only one, when one alone is), either of the two when their
    costs lie within ``buffer`` (a fraction) of each other; then the rest by cost."""
    order = sorted(range(len(costs)), key=lambda i: costs[i])
    if len(order) < 2:
        return order
    best = costs[order[0]]
    if best > 0:
        band = [i for i in order if costs[i] <= best * slack]
    else:  # deployments never measured: they go first
        band = [i for i in order if costs[i] <= 0]
    if len(band) < 2:
        return order
    first, second = rng.sample(band, 2)  # (in random order: within the buffer, either)
    chosen = first if costs[first] <= costs[second] * (1 + buffer) else second
    return [chosen] + [i for i in order if i != chosen]


def explored(order: Sequence[int], due: Sequence[float | None]) -> int | None:
    """The deployment a call explores, of those ranked in ``order`` (indexes, the leader
    first): the one unfed the longest among those due (``due``: how long each has neither
    answered nor led a call, None while it is not due), among equals the one ranked last
    (the ranking is the least likely to send it a call); None when none is due, or when
    the ranking leads with that one anyway."""
    waits = [(wait, i) for i in order if (wait := due[i]) is not None]
    if not waits:
        return None
    longest = max(wait for wait, _ in waits)
    chosen = [i for wait, i in waits if wait == longest][-1]
    return None if chosen == order[0] else chosen


def rank_by_load(counts: Sequence[int], turn: int) -> list[int]:
    """Indexes, fewest calls in flight first; ties go round (from ``turn``), so equal loads
    spread."""
    count = len(counts)
    return sorted(range(count), key=lambda i: (counts[i], (i - turn) % count if count else 0))


def rank_by_weight(weights: Sequence[float], rng: random.Random) -> list[int]:
    """Indexes: the first drawn in proportion to ``weights`` (all 0: evenly), then the rest
    by weight."""
    order = sorted(range(len(weights)), key=lambda i: -weights[i])
    top = weights[order[0]]  # drawn as shares of the largest: finite weights, a finite sum
    shares = [w / top for w in weights] if top > 0 else [1.0] * len(weights)
    chosen = rng.choices(range(len(weights)), weights=shares)[0]
    return [chosen] + [i for i in order if i != chosen]


def rotate(count: int, turn: int) -> list[int]:
    """Indexes starting at ``turn`` (modulo ``count``), the rest in order after it."""
    start = turn % count if count else 0
    return [(start + i) % count for i in range(count)]
