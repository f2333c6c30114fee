"""What both limiters share: the limits configuration and how a call's limits are found.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import difflib
import math
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, NoReturn, cast

from .._callers import caller_level
from .._ids import UniqueIds
from .._keywords import check_keywords
from ..errors import ConfigurationError, RateLimitConfigWarning
from .policy import Priority, RateLimit

__all__ = [
    "LimiterBase",
    "LimitsConfig",
    "Rules",
    "check_args",
    "check_numbers",
    "metered",
    "never_fits",
    "new_call_id",
    "normalize",
    "unsized_calls_never_fit",
    "wait_bound",
]


LimitsConfig = Mapping[str, "RateLimit | Sequence[RateLimit]"]
"""Per key (a route name): one :class:`RateLimit`, or several that all apply."""

Rules = dict[str, tuple[RateLimit, ...]]


def normalize(limits: LimitsConfig) -> Rules:
    """Every key's limits as a tuple; a typed error for anything else."""
    if not isinstance(limits, Mapping):
        raise ConfigurationError("rate limits must be a mapping of route name to RateLimit")
    rules: Rules = {}
    for key, value in limits.items():
        if not isinstance(key, str) or not key:
            raise ConfigurationError(f"rate limit keys must be route names, got {key!r}")
        given: object = value
        found: tuple[object, ...] = (given,)  # (a number or None: refused below)
        if isinstance(given, Iterable) and not isinstance(given, (RateLimit, str)):
            found = tuple(given)
        if not found or not all(isinstance(limit, RateLimit) for limit in found):
            raise ConfigurationError(
                f"rate_limits[{key!r}] must be a RateLimit or a list of them, got {value!r}"
            )
        rules[key] = cast(tuple[RateLimit, ...], found)
        for limit in rules[key]:
            _admits_a_request(key, limit)
    return rules


def _admits_a_request(key: str, limit: RateLimit) -> None:
    """A request rate whose burst holds less than one request refuses every call: say so
    (``rpm=0.5`` meant one request every two minutes: ``rpm=1, period=120``). A process's
    share of a shared limit may (it admits one call of the whole limit's burst)."""
    rpm = limit.rpm
    if rpm is not None and rpm * limit.burst < 1 - 1e-9 and not limit._ceilings[0]:
        every = limit.period / rpm
        raise ConfigurationError(
            f"rate_limits[{key!r}]: rpm={rpm:g} with burst={limit.burst:g} has room for "
            f"{rpm * limit.burst:.3g} of a request, so no call ever fits (rpm x burst must be "
            f"at least 1); one request every {every:g} s is rpm=1, period={every:g}, burst=1 "
            "(and batch_headroom=0 for batch calls to fit too)"
        )


def _warn_unfit_batches(key: str, rules: Sequence[RateLimit]) -> None:
    """A request rate whose burst less ``batch_headroom`` holds less than one request
    refuses every ``batch`` call (interactive calls fit): warn
    (:class:`~llmguard_sdk.RateLimitConfigWarning`), once per limit, when a limiter is given
    it (not when a Guard only reads its ``rate_limits``, nor for a process's share)."""
    for limit in rules:
        rpm = limit.rpm
        if rpm is None or limit._ceilings[0]:
            continue
        room = rpm * limit.burst  # (at least 1: normalize)
        batch = room * (1 - limit.batch_headroom)
        if batch >= 1 - 1e-9:
            continue
        most = math.floor((1 - 1 / room) * 1000) / 1000  # (rounded down: it still fits)
        headroom = f"batch_headroom={most:g} or less" if most > 0 else "batch_headroom=0"
        warnings.warn(
            f"rate_limits[{key!r}]: rpm={rpm:g} with burst={limit.burst:g} leaves batch calls "
            f"(batch_headroom={limit.batch_headroom:g}) room for {batch:.3g} of a request, so "
            "every call with priority='batch' is refused as never fitting (interactive calls "
            f"fit); set {headroom}, or a larger rpm or burst",
            RateLimitConfigWarning,
            stacklevel=caller_level(),
        )


_MAY_BE_INFINITE = frozenset(  # a reservation's: a call that never fits, or no cap of its own
    {"requests", "tokens", "input_tokens", "output_tokens", "max_wait", "lease_seconds"}
)


# what may be None (unknown, or the limits' own), what may not be below zero, the names
_MAY_BE_NONE = frozenset(
    {"input_tokens", "output_tokens", "max_wait", "lease_seconds", "input_delta", "output_delta"}
    | {f"remaining_{kind}" for kind in ("requests", "tokens", "input_tokens", "output_tokens")}
    | {"pause"}
)
_AT_LEAST_ZERO = (_MAY_BE_NONE - {"input_delta", "output_delta", "lease_seconds"}) | {
    "requests",
    "tokens",
}
_NAMES = frozenset({"tenant", "lease"})


def check_numbers(given: Mapping[str, object], what: str) -> None:
    """Raise :class:`ConfigurationError` for an argument of the wrong kind (a number that is
    none, a tenant or lease that is no string, an unknown priority), a NaN, a negative
    amount asked or reported, a lease of no time, or an infinite delta, remaining count or
    pause: any would fail deep inside with an untyped error, or be written into the limits'
    state and corrupt it (a NaN turns a shared limit off, a negative reservation hands out
    room, a lease that lapses at once lifts the concurrency cap)."""
    for name, value in given.items():
        if name in _NAMES:
            if not (value is None or isinstance(value, str)):
                raise ConfigurationError(f"{what} got {name}={value!r}: a string is needed")
            continue
        if name == "priority":
            if value not in ("interactive", "batch"):
                raise ConfigurationError(f"{what} got priority={value!r}: interactive or batch")
            continue
        if value is None and name in _MAY_BE_NONE:
            continue
        if not isinstance(value, (int, float)) or isinstance(value, bool):  # (a bool is an int)
            raise ConfigurationError(f"{what} got {name}={value!r}: a number is needed")
        if math.isnan(value) or (math.isinf(value) and name not in _MAY_BE_INFINITE):
            raise ConfigurationError(f"{what} got {name}={value!r}: a finite number is needed")
        if value < 0 and name in _AT_LEAST_ZERO:
            raise ConfigurationError(f"{what} got {name}={value!r}: a number >= 0 is needed")
        if value <= 0 and name == "lease_seconds":
            raise ConfigurationError(f"{what} got {name}={value!r}: a positive number is needed")


def check_args(given: Mapping[str, object], typed: Any, what: str) -> None:
    """Check the keywords a user gave a limiter's public ``what`` (``typed``: their
    TypedDict): :func:`~llmguard_sdk._keywords.check_keywords`, then :func:`check_numbers`.
    The public entry points check; the Guard's own calls, whose arguments it builds, go to
    the private steps unchecked (the checks were a sixth of a reservation's time)."""
    check_keywords(given, typed, what)
    check_numbers(given, what)


_QUANTITIES = (
    ("rpm", "requests"),
    ("tpm", "tokens"),
    ("input_tpm", "input tokens"),
    ("output_tpm", "output tokens"),
)


def never_fits(
    rules: Sequence[RateLimit],
    *,
    input_tokens: float,
    output_tokens: float,
    priority: Priority = "interactive",
) -> str | None:
    """Why a call of ``input_tokens`` and ``output_tokens`` can never fit ``rules`` (the
    reservation's ``"never"``), in words: larger than a limit's burst, or a batch call
    larger than the share of it that batch calls may take; None when no limit says so."""
    costs = (1.0, input_tokens + output_tokens, input_tokens, output_tokens)
    shares: tuple[Priority, ...] = ("interactive", "batch")  # (the whole burst first)
    for share in shares if priority == "batch" else shares[:1]:
        for limit in rules:
            for (name, unit), per_period, cost in zip(
                _QUANTITIES, limit.limits(), costs, strict=True
            ):
                # as the policy's _evaluate: seconds of allowance the call costs
                if per_period is None or cost * limit.period / per_period <= (
                    limit.capacity(share) + 1e-9
                ):
                    continue
                at_once = f"{name} {per_period:g} x burst {limit.burst:g}"
                room = limit.capacity(share) * per_period / limit.period
                if share == "interactive":
                    return (
                        f"the call's {cost:g} {unit} are more than the {room:g} {unit} this "
                        f"limit lets through at once ({at_once}): it never fits this route"
                    )
                return (
                    f"a batch call of {cost:g} {unit} is larger than the {room:g} {unit} a "
                    f"batch call may take at once ({at_once}, less batch_headroom "
                    f"{limit.batch_headroom:g}); it fits as an interactive call"
                )
    return None


def unsized_calls_never_fit(key: str, rules: Sequence[RateLimit]) -> str | None:
    """Why every call of the Guard's on route ``key`` that sets no ``max_tokens`` is refused
    as never fitting, in words; None when such a call fits. The Guard reserves the largest
    ``reserve_output_tokens`` of the route's limits as its output: a ``tpm`` or
    ``output_tpm`` whose burst holds fewer tokens refuses it whatever its input (a ``batch``
    call: one whose share of the burst does). Calls that set ``max_tokens`` may still fit,
    so this is a warning's, not an error's."""
    reserved = max((limit.reserve_output_tokens for limit in rules), default=0)
    kinds: tuple[tuple[Priority, str], ...] = (("interactive", "a call"), ("batch", "a batch call"))
    for priority, kind in kinds:
        if never_fits(rules, input_tokens=0, output_tokens=0, priority=priority) is not None:
            return None  # (not for its output: one request is already too many)
        why = never_fits(rules, input_tokens=0, output_tokens=reserved, priority=priority)
        if why is not None:
            return (
                f"rate_limits[{key!r}]: {kind} that sets no max_tokens reserves "
                f"reserve_output_tokens={reserved} output tokens, so every such call is "
                f"refused ({why}); set max_tokens on those calls, a smaller "
                "RateLimit.reserve_output_tokens, or a larger limit or burst"
            )
    return None


_CALL_IDS = UniqueIds(random_digits=8)


def new_call_id() -> str:
    """A unique id naming one call in leases and the queue (no system call per id)."""
    return _CALL_IDS.next()


def wait_bound(rules: Sequence[RateLimit], max_wait: float | None) -> float:
    """The longest any of ``rules`` lets a call allowed ``max_wait`` wait."""
    return max((limit.patience(max_wait) for limit in rules), default=0.0)


_UNKNOWN_KEYS_TOLD = 16  # keys without limits a limiter warns about, at most (then: no more)


def metered(limit: RateLimit) -> tuple[float | None, ...]:
    """What ``limit``'s TATs mean: its rates, ``period`` and ``burst``, each as a float
    (``rpm=60`` and ``rpm=60.0`` are one limit). The rest (concurrency, waits, the queue,
    leases) changes no TAT, so a limit replaced by one that meters the same keeps its state."""
    meaning = (*limit.limits(), limit.period, limit.burst)
    return tuple(None if value is None else float(value) for value in meaning)


class _Limits(Mapping[str, tuple[RateLimit, ...]]):
    """A limiter's limits per key, read-only: a key's are replaced with ``set_limits``,
    which also moves what the limiter worked out from them (an item assigned here would
    leave that behind: waits, lease names, a memory limiter's cells)."""

    __slots__ = ("_rules",)

    def __init__(self, rules: Rules) -> None:
        self._rules = rules

    def __getitem__(self, key: str) -> tuple[RateLimit, ...]:
        return self._rules[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._rules)

    def __len__(self) -> int:
        return len(self._rules)

    def __repr__(self) -> str:
        return repr(self._rules)

    def __setitem__(self, key: str, value: object) -> NoReturn:
        _read_only(key)

    def __delitem__(self, key: str) -> NoReturn:
        _read_only(key)


def _read_only(key: str) -> NoReturn:
    """Refuse a change of ``key`` in a limiter's :class:`_Limits`, naming the way to make it."""
    raise ConfigurationError(
        f"a limiter's limits are read-only: limiter.set_limits({key!r}, RateLimit(...)) "
        "replaces a key's limits (and what the limiter keeps for them)"
    )


class LimiterBase:
    """What both limiters share: the limits of each key."""

    def __init__(self, limits: LimitsConfig) -> None:
        self._rules: Rules = {}
        self._limits = _Limits(self._rules)
        # per key, worked out once: the longest any of its limits lets a call wait, and
        # whether a call needs an id (a concurrency lease or a place in a queue)
        self._patience: dict[str, float] = {}
        self._named: dict[str, bool] = {}
        for key, rules in normalize(limits).items():
            _warn_unfit_batches(key, rules)
            self._note(key, rules)
        self._unknown_keys: set[str] = set()  # those warned about (a bounded few)

    @property
    def limits(self) -> Mapping[str, tuple[RateLimit, ...]]:
        """The limits of each key (read-only: :meth:`set_limits` replaces a key's)."""
        return self._limits

    def set_limits(self, key: str, limits: RateLimit | Sequence[RateLimit]) -> None:
        """Replace ``key``'s limits (or give a key its first), checked as the limiter's
        own are, on a limiter in use. The next calls on ``key`` meet the new limits; a limit
        that meters differently (other rates, ``period`` or ``burst``) starts from a state
        of its own, not from TATs worked out for the old one; the calls holding a
        concurrency lease or waiting for a slot still count (they are in flight, or
        waiting; a call already waiting for a slot waits on under the limits it asked
        with). In Redis, only this process's limiter changes: see
        :class:`~llmguard_sdk.ratelimit.RedisRateLimiter` on processes with different limits.

        Raises:
            ConfigurationError: ``key`` or ``limits`` are not a route name and a
                :class:`~llmguard_sdk.ratelimit.RateLimit` (or several), or the limits can
                never admit a call.

        Warns:
            RateLimitConfigWarning: as when the limiter is built, for a request rate with no
                room for a ``batch`` call.

        .. versionadded:: 0.2.0
        """
        rules = normalize({key: limits})[key]
        _warn_unfit_batches(key, rules)
        self._replace(key, rules)

    def _replace(self, key: str, rules: tuple[RateLimit, ...]) -> None:
        """Replace ``key``'s limits by ``rules`` (checked); limiters extend it to move what
        they keep per limit."""
        self._note(key, rules)

    def _note(self, key: str, rules: tuple[RateLimit, ...]) -> None:
        """Keep ``rules`` as ``key``'s limits, and what is worked out once from them."""
        self._patience[key] = max(float(limit.max_wait) for limit in rules)
        self._named[key] = any(
            limit.concurrency is not None or limit.max_queue is not None for limit in rules
        )
        self._rules[key] = rules

    def _configured(self, key: str) -> None:
        """Warn (:class:`~llmguard_sdk.RateLimitConfigWarning`) the first time a caller asks
        about ``key`` when it has no limits: every call on it passes, as documented, but a
        misspelt key means its limits never apply. Once per key, for the first
        :data:`_UNKNOWN_KEYS_TOLD` keys (keys made per call are not remembered for ever);
        not at all for a limiter without limits. The public entry points ask; the Guard,
        which only reserves on routes with limits, goes to the private steps."""
        told = self._unknown_keys
        if not self._rules or key in self._rules or key in told:
            return
        if len(told) >= _UNKNOWN_KEYS_TOLD:
            return
        told.add(key)
        known = sorted(self._rules)
        close = difflib.get_close_matches(str(key), known, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        more = f" and {len(known) - 8} more" if len(known) > 8 else ""
        last = (
            "; further keys without limits go unreported" if len(told) == _UNKNOWN_KEYS_TOLD else ""
        )
        warnings.warn(
            f"the rate limiter has no limits for key {key!r}, so every call on it passes "
            f"unlimited ({hint}its keys: {known[:8]}{more}){last}",
            RateLimitConfigWarning,
            stacklevel=caller_level(),
        )

    def wait_bound(self, key: str, max_wait: float | None) -> float:
        """:func:`wait_bound` of ``key``'s limits (the longest ``max_wait`` of its limits,
        capped by the call's own ``max_wait``; 0 without limits)."""
        longest = self._patience.get(key, 0.0)
        return longest if max_wait is None else max(0.0, min(float(max_wait), longest))

    def call_id(self, key: str) -> str:
        """:func:`new_call_id` when ``key``'s limits name calls (leases, queues), else ``""``
        (an id nothing would read)."""
        return new_call_id() if self._named.get(key, False) else ""

    def rules(self, key: str) -> tuple[RateLimit, ...]:
        """The limits that apply on ``key`` (empty: none)."""
        return self._rules.get(key, ())
