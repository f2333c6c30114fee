"""Options of the telemetry parts (:class:`~llmguard_sdk.telemetry.anomaly.Anomalies`,
:class:`~llmguard_sdk.telemetry.sampling.EvalSink`), checked when they are built: a value of
the wrong kind or out of range is a :class:`~llmguard_sdk.errors.ConfigurationError` naming
the option, not a ``TypeError`` at the first call, nor a setting silently misread (``True``
as a share of 1); ``propagate``'s route names, resolved in the chain of each Guard given the
telemetry."""

from __future__ import annotations

import math
import threading
import warnings
from collections.abc import Collection, Mapping
from typing import Any

from .._callers import caller_level
from ..errors import ConfigurationError, TelemetryConfigWarning

__all__ = ["Propagation", "check_parts", "checked_number", "checked_propagate"]


def checked_number(
    owner: str,
    name: str,
    value: object,
    *,
    whole: bool = False,
    above: float | None = None,
    at_least: float | None = None,
    at_most: float | None = None,
) -> Any:
    """``value``, when it is a finite number (a whole one with ``whole``: ``24`` or
    ``24.0``) in the bounds given; else a :class:`ConfigurationError` that names ``owner``
    and ``name``."""
    kinds: tuple[type, ...] = (int, float)
    bounds = [
        f"{word} {bound:g}"
        for word, bound in ((">", above), (">=", at_least), ("<=", at_most))
        if bound is not None
    ]
    wanted = ("a whole number" if whole else "a finite number") + (
        f" {' and '.join(bounds)}" if bounds else ""
    )
    good = isinstance(value, kinds) and not isinstance(value, bool)
    if good:
        number = float(value)  # type: ignore[arg-type]
        good = (
            math.isfinite(number)
            and (number.is_integer() or not whole)
            and not (
                (above is not None and not number > above)
                or (at_least is not None and number < at_least)
                or (at_most is not None and number > at_most)
            )
        )
    if not good:
        raise ConfigurationError(f"{owner}: {name} must be {wanted}, not {value!r}")
    return value


def check_parts(
    capture_content: object, redact: object, eval_sink: object, anomalies: object
) -> None:
    """``Telemetry``'s parts, checked: one of the wrong kind failed the telemetry of every
    call (an ``EvalSink``'s path for the sink, a number for ``anomalies``), or, for a
    ``capture_content`` that is no bool (``"false"``), captured the prompts."""
    from .anomaly import Anomalies
    from .sampling import EvalSink

    if not isinstance(capture_content, bool):
        raise ConfigurationError(f"capture_content must be True or False, not {capture_content!r}")
    if not callable(redact):
        raise ConfigurationError(f"redact must be a function of a string, not {redact!r}")
    if eval_sink is not None and not isinstance(eval_sink, EvalSink):
        raise ConfigurationError(f"eval_sink must be an EvalSink or None, not {eval_sink!r}")
    if anomalies is not None and not isinstance(anomalies, (bool, Anomalies)):
        raise ConfigurationError(
            f"anomalies must be an Anomalies, True or False, not {anomalies!r}"
        )


def checked_propagate(propagate: object) -> bool | frozenset[str]:
    """``Telemetry``'s ``propagate``: ``True``, ``False`` or route names (a collection of
    strings, not one string, whose letters would be taken for names)."""
    if isinstance(propagate, bool):
        return propagate
    if (
        isinstance(propagate, Collection)
        and not isinstance(propagate, (str, bytes))
        and all(isinstance(name, str) for name in propagate)
    ):
        return frozenset(propagate)
    raise ConfigurationError(
        f"propagate must be True, False or a collection of route names, not {propagate!r}"
    )


class Propagation:
    """``Telemetry``'s ``propagate``, resolved for each Guard it is given to: a group's name
    stands for its deployments; a name that is no route or group of the Guard, nor of a Guard
    given the same Telemetry before, is warned about (once per name)."""

    def __init__(self, wanted: bool | frozenset[str]) -> None:
        self.wanted = wanted
        self._known: set[str] = set()  # the routes and groups of the Guards given it so far
        self._said: set[str] = set()  # the names warned about
        self._lock = threading.Lock()

    def routes(self, chain: Mapping[str, Collection[str]]) -> bool | frozenset[str]:
        """The names of the routes (deployments) of a Guard whose requests carry their
        attempt's trace context: ``True`` all, ``False`` none. ``chain``: what each name of
        the Guard's chain (route, group, a group's deployment) stands for."""
        wanted = self.wanted
        if isinstance(wanted, bool):
            return wanted
        with self._lock:
            self._known.update(chain)
            unknown = sorted(wanted - self._known - self._said)
            self._said.update(unknown)
        if unknown:
            warnings.warn(
                f"Telemetry(propagate=...) names {', '.join(map(repr, unknown))}: no route "
                "or deployment group of this Guard (its routes and groups: "
                f"{', '.join(map(repr, sorted(chain)))}), so no request is sent a trace "
                "context for it",
                TelemetryConfigWarning,
                stacklevel=caller_level(),
            )
        return frozenset(route for name in wanted & chain.keys() for route in chain[name])
