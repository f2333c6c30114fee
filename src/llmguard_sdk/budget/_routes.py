"""What the spend stage reads off a call's routes and request: the service tier a route
serves or a call asks for, the routes a task-routed call is priced over, whether a model
takes its output limit as ``max_completion_tokens``, and the moment a call is priced at.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Sequence
from typing import Literal

from ..context import CallContext
from ..providers.base import Provider
from ._source import normal_tier

__all__ = [
    "Level",
    "asked_tier",
    "route_tier",
    "started_at",
    "takes_completion_limit",
    "tier_routes",
]

Level = Literal["all", "downgrade", "local"]
"""The routes a call may take: all, a budget's downgrade routes, or local ones only."""
# OpenAI's reasoning models (o1, o3, o4-mini, gpt-5 ...) refuse max_tokens: the limit a
# budget gives a call for them goes as max_completion_tokens
_COMPLETION_LIMIT_MODELS = re.compile(r"(?:o\d|gpt-5)(?![a-z])")
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
_last_start: tuple[int, dt.datetime] = (-1, _EPOCH)


def takes_completion_limit(model: str | None) -> bool:
    """Whether ``model`` (``provider/`` prefix aside) is an OpenAI reasoning model, which
    takes ``max_completion_tokens`` and refuses ``max_tokens``."""
    return model is not None and bool(_COMPLETION_LIMIT_MODELS.match(model.rpartition("/")[2]))


def route_tier(route: Provider) -> str | None:
    """The one service tier a route serves, when it says (``service_tier``)."""
    tier = getattr(route, "service_tier", None)
    return normal_tier(tier) if isinstance(tier, str) else None


def asked_tier(ctx: CallContext) -> str | None:
    """The service tier a call asks for (``extra_body={"service_tier": ...}``)."""
    tier = (ctx.request.extra_body or {}).get("service_tier")
    return normal_tier(tier) if isinstance(tier, str) else None


def tier_routes(ctx: CallContext, routes: tuple[Provider, ...], level: Level) -> Sequence[Provider]:
    """The routes a call's worst case is priced over: a task-routed call's tier's only (it
    tries no other route unless a budget downgrade sends it on)."""
    if level != "all" or ctx.task is None or not ctx.route_order:
        return routes
    return [route for route in ctx.route_order if route in routes] or routes


def started_at(ctx: CallContext) -> dt.datetime:
    """When the call started (UTC): the moment its hold and its cost are priced at, so that
    time-of-day prices (DeepSeek's peak hours) are those of the call's start. The last one
    made is remembered (the same object: the price lookup remembers what it read of it),
    as a call's hold and its cost ask it in turn."""
    global _last_start
    last = _last_start
    if last[0] == ctx.started_ns:
        return last[1]
    found = _EPOCH + dt.timedelta(microseconds=ctx.started_ns // 1000)
    _last_start = (ctx.started_ns, found)
    return found
