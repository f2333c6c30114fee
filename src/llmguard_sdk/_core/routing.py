"""The chain's order for one call: each deployment group's deployments ranked by its
strategy, in the group's place among the other routes."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from ..providers.base import Provider
from ..router import DeploymentGroup

__all__ = ["Routing", "flatten"]


class Routing:
    """The chain's entries (routes and groups), ranked anew for each call."""

    def __init__(self, entries: Sequence[Provider | DeploymentGroup]) -> None:
        self.entries = tuple(entries)
        self._groups = {
            deployment.name: entry
            for entry in entries
            if isinstance(entry, DeploymentGroup)
            for deployment in entry.deployments
        }

    def ranked(self) -> tuple[Provider, ...]:
        """Every route, each group's deployments in the order its strategy gives now."""
        return tuple(
            route
            for entry in self.entries
            for route in (entry.ranked() if isinstance(entry, DeploymentGroup) else (entry,))
        )

    def can_fail_over(self, route: str, failed: Collection[str]) -> bool:
        """Whether ``route``'s group has another deployment not among the ``failed`` routes
        (a failure there moves on to it rather than retrying ``route``)."""
        group = self._groups.get(route)
        if group is None:
            return False
        return any(d.name != route and d.name not in failed for d in group.deployments)

    def observe(self, route: str, seconds: float, *, failed: bool) -> None:
        """Feed an attempt on ``route`` to its group (a route outside groups: nothing)."""
        group = self._groups.get(route)
        if group is not None:
            group.observe(route, seconds, failed=failed)


def flatten(entries: Sequence[Provider | DeploymentGroup]) -> tuple[Provider, ...]:
    """The routes of the chain's entries: each group's deployments in its place."""
    return tuple(
        route
        for entry in entries
        for route in (entry.deployments if isinstance(entry, DeploymentGroup) else (entry,))
    )
