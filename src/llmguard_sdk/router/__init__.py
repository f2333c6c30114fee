"""Routing: deployment groups whose deployments are ranked per call by a strategy; task
routing and cascades.

A :class:`DeploymentGroup` takes one place in a Guard's fallback chain; each call tries its
deployments in the order the group's strategy gives (peak-EWMA latency with the power of two
choices, fewest calls in flight, most rate-limit headroom, cheapest that fits, round robin,
weighted, or as listed), its caller's region first, then the chain's next routes. The ranking
is pure (:mod:`llmguard_sdk.router.policy`, :mod:`llmguard_sdk.router.fit`); the group keeps
its measurements in this process, and the calls in flight of ``least_outstanding`` are leases
in the Guard's store (:mod:`llmguard_sdk.router.leases`: with Redis, every process's).

A :class:`TaskRouter` (``Guard(..., tasks=...)``) chooses each call's *tier*, a named part of
the chain, by :class:`Rule` s and a classifier (:mod:`llmguard_sdk.router.tasks`); a
:class:`Cascade` tries a small tier first and escalates when a check rejects its answer
(:mod:`llmguard_sdk.router.cascade`: :func:`finish_reason`, :func:`json_schema`,
:func:`not_empty`, :func:`validator`). :func:`is_route_failure` is the chain's rule for which
errors move a call on, to build a Guard's ``moves_on=`` on.

.. versionadded:: 0.2.0
"""

from .cascade import Cascade, Check, finish_reason, json_schema, not_empty, validator
from .groups import DeploymentGroup
from .moves import is_route_failure
from .policy import Strategy
from .tasks import Classifier, Predicate, Rule, TaskRouter

__all__ = [
    "Cascade",
    "Check",
    "Classifier",
    "DeploymentGroup",
    "Predicate",
    "Rule",
    "Strategy",
    "TaskRouter",
    "finish_reason",
    "is_route_failure",
    "json_schema",
    "not_empty",
    "validator",
]
