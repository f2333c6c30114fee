"""The Guard's names for the routes of answers no provider gave.

A leaf module (it imports nothing), so the pipeline, the budgets, the prompt adapters and the
telemetry report read the same names without importing one another.
"""

from __future__ import annotations

__all__ = ["CACHE", "DEGRADED", "NOT_SENT"]

DEGRADED = "degraded"
"""``route`` and ``finish_reason`` of a degraded answer."""

CACHE = "cache"
"""``route`` of an answer served from the response cache."""

NOT_SENT = (CACHE, DEGRADED)
"""The routes of answers no provider gave."""
