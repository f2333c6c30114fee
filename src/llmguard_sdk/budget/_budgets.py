"""How a Guard's spend budgets act: :class:`Budgets` (limits, prices, what a refusal does,
failing open or closed).

.. versionadded:: 0.2.0
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from ..errors import ConfigurationError
from .policy import Budget, BudgetEvent
from .prices import PriceTable

__all__ = ["Budgets", "EventHook"]

EventHook = Callable[[BudgetEvent], None]
"""Receives each :class:`~llmguard_sdk.budget.BudgetEvent` (alerts, exhaustion, runaways)."""


@dataclass(frozen=True)
class Budgets:
    """The spend budgets of a Guard and how they act: ``Guard(budgets=Budgets([...]))``.

    Args:
        budgets: the :class:`Budget` limits; a call is counted by every one that applies.
        prices: the :class:`PriceTable` (default: the Guard's ``prices=``, else the default
            one); it is the Guard's one table, pricing its answers and releases too, so a
            Guard given another ``prices=`` refuses the two. A budgeted route whose
            model has no price is a :class:`~llmguard_sdk.budget.UnknownModelPriceError`
            before any call; a route without a model is priced at the model each call names,
            so a budgeted call naming a model with no price raises it, before anything is
            held or sent.
        downgrade_to: the cheaper routes (names) a call moves to when a budget with
            ``on_exhausted="downgrade"`` has no room for the full chain.
        local_routes: routes counted as free local models for ``"local_only"`` (every
            :class:`~llmguard_sdk.LocalProvider` route, and every route that declares
            ``is_local``, is one already).
        on_event: callables receiving each :class:`BudgetEvent`.
        fail_open: when Redis cannot be reached, count in each process's memory instead of
            refusing budgeted calls (the default fails closed: hard caps hold), within a bound
            for the whole fleet: ``fail_open_share``.
        fail_open_share: with ``fail_open``, the share of what each budget had left that
            the processes may spend until Redis answers again: each takes its part (the
            share divided by the processes alive) of the room its last reservation saw (a
            process idle while others spent the budget down sees more room than is left:
            the fleet can then overrun by up to about this share of the limit; a process
            that never reached Redis, or whose last reservation saw fewer processes alive
            than there are, takes more: at most this share of the limit per process is
            what holds whatever the timing); ``None``: the store's ``local_share`` (0.25).
        clamp_max_tokens: lower a call's ``max_tokens`` to what the budgets still allow
            (down to ``min_output_tokens``) instead of refusing it, at its reservation and
            at the top-up before a retry or fallback attempt after billed attempts.
        min_output_tokens: the fewest output tokens a clamped call is given.
        default_output_tokens: the ``max_tokens`` given to a budgeted call that set none (its
            worst case must be bounded for the cap to hold).
        input_margin: the reserved input is the counted input times ``1 + input_margin``
            (the SDK's count is an estimate for most models).
        hold_seconds: how long a reservation outlives its call's deadline before it expires
            by itself (a process that died mid-call leaks nothing).
        runaway_factor: raise a ``"runaway"`` event when a call's tokens exceed this many
            times its feature's rolling p95 (``None``: off).
        name: the budget set's name: every Redis key of the set shares its hash tag.
    """

    budgets: Sequence[Budget] = ()
    prices: PriceTable | None = None
    downgrade_to: Sequence[str] = ()
    local_routes: Sequence[str] = ()
    on_event: Sequence[EventHook] = ()
    fail_open: bool = False
    fail_open_share: float | None = None
    clamp_max_tokens: bool = False
    min_output_tokens: int = 16
    default_output_tokens: int = 1024
    input_margin: float = 0.1
    hold_seconds: float = 60.0
    runaway_factor: float | None = 5.0
    name: str = "default"

    def __post_init__(self) -> None:
        for name in ("budgets", "downgrade_to", "local_routes", "on_event"):
            value = getattr(self, name)
            if isinstance(value, (str, Budget)) or callable(value):
                value = (value,)
            if not isinstance(value, Iterable):
                raise ConfigurationError(f"Budgets.{name} must be a sequence, got {value!r}")
            object.__setattr__(self, name, tuple(value))
        for budget in self.budgets:
            if not isinstance(budget, Budget):
                raise ConfigurationError(f"{budget!r} is not a Budget")
        names = [b.key_name for b in self.budgets]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ConfigurationError(f"budgets share a name {repeated}: give them name=...")
        for hook in self.on_event:
            if not callable(hook):
                raise ConfigurationError(f"on_event {hook!r} is not callable")
        if self.prices is not None and not isinstance(self.prices, PriceTable):
            raise ConfigurationError("prices must be a PriceTable")
        for name, low in (("min_output_tokens", 1), ("default_output_tokens", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ConfigurationError(f"{name} must be an integer >= {low}")
        self._check_numbers()

    def _check_numbers(self) -> None:
        for name in ("fail_open", "clamp_max_tokens"):  # ("false" is true)
            if not isinstance(getattr(self, name), bool):
                raise ConfigurationError(f"{name} must be True or False")
        for name in ("input_margin", "hold_seconds"):
            if isinstance(getattr(self, name), bool):
                raise ConfigurationError(f"{name} must be a number, not a boolean")
        share = self.fail_open_share
        if share is not None and (
            isinstance(share, bool) or not (isinstance(share, (int, float)) and 0 <= share <= 1)
        ):
            raise ConfigurationError("fail_open_share must be in [0, 1] (or None)")
        if not (isinstance(self.input_margin, (int, float)) and 0 <= self.input_margin <= 10):
            raise ConfigurationError("input_margin must be between 0 and 10")
        if not (isinstance(self.hold_seconds, (int, float)) and 1 <= self.hold_seconds < 1e7):
            raise ConfigurationError("hold_seconds must be at least 1")
        factor = self.runaway_factor
        if factor is not None and not (
            isinstance(factor, (int, float)) and not isinstance(factor, bool) and factor > 1
        ):
            raise ConfigurationError("runaway_factor must be over 1 (or None)")
        name = self.name
        if (
            not isinstance(name, str)
            or not name
            or not all(c.isalnum() or c in "_.-" for c in name)
        ):
            raise ConfigurationError("the budget set's name must be letters, digits, _.-")
