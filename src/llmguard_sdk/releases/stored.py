"""The canary as its store keeps it, read and moved by hand: :func:`status_of` (a Guard's
``guard.releases.status()`` and ``llmguard release status``) and :func:`move_by_hand`
(``promote()``, ``rollback()`` and ``llmguard release promote|rollback``), by the stage
shares its Guards stored (:func:`as_stored`). They need no Guard: the CLI reads and moves a
canary with its backend alone.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from ..errors import CanaryNotFoundError, ConfigurationError, ReleaseConflictError
from .backends import ReleaseBackend
from .policy import (
    CanaryPolicy,
    Counters,
    Stage,
    log_likelihood_ratio,
    metric_counts,
    percentile,
    promoted,
    rolled_back,
)

__all__ = ["as_stored", "move_by_hand", "status_of"]


def move_by_hand(backend: ReleaseBackend, key: str, policy: CanaryPolicy, action: str) -> Stage:
    """``promote`` or ``rollback`` the canary stored under ``key`` (every process follows
    at its next exchange), by the stage shares its Guards stored (else ``policy``'s).

    Raises:
        CanaryNotFoundError: no canary is under way under ``key`` (none stored, or its
            state expired; also when it expires between the read and the move).
        ReleaseConflictError: other processes moved it between each read and move.
    """
    for _ in range(10):  # another process may move it between the read and the move
        found = backend.exchange(key, "", 0, {}, {})
        if found.stage is None:  # never stored, or forgotten (its TTL passed)
            raise CanaryNotFoundError(key, action)
        policy = as_stored(policy, found.stages)
        now = time.time()
        if action == "rollback":
            new = rolled_back(found.stage, "rolled back by hand", now)
        else:
            again = found.stage.status == "rolled_back"
            why = "started again by hand" if again else "promoted by hand"
            new = promoted(found.stage, policy, why, now)
        moved, stage = backend.transition(
            key, found.stage.version, new.index, new.status, new.reason
        )
        if moved:
            return stage
    raise ReleaseConflictError(key, action, attempts=10)


def _arm_figures(counters: Counters, min_calls: int | None) -> dict[str, Any]:
    """An arm's figures; ``calls_needed``: the calls it still serves before the stage can be
    promoted (``min_calls`` less its calls; ``None`` outside a canary under way)."""
    calls = counters.get("calls", 0.0)
    p99 = percentile(counters, "lat", 0.99)
    cost_n = sum(v for k, v in counters.items() if k.startswith("cost:"))
    median_cost = percentile(counters, "cost", 0.5)
    return {
        "calls": int(calls),
        "error_rate": counters.get("errors", 0.0) / calls if calls else None,
        "rejected_rate": counters.get("rejected", 0.0) / calls if calls else None,
        "p99_latency_s": p99,
        "median_cost_usd": median_cost if cost_n else None,
        "feedback_scores": int(counters.get("fb", 0.0)),
        "low_feedback": int(counters.get("fb_low", 0.0)),
        "calls_needed": None if min_calls is None else max(0, min_calls - int(calls)),
    }


def as_stored(policy: CanaryPolicy, stages: tuple[float, ...], min_calls: int = 0) -> CanaryPolicy:
    """``policy`` with the stage shares and ``min_calls`` stored with the canary (its
    Guards'), where stored."""
    if min_calls > 0 and min_calls != policy.min_calls:
        policy = replace(policy, min_calls=min_calls)
    if not stages or stages == policy.stages:
        return policy
    try:
        return replace(policy, stages=stages)
    except ConfigurationError:  # no shares a policy takes: the caller's own
        return policy


def status_of(
    backend: ReleaseBackend, key: str, policy: CanaryPolicy, *, release: str | None = None
) -> dict[str, Any]:
    """The stage stored under ``key`` and, for its current stage, each arm's figures (with
    the calls it still needs before the stage can be promoted) and each metric's log
    likelihood ratio against the breach bound (the share and ``min_calls`` by those its
    Guards stored, else ``policy``'s). ``release`` is the current release's id,
    given back as is: the store keeps the candidate's only, so a reader of the store alone
    (``llmguard release status``) has ``None`` there, in the same shape."""
    found = backend.exchange(key, "", 0, {}, {})
    stage = found.stage
    if stage is None:
        return {"key": key, "release": release, "canary": None}
    policy = as_stored(policy, found.stages, found.min_calls)
    counts = metric_counts(found.control, found.canary, policy)
    deciding = stage.status == "canary" and stage.share(policy) < 1.0
    needs = policy.min_calls if deciding else None
    return {
        "key": key,
        "release": release,
        "canary": {
            "candidate": stage.candidate,
            "status": stage.status,
            "stage": stage.index,
            "share": stage.share(policy),
            "version": stage.version,
            "reason": stage.reason,
            "changed_at": stage.changed_at,
            "min_calls": policy.min_calls,
        },
        "control": _arm_figures(found.control, needs),
        "candidate": _arm_figures(found.canary, needs),
        "log_likelihood_ratios": {
            metric: round(log_likelihood_ratio(*c, policy.ratio), 3) for metric, c in counts.items()
        },
        "bound": round(policy.bound, 3),
    }
