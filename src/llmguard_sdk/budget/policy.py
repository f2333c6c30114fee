"""Budget maths, pure: windows, counters, reservations and alerts; the clock is passed in.

A budget's counter holds what was spent in its current window (settled), what is reserved by
calls in flight (each reservation with an expiry), and which alert thresholds already fired
this window. Money is counted in whole nano-dollars (``1e-9`` USD), so sums are exact in
Python and in Redis Lua alike (up to about $9 million per counter). The Lua scripts of
:mod:`llmguard_sdk.budget.redis` mirror these functions line for line.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import calendar
import datetime as dt
import heapq
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from ..errors import ConfigurationError
from ..telemetry.anomaly import RollingBaseline
from ._zones import UTC, ZONED_WINDOWS, key_part, local_window, zone

__all__ = [
    "ROLLING_BUCKETS",
    "Budget",
    "BudgetEvent",
    "CounterSpec",
    "CounterState",
    "ExhaustionPolicy",
    "NANO",
    "ReserveResult",
    "RunawayDetector",
    "ScopeKind",
    "SettleResult",
    "WindowKind",
    "add_hold",
    "bring_to_now",
    "decide",
    "drop_hold",
    "exhausted_alert",
    "fire_alerts",
    "for_log",
    "nano",
    "window_bounds",
]

NANO = 1_000_000_000
"""Nano-dollars per USD: the unit of every counter."""
ROLLING_BUCKETS = 60
"""A rolling window is counted in buckets of ``rolling_seconds`` / this (a 1-hour window: one
per minute); a bucket leaves ``ROLLING_BUCKETS + 1`` bucket widths after it began, so spend
counts for at least ``rolling_seconds`` (at most one bucket width more), wherever in its
bucket it was made."""
_MAX_NANO = 2**53 - 1
_SAFE = re.compile(r"^[A-Za-z0-9_.-]+$")

WindowKind = Literal["minute", "hour", "day", "month", "rolling"]
"""A budget's window: a calendar minute, hour, day or month (in UTC, or a day or month in a
budget's ``tz``), or ``rolling``."""
ScopeKind = Literal["global", "tenant", "feature", "user", "tag"]
"""What a budget counts: every call, or each tenant, feature, user or tag of its own."""
ExhaustionPolicy = Literal["refuse", "downgrade", "local_only"]
"""What a call meets when a budget has no room: refused, sent to the ``downgrade_to``
routes, or to the local model routes only."""
_WINDOWS = ("minute", "hour", "day", "month", "rolling")
_SCOPES = ("global", "tenant", "feature", "user", "tag")
_POLICIES = ("refuse", "downgrade", "local_only")
_SECONDS = {"minute": 60, "hour": 3600, "day": 86400}


def nano(usd: float) -> int:
    """USD as whole nano-dollars, rounded up (a reservation never comes out short), a
    thousandth of a nano-dollar of float noise over a whole one not counted."""
    scaled = usd * NANO
    whole = math.floor(scaled)
    over = scaled - whole  # (exact: a float less its floor)
    if over >= 0.001 or over == 0:  # what ceil(round(scaled, 3)) gives, without its decimal
        return whole + (over != 0)  # rounding (a float to decimal digits and back: slow)
    return math.ceil(round(scaled, 3))


@dataclass(frozen=True)
class Budget:
    """A USD limit on one scope over one window.

    Args:
        limit_usd: what the scope may spend per window.
        scope: ``"global"`` (every call), ``"tenant"``, ``"feature"``, ``"user"`` or ``"tag"``
            (calls whose ``metadata={"tags": "a,b"}`` names the tag).
        id: the one tenant / feature / user / tag this budget is for; ``None`` gives *each*
            value its own counter with this limit (every tenant $50 a day). A budget with an
            ``id`` takes the place of those without one of its scope and window for that
            value (a tenant's own plan). A call without a value for the scope (no tenant
            given) is not counted by that budget; a user's counter is kept per tenant.
            ``tag`` budgets need an ``id``.
        window: calendar ``"minute"``, ``"hour"``, ``"day"`` or ``"month"`` in UTC (the
            counter starts again at 0 at each boundary; a day or a month in ``tz``), or
            ``"rolling"`` over ``rolling_seconds``.
        rolling_seconds: the length of a rolling window.
        on_exhausted: what a call that does not fit gets: ``"refuse"``
            (:class:`~llmguard_sdk.errors.BudgetExceededError`), ``"downgrade"`` (the
            cheaper routes of ``Budgets(downgrade_to=...)``) or ``"local_only"`` (the local
            model routes); at its reservation, and when the top-up before a retry or a
            fallback after billed attempts does not fit (then to such routes not tried yet).
        alerts: fractions of the limit at which a :class:`BudgetEvent` fires, once per
            threshold per window, when the *settled* spend reaches them. Holds keep the
            settled spend from touching the limit, so 1.0 also fires at the window's first
            refused (or downgraded) call.
        name: the counter's name in keys and events (default: from scope, id and window,
            and ``tz`` where it is not UTC).
        tz: the time zone of a ``"day"`` or ``"month"`` window's boundaries, an IANA name
            (``"America/New_York"``: the day starts again at local midnight, the month on
            the 1st at local midnight; a local day is 23 or 25 hours long across a
            daylight-saving change); default ``"UTC"``. A name that is no time zone, or a
            ``tz`` on another window, is a :class:`~llmguard_sdk.errors.ConfigurationError`;
            where the system has no time zone database (Windows), ``pip install tzdata``.
    """

    limit_usd: float
    scope: ScopeKind = "global"
    id: str | None = None
    window: WindowKind = "day"
    rolling_seconds: float = 3600.0
    on_exhausted: ExhaustionPolicy = "refuse"
    alerts: tuple[float, ...] = (0.5, 0.8, 1.0)
    name: str | None = None
    tz: str = UTC

    def __post_init__(self) -> None:
        limit = self.limit_usd
        if (
            isinstance(limit, bool)
            or not isinstance(limit, (int, float))
            or not 0 <= limit < math.inf
        ):
            raise ConfigurationError(f"limit_usd must be a number >= 0, got {limit!r}")
        if nano(limit) > _MAX_NANO:
            raise ConfigurationError("limit_usd is over the largest budget ($9 million)")
        if self.scope not in _SCOPES:
            raise ConfigurationError(f"scope must be one of {_SCOPES}, got {self.scope!r}")
        if self.window not in _WINDOWS:
            raise ConfigurationError(f"window must be one of {_WINDOWS}, got {self.window!r}")
        if self.on_exhausted not in _POLICIES:
            raise ConfigurationError(
                f"on_exhausted must be one of {_POLICIES}, got {self.on_exhausted!r}"
            )
        seconds = self.rolling_seconds  # (checked whatever the window: every call reads it)
        if isinstance(seconds, bool) or not (
            isinstance(seconds, (int, float)) and 1 <= seconds < 1e9
        ):
            raise ConfigurationError(f"rolling_seconds must be at least 1, got {seconds!r}")
        if self.scope == "global" and self.id is not None:
            raise ConfigurationError("a global budget has no id")
        if self.scope == "tag" and not self.id:
            raise ConfigurationError("a tag budget needs id= (the tag)")
        if self.id is not None and (not isinstance(self.id, str) or not self.id):
            raise ConfigurationError("id must be a non-empty string or None")
        if isinstance(self.alerts, (str, bytes)) or not isinstance(self.alerts, Iterable):
            raise ConfigurationError(f"alerts is a tuple of fractions, got {self.alerts!r}")
        if not all(
            isinstance(a, (int, float)) and not isinstance(a, bool) and 0 < a <= 1
            for a in self.alerts
        ):
            raise ConfigurationError("alerts are fractions of the limit in (0, 1]")
        object.__setattr__(self, "alerts", tuple(sorted(set(float(a) for a in self.alerts))))
        if self.name is not None and not (isinstance(self.name, str) and _SAFE.match(self.name)):
            raise ConfigurationError(f"budget name {self.name!r} must be letters, digits, _.-")
        self._check_tz()

    def _check_tz(self) -> None:
        if not isinstance(self.tz, str):
            raise ConfigurationError(f"tz must be an IANA time zone name, got {self.tz!r}")
        if self.tz == UTC:
            return
        if self.window not in ZONED_WINDOWS:
            raise ConfigurationError(
                f"tz={self.tz!r} moves the boundaries of day and month windows; a "
                f"{self.window!r} window keeps UTC's (leave tz out)"
            )
        zone(self.tz)  # (a ConfigurationError naming it when it is not one)

    @property
    def key_name(self) -> str:
        """The counter's name: ``name``, or one made of scope, id and window."""
        if self.name is not None:
            return self.name
        from .._state.stores import hash_id

        who = "each" if self.id is None else hash_id(self.id)
        window: str = self.window
        if window == "rolling":
            window = f"rolling{int(self.rolling_seconds)}"
        elif self.tz != UTC:
            window = f"{window}.{key_part(self.tz)}"
        return f"{self.scope}.{who}.{window}"


@dataclass(frozen=True)
class CounterSpec:
    """One counter a call touches: ``key`` (budget name and hashed scope value), its limit
    in nano-dollars, its window (in time zone ``tz``) and alert thresholds; ``scope``
    describes it for people (``"tenant:acme"``)."""

    key: str
    limit: int
    window: WindowKind
    rolling_seconds: float
    alerts: tuple[float, ...]
    scope: str
    budget_index: int
    tz: str = UTC
    tenant: str | None = None
    """The tenant of a user's counter (users are counted per tenant), else ``None``."""


_NO_ALERTS: frozenset[float] = frozenset()  # shared: an empty frozenset is a new object


@dataclass(slots=True)
class CounterState:
    """One counter's stored state (what the Redis hash and sorted set hold). A process keeps
    one per tenant for a day: small (slots; the alerts fired are a shared frozenset, and a
    counter without holds keeps no expiry heap)."""

    window_id: int | None = None
    spent: int = 0
    reserved: int = 0
    holds: dict[str, tuple[int, float]] = field(default_factory=dict)  # id: (amount, expiry)
    fired: frozenset[float] = _NO_ALERTS
    buckets: dict[int, int] = field(default_factory=dict)  # rolling windows
    expiries: list[tuple[float, str]] = field(default_factory=list)  # heap of (expiry, id)
    full_at: int = 0  # the spend a refusal fired 100 % at (a rolling window re-arms below it)


def add_hold(state: CounterState, rid: str, amount: int, expiry: float) -> None:
    """Hold ``amount`` for reservation ``rid`` until ``expiry``: O(log n), and the expiry
    heap is rebuilt from the live holds when settled ones make up most of it (amortised)."""
    state.holds[rid] = (amount, expiry)
    state.reserved += amount
    heapq.heappush(state.expiries, (expiry, rid))
    if len(state.expiries) > 2 * len(state.holds) + 16:
        state.expiries = [(until, hold) for hold, (_, until) in state.holds.items()]
        heapq.heapify(state.expiries)


def drop_hold(state: CounterState, rid: str) -> None:
    """Release reservation ``rid`` (its heap entry goes when it comes up)."""
    hold = state.holds.pop(rid, None)
    if hold is not None:
        state.reserved -= hold[0]
        if not state.holds:  # nothing left to expire: the heap and the dict's table go
            state.holds, state.expiries = {}, []


@dataclass(frozen=True)
class ReserveResult:
    """The answer to a reservation: granted output tokens and the amount held, or the
    counter that had no room (its index, settled spend, reserved amount, reset time);
    ``unavailable`` when the shared store could not be reached (fail closed), and
    ``retry_after`` then: the seconds until the store tries it again (5 where a backend
    does not say), and ``detail``: why, where that was not the store being away (a full
    connection pool: this process's load), or what a refusal counted in a ``fail_open``
    process's memory was refused on (empty otherwise); ``alerted`` when this
    refusal is the window's 100 % alert (see :func:`exhausted_alert`); ``first_local`` when
    the store could not be reached and this is the first reservation of the outage that a
    ``fail_open`` backend counted in its process's memory (once per outage: the caller
    tells ``on_event``); ``frees_at`` when holds of calls in flight explain a refusal (the
    settled spend alone leaves the call room): the earliest of the counter's holds' expiries
    (epoch seconds, the latest its room starts to come back; 0.0 otherwise)."""

    allowed: bool
    tokens: int = 0
    amount: int = 0
    refused_index: int = -1
    spent: int = 0
    reserved: int = 0
    resets_at: float = 0.0
    unavailable: bool = False
    alerted: bool = False
    retry_after: float = 5.0
    first_local: bool = False
    detail: str = ""
    frees_at: float = 0.0


@dataclass(frozen=True)
class SettleResult:
    """The answer to a settle: whether it applied (False: already settled), and per counter
    the settled spend, the window's reset time and the alert thresholds it newly reached."""

    applied: bool
    spent: tuple[int, ...] = ()
    resets_at: tuple[float, ...] = ()
    fired: tuple[tuple[float, ...], ...] = ()


@dataclass(frozen=True)
class BudgetEvent:
    """What a budget reports to its ``on_event`` callbacks.

    ``kind``:

    * ``"alert"``: the settled spend of ``scope`` reached ``threshold`` of its limit (once
      per threshold per window);
    * ``"exhausted"``: a call did not fit and was ``action`` (``"refused"``,
      ``"downgraded"`` or ``"local_only"``);
    * ``"runaway"``: a call of feature ``scope`` used ``tokens`` tokens, over ``factor``
      times the feature's rolling p95 (``p95``);
    * ``"unavailable"``: Redis could not be reached and ``action`` says what was done:
      ``"refused"`` (the budgets fail closed: each call refused, one event each) or
      ``"counted_locally"`` (``Budgets(fail_open=True)``: calls are let through on each
      process's own count in memory, within its part of ``fail_open_share``, so the limits
      are not enforced across the fleet until Redis answers; one event per outage, at the
      first call (or retry's top-up) counted so, and one again in the next outage).

    ``tenant``: the tenant of a user's budget (``scope`` ``"user:u1"``: users are counted per
    tenant), else ``None``.

    .. versionchanged:: 0.2.0 ``tenant``.
    """

    kind: Literal["alert", "exhausted", "runaway", "unavailable"]
    budget: str
    scope: str
    limit_usd: float = 0.0
    spent_usd: float = 0.0
    threshold: float | None = None
    resets_at: float | None = None
    action: str | None = None
    tokens: int | None = None
    p95: float | None = None
    factor: float | None = None
    tenant: str | None = None


def for_log(event: BudgetEvent) -> BudgetEvent:
    """``event`` as the SDK logs it: a tenant's or user's id in its scope hashed
    (``tenant:<hash>``, as keys and the usage file have it); ``on_event`` gets the raw one."""
    kind, _, who = event.scope.partition(":")
    if kind not in ("tenant", "user") or not who:
        return event
    from .._state.stores import hash_id

    tenant = hash_id(event.tenant) if event.tenant is not None else None
    return replace(event, scope=f"{kind}:{hash_id(who)}", tenant=tenant)


def _month_bounds(now: float) -> tuple[int, float]:
    day = dt.datetime.fromtimestamp(math.floor(now), tz=dt.timezone.utc)
    year, month = (day.year, day.month + 1) if day.month < 12 else (day.year + 1, 1)
    return day.year * 12 + day.month - 1, float(calendar.timegm((year, month, 1, 0, 0, 0)))


_BOUNDS: dict[str, tuple[float, float, tuple[int, float]]] = {}
"""The window each calendar kind was last asked about: (from, until, its bounds); a call
checks that its clock is in it instead of working the bounds out again (a month's take a
datetime and a ``timegm``: every reserve and settle asks twice)."""


def window_bounds(window: WindowKind, now: float, tz: str = UTC) -> tuple[int, float]:
    """(window id, when the window ends) for a calendar window at ``now`` (epoch seconds,
    UTC); rolling windows have id 0 and no end of their own. A day or month in time zone
    ``tz`` other than UTC has its start for id (:mod:`._zones`)."""
    if tz != UTC and window in ZONED_WINDOWS:
        start, end = local_window(window, tz, now)
        return start, float(end)
    last = _BOUNDS.get(window)
    if last is not None and last[0] <= now < last[1]:
        return last[2]
    if window == "month":
        found = _month_bounds(now)
        start = calendar.timegm((found[0] // 12, found[0] % 12 + 1, 1, 0, 0, 0))
        _BOUNDS[window] = (float(start), found[1], found)
        return found
    seconds = _SECONDS.get(window)
    if seconds is None:
        return 0, now
    index = math.floor(now / seconds)
    found = index, float((index + 1) * seconds)
    # a second inside each edge: a clock within rounding of one works it out in full
    _BOUNDS[window] = (index * seconds + 1.0, found[1] - 1.0, found)
    return found


def bring_to_now(state: CounterState, spec: CounterSpec, now: float) -> tuple[int, float]:
    """Roll the window, drop expired reservations and old buckets; (spent, resets_at).

    A calendar window that ended starts again at 0 with its alerts re-armed; reservations
    made in it stay held (their calls are still running). A rolling window sums its live
    buckets; it "resets" (frees room) when its oldest bucket leaves the window, and its
    alerts re-arm when the spend falls back under them (a refusal's 100 % alert: under the
    spend it fired at, see :func:`exhausted_alert`).
    """
    expiries = state.expiries
    while expiries and expiries[0][0] <= now:  # only the holds that expired: O(log n) each
        _, rid = heapq.heappop(expiries)
        hold = state.holds.get(rid)
        if hold is not None and hold[1] <= now:
            del state.holds[rid]
            state.reserved -= hold[0]
    if spec.window == "rolling":
        width = spec.rolling_seconds / ROLLING_BUCKETS
        current = math.floor(now / width)
        for index in [i for i in state.buckets if i < current - ROLLING_BUCKETS]:
            del state.buckets[index]
        state.spent = sum(state.buckets.values())
        oldest = min(state.buckets) if state.buckets else None
        resets = (oldest + ROLLING_BUCKETS + 1) * width if oldest is not None else now
        if state.fired:  # (a refusal's 100 %: until the spend falls under what it fired at)
            state.fired = frozenset(
                a
                for a in state.fired
                if state.spent >= a * spec.limit or (a == 1.0 and 0 < state.full_at <= state.spent)
            )
            state.full_at = state.full_at if 1.0 in state.fired else 0
        return state.spent, resets
    window_id, resets = window_bounds(spec.window, now, spec.tz)
    if state.window_id != window_id:
        state.window_id = window_id
        state.spent = 0
        state.fired = _NO_ALERTS
    return state.spent, resets


def decide(
    rooms: Sequence[int], base: int, per_token: float, want: int, minimum: int
) -> tuple[int, int]:
    """(output tokens granted, -1) when a call of ``base`` + tokens x ``per_token`` fits the
    smallest room, clamped between ``minimum`` and ``want`` tokens; else (-1, index of the
    first counter without room for the minimum)."""
    smallest = min(rooms)
    tokens = want
    if base + want * per_token > smallest:
        tokens = math.floor((smallest - base) / per_token) if per_token > 0 else -1
    if tokens < minimum or tokens < 0:
        need = base + max(minimum, 0) * per_token
        for index, room in enumerate(rooms):
            if room < need:
                return -1, index
        return -1, rooms.index(smallest)
    return tokens, -1


def fire_alerts(state: CounterState, spec: CounterSpec) -> tuple[float, ...]:
    """The thresholds the settled spend reached for the first time this window (marked)."""
    if not spec.alerts or not 0 < state.spent >= min(spec.alerts) * spec.limit:
        return ()  # under the lowest threshold: none reached
    fired = tuple(
        a for a in spec.alerts if a not in state.fired and 0 < state.spent >= a * spec.limit
    )
    if fired:
        state.fired = state.fired.union(fired)
    return fired


def exhausted_alert(state: CounterState, spec: CounterSpec, need: float) -> bool:
    """A refusal is the window's 100 % alert, once: holds keep the settled spend from ever
    touching the limit, so "100 %" means "the settled spend alone leaves no room for a call
    (of ``need``) that would fit an empty window" (when 1.0 is a threshold, not yet fired).
    Refusals caused by other calls' holds in flight do not count. A rolling window keeps it
    fired until its spend falls back under the spend it fired at (:func:`bring_to_now`)."""
    if (
        1.0 in spec.alerts
        and 1.0 not in state.fired
        and need <= spec.limit
        and state.spent + need > spec.limit
    ):
        state.fired = state.fired.union((1.0,))
        state.full_at = state.spent
        return True
    return False


class RunawayDetector(RollingBaseline):
    """Flags calls whose tokens are over ``factor`` times their feature's rolling p95.

    Keeps the last ``window`` token counts per feature (in this process); once it has
    ``min_samples`` of them, a call over ``factor`` x p95 returns the p95 it broke. The p95
    is recomputed every 16 observations. One case of the anomaly alerts'
    :class:`~llmguard_sdk.telemetry.anomaly.RollingBaseline` (tokens per request).
    ``observe(feature, tokens)`` returns the p95 a call's tokens broke, else None.
    """
