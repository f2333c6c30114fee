"""Rate limits per route, and optionally per tenant: requests, tokens (input plus output, and
input and output separately) per minute, reserve-then-settle (GCRA), and concurrency caps.

The limiters are here; the pure maths they share (``reserve``, ``settle``, ``learn`` ... on a
``CellState``, time passed in) is in :mod:`llmguard_sdk.ratelimit.policy`.

.. versionadded:: 0.1.0
"""

from typing import Protocol

from typing_extensions import Unpack

from .._state.steps import Step
from ._rules import LimitsConfig
from .memory import MemoryRateLimiter
from .policy import Grant, LearnArgs, Priority, RateLimit, ReserveArgs, SettleArgs
from .redis import RedisRateLimiter

__all__ = [
    "Grant",
    "LearnArgs",
    "LimitsConfig",
    "MemoryRateLimiter",
    "Priority",
    "RateLimit",
    "RateLimiter",
    "RedisRateLimiter",
    "ReserveArgs",
    "SettleArgs",
]


class RateLimiter(Protocol):
    """What the Guard needs from a limiter (memory or Redis; the same contract).

    Each operation is written once, as steps (``reserve_steps`` ...), with blocking and async
    entry points derived from it; the keywords are :class:`ReserveArgs`,
    :class:`SettleArgs` and :class:`LearnArgs`.
    """

    def rules(self, key: str) -> tuple[RateLimit, ...]:
        """The limits that apply on ``key`` (empty: none)."""
        ...

    def reserve_steps(self, key: str, **ask: Unpack[ReserveArgs]) -> Step[Grant]:
        """Reserve a call on ``key`` (and ``tenant``'s per-tenant limits), all or none."""
        ...

    def settle_steps(self, key: str, **settled: Unpack[SettleArgs]) -> Step[None]:
        """Correct a reservation, and give its concurrency lease back (``request_delta=-1``:
        and its request, for a call never sent)."""
        ...

    def learn_steps(self, key: str, **taught: Unpack[LearnArgs]) -> Step[None]:
        """Bring the route-wide state down to what the provider reported."""
        ...

    def reserve(self, key: str, **ask: Unpack[ReserveArgs]) -> Grant:
        """Blocking :meth:`reserve_steps`."""
        ...

    def settle(self, key: str, **settled: Unpack[SettleArgs]) -> None:
        """Blocking :meth:`settle_steps`."""
        ...

    def learn(self, key: str, **taught: Unpack[LearnArgs]) -> None:
        """Blocking :meth:`learn_steps`."""
        ...

    def release(self, key: str, *, tenant: str | None = None, lease: str) -> None:
        """Give a concurrency lease back without settling tokens."""
        ...

    async def areserve(self, key: str, **ask: Unpack[ReserveArgs]) -> Grant:
        """Async twin of :meth:`reserve`."""
        ...

    async def asettle(self, key: str, **settled: Unpack[SettleArgs]) -> None:
        """Async twin of :meth:`settle`."""
        ...

    async def alearn(self, key: str, **taught: Unpack[LearnArgs]) -> None:
        """Async twin of :meth:`learn`."""
        ...

    async def arelease(self, key: str, *, tenant: str | None = None, lease: str) -> None:
        """Async twin of :meth:`release`."""
        ...
