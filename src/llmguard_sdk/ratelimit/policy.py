"""Rate-limit maths: the generic cell rate algorithm (GCRA) with a cost per call.

One state per key, a *theoretical arrival time* (TAT) per measured quantity, whatever the
traffic: a limit of ``limit`` units per ``period`` seconds emits one unit every
``period / limit`` seconds and lets a burst of up to ``burst`` x ``limit`` units through. A
call costing ``n`` units moves the TAT forward by ``n`` emission intervals; it fits when the
new TAT is at most ``burst`` periods ahead of now. There are no window boundaries, so no
double bursts at a minute's edge.

A key's quantities are requests, tokens (input plus output), input tokens and output tokens,
each optional; a call reserves all of them or none. Tokens are reserved before the call
(estimated input plus the output limit) and settled afterwards to what the call really used
(:func:`settle`: a refund moves a TAT back, a debit forward). A concurrency cap counts the
calls in flight as *leases* that expire, so a crashed process leaks nothing: a lease is
given back by :func:`settle` or :func:`release`, or lapses after ``lease_seconds``.

Waiting is scheduling: a call that may wait ``max_wait`` seconds takes the next free slot even
when it lies in the future, and is told to wait until then. Slots are handed out in arrival
order, so waiting calls are served first-in first-out whatever their size, and the wait bound
is a bound on the queue's length in time; ``max_queue`` also bounds it in calls (further
calls are shed at once). A call refused for want of a free concurrency slot may wait too: it
joins the queue and asks again (see the limiters); a slot freed meanwhile is left to the calls
waiting for one, so later calls do not overtake them, and among those to the one whose wait
ends first (first come, first served for calls allowed the same wait). A ``batch`` call
leaves ``batch_headroom`` of the burst to interactive calls: it only gets a slot that keeps
that share free. Providers' own counters correct the state (:func:`learn`): fewer remaining
units than ours, or a 429, move the TATs forward.

Several limits can apply to one call (a route's and its tenant's): :func:`reserve_all`
checks and debits them together, all or nothing. Each limit's state is a :class:`CellState`;
the functions here never mutate one, they return the next.

.. versionadded:: 0.1.0
.. versionchanged:: 0.2.0
   Input and output token limits, concurrency caps with leases, ``max_queue``, ``burst``,
   per-tenant limits, and :func:`reserve_all` / :func:`release`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, TypedDict, TypeVar

from typing_extensions import Unpack

from ._checks import check_limit
from ._slots import slots_taken

__all__ = [
    "CellAsk",
    "CellState",
    "Grant",
    "LearnArgs",
    "Priority",
    "RateLimit",
    "ReserveArgs",
    "SettleArgs",
    "learn",
    "release",
    "reserve",
    "reserve_all",
    "settle",
]

Priority = Literal["interactive", "batch"]
"""``interactive`` calls may use the whole burst; ``batch`` calls leave ``batch_headroom``."""


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
    """A limiter's ``reserve`` keywords: :class:`CellAsk`, the call's ``tenant``, and ``lease``
    (its lease's name, to ``release`` it when cut short before the grant; new by default)."""

    tenant: str | None
    lease: str


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


Refusal = Literal["", "rate", "concurrency", "queue", "never"]

CONCURRENCY_POLL = 0.05
"""Seconds a call refused for want of a concurrency slot is told to wait before asking again
(when a slot frees is not known in advance)."""

_EPSILON = 1e-9

PROVIDER_WINDOW = 60.0
"""Seconds a provider's rate-limit hints speak for (``x-ratelimit-remaining-*``, a 429's
pause): the per-minute window that OpenAI's and Anthropic's counters describe."""


@dataclass(frozen=True)
class RateLimit:
    """Limits of one route (or of each tenant on it), every one optional.

    Args:
        rpm: requests per ``period``.
        tpm: tokens (input plus output) per ``period``.
        input_tpm: input tokens per ``period``.
        output_tpm: output tokens per ``period`` (reserved as ``max_tokens``, settled to the
            real count).
        concurrency: calls in flight at once.
        period: the period the limits are stated for, in seconds (60: per minute).
        burst: the share of a period's allowance that may go out at once (1: a whole
            period, as a token-bucket provider allows). A provider that counts a sliding
            window lets any window hold one period's allowance: with ``burst`` b the limiter
            keeps every window under (1 + b) x the limit, so set the limit to
            ``provider limit / (1 + b)`` against such a provider, or a small ``burst``.
            A single call larger than ``burst`` x the limit never fits.
        reserve_output_tokens: output tokens reserved for a call that sets no ``max_tokens``
            (settled to the real count afterwards).
        max_wait: seconds a call may wait for room in this limit (within its deadline);
            0 refuses at once.
        max_queue: calls that may wait for this limit at once; more are refused at once
            (``None``: only ``max_wait`` bounds the queue).
        batch_headroom: share of the burst that ``batch`` calls leave to interactive ones
            (a ``batch`` call larger than the rest never fits; as interactive it may).
        per_tenant: the limit applies to each tenant of the route separately (calls without
            a tenant share one state); otherwise to the route as a whole.
        lease_seconds: longest a concurrency slot is held when its call never gives it back
            (a crashed process); the Guard holds one no longer than the call's deadline.

    Raises:
        ConfigurationError: a value out of range, or no limit at all.
    """

    rpm: float | None = None
    tpm: float | None = None
    input_tpm: float | None = None
    output_tpm: float | None = None
    concurrency: int | None = None
    period: float = 60.0
    burst: float = 1.0
    reserve_output_tokens: int = 1024
    max_wait: float = 0.0
    max_queue: int | None = None
    batch_headroom: float = 0.2
    per_tenant: bool = False
    lease_seconds: float = 600.0

    def __post_init__(self) -> None:
        check_limit(self)
        # (index in CellState.tats, the limit, seconds a unit costs) of each limit set
        intervals = tuple(
            (index, per_period, self.period / per_period)
            for index, per_period in enumerate(self.limits())
            if per_period is not None
        )
        object.__setattr__(self, "_intervals", intervals)
        capacities = (self.capacity("interactive"), self.capacity("batch"))  # every call's
        object.__setattr__(self, "_capacities", capacities)

    _intervals: ClassVar[tuple[tuple[int, float, float], ...]]
    _capacities: ClassVar[tuple[float, float]]
    # per quantity, the most seconds a call (a batch call) beyond the burst may cost (a share's)
    _ceilings: ClassVar[tuple[float, float, float, float]] = (0.0, 0.0, 0.0, 0.0)
    _batch_ceilings: ClassVar[tuple[float, float, float, float]] = (0.0, 0.0, 0.0, 0.0)

    def limits(self) -> tuple[float | None, float | None, float | None, float | None]:
        """(rpm, tpm, input_tpm, output_tpm): the order of :attr:`CellState.tats`."""
        return self.rpm, self.tpm, self.input_tpm, self.output_tpm

    def capacity(self, priority: Priority = "interactive") -> float:
        """Seconds of allowance a call of ``priority`` may use ahead of now."""
        share = 1.0 - (self.batch_headroom if priority == "batch" else 0.0)
        return self.period * self.burst * share

    def hint_horizon(self) -> float:
        """Seconds of this limit's allowance a provider's hint speaks for: its capacity, scaled
        to the provider's one-minute window (:data:`PROVIDER_WINDOW`) when its ``period`` is
        longer (a per-minute header or a 429 says nothing of a day's quota).

        .. versionadded:: 0.2.0
        """
        return self.capacity() * min(1.0, PROVIDER_WINDOW / self.period)

    def patience(self, max_wait: float | None) -> float:
        """How long a call allowed ``max_wait`` may wait for this limit."""
        if max_wait is None:
            return float(self.max_wait)
        return max(0.0, min(float(max_wait), float(self.max_wait)))


@dataclass(frozen=True)
class Grant:
    """The answer to a reservation.

    ``allowed`` with ``wait`` seconds to wait before sending (0: now) and, under a
    concurrency cap, the ``lease`` to give back (in Redis also under token limits: the
    call's hold on their state until it settles); or refused, with ``retry_after`` seconds
    until the call would fit and the ``reason``: ``"rate"`` (no room in time), ``"never"``
    (larger than a burst allows; a ``batch`` call: than the share of it that ``batch_headroom``
    leaves batch calls), ``"concurrency"`` (no slot free), ``"queue"`` (the queue is
    full). ``queued``: a refusal for want of a concurrency slot that joined the queue; ask
    again after ``retry_after``.
    """

    allowed: bool
    retry_after: float = 0.0
    wait: float = 0.0
    lease: str | None = None
    reason: Refusal = ""
    queued: bool = False


@dataclass(frozen=True)
class CellState:
    """The state of one limit: a TAT per quantity (requests, tokens, input, output), the
    leases of the calls in flight and the calls waiting, each id with the instant it lapses,
    and the instant a provider's pause (a 429's ``Retry-After``) ends: no call goes before
    it, whatever the limit's period, and it costs no allowance (``paused``, new in 0.2.0).
    """

    tats: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)
    leases: Mapping[str, float] = field(default_factory=dict)
    queue: Mapping[str, float] = field(default_factory=dict)
    paused: float = 0.0

    def idle(self, now: float) -> bool:
        """True when forgetting this state changes nothing (TATs, pause passed; none held)."""
        return (
            self.paused <= now
            and all(tat <= now for tat in self.tats)
            and not any(until > now for until in self.leases.values())
            and not any(until > now for until in self.queue.values())
        )


def _live(entries: Mapping[str, float], now: float) -> dict[str, float]:
    return {key: until for key, until in entries.items() if until > now}


_Costs = tuple[float, float, float, float]  # requests, tokens, input, output


def _costs(
    requests: float, tokens: float, input_tokens: float | None, output_tokens: float | None
) -> _Costs:
    """The four costs; an unknown split counts the whole of ``tokens`` (the safe side)."""
    if not tokens and (input_tokens is not None or output_tokens is not None):
        tokens = (input_tokens or 0.0) + (output_tokens or 0.0)
    return (
        requests,
        tokens,
        tokens if input_tokens is None else input_tokens,
        tokens if output_tokens is None else output_tokens,
    )


def _evaluate(
    state: CellState, now: float, limit: RateLimit, costs: _Costs, priority: Priority
) -> tuple[float, tuple[float, float, float, float]]:
    """(seconds the call must wait for this limit, or inf; the TATs after it)."""
    ceilings = limit._batch_ceilings if priority == "batch" else limit._ceilings
    capacity = limit._capacities[1 if priority == "batch" else 0]  # limit.capacity(priority)
    over, before = 0.0, state.tats
    tats = list(before)
    for index, _, interval in limit._intervals:
        spend = costs[index] * interval
        tats[index] = (before[index] if before[index] > now else now) + spend
        late = tats[index] - now - capacity
        if spend > capacity + _EPSILON:  # larger than a burst: never, unless within a ceiling
            if spend > ceilings[index] + _EPSILON:
                return math.inf, before
            late = before[index] - now  # it goes once the bucket is full, leaving it in debt
        if late > over:
            over = late
    if state.paused - now > over:  # a provider's pause: no call before it ends
        over = state.paused - now
    return over, (tats[0], tats[1], tats[2], tats[3])


_NOW = Grant(True)  # the grant of a call that may go now, without a lease (immutable: shared)


def _tats_only(cells: Sequence[tuple[CellState, RateLimit]]) -> bool:
    """Whether no limit of ``cells`` has leases or a queue (only their TATs move)."""
    for state, limit in cells:
        if (
            limit.concurrency is not None
            or limit.max_queue is not None
            or state.leases
            or state.queue
        ):
            return False
    return True


def _plan(
    fresh: Sequence[CellState],
    cells: Sequence[tuple[CellState, RateLimit]],
    now: float,
    costs: _Costs,
    priority: Priority,
    max_wait: float | None,
) -> Grant | tuple[float, list[tuple[float, float, float, float]]]:
    """(the wait, each limit's TATs after the call), or the refusal of a call that no
    limit's rate lets through in time."""
    wait = 0.0
    planned = []
    for state, (_, limit) in zip(fresh, cells, strict=True):
        over, tats = _evaluate(state, now, limit, costs, priority)
        if over == math.inf:
            return Grant(False, math.inf, reason="never")
        if over > _EPSILON and over > limit.patience(max_wait) + _EPSILON:  # (patience >= 0)
            return Grant(False, over, reason="rate")
        if over > wait:
            wait = over
        planned.append(tats)
    return wait, planned


def reserve_all(
    cells: Sequence[tuple[CellState, RateLimit]],
    now: float,
    *,
    requests: float = 1.0,
    tokens: float = 0.0,
    input_tokens: float | None = None,
    output_tokens: float | None = None,
    priority: Priority = "interactive",
    max_wait: float | None = None,
    call_id: str = "",
    lease_seconds: float | None = None,
) -> tuple[Grant, list[CellState]]:
    """Reserve one call on every limit of ``cells``, all or none.

    ``call_id`` names the call in leases and the queue (needed with ``concurrency`` or
    ``max_queue``; a call asking again after ``queued`` passes the same id).
    ``lease_seconds`` (at most each limit's own) bounds how long a concurrency slot is held.
    A refusal changes nothing, except that a call refused for a concurrency slot joins the
    queue when it may wait (``queued``).
    """
    costs = _costs(requests, tokens, input_tokens, output_tokens)
    if _tats_only(cells):  # no lease, no queue: only the TATs move
        fresh: Sequence[CellState] = [state for state, _ in cells]
        found = _plan(fresh, cells, now, costs, priority, max_wait)
        if isinstance(found, Grant):
            return found, list(fresh)
        wait, planned = found
        moved = zip(fresh, planned, strict=True)
        after = [CellState(tats, state.leases, state.queue, state.paused) for state, tats in moved]
        return (_NOW if wait <= 0.0 else Grant(True, wait=wait)), after
    fresh = [
        CellState(state.tats, _live(state.leases, now), _live(state.queue, now), state.paused)
        if state.leases or state.queue
        else state  # nothing held or waiting: nothing to drop
        for state, _ in cells
    ]
    found = _plan(fresh, cells, now, costs, priority, max_wait)
    if isinstance(found, Grant):
        return found, [s for s, _ in cells]
    wait, planned = found
    full = [
        limit.concurrency is not None
        and slots_taken(state.leases, state.queue, call_id) >= limit.concurrency
        for state, (_, limit) in zip(fresh, cells, strict=True)
    ]
    if any(full):
        return _no_slot(fresh, cells, full, now, max_wait, call_id)
    for state, (_, limit) in zip(fresh, cells, strict=True):
        if limit.max_queue is not None and wait > _EPSILON:
            waiting = sum(1 for other in state.queue if other != call_id)
            if waiting >= limit.max_queue:
                return Grant(False, wait, reason="queue"), [s for s, _ in cells]
    lease = None
    result = []
    for state, (_, limit), tats in zip(fresh, cells, planned, strict=True):
        if limit.concurrency is None and limit.max_queue is None and not state.queue:
            result.append(CellState(tats, state.leases, state.queue, state.paused))  # TATs only
            continue
        leases, queue = dict(state.leases), dict(state.queue)
        queue.pop(call_id, None)
        if wait > _EPSILON and limit.max_queue is not None:
            queue[call_id] = now + wait  # waiting for its slot: in the queue until then
        if limit.concurrency is not None:
            hold = limit.lease_seconds if lease_seconds is None else lease_seconds
            leases[call_id] = now + wait + min(hold, limit.lease_seconds)
            lease = call_id
        result.append(CellState(tats, leases, queue, state.paused))
    return Grant(True, wait=max(0.0, wait), lease=lease), result


def _no_slot(
    fresh: list[CellState],
    cells: Sequence[tuple[CellState, RateLimit]],
    full: list[bool],
    now: float,
    max_wait: float | None,
    call_id: str,
) -> tuple[Grant, list[CellState]]:
    """Every concurrency slot is taken: join the queue to ask again, or be shed."""
    limits = [limit for _, limit in cells]
    patience = min(
        limit.patience(max_wait) for limit, busy in zip(limits, full, strict=True) if busy
    )
    if patience <= _EPSILON or not call_id:
        return Grant(False, CONCURRENCY_POLL, reason="concurrency"), [s for s, _ in cells]
    for state, limit, busy in zip(fresh, limits, full, strict=True):
        queue_full = limit.max_queue is not None and len(state.queue) >= limit.max_queue
        if busy and queue_full and call_id not in state.queue:
            return Grant(False, CONCURRENCY_POLL, reason="queue"), [s for s, _ in cells]
    # one place in every queue it waits in: the instant its wait ends, as it first joined
    # one (a call waiting on several limits is in the same order on each: none waits for
    # another that waits for it)
    placed = [state.queue[call_id] for state in fresh if call_id in state.queue]
    till = min(placed) if placed else now + patience
    result = []
    for state, busy in zip(fresh, full, strict=True):
        queue = dict(state.queue)
        if busy:
            queue[call_id] = till
        else:  # a slot is free for it here: the calls behind it may take it meanwhile
            queue.pop(call_id, None)
        result.append(CellState(state.tats, state.leases, queue, state.paused))
    return Grant(False, CONCURRENCY_POLL, reason="concurrency", queued=True), result


_State = TypeVar("_State", CellState, tuple[float, ...])


def _as_cell(state: CellState | tuple[float, ...], limit: RateLimit) -> CellState:
    if isinstance(state, CellState):
        return state
    if len(state) < 4 and (
        limit.input_tpm is not None
        or limit.output_tpm is not None
        or limit.concurrency is not None
        or limit.max_queue is not None
    ):
        raise ValueError("this limit needs a CellState (input/output tokens, leases, queue)")
    padded = (*state, 0.0, 0.0, 0.0, 0.0)[:4]
    return CellState((padded[0], padded[1], padded[2], padded[3]))


def _like(state: CellState | tuple[float, ...], cell: CellState) -> Any:
    """``cell`` in the form ``state`` came in: a CellState, or a tuple of TATs."""
    return cell if isinstance(state, CellState) else cell.tats[: max(2, len(state))]


def reserve(
    state: _State, now: float, limit: RateLimit, *, call_id: str = "", **ask: Unpack[CellAsk]
) -> tuple[Grant, _State]:
    """:func:`reserve_all` for one limit.

    ``state`` is a :class:`CellState`, or for limits of requests and tokens only, the
    (request TAT, token TAT) pair of 0.1.0; the next state comes back in the same form.
    A call needing more than a burst allows can never fit: it is refused with
    ``retry_after`` infinity.
    """
    grant, (cell,) = reserve_all([(_as_cell(state, limit), limit)], now, call_id=call_id, **ask)
    after: _State = _like(state, cell)
    return grant, after


def learn(
    state: _State,
    now: float,
    limit: RateLimit,
    *,
    remaining_requests: float | None = None,
    remaining_tokens: float | None = None,
    remaining_input_tokens: float | None = None,
    remaining_output_tokens: float | None = None,
    pause: float | None = None,
) -> _State:
    """Bring the state down to what the provider says remains (never up).

    ``remaining_*`` come from ``x-ratelimit-remaining-*``; ``pause`` is a 429's wait: no
    room at all until it has passed.

    The provider's counters describe its own one-minute window, so each limit learns them
    over its :meth:`~RateLimit.hint_horizon` ``h``: its capacity, or for a longer ``period``
    a minute's share of it. ``left`` units remaining move a TAT to at least
    ``now + h - left x interval``; a pause to at least ``now + h + pause``. A limit of
    ``period`` up to a minute (``burst`` 1: ``h`` is its capacity) is left with ``left``
    units of room, or none until the pause has passed and then its rate's worth; a hint
    costs a longer limit (a daily quota) at most a minute's share of its allowance plus the
    pause's share, never a day's. The pause itself holds every limit, whatever its period,
    until it ends (:attr:`CellState.paused`; not kept in a tuple state), at no cost.

    .. versionchanged:: 0.2.0
       Learned over the hint's minute, not a longer limit's whole period; the pause holds.
    """
    cell = _as_cell(state, limit)
    remaining = (
        remaining_requests,
        remaining_tokens,
        remaining_input_tokens,
        remaining_output_tokens,
    )
    horizon = limit.hint_horizon()
    tats = list(cell.tats)
    for index, per_period in enumerate(limit.limits()):
        if per_period is None:
            continue
        interval = limit.period / per_period
        left = remaining[index]
        if left is not None:
            tats[index] = max(tats[index], now + horizon - left * interval)
        if pause is not None:
            tats[index] = max(tats[index], now + horizon + pause)
    paused = max(cell.paused, now + pause) if pause is not None else cell.paused
    learned: _State = _like(
        state, CellState((tats[0], tats[1], tats[2], tats[3]), cell.leases, cell.queue, paused)
    )
    return learned


def settle(
    state: _State,
    now: float,
    limit: RateLimit,
    *,
    token_delta: float = 0.0,
    input_delta: float | None = None,
    output_delta: float | None = None,
    lease: str | None = None,
    request_delta: float = 0.0,
) -> _State:
    """Correct a reservation by what the call really used (negative: a refund), and give
    its ``lease`` back; ``request_delta=-1`` gives the request back too (a reservation made
    ahead for a call that was never sent).

    ``token_delta`` is the change of input plus output tokens; ``input_delta`` and
    ``output_delta`` correct the separate limits. When only ``token_delta`` is known, a
    debit moves each of them by all of it and a refund moves neither (the safe side).
    """
    cell = _as_cell(state, limit)
    if not token_delta and (input_delta is not None or output_delta is not None):
        token_delta = (input_delta or 0.0) + (output_delta or 0.0)
    deltas = (
        request_delta,
        token_delta,
        max(token_delta, 0.0) if input_delta is None else input_delta,
        max(token_delta, 0.0) if output_delta is None else output_delta,
    )
    tats = list(cell.tats)
    for index, per_period, _ in limit._intervals:
        delta = deltas[index]
        if not delta:
            continue
        tats[index] += delta * limit.period / per_period
        if delta < 0:
            tats[index] = max(tats[index], now)
    cell = CellState((tats[0], tats[1], tats[2], tats[3]), cell.leases, cell.queue, cell.paused)
    settled: _State = _like(state, cell if lease is None else release(cell, now, lease))
    return settled


def release(state: CellState, now: float, lease: str) -> CellState:
    """Give a concurrency lease back, and the call's place in the queue (it ended without
    anything to settle, or was cut short while it waited)."""
    if lease not in state.leases and lease not in state.queue:
        return state
    queue = {k: v for k, v in state.queue.items() if k != lease}
    leases = {k: v for k, v in _live(state.leases, now).items() if k != lease}
    return CellState(state.tats, leases, queue, state.paused)
