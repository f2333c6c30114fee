"""Canary decisions as pure functions: which calls a canary gets, what each call adds to its
arm's guardrail counters, and when the counters say roll back or promote.

Nothing here reads a clock or a store: the counters of both arms (summed over every process by
the store) go in, a :class:`Decision` comes out.

**The test.** Each guardrail metric turns a call into a *bad event* or not: an error, an
output filter's rejection, a slow call (latency above ``latency_tolerance`` times the
control's ``latency_quantile``, its median by default, and above it by ``latency_slack_s``
too), a costly call (cost above
``cost_tolerance`` times the control's median cost), a low feedback score. Given that a bad
event happened, it came from the canary with probability
``q0 = n_canary / (n_canary + n_control)`` when both arms are equally good (``n``: the arm's
calls, or scores for feedback), and ``q1`` when the canary's rate is ``ratio`` times the
control's. The likelihood ratio of ``q1`` to ``q0`` over the bad events seen is a
nonnegative martingale when the canary is no worse, so (Ville's inequality) it ever reaches
``1 / alpha`` with probability at most ``alpha``: a breach is declared at that bound, however
often the counters are looked at. A stage whose arms have each served ``min_calls`` calls
without a breach is promoted to the next share.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import hashlib
import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Literal

from ..errors import ConfigurationError

__all__ = [
    "METRICS",
    "CanaryPolicy",
    "Counters",
    "Decision",
    "Stage",
    "bucket",
    "decide",
    "in_canary",
    "log_likelihood_ratio",
    "metric_counts",
    "observation",
    "percentile",
    "rolled_back",
    "promoted",
]

METRICS = ("errors", "rejected", "slow", "costly", "low_feedback")
"""The guardrail metrics, each tested on its own."""

Counters = Mapping[str, float]
"""One arm's counters: ``calls``, ``errors``, ``rejected``, ``fb`` / ``fb_low`` (feedback
scores, low ones), and histograms ``lat:<i>`` (seconds) and ``cost:<i>`` (USD)."""

StageStatus = Literal["canary", "promoted", "rolled_back"]
LATENCY_SLACK_S = 0.05  # a call is slow only this far above the control's too (CanaryPolicy)
_GROWTH = 1.1  # histogram buckets: each 10 % wider than the one before
_BUCKETS = 300
_FLOOR = {"lat": 1e-4, "cost": 1e-9}  # 0.1 ms, a nano-dollar: the first bucket's edge


@dataclass(frozen=True)
class CanaryPolicy:
    """How a candidate release is canaried against the current one.

    Args:
        stages: the candidate's share of traffic at each stage, rising, the last 1.0
            (promoted): default 1 % -> 5 % -> 25 % -> 100 %.
        sticky_by: ``"user"`` or ``"tenant"``: the scope id hashed to pick the arm, so one
            user (tenant) stays on one arm as the share grows; calls without one are drawn
            at random.
        min_calls: calls each arm (the canary and the control) serves in a stage without a
            breach before it is promoted: a canary whose control served too few calls (one
            tenant, sticky, inside it) has nothing to be compared with and waits. A healthy
            candidate is promoted after about ``min_calls / min(s, 1 - s)`` calls of the
            feature a stage at share ``s`` (the default policy: 62,000 calls, 43 days at a
            call a minute); ``status()`` says how many each arm still needs.
        alpha: the chance, per metric and stage, of rolling back a candidate that is no
            worse than the control (the sequential test's false-alarm bound).
        ratio: the bad-event rate ratio (canary over control) the test is tuned to detect;
            larger effects are detected sooner.
        latency_quantile / latency_tolerance / latency_slack_s: a call is slow above
            ``latency_tolerance`` times the control's ``latency_quantile`` latency and
            ``latency_slack_s`` seconds (default 0.05) above it: both. At millisecond
            latencies a ratio alone calls a candidate 2 ms slower (3 ms beside 1.1 ms) slow
            on every call; a difference under the slack is no slowness a user notices.
            ``0`` judges by the ratio alone.
        cost_tolerance: a call is costly above this many times the control's median cost.
            A call whose model has no price (in the Guard's ``prices``) has no cost: a
            candidate (or control) route without one turns this check off, and the Guard
            logs a warning naming it as it is built.
        feedback_threshold: feedback scores below it are bad.
        min_control: control calls needed before latency and cost are compared.
        flush_interval: seconds between a process's exchanges with the store (its counters
            added, the stage read back): how stale a stage may be in one process. A
            candidate's canary keeps the store's key from other candidates (a rolling deploy)
            until 10 intervals after its Guards' last exchange.
        auto: decide by itself; ``False``: only count (stages change by hand).

    .. versionadded:: 0.2.0
    """

    stages: tuple[float, ...] = (0.01, 0.05, 0.25, 1.0)
    sticky_by: Literal["user", "tenant"] = "user"
    min_calls: int = 500
    alpha: float = 0.001
    ratio: float = 2.0
    latency_quantile: float = 0.5
    latency_tolerance: float = 1.5
    latency_slack_s: float = LATENCY_SLACK_S
    cost_tolerance: float = 1.5
    feedback_threshold: float = 0.5
    min_control: int = 20
    flush_interval: float = 0.25
    auto: bool = True

    def __post_init__(self) -> None:
        _check_kinds(self)
        stages = tuple(float(s) for s in self.stages)
        if not stages or stages[-1] != 1.0 or any(not 0 < s <= 1 for s in stages):
            raise ConfigurationError(
                f"stages: shares in (0, 1], rising, the last 1.0 (5 % is 0.05), got {stages!r:.80}"
            )
        if any(b <= a for a, b in itertools.pairwise(stages)):
            raise ConfigurationError(f"stages must rise, got {stages!r:.80}")
        object.__setattr__(self, "stages", stages)
        if self.sticky_by not in ("user", "tenant"):
            raise ConfigurationError("sticky_by must be 'user' or 'tenant'")
        if isinstance(self.min_calls, bool) or not (
            isinstance(self.min_calls, int) and self.min_calls >= 1
        ):
            raise ConfigurationError("min_calls must be an int >= 1")
        if not 0 < self.alpha < 1 or not 1 < self.ratio < math.inf:
            raise ConfigurationError("alpha must be in (0, 1) and ratio > 1 (finite)")
        threshold = self.feedback_threshold
        if not (isinstance(threshold, int | float) and math.isfinite(threshold)):
            raise ConfigurationError("feedback_threshold must be a finite number")
        if not 0 < self.latency_quantile < 1:
            raise ConfigurationError("latency_quantile must be in (0, 1)")
        if not (self.latency_tolerance >= 1 and self.cost_tolerance >= 1):
            raise ConfigurationError("latency_tolerance and cost_tolerance must be >= 1")
        if not 0 <= self.latency_slack_s < math.inf:
            raise ConfigurationError(
                f"latency_slack_s must be finite seconds >= 0, got {self.latency_slack_s!r}"
            )
        if not (0 < self.flush_interval <= 60 and self.min_control >= 1):
            raise ConfigurationError("flush_interval in (0, 60] s and min_control >= 1")

    @property
    def bound(self) -> float:
        """The log likelihood ratio at which a metric breaches: ``log(1 / alpha)``."""
        return math.log(1.0 / self.alpha)


_NUMBERS = (
    "alpha", "ratio", "latency_quantile", "latency_tolerance", "latency_slack_s",
    "cost_tolerance", "feedback_threshold", "flush_interval",
)  # fmt: skip


def is_number(value: object) -> bool:
    """Whether ``value`` is a real number (an int or a float, not a bool, not NaN)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and value == value


def _check_kinds(policy: CanaryPolicy) -> None:
    """A :class:`ConfigurationError` naming the first setting of the wrong kind (a text or
    ``None`` number raised TypeError from a comparison; ``auto="no"`` read as true)."""
    for name in _NUMBERS:
        value = getattr(policy, name)
        if not is_number(value):
            raise ConfigurationError(f"{name} must be a number, got {value!r:.80}")
    stages = policy.stages
    if isinstance(stages, str | bytes) or not isinstance(stages, tuple | list):
        raise ConfigurationError(f"stages must be a tuple of shares, got {stages!r:.80}")
    if not all(is_number(s) for s in stages):
        raise ConfigurationError(f"stages must be numbers (shares in (0, 1]), got {stages!r:.80}")
    control = policy.min_control
    if isinstance(control, bool) or not (isinstance(control, int) and control >= 1):
        raise ConfigurationError(f"min_control must be an int >= 1, got {control!r:.80}")
    if not isinstance(policy.auto, bool):
        raise ConfigurationError(f"auto must be True or False, got {policy.auto!r:.80}")


@dataclass(frozen=True)
class Stage:
    """Where a canary stands, as every process reads it from the store: ``version`` grows
    at each change (and starts the stage's counters afresh), ``index`` points into
    :attr:`CanaryPolicy.stages`, ``candidate`` is the release id canaried, ``reason``
    says why the last change happened, ``changed_at`` when (epoch seconds)."""

    version: int = 0
    index: int = 0
    status: StageStatus = "canary"
    candidate: str = ""
    reason: str = ""
    changed_at: float = 0.0

    def share(self, policy: CanaryPolicy) -> float:
        """The candidate's share of traffic now."""
        if self.status == "rolled_back":
            return 0.0
        if self.status == "promoted":
            return 1.0
        return policy.stages[min(self.index, len(policy.stages) - 1)]


@dataclass(frozen=True)
class Decision:
    """What the counters say: ``rollback`` (``metric`` breached, ``llr`` its log likelihood
    ratio) or ``promote`` to the next stage."""

    action: Literal["rollback", "promote"]
    metric: str = ""
    llr: float = 0.0

    @property
    def reason(self) -> str:
        """The decision in words, as stages and events record it."""
        if self.action == "rollback":
            return f"{self.metric} breached (log LR {self.llr:.2f})"
        return "stage passed"


def in_canary(key: str, share: float) -> bool:
    """Whether the scope id ``key`` is in the canary at ``share``: its hash, as a number in
    [0, 1), below the share (so a key in at one share stays in at every larger one)."""
    raw = key.encode("utf-8", "surrogatepass")  # any str id (JSON may hold a lone surrogate)
    digest = hashlib.blake2b(raw, digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64 < share


def bucket(kind: Literal["lat", "cost"], value: float) -> int:
    """The histogram bucket of ``value`` (seconds or USD): bounded, 10 % wide."""
    if not value > _FLOOR[kind]:
        return 0
    return min(_BUCKETS - 1, 1 + int(math.log(value / _FLOOR[kind]) / math.log(_GROWTH)))


def _edge(kind: str, index: int) -> float:
    """The upper edge of bucket ``index``."""
    return _FLOOR[kind] * _GROWTH**index


def observation(
    latency_s: float | None, cost_usd: float | None, *, failed: bool, rejected: bool
) -> dict[str, float]:
    """What one finished call adds to its arm's counters."""
    delta: dict[str, float] = {"calls": 1}
    if failed:
        delta["errors"] = 1
    if rejected:
        delta["rejected"] = 1
    if not failed and latency_s is not None:
        delta[f"lat:{bucket('lat', latency_s)}"] = 1
    if not failed and cost_usd is not None:
        delta[f"cost:{bucket('cost', cost_usd)}"] = 1
    return delta


def _histogram(counters: Counters, kind: str) -> dict[int, float]:
    prefix = kind + ":"
    return {int(k[len(prefix) :]): v for k, v in counters.items() if k.startswith(prefix)}


def percentile(counters: Counters, kind: Literal["lat", "cost"], q: float) -> float | None:
    """The ``q`` quantile of an arm's histogram (the upper edge of its bucket), or None."""
    hist = _histogram(counters, kind)
    total = sum(hist.values())
    if total <= 0:
        return None
    seen = 0.0
    for index in sorted(hist):
        seen += hist[index]
        if seen >= q * total:
            return _edge(kind, index)
    return _edge(kind, max(hist))


def _above(counters: Counters, kind: str, threshold: float) -> tuple[float, float]:
    """(observations, those in buckets wholly above ``threshold``)."""
    hist = _histogram(counters, kind)
    above = sum(v for i, v in hist.items() if _edge(kind, i - 1) >= threshold)
    return sum(hist.values()), above


def metric_counts(
    control: Counters, canary: Counters, policy: CanaryPolicy
) -> dict[str, tuple[float, float, float, float]]:
    """Per metric: (canary bad events, canary trials, control bad events, control trials)."""
    out: dict[str, tuple[float, float, float, float]] = {}
    for metric in ("errors", "rejected"):
        out[metric] = (
            canary.get(metric, 0), canary.get("calls", 0),
            control.get(metric, 0), control.get("calls", 0),
        )  # fmt: skip
    for metric, kind, q, tolerance, slack in (
        ("slow", "lat", policy.latency_quantile, policy.latency_tolerance, policy.latency_slack_s),
        ("costly", "cost", 0.5, policy.cost_tolerance, 0.0),
    ):
        n0 = sum(_histogram(control, kind).values())
        base = percentile(control, kind, q)  # type: ignore[arg-type]
        if base is None or n0 < policy.min_control:
            continue
        threshold = max(base * tolerance, base + slack)  # past the ratio and the slack both
        n_c, bad_c = _above(canary, kind, threshold)
        n_0, bad_0 = _above(control, kind, threshold)
        out[metric] = (bad_c, n_c, bad_0, n_0)
    out["low_feedback"] = (
        canary.get("fb_low", 0), canary.get("fb", 0), control.get("fb_low", 0), control.get("fb", 0)
    )  # fmt: skip
    return out


def log_likelihood_ratio(
    bad_canary: float, n_canary: float, bad_control: float, n_control: float, ratio: float
) -> float:
    """The log likelihood ratio of "the canary's bad-event rate is ``ratio`` times the
    control's" to "they are equal", from where the bad events fell (see the module docs)."""
    if n_canary <= 0 or n_control <= 0 or bad_canary + bad_control <= 0:
        return 0.0
    q0 = n_canary / (n_canary + n_control)
    q1 = q0 * ratio / (q0 * ratio + 1.0 - q0)
    return bad_canary * math.log(q1 / q0) + bad_control * math.log((1.0 - q1) / (1.0 - q0))


def decide(
    stage: Stage, control: Counters, canary: Counters, policy: CanaryPolicy
) -> Decision | None:
    """Roll back at the first metric past the bound; promote a stage whose arms each served
    ``min_calls`` calls, or whose share is already 1.0; else nothing yet (and nothing outside
    a running canary)."""
    if stage.status != "canary" or not policy.auto:
        return None
    if stage.share(policy) >= 1.0:  # the candidate serves every call: no canary arm to test
        return Decision("promote")
    worst: Decision | None = None
    for metric, counts in metric_counts(control, canary, policy).items():
        llr = log_likelihood_ratio(*counts, policy.ratio)
        if llr >= policy.bound and (worst is None or llr > worst.llr):
            worst = Decision("rollback", metric, llr)
    if worst is not None:
        return worst
    # both arms: where bad events fell says little when nearly every call was the canary's
    # (one tenant, sticky, inside it: a candidate failing every call passed)
    if min(canary.get("calls", 0), control.get("calls", 0)) >= policy.min_calls:
        return Decision("promote")
    return None


def promoted(stage: Stage, policy: CanaryPolicy, reason: str, now: float) -> Stage:
    """The next stage (the last one is ``promoted``: the candidate serves everything); a
    rolled-back canary's next is the stage it was rolled back from (started again, it skipped
    the stage it failed at: from the one before the last, to every user)."""
    step = 0 if stage.status == "rolled_back" else 1
    index = min(stage.index + step, len(policy.stages) - 1)
    status: StageStatus = "promoted" if index == len(policy.stages) - 1 else "canary"
    return replace(
        stage, version=stage.version + 1, index=index, status=status, reason=reason,
        changed_at=now,
    )  # fmt: skip


def rolled_back(stage: Stage, reason: str, now: float) -> Stage:
    """The candidate gets no traffic until a new candidate (or a hand) starts it again."""
    return replace(
        stage, version=stage.version + 1, status="rolled_back", reason=reason, changed_at=now
    )
