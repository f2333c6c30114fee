"""Routing: deployment groups whose deployments are ranked per call by a strategy; task
routing and cascades.

A :class:`DeploymentGroup` takes one place in a Guard's fallback chain; each call tries its
deployments in the order the group's strategy gives (latency-aware power of two choices,
round robin, weighted, or as listed), then the chain's next routes. The ranking is pure
(:mod:`llmguard_sdk.router.policy`); the group keeps its measurements in this process.

A :class:`TaskRouter` (``Guard(..., tasks=...)``) chooses each call's *tier*, a named part of
the chain, by :class:`Rule` s and a classifier (:mod:`llmguard_sdk.router.tasks`); a
:class:`Cascade` tries a small tier first and escalates when a check rejects its answer
(:mod:`llmguard_sdk.router.cascade`: :func:`finish_reason`, :func:`json_schema`,
:func:`not_empty`, :func:`validator`).

.. versionadded:: 0.2.0
"""

from .cascade import Cascade, Check, finish_reason, json_schema, not_empty, validator
from .groups import DeploymentGroup
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
    "json_schema",
    "not_empty",
    "validator",
]
