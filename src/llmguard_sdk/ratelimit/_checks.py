"""A :class:`~llmguard_sdk.ratelimit.RateLimit`'s checks of its own values: a typed error
naming the setting and the value given.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, NoReturn, TypeGuard

from ..errors import ConfigurationError

if TYPE_CHECKING:  # (policy imports this module)
    from .policy import RateLimit

__all__ = ["check_limit"]

_QUANTITIES = ("rpm", "tpm", "input_tpm", "output_tpm")


def _number(value: object) -> TypeGuard[float]:
    """Whether ``value`` is an int or a float, not a bool (which is an int)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _positive(value: object) -> bool:
    return _number(value) and 0 < float(value) < math.inf


def _refuse(name: str, must: str, value: object) -> NoReturn:
    """Raise the :class:`ConfigurationError` of a bad ``RateLimit.<name>``, naming the value."""
    raise ConfigurationError(f"RateLimit.{name} must be {must}, got {value!r}")


def check_limit(limit: RateLimit) -> None:
    """Raise :class:`ConfigurationError` for a value of ``limit`` out of range, or for no
    limit at all."""
    for name in _QUANTITIES:
        value = getattr(limit, name)
        if value is not None and not _positive(value):
            _refuse(name, "a positive number", value)
    if limit.concurrency is not None and (not _whole(limit.concurrency) or limit.concurrency < 1):
        _refuse("concurrency", "a whole number >= 1", limit.concurrency)
    if all(getattr(limit, name) is None for name in (*_QUANTITIES, "concurrency")):
        raise ConfigurationError("a RateLimit needs rpm, tpm, input_tpm, output_tpm or concurrency")
    if not _positive(limit.period):
        _refuse("period", "a positive number of seconds", limit.period)
    if not (_positive(limit.burst) and limit.burst <= 1):
        _refuse("burst", "in (0, 1]", limit.burst)
    if not _number(limit.max_wait) or not (0 <= limit.max_wait < math.inf):
        _refuse("max_wait", "a number of seconds >= 0", limit.max_wait)
    if not _number(limit.batch_headroom) or not (0 <= limit.batch_headroom < 1):
        _refuse("batch_headroom", "in [0, 1)", limit.batch_headroom)
    if limit.max_queue is not None and (not _whole(limit.max_queue) or limit.max_queue < 0):
        _refuse("max_queue", "a whole number >= 0 or None", limit.max_queue)
    if not _whole(limit.reserve_output_tokens) or limit.reserve_output_tokens < 0:
        _refuse("reserve_output_tokens", "a whole number >= 0", limit.reserve_output_tokens)
    if not isinstance(limit.per_tenant, bool):
        _refuse("per_tenant", "True or False", limit.per_tenant)
    if not _positive(limit.lease_seconds):
        _refuse("lease_seconds", "a positive number", limit.lease_seconds)
