"""Giving back to a retry budget a retry it granted that was never made (its wait was
interrupted, or the SDK refused to send it: an open breaker below ``@retry``)."""

from __future__ import annotations

import anyio

from .budget import RetryBudget


def give_back(budget: RetryBudget, key: str) -> None:
    """Return a retry ``budget`` gave that was never made (a budget without ``refund``,
    which :class:`RetryBudget` does not require, keeps it)."""
    refund = getattr(budget, "refund", None)
    if callable(refund):
        refund(key)


async def agive_back(budget: RetryBudget, key: str) -> None:
    """Async :func:`give_back`, shielded: it runs while the loop is being cancelled (a
    Redis budget's call is bounded by the store's socket timeout)."""
    refund = getattr(budget, "arefund", None)
    if callable(refund):
        with anyio.CancelScope(shield=True):
            await refund(key)
