"""Routing: deployment groups whose deployments are ranked per call by a strategy.

A :class:`DeploymentGroup` takes one place in a Guard's fallback chain; each call tries its
deployments in the order the group's strategy gives (latency-aware power of two choices,
round robin, weighted, or as listed), then the chain's next routes. The ranking is pure
(:mod:`llmguard_sdk.router.policy`); the group keeps its measurements in this process.

.. versionadded:: 0.2.0
"""

from .groups import DeploymentGroup
from .policy import Strategy

__all__ = ["DeploymentGroup", "Strategy"]
