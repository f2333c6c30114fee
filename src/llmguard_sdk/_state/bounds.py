"""How long a round trip may wait for Redis when its commands are only worth what is left of
a call's deadline.

A step may bound its command by an instant (:attr:`~._state.steps.Command.by`, a
:func:`time.monotonic` one): a cache lookup that fails open (a miss) is not worth waiting for
past the share of the call's deadline that leaves its provider the rest. A round whose
commands on one store are all so bounded waits for that store until the latest of their
instants at most (:func:`answered_by` around it; a command without a bound in the same round
waits as the store's own timeouts let it, and so does the whole round then): a sync
connection's socket waits at most what is left (:mod:`._state.connections`), an async round
trip's bound on its event loop is cut short at that instant (:mod:`._state.turns`). A wait
cut short so raises :func:`out_of_time`'s error: the call's own lack of time, not Redis
down, so it pauses nothing (:meth:`.health.Outage.failed`), unless Redis answers none of a
few such round trips in a row (:meth:`.health.RedisHealth.ran_out_of_time`); a round with no
time left at all is not sent.

A guarded call bounds every round trip it makes (:class:`~._state.steps.Batch`'s ``by``):
those its provider waits on (the opening batch, an answer the route loop needs, what waits in
the tail before a retry's pause) by :func:`ahead_of` its deadline, the round trip after its
answer (settles, records, the cache store) by :func:`after`. Each stage meets a round trip so
cut short as it meets Redis away (a budget refuses or counts locally, a spend settle is
journaled, a rate limit falls back to the process's share, a breaker decides locally).

Private. redis is imported when a bound runs out, never before.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import time
from collections.abc import Iterator

__all__ = ["after", "ahead_of", "answered_by", "left", "out_of_time", "ran_out"]

SHARE = 0.5  # of what is left of a call's deadline, for a round trip its provider waits on
GRACE = 0.1  # seconds a round trip after a call's answer may wait, its deadline past or near

# the monotonic instant the round trip under way waits for Redis until, at most (None: the
# store's own timeouts)
_BY: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "llmguard_answer_by", default=None
)


@contextlib.contextmanager
def answered_by(by: float | None) -> Iterator[None]:
    """Around one round trip: its waits for Redis end at ``by`` at most (``None``: as the
    store's timeouts let them)."""
    if by is None:
        yield
        return
    token = _BY.set(by)
    try:
        yield
    finally:
        _BY.reset(token)


def ahead_of(deadline: float | None) -> float | None:
    """Until when a round trip that a call's provider waits on waits for Redis (a
    :func:`time.monotonic` instant): :data:`SHARE` of what is left before ``deadline``, the
    rest the provider's (``None``: no deadline)."""
    if deadline is None:
        return None
    now = time.monotonic()
    return now + (deadline - now) * SHARE


def after(deadline: float | None) -> float | None:
    """Until when the round trip after a call's answer waits for Redis: ``deadline``, and
    :data:`GRACE` seconds at least (a call that ran out of time, or answered just before
    it, still tells a Redis that answers its settles and records; ``None``: no deadline)."""
    if deadline is None:
        return None
    return max(deadline, time.monotonic() + GRACE)


def left() -> float | None:
    """Seconds the round trip under way may still wait for Redis (``None``: no bound here;
    0 or less: none)."""
    by = _BY.get()
    return None if by is None else by - time.monotonic()


@functools.cache
def out_of_time() -> type[Exception]:
    """The error of a round trip cut short (or not sent) because the deadline of its
    commands' call left it no more time (a redis-py ``TimeoutError``): not an outage."""
    from redis.exceptions import TimeoutError

    class OutOfTimeError(TimeoutError):
        """Redis did not answer within what the call's deadline left the round trip."""

    return OutOfTimeError


def ran_out(seconds: float) -> Exception:
    """:func:`out_of_time`'s error for a wait bounded to ``seconds`` (0 or less: not sent)."""
    if seconds <= 0:
        return out_of_time()("not sent: the call's deadline left no time to wait for Redis")
    return out_of_time()(
        f"Redis did not answer within the {seconds:.3g} s the call's deadline left the round trip"
    )
