"""The hedge race: a plan of its own, run by the drivers' leg runners.

Start the first leg; after ``hedge_after`` without an answer, or after a failure that moves
the call on, start the second (if its breaker and its rate limit let it, now: a hedge that
waited for a slot would defeat its purpose). The first leg ready wins (a whole answer, or a
stream's first content); the other is ended and gives its permit and lease back. At the
deadline every leg still running counts as a timeout. A hedged pair is not retried; if both
fail, the route loop goes on with the next routes. A loser whose answer (or a stream's first
content) had arrived too by the time the race was decided, or came as it was stopped, is
charged what it used (its usage, else its counted output), not an estimate; one cut off before
is charged its prompt and an estimate of its output (a plain call's: the winner's output; a
stream's: the hidden reasoning the winner did before its first content). A streamed loser's
prompt is counted as its provider reported it in what it had streamed (Anthropic's
``message_start``), where it did. A leg that failed is charged as any attempt that did not
end (:func:`.limits.charge_stopped`): its prompt once its provider took it, and the
server-side tools its stream showed before it failed. A leg still running at the deadline (a
timeout) is charged as a streamed loser cut off is: its prompt as its provider reported it,
and the server-side tools its stream had showed.
"""

from __future__ import annotations

import math
import time
from collections.abc import Generator
from typing import Any

from ..budget._usage import usable_usage
from ..context import AttemptRecord
from ..errors import ProviderError, ProviderTimeoutError
from ..models import ChatResponse, StreamChunk, Usage
from ..providers.base import Provider
from ..store import Step
from . import limits, plan, routes
from .assembly import Assembler, at_least, has_content
from .limits import Reservation
from .ops import AwaitLeg, HaltLegs, LegEvent, Preopened, Race, StartLeg, StopLegs, answer_of
from .run import Run, elapsed_since

__all__ = ["charge_silent_losers", "hedge", "race"]

Outcome = ChatResponse | Preopened | None
"""A plain call's winning answer, a stream that won (to be read by the route loop), or no
winner."""


def hedge(run: Run) -> Generator[Any, Any, Outcome]:
    """Race the first usable route its breaker and rate limit admit against the next one;
    None when there was no race or no winner (the routes it used up are in ``run.tried``)."""
    ctx = run.ctx
    usable = [
        r
        for r in routes.call_routes(ctx, run.stages)
        if r not in ctx.fallback_routes and not routes.too_small_for(ctx, r)
    ]  # (a fallback route is tried once the others failed: never raced beside them)
    for index in range(len(usable) - 1):
        rest = usable[index + 1 :]  # (a group reached first takes the call, as in the loop)
        first = usable[index] = yield from run.reach_group(usable[index], rest)
        usable[index + 1 :] = rest
        admitted, reservation = yield from plan.admit(run, first)
        if not admitted:
            run.tried.add(first.name)
            continue
        run.give_back_ahead()  # the race asks for its other leg itself
        outcome: Outcome = yield Race(race(run, first, usable[index + 1], reservation))
        return outcome
    return None


class _Leg:
    """One route of a race, as the plan tracks it."""

    def __init__(self, route: Provider, reservation: Reservation | None, run: Run) -> None:
        self.route = route
        self.reservation = reservation
        self.record = run.ctx.begin_attempt(route.name)
        self.started = time.monotonic()
        self.ended = False


class _Race:
    """What the race has decided so far."""

    def __init__(self, run: Run, first: _Leg, second: Provider) -> None:
        self.run = run
        self.second = second
        self.legs = {first.route.name: first}
        self.errors: dict[str, ProviderError] = {}
        self.winner: tuple[_Leg, LegEvent] | None = None
        self.won_usage: Usage | None = None  # a plain call's winner's usage, read once
        self.answered: dict[str, LegEvent] = {}  # losers whose answer had arrived too
        self.so_far: dict[str, Usage] = {}  # what streamed losers' providers reported so far
        self.unsent: set[str] = set()  # losers stopped before their request went out
        self.unexpected: BaseException | None = None
        self.hedged = False

    def running(self) -> list[_Leg]:
        return [leg for leg in self.legs.values() if not leg.ended]

    def timed_out(self) -> bool:
        """No winner and no bug, and the deadline has passed."""
        return self.winner is None and self.unexpected is None and self.run.ctx.remaining() <= 0


def race(
    run: Run, first: Provider, second: Provider, reservation: Reservation | None
) -> Generator[Any, Any, Outcome]:
    """Decide a hedge race (see the module docs); the driver runs its legs."""
    state = _Race(run, _Leg(first, reservation, run), second)
    try:
        yield (yield from _start(run, state.legs[first.name]))
        yield from _until_decided(state)
        yield from _answered_too(state)
        yield from _halted(state)
        yield _stop(state)
    except BaseException:  # closed or cancelled mid-race: every running leg gives back
        for leg in state.running() + _kept(state):
            leg.ended = True
            limits.cut_off(run.ctx, leg.route, leg.reservation)  # (its prompt billed)
            run.queue(run.give_back_steps(leg.route, leg.reservation))
        raise
    return _outcome(state)


def _start(run: Run, leg: _Leg) -> Generator[Any, Any, StartLeg]:
    run.ctx.attempts += 1
    run.tried.add(leg.route.name)
    yield from run.reach_group(leg.route)  # (its group takes the call, leased there)
    make = plan.open_op if run.streaming else plan.complete_op
    op = make(run, leg.route, leg.record)
    return StartLeg(op)


def _until_decided(state: _Race) -> Generator[Any, Any, None]:
    """Wait for legs to end (starting the second when it is time) until one wins, one has a
    bug, every leg failed, or the deadline passed."""
    ctx = state.run.ctx
    delay = ctx.hedge_after or 0.0
    while state.running():
        wait = min(delay if not state.hedged else math.inf, ctx.remaining())
        event: LegEvent | None = yield AwaitLeg(max(0.0, wait))
        if event is None:
            if state.hedged or ctx.remaining() <= 0:
                return  # the deadline: what still runs has timed out
        elif not _ended(state, event):
            return
        elif state.hedged or not _moves_on(state, state.errors.get(event.route)):
            continue
        if not state.hedged:  # the delay passed, or the first failed early: start the second
            state.hedged = True
            yield from _start_second(state)


def _ended(state: _Race, event: LegEvent) -> bool:
    """Note how a leg ended; False when that decides the race (a winner, or a bug)."""
    leg = state.legs[event.route]
    leg.ended = True
    if event.unexpected is not None:
        state.unexpected = event.unexpected
        return False
    if event.error is None:
        state.winner = (leg, event)
        if isinstance(event.value, ChatResponse):  # (settled and priced from this one count)
            state.won_usage = limits.response_usage(
                state.run.ctx, leg.route, leg.reservation, event.value
            )
        return False
    run = state.run
    state.errors[leg.route.name] = event.error
    leg.record.end(event.error)
    shown = _assembled(leg, event.shown)  # (a stream's: its tools' uses, its prompt's count)
    used = limits.charge_stopped(run.ctx, leg.route, leg.reservation, shown, event.error)
    run.settle(leg.reservation, used=used, error=event.error)  # (used: its prompt kept)
    run.record(leg.route, event.error, elapsed_since(leg.started))
    return True


def _answered_too(state: _Race) -> Generator[Any, Any, None]:
    """Once a leg has won, take what the others sent meanwhile (without waiting): a loser's
    answer, charged as it used (:func:`_stop`), or its failure, settled as one."""
    if state.winner is None:
        return
    while state.running():
        event: LegEvent | None = yield AwaitLeg(0.0)
        if event is None:
            return
        _take(state, event)


def _take(state: _Race, event: LegEvent) -> None:
    """A loser's event after the race was won: its failure settled as one, its answer kept
    to charge it as used (a loser's bug: stopped as any loser)."""
    if event.error is not None:
        _ended(state, event)
    elif event.unexpected is None:
        state.answered[event.route] = event


def _halted(state: _Race) -> Generator[Any, Any, None]:
    """Stop the losers, and take the answers of those that ended meanwhile: an answer that
    came as a loser was stopped is charged as it used, not estimated (its thread ended after
    the race decided; its task after its cancellation). A failure then is the stop's own (an
    aborted socket): not the route's. Without a winner (the deadline), a stream's usage so
    far is taken alone, for its timeout's charge."""
    winner = state.winner
    keep = winner[0].route.name if winner is not None and state.run.streaming else None
    events: list[LegEvent] = yield HaltLegs(keep)
    for event in events:
        if state.legs[event.route].ended:
            continue
        if winner is not None and _answer_came(event):
            state.answered[event.route] = event
        elif event.error is not None and not event.error.request_sent:
            state.unsent.add(event.route)  # (waiting for a connection: it cost nothing)
        elif isinstance(event.value, tuple) and (so_far := reported(event.value[0])) is not None:
            state.so_far[event.route] = so_far  # (a stream stopped before its content)


def _answer_came(event: LegEvent) -> bool:
    """Whether a stopped leg's event is an answer: a whole one, or a stream's first content
    (a stream stopped before it is a loser cut off)."""
    if isinstance(event.value, ChatResponse):
        return True
    return event.value is not None and any(has_content(c) for c in event.value[0])


def _kept(state: _Race) -> list[_Leg]:
    """A winning stream not yet handed on (the race was closed as it stopped the others)."""
    winner = state.winner
    if winner is None or not state.run.streaming:
        return []
    return [winner[0]]


def _moves_on(state: _Race, error: ProviderError | None) -> bool:
    moves_on = state.run.stages.moves_on or routes.is_route_failure
    return error is not None and moves_on(error)


def _start_second(state: _Race) -> Generator[Any, Any, None]:
    """The second leg starts if its breaker and its rate limit admit it now."""
    run, second = state.run, state.second
    admitted, reservation = yield from _admit_now(run, second)
    if not admitted:
        run.tried.add(second.name)
        return
    leg = state.legs[second.name] = _Leg(second, reservation, run)
    yield (yield from _start(run, leg))


def _admit_now(run: Run, route: Provider) -> Generator[Any, Any, tuple[bool, Reservation | None]]:
    """The second leg's permit and reservation, without waiting for a slot."""
    ctx, stages = run.ctx, run.stages
    if stages.breakers is not None:
        permit = yield from answer_of(stages.breakers.permit_steps(route.name))
        if not permit.allowed:
            routes.route_refused(ctx, stages, route, permit)
            return False, None
        run.permitted(route, permit)
    reservation = limits.token_reservation(ctx, stages, route)
    if reservation is not None:
        grant = yield from run.reserve(route, reservation, wait=False)
        if not grant.allowed:
            routes.route_rate_limited(ctx, stages, route, grant, reservation)
            run.release(route)
            return False, None
    return True, reservation


def _stop(state: _Race) -> StopLegs:
    """End the legs still running: timeouts at the deadline (a failure for the breaker),
    else losers (no outcome; their attempt record stays open: cancelled; their prompt is
    billed, so the call's spend counts it; one stopped before its request went out, nothing).
    Each gives back its permit and lease once it has ended; a winning stream is kept."""
    run = state.run
    after: dict[str, list[Step[Any]]] = {}
    for leg in state.running():
        leg.ended = True
        if state.timed_out():
            timed_out = ProviderTimeoutError(
                "no answer before the call's deadline (hedged)", route=leg.route.name
            )
            state.errors[leg.route.name] = timed_out
            run.record(leg.route, timed_out, elapsed_since(leg.started))
            sent = _cut_off(state, leg, 0)  # (billed: its prompt, the tools its stream showed)
            # its prompt kept, its output back (as a plain call that timed out)
            after[leg.route.name] = run.settle_steps(leg.reservation, used=sent, sent=True)
        else:  # a loser: its request was sent, the provider bills its prompt (and output)
            if run.stages.routing is not None:  # (no outcome for its breaker: no failure)
                run.stages.routing.outlasted(leg.route.name, elapsed_since(leg.started))
            if leg.route.name in state.unsent:  # (stopped before it sent: nothing billed)
                after[leg.route.name] = run.release_steps(leg.route) + run.settle_steps(
                    leg.reservation, unsent=True
                )
            else:
                after[leg.route.name] = _lost(state, leg)
    winner = state.winner
    return StopLegs(winner[0].route.name if winner and run.streaming else None, after)


def _lost(state: _Race, leg: _Leg) -> list[Step[Any]]:
    """Charge a loser (``ctx.unserved``) and return the steps that give back its permit and
    lease: what it used when its answer had arrived too (its rate limit settled to that),
    else its prompt and an estimate of its output (:func:`_loser_output`)."""
    run = state.run
    answered = state.answered.get(leg.route.name)
    if answered is None:
        if run.streaming:  # (its output is known once the winner's stream ends)
            run.silent_losers.append((len(run.ctx.unserved), _allowed(run, leg)))
        _cut_off(state, leg, _loser_output(state, leg))
        return run.give_back_steps(leg.route, leg.reservation)
    used, headers = _answer_usage(state, leg, answered)
    run.ctx.unserved.append((leg.route.name, used))
    settle = run.settle_steps(leg.reservation, used=used, headers=headers)
    return run.release_steps(leg.route) + settle


def _cut_off(state: _Race, leg: _Leg, output: int) -> Usage:
    """Charge a leg stopped before its answer (a loser, a timeout) its prompt and ``output``
    (:func:`.limits.cut_off`); a stream's, what its provider reported in what it had
    streamed (:func:`_halted`): its prompt as its provider counted it (else as sent), its
    tools' uses. Returns what it used."""
    run = state.run
    so_far = state.so_far.get(leg.route.name)
    if so_far is None:
        return limits.cut_off(run.ctx, leg.route, leg.reservation, output)
    sent = limits.sent_input(run.ctx, leg.route, leg.reservation)
    used = at_least(so_far, output, sent)
    run.ctx.unserved.append((leg.route.name, used))
    return used


def _answer_usage(state: _Race, leg: _Leg, event: LegEvent) -> tuple[Usage, dict[str, str] | None]:
    """What a loser whose answer arrived used, and its headers: a plain answer's usage (else
    its counted text, as a winner's); a stream's first content, assembled and counted as a
    winner's stream without usage is (:meth:`.assembly.Assembler.counted`), beside its
    prompt."""
    ctx = state.run.ctx
    if isinstance(event.value, ChatResponse):
        response = event.value
        return limits.response_usage(ctx, leg.route, leg.reservation, response), response.headers
    assembler = _assembled(leg, event.value[0] if event.value is not None else [])
    model = limits.answer_model(ctx, leg.route, assembler.model)
    used = assembler.used(model, limits.sent_input(ctx, leg.route, leg.reservation))
    assert used is not None  # (billed: its prompt was sent)
    return used, assembler.headers


def _assembled(leg: _Leg, chunks: list[StreamChunk]) -> Assembler:
    """A leg's streamed ``chunks`` assembled, to be counted (a record of its own: the leg's
    attempt and the call note no first token of it)."""
    assembler = Assembler(None, "", AttemptRecord(leg.route.name))
    for chunk in chunks:
        assembler.add(chunk)
    return assembler


def reported(chunks: list[StreamChunk]) -> Usage | None:
    """The usage a stream's provider reported in ``chunks`` (the last), before its end: a
    chunk's usage, or what Anthropic's ``message_start`` says of the prompt."""
    for chunk in reversed(chunks):
        found = usable_usage(chunk.usage) or usable_usage(chunk._usage_so_far)
        if found is not None:
            return found
    return None


def _loser_output(state: _Race, leg: _Leg) -> int:
    """The output tokens a loser is charged beside its prompt when its answer has not
    arrived. A stream's loser had streamed no content when the winner's first came (it would
    have won): none now, its hidden reasoning once the winner's stream has ended
    (:func:`charge_silent_losers`). A plain call's loser is an estimate: as many as the
    winner's answer used (the same request; a provider that has not noticed the hang-up
    finishes the answer and bills it), up to the output the call allows it."""
    run, used = state.run, state.won_usage
    if used is None or run.streaming:
        return 0  # (a stream's: see charge_silent_losers)
    allowed = _allowed(run, leg)
    return min(used.output_tokens, allowed) if allowed else used.output_tokens


def _allowed(run: Run, leg: _Leg) -> int:
    """The output tokens a leg was allowed (0: no bound known)."""
    allowed = leg.reservation.output if leg.reservation else run.ctx.request.most_output
    return int(allowed or 0)


def charge_silent_losers(run: Run, used: Usage | None, shown: bool) -> None:
    """A race's winning stream has ended having ``used`` what it did: its streamed losers,
    cut off before any content, are charged the hidden reasoning it did before its first
    content (its ``reasoning_tokens``, unless it ``shown`` its reasoning as it went: then
    they came after it), up to the output each was allowed, beside their prompts. They had
    been reasoning too, on the same request (as a plain call's loser is charged the
    winner's output), and the provider bills it. A winner whose stream breaks or is closed
    never says: they are forgotten then (``plan._stream``), charged their prompts alone."""
    losers, run.silent_losers = run.silent_losers, []
    hidden = 0 if shown or used is None else used.reasoning_tokens
    unserved = run.ctx.unserved
    for at, allowed in losers if hidden else ():
        route, charged = unserved[at]
        output = min(hidden, allowed) if allowed else hidden
        unserved[at] = (route, charged.model_copy(update={"output_tokens": output}))


def _outcome(state: _Race) -> Outcome:
    """The race's result for the route loop (a bug is raised as it is; failures fall
    through, raising when the next route must not be tried)."""
    run = state.run
    if state.unexpected is not None:
        raise state.unexpected
    if state.winner is None:
        for name, error in state.errors.items():
            if routes.fall_through(
                run.ctx,
                state.legs[name].route,
                error,
                delivered=False,
                moves_on=run.stages.moves_on,
            ):
                run.skip_to_current()  # (a canary call's candidate refused its request)
        return None
    run.ctx.route_errors.update(state.errors)
    return _won(run, *state.winner, state.won_usage)


def _won(run: Run, leg: _Leg, event: LegEvent, used: Usage | None) -> ChatResponse | Preopened:
    """The race's winner: a plain call's answer (recorded and settled here), or a stream to
    be read by the route loop (recorded and settled when it ends)."""
    if isinstance(event.value, ChatResponse):
        response = event.value
        leg.record.end()
        run.record(leg.route, None, elapsed_since(leg.started))
        assert used is not None  # (read as the race was decided)
        if leg.reservation is not None:
            run.settle(leg.reservation, used=used, headers=response.headers)
        run.ctx.route = leg.route.name
        return limits.with_usage(response, used)  # (priced as settled)
    assert event.value is not None
    buffered, chunks = event.value
    run.tried.discard(leg.route.name)
    return Preopened(leg.route, leg.reservation, leg.record, list(buffered), chunks)
