"""Rate limits per route: requests and tokens per minute, reserve-then-settle (GCRA).

.. versionadded:: 0.1.0
"""

from .memory import MemoryRateLimiter
from .policy import Grant, RateLimit, reserve, settle

__all__ = ["Grant", "MemoryRateLimiter", "RateLimit", "reserve", "settle"]
