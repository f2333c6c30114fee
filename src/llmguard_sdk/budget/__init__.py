"""Spend budgets and cost control: prices, atomic reserve-then-settle, alerts, downgrades.

::

    from llmguard_sdk import Guard
    from llmguard_sdk.budget import Budget, Budgets

    guard = Guard(
        providers,
        budgets=Budgets(
            [Budget(limit_usd=50, scope="tenant", window="day", on_exhausted="downgrade"),
             Budget(limit_usd=2_000, window="month")],
            downgrade_to=["small"],
            on_event=[print],
        ),
    )

.. versionadded:: 0.2.0
"""

from .control import Budgets, BudgetScope, BudgetUnavailableError, CounterStatus, EventHook
from .control import Held as Held  # the Guard's internals, not part of the API
from .control import SpendControl as SpendControl
from .memory import BudgetBackend, MemoryBudgetBackend
from .policy import (
    Budget,
    BudgetEvent,
    CounterSpec,
    ExhaustionPolicy,
    RunawayDetector,
    ScopeKind,
    WindowKind,
)
from .prices import Cost, Price, PriceTable, UnknownModelPriceError, cost_of_response
from .recorder import UsageRecorder, read_usage, usage_report
from .redis import RedisBudgetBackend

__all__ = [
    "Budget",
    "BudgetBackend",
    "BudgetEvent",
    "BudgetUnavailableError",
    "Budgets",
    "Cost",
    "CounterSpec",
    "BudgetScope",
    "CounterStatus",
    "EventHook",
    "ExhaustionPolicy",
    "MemoryBudgetBackend",
    "Price",
    "PriceTable",
    "RedisBudgetBackend",
    "RunawayDetector",
    "ScopeKind",
    "UnknownModelPriceError",
    "UsageRecorder",
    "WindowKind",
    "cost_of_response",
    "read_usage",
    "usage_report",
]
