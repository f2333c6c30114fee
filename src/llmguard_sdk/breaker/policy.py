"""Circuit-breaker state machine: pure functions of (state, now, event), in the Resilience4j mould.

* **CLOSED** records each call's outcome in a sliding window (the last ``window`` calls, or the
  calls of the last ``window`` seconds, counted in :data:`TIME_BUCKETS` buckets). Once the
  window holds ``minimum_calls``, the breaker opens when the share of failures reaches
  ``failure_rate`` or the share of slow calls reaches ``slow_call_rate``. Recording an outcome
  costs the same however many calls the window has seen: the window keeps running counts, a
  ring of 2-bit outcome codes (count windows) or one ``(calls, failures, slow)`` triple per
  bucket (time windows), never the outcomes themselves.
* **OPEN** refuses calls at once until ``open_until``. The open duration grows by
  ``backoff_factor`` on each consecutive trip, up to ``max_open_seconds``. A 429 opens the
  breaker for the provider's Retry-After.
* **HALF_OPEN** hands out ``half_open_permits`` probe permits; a failed probe reopens the
  breaker (for longer), and so does a slow one (slower than ``slow_call_seconds``: a route
  tripped by slow calls would otherwise flap between open and half-open); that many
  successful probes close it. A probe whose outcome never
  comes back (its caller was cancelled, or stopped reading a stream) does not hold its permit
  forever: once ``open_seconds`` have passed since the last probe permit was handed out
  with no outcome back, the permits of the probes still out are handed out again (the
  successes already counted stay counted). Only
  probes count: a call let through before the breaker opened that ends while it is half-open
  (``probe=False``) neither closes nor reopens it, nor frees a probe permit.
* **ISOLATED** (manual) refuses every call until reset.

Client errors (4xx) say nothing about the provider's health and are not recorded, nor is an
empty stream (the route failed that request: :class:`~llmguard_sdk.errors.EmptyStreamError`).

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Literal

from .. import errors
from .._copies import frozen
from ..errors import ConfigurationError, ProviderError, RateLimitedError

__all__ = [
    "BreakerPolicy",
    "BreakerState",
    "Outcome",
    "Permit",
    "State",
    "TIME_BUCKETS",
    "acquire",
    "outcome_of",
    "probe_passed",
    "record",
    "release",
]

State = Literal["closed", "open", "half_open", "isolated"]
"""A breaker's state: ``isolated`` is open by hand (``Breakers.isolate``) until reset."""
Outcome = Literal["ok", "slow", "fail", "rate_limited"]
"""How a call went, for the breaker: ``rate_limited`` opens it for the server's hint."""

TIME_BUCKETS = 10
"""A time window of ``window`` seconds is counted in this many buckets of ``window / 10``
seconds (Resilience4j counts one-second buckets): an outcome stays in the window for at
least ``0.9 * window`` and less than ``window`` seconds. Its state is this many
``(calls, failures, slow)`` triples, however busy the route."""


@dataclass(frozen=True)
class BreakerPolicy:
    """When a route's breaker opens, how long it stays open, and how it probes.

    Args:
        window_type: ``"count"`` (the last ``window`` calls) or ``"time"`` (the last
            ``window`` seconds, in :data:`TIME_BUCKETS` buckets: an outcome leaves the window
            between ``0.9 * window`` and ``window`` seconds after it was recorded).
        window: size of the sliding window, in calls or seconds.
        minimum_calls: outcomes needed in the window before rates are judged (at most
            ``window`` for a count window).
        failure_rate: share of failures (0..1) that opens the breaker.
        slow_call_rate: share of slow calls (0..1) that opens it.
        slow_call_seconds: a call slower than this (to its first token, for streams) is slow;
            ``None`` turns slow-call tracking off.
        open_seconds: how long the first trip keeps the breaker open.
        backoff_factor: growth of the open duration per consecutive trip.
        max_open_seconds: the longest open duration.
        half_open_permits: probe calls let through in half-open; as many successes close it
            (a failed or slow one reopens it).
        probe_every: while a route's breaker is open, a call that finds it open starts a
            background probe of the route (a one-token request, not a user's call) at most
            this often per route and process; a probe that succeeds (no slower than
            ``slow_call_seconds``) ends the open wait, so the next call half-opens the
            breaker (a recovered route is back within seconds, not after the whole open
            duration). A route paused by a 429's Retry-After is not probed before the
            pause ends (a probe cannot cut it short). ``None`` turns probes off.
    """

    window_type: Literal["count", "time"] = "count"
    window: float = 20
    minimum_calls: int = 10
    failure_rate: float = 0.5
    slow_call_rate: float = 1.0
    slow_call_seconds: float | None = None
    open_seconds: float = 30.0
    backoff_factor: float = 2.0
    max_open_seconds: float = 600.0
    half_open_permits: int = 2
    probe_every: float | None = 5.0

    def __post_init__(self) -> None:
        _check_types(self)
        if self.window_type not in ("count", "time"):
            raise ConfigurationError("window_type must be 'count' or 'time'")
        if not (0 < self.window < math.inf) or self.minimum_calls < 1:
            raise ConfigurationError("window must be positive and minimum_calls at least 1")
        if self.window_type == "count" and (self.window < 1 or self.window != int(self.window)):
            raise ConfigurationError("a count window is a whole number of calls (>= 1)")
        if self.window_type == "count" and self.minimum_calls > self.window:
            raise ConfigurationError(
                "minimum_calls must be at most a count window's size: the window never holds "
                "more calls than that, so the breaker could never open"
            )
        if not (0 < self.failure_rate <= 1 and 0 < self.slow_call_rate <= 1):
            raise ConfigurationError("failure_rate and slow_call_rate must be in (0, 1]")
        if not (0 < self.open_seconds <= self.max_open_seconds < math.inf):
            raise ConfigurationError("need 0 < open_seconds <= max_open_seconds (finite)")
        if not self.backoff_factor >= 1 or self.half_open_permits < 1:  # (NaN is not >= 1)
            raise ConfigurationError("backoff_factor must be >= 1, half_open_permits >= 1")
        if self.slow_call_seconds is not None and not self.slow_call_seconds > 0:
            raise ConfigurationError("slow_call_seconds must be positive")
        if self.probe_every is not None and not (0 < self.probe_every < math.inf):
            raise ConfigurationError("probe_every must be a positive number of seconds or None")

    def open_duration(self, trips: int) -> float:
        """How long trip number ``trips`` (1-based, consecutive) keeps the breaker open."""
        try:
            growth = self.backoff_factor ** min(max(trips - 1, 0), 64)
        except OverflowError:  # a steep factor: far past any open duration (Lua gets inf)
            return self.max_open_seconds
        return min(self.max_open_seconds, self.open_seconds * growth)


def _check_types(policy: BreakerPolicy) -> None:
    """Numbers where numbers go (a string or None failed a comparison with TypeError)."""
    for name, value in vars(policy).items():
        if name == "window_type" or (value is None and name in _OPTIONAL):
            continue
        whole = name in ("minimum_calls", "half_open_permits")
        if isinstance(value, bool) or not isinstance(value, int if whole else (int, float)):
            kind = "a whole number" if whole else "a number"
            raise ConfigurationError(f"BreakerPolicy.{name} must be {kind}, got {value!r}")


_OPTIONAL = ("slow_call_seconds", "probe_every")


@dataclass(frozen=True)
class BreakerState:
    """One route's breaker. ``window`` holds the sliding window's counts, laid out for one
    policy's ``window_type`` (empty: nothing recorded since the breaker last closed):

    * count windows: ``(calls, failures, slow, ring)``, where ``ring`` holds the codes of the
      last ``calls`` outcomes, 2 bits each, the newest in the lowest bits (bit 0: failed,
      bit 1: slow);
    * time windows: ``(calls, failures, slow, head, c0, f0, s0, c1, f1, s1, ...)``, where
      ``head`` is the newest bucket's number (``floor(time / bucket width)``) and the triples
      count the buckets ``head``, ``head - 1``, ... (at most :data:`TIME_BUCKETS` of them).

    ``calls``, ``failures`` and ``slow`` are running totals of the whole window.
    ``paused_until``: the end of the pause a 429's Retry-After asked for, which a passed
    background probe does not cut short. ``half_open_at``: when the breaker last turned
    half-open; ``probed_at``: when its last probe permit was handed out (the probes still
    out are presumed lost ``open_seconds`` after it).

    .. versionchanged:: 0.2.0
       ``window`` (bounded counts) replaced ``outcomes`` (every ``(time, outcome)`` pair of
       the window).

    .. versionchanged:: 0.2.0
       ``probed_at``: lost probes are timed from the last probe permit, not from
       ``half_open_at``.
    """

    state: State = "closed"
    open_until: float = 0.0
    trips: int = 0
    permits: int = 0
    probes_ok: int = 0
    half_open_at: float = 0.0
    window: tuple[int, ...] = ()
    paused_until: float = 0.0
    probed_at: float = 0.0

    @property
    def calls(self) -> int:
        """Outcomes in the window."""
        return self.window[0] if self.window else 0

    @property
    def failures(self) -> int:
        """Failed outcomes (``fail``, ``rate_limited``) in the window."""
        return self.window[1] if self.window else 0

    @property
    def slow_calls(self) -> int:
        """Slow outcomes in the window."""
        return self.window[2] if self.window else 0


@dataclass(frozen=True)
class Permit:
    """The answer to "may a call go to this route now?".

    ``retry_after`` says when an open breaker will let a probe through; ``probe`` marks a
    half-open probe call; ``paused`` marks a refusal during a 429's pause (the provider's
    Retry-After), which a background probe cannot end: none is sent then.

    .. versionchanged:: 0.2.0 ``paused``.
    """

    allowed: bool
    state: State
    retry_after: float = 0.0
    probe: bool = False
    paused: bool = False


def acquire(state: BreakerState, now: float, policy: BreakerPolicy) -> tuple[Permit, BreakerState]:
    """Ask for a permit; an expired OPEN state turns HALF_OPEN here."""
    if state.state == "isolated":
        return Permit(False, "isolated", retry_after=math.inf), state
    if state.state == "open":
        if now < state.open_until:
            paused = now < state.paused_until
            return Permit(False, "open", retry_after=state.open_until - now, paused=paused), state
        state = replace(state, state="half_open", permits=0, probes_ok=0, half_open_at=now)
    if state.state == "half_open":
        if state.permits >= policy.half_open_permits:
            if now - state.probed_at < policy.open_seconds:
                return Permit(False, "half_open", retry_after=0.0), state
            # the probes still out have gone open_seconds without an outcome (lost): their
            # permits are handed out again; the successes already counted stay counted
            state = replace(state, permits=state.probes_ok)
        granted = replace(state, permits=state.permits + 1, probed_at=now)
        return Permit(True, "half_open", probe=True), granted
    return _CLOSED_PERMIT, state


_CLOSED_PERMIT = Permit(True, "closed")  # shared: permits are immutable


def record(
    state: BreakerState,
    now: float,
    policy: BreakerPolicy,
    outcome: Outcome,
    *,
    hint: float | None = None,
    probe: bool | None = None,
) -> BreakerState:
    """The state after a call's ``outcome`` (``hint``: a 429's Retry-After, seconds;
    ``probe``: whether the call's permit was a half-open probe, :attr:`Permit.probe`,
    ``None`` when not known: counted as one)."""
    if state.state in ("open", "isolated"):
        return state  # a late answer from before the breaker opened
    if outcome == "rate_limited" and hint is not None and hint > 0:
        until = max(state.open_until, now + min(hint, policy.max_open_seconds))
        return replace(
            state, state="open", open_until=until, window=(), permits=0, paused_until=until
        )
    failed = outcome == "fail" or outcome == "rate_limited"
    if state.state == "half_open":
        if probe is False:
            return state  # a late answer from before the breaker opened: not a probe's
        if failed or outcome == "slow":  # a slow probe: the route is still slow
            return _trip(state, now, policy)
        probes_ok = state.probes_ok + 1
        if probes_ok >= policy.half_open_permits:
            return BreakerState()  # closed, fresh window, trips forgiven
        return replace(state, probes_ok=probes_ok)
    code = 1 if failed else 2 if outcome == "slow" else 0
    if policy.window_type == "count":
        window = _count(state.window, int(policy.window), code)
    else:
        window = _timed(state.window, math.floor(now * TIME_BUCKETS / policy.window), code)
    calls, failures, slow = window[0], window[1], window[2]
    if calls >= policy.minimum_calls and (
        failures / calls >= policy.failure_rate or slow / calls >= policy.slow_call_rate
    ):
        return _trip(state, now, policy)
    return frozen(BreakerState, {**state.__dict__, "window": window})  # once per call: cheap


def _count(window: tuple[int, ...], size: int, code: int) -> tuple[int, ...]:
    """The count window of ``size`` calls after one more outcome ``code``: O(1) (a shift of
    a ``2 * size``-bit ring and three counters), whatever the traffic."""
    calls, failures, slow, ring = window or _EMPTY
    ring = (ring << 2) | code
    if calls == size:  # full: the oldest code drops out of the ring
        gone = ring >> (2 * size)
        ring ^= gone << (2 * size)
        failures -= gone & 1
        slow -= gone >> 1
    else:
        calls += 1
    return (calls, failures + (code & 1), slow + (code >> 1), ring)


def _timed(window: tuple[int, ...], bucket: int, code: int) -> tuple[int, ...]:
    """The time window after one more outcome ``code`` in bucket number ``bucket``: the
    buckets that fell out of the window are dropped and their counts subtracted (at most
    :data:`TIME_BUCKETS`, and each bucket only once); the rest is O(1)."""
    fail, slow = code & 1, code >> 1
    if not window:
        return (1, fail, slow, bucket, 1, fail, slow)
    calls, failures, slowed, head = window[0], window[1], window[2], window[3]
    if bucket <= head:  # the newest bucket (or a clock that stepped back): count it there
        newest = (window[4] + 1, window[5] + fail, window[6] + slow)
        return (calls + 1, failures + fail, slowed + slow, head, *newest, *window[7:])
    moved = bucket - head
    if moved >= TIME_BUCKETS:  # every bucket is older than the window
        return (1, fail, slow, bucket, 1, fail, slow)
    keep = 4 + 3 * (TIME_BUCKETS - moved)
    gone = window[keep:]
    calls += 1 - sum(gone[0::3])
    failures += fail - sum(gone[1::3])
    slowed += slow - sum(gone[2::3])
    skipped = (0, 0, 0) * (moved - 1)
    return (calls, failures, slowed, bucket, 1, fail, slow, *skipped, *window[4:keep])


_EMPTY = (0, 0, 0, 0)


def probe_passed(state: BreakerState) -> BreakerState:
    """The state after a background probe of an open route succeeded: the open wait is over
    (the next permit half-opens the breaker), but not a 429's pause (its Retry-After still
    holds); any other state is left as it is."""
    if state.state != "open":
        return state
    return replace(state, open_until=min(state.open_until, state.paused_until))


def release(state: BreakerState, probe: bool | None = None) -> BreakerState:
    """Give back a permit whose call ended without an outcome to record (a client error,
    a cancelled caller, a stream closed early): a half-open breaker may probe again, unless
    the permit was no probe (``probe=False``: taken before the breaker opened)."""
    if state.state == "half_open" and state.permits > 0 and probe is not False:
        return replace(state, permits=state.permits - 1)
    return state


def _trip(state: BreakerState, now: float, policy: BreakerPolicy) -> BreakerState:
    trips = state.trips + 1
    return BreakerState(state="open", open_until=now + policy.open_duration(trips), trips=trips)


def outcome_of(
    error: BaseException | None, *, seconds: float, policy: BreakerPolicy
) -> Outcome | None:
    """How a finished call counts for the breaker; ``None``: not recorded (client errors,
    and an empty stream: the route failed that request, see
    :class:`~llmguard_sdk.errors.EmptyStreamError`).

    5xx, timeouts, connection failures and malformed answers are failures; a 429 is
    ``rate_limited``; a success slower than ``slow_call_seconds`` is ``slow``.
    """
    if error is None:
        slow = policy.slow_call_seconds is not None and seconds >= policy.slow_call_seconds
        return "slow" if slow else "ok"
    if isinstance(error, RateLimitedError):
        return "rate_limited"
    if isinstance(error, errors.EmptyStreamError):
        return None
    failures = (
        errors.ProviderUnavailableError,
        errors.ProviderTimeoutError,
        errors.MalformedResponseError,
        errors.StreamInterruptedError,  # a stream cut mid-answer: HTTP 200, the route failed
    )
    if isinstance(error, failures):
        return "fail"
    if isinstance(error, ProviderError) and error.status_code is not None:
        return "fail" if error.status_code >= 500 else None
    return None
