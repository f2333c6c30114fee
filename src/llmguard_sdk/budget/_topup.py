"""Topping up a call's spend hold before a retry or a fallback attempt.

A call holds its worst case once, before its first attempt (one prompt and its
``max_tokens`` of output; two of each when hedged). An attempt that went out and served
nothing is billed all the same (a timeout after sending: its prompt; a stream cut off:
what it delivered), so a call that retries after such attempts could settle past its hold,
and past a hard cap. A call whose request was replaced after its hold was sized (a canary
call that falls back to the current release sends that release's request: its
``max_tokens``, its system prompt) could too, charged or not. Before each attempt after one
that was charged, or of a request other than the one held for, the hold must cover what was
charged so far plus that attempt's worst case on its route; when it does not, the
difference is reserved as a reservation of its own (same counters, all or nothing; with
``clamp_max_tokens``, as many of the attempt's output tokens as the budgets allow, down to
``min_output_tokens``, and the attempt's ``max_tokens`` is lowered to them). An attempt on
a free route (a local model) puts nothing more at risk and needs none.

A top-up the budgets refuse gets what the refusing budget's ``on_exhausted`` says, as the
call's reservation did: ``"downgrade"`` moves the call on to the ``downgrade_to`` routes it has
not reached yet, ``"local_only"`` to its local routes not reached yet (each attempt there is
topped up in turn, and a downgraded call refused again ends). Otherwise, or when no such route
is left, the call ends with :class:`~llmguard_sdk.errors.BudgetExceededError` (what went out
stays charged when the call settles), saying, as the reservation's does, when the attempt's
own worst case is over the whole limit (no reset makes room for it). The call's settle turns
its first reservation into the actual spend and releases the top-ups.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .._state import steps as store_steps
from ..context import CallContext
from ..providers.base import Provider
from ._reserve import Held, counted_locally, moved_to, refused, unavailable, with_output_limit
from .memory import HoldArgs, MemoryBudgetBackend
from .policy import BudgetEvent, ReserveResult, nano

if TYPE_CHECKING:
    from .control import SpendControl

__all__ = ["needs_top_up", "top_up_steps"]


def _hold_args(
    spend: SpendControl, held: Held, ctx: CallContext, route: Provider, charged: int
) -> tuple[HoldArgs, int, int] | None:
    """The top-up an attempt on ``route`` needs (None: the hold covers it), the output
    tokens the hold covers already beyond what it asks for, and the attempt's own worst case
    at the least (nano-dollars: more than a budget's whole limit never fits it). The
    attempt's worst case is the prompt it sends now (a continuation's included) and the
    call's ``max_tokens`` of output; with ``clamp_max_tokens`` the top-up asks for output
    tokens, as a reservation does (the hold's room beyond the charges and the prompt counts
    as tokens already held), else for the whole difference at once."""
    base, per = spend.route_price_args(ctx, (route,), input_tokens=ctx.sent_input_tokens())
    output = spend.held_output(ctx.request)
    attempt = base + math.ceil(output * per)
    if attempt == 0 or charged + attempt <= held.amount:
        return None  # a free route (nothing more at risk), or the hold covers it
    ttl = max(0.0, ctx.remaining()) + spend.config.hold_seconds
    config = spend.config
    if not config.clamp_max_tokens or per <= 0:
        base = charged + attempt - held.amount
        return {"base": base, "per_token": 0.0, "want": 0, "minimum": 0, "ttl": ttl}, 0, attempt
    slack = held.amount - charged - base  # room for output tokens in the hold already
    covered = min(output, math.floor(slack / per)) if slack > 0 else 0
    fewest = min(config.min_output_tokens, output)
    hold: HoldArgs = {
        "base": max(0, -slack),
        "per_token": per,
        "want": output - covered,
        "minimum": max(0, fewest - covered),
        "ttl": ttl,
    }
    return hold, covered, base + math.ceil(fewest * per)


def needs_top_up(held: Held, ctx: CallContext) -> bool:
    """Whether the call's next attempt may need more than ``held``: attempts that went out
    were charged, or the request it sends is not the one the hold was sized for (else the
    first hold covers any one attempt)."""
    return bool(ctx.unserved) or (held.request is not None and held.request is not ctx.request)


def top_up_steps(
    spend: SpendControl,
    held: Held,
    ctx: CallContext,
    route: Provider,
    left: Sequence[Provider] = (),
) -> store_steps.Step[tuple[Provider, ...]]:
    """Make ``held`` cover what the call was charged so far and an attempt on ``route``
    (see the module docs). Returns ``()`` when it does; when the budgets have no room, the
    routes of ``left`` (those the call has not reached) the refusing budget moves the call to,
    else raises :class:`BudgetExceededError` (or :class:`BudgetUnavailableError`)."""
    if held.done or not held.specs or not needs_top_up(held, ctx):
        return ()
    charged = nano(spend.unserved_cost(ctx, held.stages) or 0.0)
    asked = _hold_args(spend, held, ctx, route, charged)
    if asked is None:
        return ()
    hold, covered, least = asked
    rid = f"{held.rid}.{len(held.extra) + 1}"
    held.extra.append(rid)  # before it goes out: cut short, the settle releases it
    result: ReserveResult
    if type(spend.backend) is MemoryBudgetBackend:  # (as SpendControl does)
        result = spend.backend.reserve(rid, held.specs, **hold)
    else:
        result = yield from spend.backend.reserve_steps(rid, held.specs, **hold)
    notes: list[BudgetEvent] = []
    try:
        counted_locally(spend.config, result, notes)
        if result.allowed:
            held.amount += result.amount
            if hold["want"] and covered + result.tokens < (ctx.request.most_output or 0):
                ctx.request = with_output_limit(ctx.request, covered + result.tokens)  # clamped
            return ()
        if result.unavailable:
            unavailable(spend.config, held.specs, result, notes)
        spec = held.specs[result.refused_index]
        moved = moved_to(spend, spec, held.level, left)
        # no route to move to: refused whatever the budget's on_exhausted ("local" refuses)
        level = held.level if moved else "local"
        level = refused(spend.config, spec, result, level, notes, least)
        held.level = level
        return moved
    finally:
        spend.emit(notes)
