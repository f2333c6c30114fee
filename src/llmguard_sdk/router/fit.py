"""What the ``headroom`` and ``cheapest`` strategies and the region preference rank by: pure
functions of what the group learnt (time passed in).

``headroom`` ranks deployments by the share of their provider rate limits left, as the
answers' ``x-ratelimit-remaining-*`` / ``x-ratelimit-limit-*`` headers (Anthropic's
``anthropic-ratelimit-*``) last said; the same counters the rate limiter learns from. A 429
leaves a deployment no headroom until its ``Retry-After``; what a deployment said is
forgotten when its counters reset (``x-ratelimit-reset-*``, Anthropic's
``anthropic-ratelimit-*-reset``, else a minute later; an hour at most, as the rate limiter
takes a provider's hint), and a deployment nobody heard from counts as having all its
headroom.

``cheapest`` ranks deployments that fit the request (context window, and the capabilities a
route declares: ``capabilities = {"tools", "vision"}``; a route that declares none is taken
to have them) by the price of the call on each (input tokens at the route's input rate,
the group's typical answer length, at most the call's ``max_tokens``, at its output rate,
and its fee per request), then those that do not fit.

A group's deployments may carry region tags; the call's region (or the group's) goes first,
each region in the strategy's order, then the other regions: failover across regions.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from ..models import ChatRequest
from ..providers.base import Provider, context_window
from ..providers.headers import limit_count, limit_reset_seconds

__all__ = [
    "Headroom",
    "by_region",
    "exhausted",
    "fits",
    "headroom_from",
    "needs",
    "rank_by_cost",
    "rank_by_headroom",
    "share_at",
]

_KINDS = ("requests", "tokens", "input-tokens", "output-tokens")
_DEFAULT_RESET_S = 60.0
# the longest a provider's word (a reset time, a 429's wait) is kept, as the rate limiter's
# MAX_LEARNED_PAUSE_S: a bogus one (Retry-After: 1e9) would keep a deployment last for good
_MAX_KEPT_S = 3600.0


@dataclass(frozen=True)
class Headroom:
    """The share of a deployment's provider rate limits left (0 to 1, the tightest limit's),
    good until ``until`` (a :func:`time.monotonic` instant: when its counters reset)."""

    share: float
    until: float


def headroom_from(
    headers: Mapping[str, str], now: float, *, wall: float | None = None
) -> Headroom | None:
    """What an answer's rate-limit headers say of the deployment's headroom (None: they
    say nothing: no remaining count, or none with its limit that is not exhausted).

    ``now`` is the group's clock; ``wall`` the wall-clock time the headers were read at
    (default: the system's), against which Anthropic's reset instants are read."""
    wall = time.time() if wall is None else wall
    lowered = {k.lower(): v for k, v in headers.items()}
    shares: list[float] = []
    resets: list[float] = []
    for kind in _KINDS:
        left = limit_count(lowered, "remaining", kind)
        if left is None:
            continue
        limit = limit_count(lowered, "limit", kind)
        if left < 1:
            shares.append(0.0)
        elif limit:
            shares.append(min(1.0, left / limit))
        else:
            continue
        reset = limit_reset_seconds(lowered, kind, now=wall)
        resets.append(_DEFAULT_RESET_S if reset is None else reset)
    if not shares:
        return None
    return Headroom(min(shares), now + min(max(resets), _MAX_KEPT_S))


def exhausted(pause_s: float | None, now: float) -> Headroom:
    """No headroom for ``pause_s`` (a 429's wait; a second when it gave none or no
    number; an hour at most)."""
    pause = pause_s if pause_s is not None and pause_s > 0 else 1.0  # NaN: not > 0
    return Headroom(0.0, now + min(pause, _MAX_KEPT_S))


def share_at(headroom: Headroom | None, now: float) -> float:
    """The share left at ``now``: all of it when nothing is known or the counters reset."""
    return 1.0 if headroom is None or now >= headroom.until else headroom.share


def rank_by_headroom(shares: Sequence[float], turn: int) -> list[int]:
    """Indexes, most headroom first; ties go round (from ``turn``)."""
    count = len(shares)
    return sorted(range(count), key=lambda i: (-shares[i], (i - turn) % count))


def needs(request: ChatRequest) -> frozenset[str]:
    """The capabilities ``request`` needs: ``tools`` (it offers tools), ``vision`` (a
    message carries an image part)."""
    wanted: set[str] = set()
    if request.tools:
        wanted.add("tools")
    for message in request.messages:
        if isinstance(message.content, list) and any(
            "image" in str(part.get("type", "")) for part in message.content
        ):
            wanted.add("vision")
    return frozenset(wanted)


def fits(route: Provider, tokens: float, wanted: Collection[str]) -> bool:
    """Whether ``route`` can take a call of ``tokens`` (input and output) that needs the
    ``wanted`` capabilities (a route that declares no ``capabilities`` has them all)."""
    window = context_window(route)
    if window is not None and tokens > window:
        return False
    declared = getattr(route, "capabilities", None)
    return declared is None or all(need in declared for need in wanted)


def rank_by_cost(costs: Sequence[float], fit: Sequence[bool], turn: int) -> list[int]:
    """Indexes: those that fit, cheapest first, then the others, cheapest first; equal
    costs go round (from ``turn``)."""
    count = len(costs)
    return sorted(range(count), key=lambda i: (not fit[i], costs[i], (i - turn) % count))


def by_region(regions: Sequence[str | None], region: str | None) -> list[list[int]]:
    """The deployments (indexes) tagged ``region``, then the others: each part is ranked on
    its own (the whole group ranked, then its region moved first, a turn or a draw that fell
    on another region went to the region's first deployment). ``None``: one part, all."""
    everyone = range(len(regions))
    if region is None:
        return [list(everyone)]
    return [
        [i for i in everyone if regions[i] == region],
        [i for i in everyone if regions[i] != region],
    ]
