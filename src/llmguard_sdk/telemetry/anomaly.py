"""Anomaly alerts: a call, an hour or a minute that departs from its rolling baseline.

A spike in tokens per request is a loop or prompt bloat; a feature whose hourly cost triples
is a bug or abuse; an error rate well over its usual is an outage the breakers may not see.
:class:`Anomalies` watches, per feature:

* ``tokens_per_request``: a call over ``factor`` x the p95 of the feature's last ``window``
  calls (:class:`RollingBaseline`, the same check as the budgets' runaway detection,
  :class:`~llmguard_sdk.budget.RunawayDetector`, which is one case of it);
* ``cost_per_hour``: the feature's cost in the current hour over ``factor`` x the mean of
  its last ``history`` hours (once per hour);
* ``error_rate``: the share of failed calls in the current minute (at least ``min_calls``)
  over ``factor`` x the mean rate of the last ``history`` minutes, and at least
  ``min_error_rate`` (once per minute).

Each departure is an :class:`AnomalyEvent`: given to the ``on_event`` callables, logged
(WARNING, once then counted: :mod:`~llmguard_sdk.telemetry._repeats`), counted on
``llmguard.anomalies`` and added to the call's span as an ``llmguard.anomaly`` event by
:class:`~llmguard_sdk.telemetry.Telemetry`. State is bounded: a fixed window per feature, at
most ``_MAX_KEYS`` features.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import bisect
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ..errors import ConfigurationError
from ._options import checked_number
from ._repeats import log_repeated

__all__ = ["Anomalies", "AnomalyEvent", "AnomalyKind", "RollingBaseline", "TimeBuckets"]

AnomalyKind = Literal["tokens_per_request", "cost_per_hour", "error_rate"]
"""What an :class:`AnomalyEvent` flags: a call's tokens, a feature's hourly cost, or a
minute's error rate, each against its baseline."""
_REFRESH_EVERY = 16
_MAX_KEYS = 10_000
logger = logging.getLogger("llmguard_sdk")


class RollingBaseline:
    """Flags values over ``factor`` times the rolling p95 of their key's last ``window``.

    Once a key has ``min_samples`` values, :meth:`observe` returns the p95 a value broke
    (else None); the p95 is read afresh every 16 observations. Each key's window is also
    kept in order, so its p95 is read, not sorted for (O(window) memory moves in C per
    value). At most 10,000 keys are kept (later ones
    are not watched). Thread-safe (the budgets' runaway check observes from every thread).
    """

    def __init__(self, factor: float = 5.0, window: int = 500, min_samples: int = 50) -> None:
        if not factor > 1 or window < 10 or not 1 <= min_samples <= window:
            raise ConfigurationError("rolling baseline: factor > 1, window >= 10, samples >= 1")
        self.factor, self.window, self.min_samples = factor, window, min_samples
        self._seen: dict[Hashable, tuple[deque[float], list[float]]] = {}  # arrival, order
        self._p95: dict[Hashable, tuple[int, float]] = {}  # key: (observations since, p95)
        self._lock = threading.Lock()  # a value's two records, and its eviction's, are one step

    def observe(self, key: Hashable, value: float) -> float | None:
        """Record ``value``; the p95 it exceeded ``factor`` times, else None."""
        with self._lock:
            return self._observe(key, value)

    def _observe(self, key: Hashable, value: float) -> float | None:
        found = self._seen.get(key)
        if found is None:
            if len(self._seen) >= _MAX_KEYS:
                return None  # bounded memory, whatever the number of keys
            found = self._seen[key] = (deque(), [])
        seen, ordered = found
        broke: float | None = None
        if len(seen) >= self.min_samples:
            since, p95 = self._p95.get(key, (_REFRESH_EVERY, 0.0))
            if since >= _REFRESH_EVERY:  # a burst is judged against the baseline before it
                since, p95 = 0, ordered[math.ceil(0.95 * len(ordered)) - 1]
            self._p95[key] = (since + 1, p95)
            if value > self.factor * max(p95, 1.0):
                broke = p95
        if len(seen) >= self.window:
            del ordered[bisect.bisect_left(ordered, seen.popleft())]
        seen.append(value)
        bisect.insort(ordered, value)
        return broke


@dataclass
class _Bucket:
    start: float
    total: float = 0.0
    count: int = 0
    fired: bool = False
    history: deque[float] = field(default_factory=deque)


class TimeBuckets:
    """Sums per key and time bucket (``bucket_s``), each compared with the mean of the key's
    last ``history`` completed buckets: :meth:`add` returns ``(value, baseline)`` the first
    time in a bucket that its value passes ``factor`` x the baseline and ``floor``, after
    ``min_history`` buckets. ``ratio=True`` compares ``total / count`` (a rate, once
    ``min_count`` calls are in the bucket) instead of the total. Buckets without calls are
    no part of the history (a feature idle at night is not compared with zeros)."""

    def __init__(
        self,
        bucket_s: float,
        *,
        factor: float,
        history: int,
        min_history: int,
        floor: float = 0.0,
        ratio: bool = False,
        min_count: int = 1,
    ) -> None:
        if not bucket_s > 0 or not factor > 1 or not 1 <= min_history <= history:
            raise ConfigurationError("time buckets: bucket_s > 0, factor > 1, 1 <= min_history")
        self.bucket_s, self.factor, self.history = bucket_s, factor, history
        self.min_history, self.floor, self.ratio, self.min_count = (
            min_history,
            floor,
            ratio,
            min_count,
        )
        self._buckets: dict[Hashable, _Bucket] = {}

    def add(
        self, key: Hashable, now: float, amount: float, count: int = 1
    ) -> tuple[float, float] | None:
        """Add ``amount`` (and ``count`` calls) to ``key``'s bucket at ``now``:
        ``(value, baseline)`` the first time the bucket passes its baseline, else None."""
        bucket = self._bucket(key, now)
        if bucket is None:
            return None
        bucket.total += amount
        bucket.count += count
        if bucket.fired or len(bucket.history) < self.min_history:
            return None
        if self.ratio and bucket.count < self.min_count:
            return None
        value = self._value(bucket)
        baseline = sum(bucket.history) / len(bucket.history)
        if value > self.factor * baseline and value > self.floor:
            bucket.fired = True
            return value, baseline
        return None

    def _value(self, bucket: _Bucket) -> float:
        if self.ratio:
            return bucket.total / bucket.count if bucket.count else 0.0
        return bucket.total

    def _bucket(self, key: Hashable, now: float) -> _Bucket | None:
        start = math.floor(now / self.bucket_s) * self.bucket_s
        bucket = self._buckets.get(key)
        if bucket is None:
            if len(self._buckets) >= _MAX_KEYS:
                return None
            bucket = self._buckets[key] = _Bucket(start, history=deque(maxlen=self.history))
        elif start > bucket.start:
            if not self.ratio or bucket.count >= self.min_count:
                bucket.history.append(self._value(bucket))
            bucket.start, bucket.total, bucket.count, bucket.fired = start, 0.0, 0, False
        return bucket


def _check_options(given: dict[str, Any]) -> None:
    """:class:`Anomalies`' numbers, each checked by name (the parts' own checks named none)."""
    for name in ("token_factor", "cost_factor", "error_factor"):
        checked_number("Anomalies", name, given[name], above=1)
    whole: list[tuple[str, float, float | None]] = [
        ("token_window", 10, None),
        ("token_min_samples", 1, given["token_window"]),
        ("cost_history_hours", 1, None),
        ("cost_min_hours", 1, given["cost_history_hours"]),
        ("error_history_minutes", 3, None),  # three minutes' history before it judges
        ("error_min_calls", 1, None),
    ]
    for name, least, most in whole:
        checked_number("Anomalies", name, given[name], whole=True, at_least=least, at_most=most)
    checked_number("Anomalies", "cost_floor_usd", given["cost_floor_usd"], at_least=0)
    checked_number("Anomalies", "min_error_rate", given["min_error_rate"], at_least=0, at_most=1)


@dataclass(frozen=True)
class AnomalyEvent:
    """A value that departed from its baseline: ``value`` against ``baseline`` (tokens,
    USD per hour, or a share of failed calls), for ``feature`` (``"-"`` without one)."""

    kind: AnomalyKind
    feature: str
    value: float
    baseline: float
    factor: float
    at: float  # Unix time


class Anomalies:
    """Watches calls for anomalies (see the module docs).

    Args:
        on_event: callables given each :class:`AnomalyEvent` (a pager, a ticket ...).
        token_factor / token_window / token_min_samples: tokens per request.
        cost_factor / cost_history_hours / cost_min_hours / cost_floor_usd: cost per hour.
        error_factor / error_history_minutes / error_min_calls / min_error_rate: errors.
        clock: Unix time (injected in tests).
    """

    def __init__(
        self,
        on_event: Sequence[Callable[[AnomalyEvent], None]] = (),
        *,
        token_factor: float = 5.0,
        token_window: int = 500,
        token_min_samples: int = 50,
        cost_factor: float = 3.0,
        cost_history_hours: int = 24,
        cost_min_hours: int = 3,
        cost_floor_usd: float = 0.01,
        error_factor: float = 3.0,
        error_history_minutes: int = 30,
        error_min_calls: int = 20,
        min_error_rate: float = 0.1,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if callable(on_event) or not all(callable(hook) for hook in on_event):
            raise ConfigurationError(
                f"Anomalies: on_event must be a list of callables, not {on_event!r}"
            )
        self.on_event = tuple(on_event)
        _check_options(locals())
        token_window, token_min_samples = int(token_window), int(token_min_samples)  # 24.0
        cost_history_hours, cost_min_hours = int(cost_history_hours), int(cost_min_hours)
        error_history_minutes, error_min_calls = int(error_history_minutes), int(error_min_calls)
        self._tokens = RollingBaseline(token_factor, token_window, token_min_samples)
        self._cost = TimeBuckets(
            3600.0,
            factor=cost_factor,
            history=cost_history_hours,
            min_history=cost_min_hours,
            floor=cost_floor_usd,
        )
        self._errors = TimeBuckets(
            60.0,
            factor=error_factor,
            history=error_history_minutes,
            min_history=3,
            floor=min_error_rate,
            ratio=True,
            min_count=error_min_calls,
        )
        self._clock = clock
        self._lock = threading.Lock()

    def observe(
        self, feature: str | None, tokens: int | None, cost_usd: float | None, failed: bool
    ) -> list[AnomalyEvent]:
        """Record one finished call; the anomalies it revealed (already handed to the hooks
        and logged)."""
        key = feature or "-"
        now = self._clock()
        found: list[AnomalyEvent] = []
        with self._lock:
            if tokens:  # (its baseline is this object's alone: under this lock, not its own)
                broke = self._tokens._observe(key, float(tokens))
                if broke is not None:
                    found.append(self._event("tokens_per_request", key, tokens, broke, now))
            if cost_usd:
                hour = self._cost.add(key, now, cost_usd)
                if hour is not None:
                    found.append(self._event("cost_per_hour", key, *hour, now))
            rate = self._errors.add(key, now, 1.0 if failed else 0.0)
            if rate is not None:
                found.append(self._event("error_rate", key, *rate, now))
        for event in found:
            self._emit(event)
        return found

    def _event(
        self, kind: AnomalyKind, key: str, value: float, baseline: float, now: float
    ) -> AnomalyEvent:
        factor = {
            "tokens_per_request": self._tokens.factor,
            "cost_per_hour": self._cost.factor,
            "error_rate": self._errors.factor,
        }[kind]
        return AnomalyEvent(kind, key, float(value), baseline, factor, now)

    def _emit(self, event: AnomalyEvent) -> None:
        log_repeated(
            logger,
            logging.WARNING,
            ("anomaly", event.kind, event.feature),
            "llmguard anomaly: %s of feature %s is %.4g, over %.1f x its baseline %.4g",
            event.kind,
            event.feature,
            event.value,
            event.factor,
            event.baseline,
        )
        for hook in self.on_event:
            try:
                hook(event)
            except Exception:
                logger.exception("llmguard anomaly hook %r failed", hook)
