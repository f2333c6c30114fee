"""What both limiters share: the limits configuration and how a call's limits are found.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence
from typing import TypedDict

from ..errors import ConfigurationError
from .policy import Priority, RateLimit

__all__ = [
    "CellAsk",
    "LearnArgs",
    "LimitsConfig",
    "ReserveArgs",
    "Rules",
    "SettleArgs",
    "new_call_id",
    "normalize",
    "wait_bound",
]


class CellAsk(TypedDict, total=False):
    """What one reservation asks of a key's limits (every field optional; the defaults are
    :func:`~llmguard_sdk.ratelimit.reserve_all`'s): ``requests`` (1), ``tokens`` (0, input
    plus output), ``input_tokens`` and ``output_tokens`` (for separate limits),
    ``priority`` (``"interactive"``), ``max_wait`` (the limits' own), ``lease_seconds``
    (how long a concurrency slot may be held, at most the limit's own)."""

    requests: float
    tokens: float
    input_tokens: float | None
    output_tokens: float | None
    priority: Priority
    max_wait: float | None
    lease_seconds: float | None


class ReserveArgs(CellAsk, total=False):
    """A limiter's ``reserve`` keywords: :class:`CellAsk` and the call's ``tenant`` (for
    per-tenant limits)."""

    tenant: str | None


class SettleArgs(TypedDict, total=False):
    """A limiter's ``settle`` keywords: the ``tenant``; ``token_delta`` (input plus output),
    ``input_delta`` and ``output_delta``: what the call used beyond what it reserved
    (negative: a refund); ``lease``: the concurrency lease to give back; ``request_delta``
    (-1: the request back too, for a call never sent)."""

    tenant: str | None
    token_delta: float
    input_delta: float | None
    output_delta: float | None
    lease: str | None
    request_delta: float


class LearnArgs(TypedDict, total=False):
    """A limiter's ``learn`` keywords: what the provider says remains
    (``remaining_requests``, ``remaining_tokens``, ``remaining_input_tokens``,
    ``remaining_output_tokens``) and a 429's ``pause`` in seconds."""

    remaining_requests: float | None
    remaining_tokens: float | None
    remaining_input_tokens: float | None
    remaining_output_tokens: float | None
    pause: float | None


LimitsConfig = Mapping[str, "RateLimit | Sequence[RateLimit]"]
"""Per key (a route name): one :class:`RateLimit`, or several that all apply."""

Rules = dict[str, tuple[RateLimit, ...]]


def normalize(limits: LimitsConfig) -> Rules:
    """Every key's limits as a tuple; a typed error for anything else."""
    if not isinstance(limits, Mapping):
        raise ConfigurationError("rate limits must be a mapping of route name to RateLimit")
    rules: Rules = {}
    for key, value in limits.items():
        if not isinstance(key, str) or not key:
            raise ConfigurationError(f"rate limit keys must be route names, got {key!r}")
        found = (value,) if isinstance(value, RateLimit) else tuple(value)
        if not found or not all(isinstance(limit, RateLimit) for limit in found):
            raise ConfigurationError(
                f"rate_limits[{key!r}] must be a RateLimit or a list of them, got {value!r}"
            )
        rules[key] = found
    return rules


def new_call_id() -> str:
    """A random id naming one call in leases and the queue."""
    return secrets.token_hex(8)


def wait_bound(rules: Sequence[RateLimit], max_wait: float | None) -> float:
    """The longest any of ``rules`` lets a call allowed ``max_wait`` wait."""
    return max((limit.patience(max_wait) for limit in rules), default=0.0)
