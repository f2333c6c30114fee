"""Bounded metric attributes: each distinct set of a metric's attributes is a series the
meter keeps (and the backend bills) for the life of the process, so a caller's per-request
value (a request id passed as a feature or a ``metadata["release"]``) would grow them without
end. :class:`CappedMeter` hands out instruments whose string attributes keep at most
``limit`` distinct values per attribute name; later new values are recorded as ``"other"``
(logged once per name). Spans are not capped: they keep the full value."""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

from opentelemetry import metrics

__all__ = ["OVERFLOW", "CappedMeter", "LabelCap"]

OVERFLOW = "other"
_LOG = logging.getLogger("llmguard_sdk.telemetry")
Labels = Mapping[str, Any]


class LabelCap:
    """At most ``limit`` distinct string values per attribute name (the rest: ``"other"``)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._seen: dict[str, set[str]] = {}
        self._lock = threading.Lock()

    def __call__(self, attributes: Labels | None) -> Labels | None:
        """``attributes`` with each string value past the cap as ``"other"``: ``attributes``
        itself when every value was seen before (no copy, no lock: every point of a known
        series), else a new dict (the caller's is never changed)."""
        if not attributes:
            return attributes
        seen = self._seen
        for key, value in attributes.items():  # (a str subclass too: an enum, a typed id)
            if isinstance(value, str) and value not in seen.get(key, ()):
                return self._bounded(attributes)
        return attributes

    def _bounded(self, attributes: Labels) -> dict[str, Any]:
        bounded = dict(attributes)
        with self._lock:
            for key, value in attributes.items():
                if isinstance(value, str) and not self._admit(key, value):
                    bounded[key] = OVERFLOW
        return bounded

    def _admit(self, key: str, value: str) -> bool:
        seen = self._seen.setdefault(key, set())
        if value in seen:
            return True
        if len(seen) < self.limit:
            seen.add(value)
            return True
        if OVERFLOW not in seen:  # the first value past the cap: said once per name
            seen.add(OVERFLOW)
            _LOG.warning(
                "llmguard metrics: attribute %s has over %d distinct values (an id passed as "
                "a feature, release or model?); further new values are recorded as %r",
                key,
                self.limit,
                OVERFLOW,
            )
        return False


class _Capped:
    """One instrument whose points' attributes go through a :class:`LabelCap`."""

    def __init__(self, instrument: Any, cap: LabelCap) -> None:
        self._instrument = instrument
        self._cap = cap

    def add(self, amount: float, attributes: Labels | None = None) -> None:
        self._instrument.add(amount, self._cap(attributes))

    def record(self, amount: float, attributes: Labels | None = None) -> None:
        self._instrument.record(amount, self._cap(attributes))

    def set(self, amount: float, attributes: Labels | None = None) -> None:
        self._instrument.set(amount, self._cap(attributes))


class CappedMeter:
    """The instruments of a meter, with their attributes capped (one cap for them all)."""

    def __init__(self, meter: metrics.Meter, limit: int) -> None:
        self._meter = meter
        self.cap = LabelCap(limit)

    def create_counter(self, name: str, **options: Any) -> _Capped:
        return _Capped(self._meter.create_counter(name, **options), self.cap)

    def create_histogram(self, name: str, **options: Any) -> _Capped:
        return _Capped(self._meter.create_histogram(name, **options), self.cap)

    def create_gauge(self, name: str, **options: Any) -> _Capped:
        return _Capped(self._meter.create_gauge(name, **options), self.cap)
