"""Rate limits shared by every process through Redis: one Lua script per decision.

A reservation checks and debits every limit of a route, and of the call's tenant, together
(all or nothing: requests, tokens, input and output tokens, a concurrency slot, a place in
the queue) with Redis ``TIME`` as the clock. Every key of a route, its per-tenant keys
included, lives under the route's hash tag, so one script touches one slot and works on
Redis Cluster. Tenant ids are hashed into the keys. Concurrency slots are leases that lapse
on their own, so a crashed process leaks none.

If Redis cannot be reached, each process falls back to its own in-memory limiter, holding
the store's ``local_share`` of every limit (so N processes together stay near N times that
share), until the store's breaker lets Redis be tried again; it logs that once per outage.
A reservation is settled where it was taken: one the process's share granted, in that share
(even once Redis is back: the shared state never counted it), one taken in Redis, in Redis
(while Redis is down, not at all: the share never counted it, and its lease lapses).

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import dataclasses
import math
import random
import threading
import time
from typing import Any, cast

from typing_extensions import Unpack

from .._state.steps import Pause, Step, entry_points
from .._state.stores import Outage, RedisScripts, RedisStore, hash_id, lua, redis_errors
from ._rules import LimiterBase, LimitsConfig, check_args, metered, new_call_id, wait_bound
from .memory import MemoryRateLimiter
from .policy import CONCURRENCY_POLL, Grant, LearnArgs, RateLimit, ReserveArgs, SettleArgs

__all__ = ["RedisRateLimiter"]

_RESERVE = lua(__name__, "reserve")
_SETTLE = lua(__name__, "settle")
_LEARN = lua(__name__, "learn")


_Bases = tuple[tuple[str, str, RateLimit], ...]


def _opt(value: float | None) -> float | str:
    return "" if value is None else value


class RedisRateLimiter(LimiterBase):
    """:class:`~llmguard_sdk.ratelimit.MemoryRateLimiter`'s contract, shared through Redis.

    Keys of a route: ``{prefix}:rl:{<route hash>}:<limit index>:<limit hash>`` (a hash of
    TATs), plus ``{prefix}:rl:{<route hash>}:<limit index>:q`` (the queue) and ``...:c``
    (concurrency leases); a per-tenant limit adds ``:t:<tenant hash>`` after the index.

    The TATs' key names the limit they were metered for (a hash of its rates, ``period``
    and ``burst``), so a changed limit starts from a state of its own instead of TATs worked
    out for the old one (a burst of an old, longer ``period`` ahead: the route was blocked
    for up to that long); processes with the same limit share it, however it is written.
    While processes with different limits run at once (a rolling deploy), each meters
    against its own limit's state, so together they may let up to both limits' worth
    through until the old ones are gone; the queue and the concurrency leases are the
    route's whatever its limit (they are calls waiting and in flight), so a concurrency cap
    counts every process's calls. ``clock_offset`` shifts the scripts' clock for tests.
    """

    def __init__(self, store: RedisStore, limits: LimitsConfig) -> None:
        super().__init__(limits)
        self.clock_offset = 0.0
        self._store = store
        self._scripts = RedisScripts(store, _RESERVE, _SETTLE, _LEARN, once=(0, 1))
        self._fallback = MemoryRateLimiter({})  # (its limits: shares of these, below)
        self._outage = Outage("rate limits", "limiting per process", store)
        # the calls the process's own share reserved (settled there): call id -> the
        # monotonic instant it is forgotten (its lease has lapsed by then)
        self._local: dict[str, float] = {}
        self._local_lock = threading.Lock()
        self._local_purge = 256  # the size at which lapsed ids are dropped
        # per key: its limits, and each one's key base and the hash of what its TATs mean
        self._bases: dict[str, tuple[tuple[RateLimit, ...], _Bases]] = {}
        for key, rules in list(self.limits.items()):
            self._replace(key, rules)

    def _replace(self, key: str, rules: tuple[RateLimit, ...]) -> None:
        """:meth:`set_limits`: the fallback's share of the new limits too. The new limits'
        keys follow from them (:meth:`_layout`): a limit that meters differently has TATs
        of its own (the old ones lapse), the queue and the leases are the route's."""
        super()._replace(key, rules)
        share = self._store.local_share
        self._fallback._replace(key, tuple(share_of(limit, share) for limit in rules))

    def _layout(self, key: str) -> _Bases:
        """Each limit of ``key``: its keys' base, the hash of what its TATs mean, the limit
        (worked out once per key, again if its limits were replaced)."""
        rules = self.rules(key)
        known = self._bases.get(key)
        if known is not None and known[0] is rules:
            return known[1]
        tag = hash_id(key)
        bases = tuple(
            (self._store.key("rl", tag, str(index)), _metered(limit), limit)
            for index, limit in enumerate(rules)
        )
        if rules:  # (keys without limits: none kept)
            self._bases[key] = (rules, bases)
        return bases

    def _cells(
        self, key: str, tenant: str | None, *, route_only: bool = False
    ) -> list[tuple[list[str], RateLimit]]:
        found = []
        for base, meaning, limit in self._layout(key):
            if limit.per_tenant:
                if route_only:
                    continue
                base = f"{base}:t:{hash_id(tenant or '')}"
            found.append(([f"{base}:{meaning}", base + ":q", base + ":c"], limit))
        return found

    def _reserve_call(
        self, cells: list[tuple[list[str], RateLimit]], call_id: str, ask: ReserveArgs
    ) -> tuple[list[str], list[Any]]:
        tokens = ask.get("tokens", 0.0)
        input_tokens, output_tokens = ask.get("input_tokens"), ask.get("output_tokens")
        if not tokens and (input_tokens is not None or output_tokens is not None):
            tokens = (input_tokens or 0.0) + (output_tokens or 0.0)
        keys: list[str] = []
        args: list[Any] = [
            self.clock_offset,
            ask.get("requests", 1.0),
            tokens,
            tokens if input_tokens is None else input_tokens,
            tokens if output_tokens is None else output_tokens,
            call_id,
            CONCURRENCY_POLL,
        ]
        lease_seconds = ask.get("lease_seconds")
        for names, limit in cells:
            keys += names
            held = limit.lease_seconds if lease_seconds is None else lease_seconds
            args += [
                *(_opt(v) for v in limit.limits()),
                limit.period,
                limit.capacity(ask.get("priority", "interactive")),
                limit.patience(ask.get("max_wait")),
                _opt(limit.concurrency),
                _opt(limit.max_queue),
                min(held, limit.lease_seconds),
            ]
        return keys, args

    def reserve_steps(self, key: str, **ask: Unpack[ReserveArgs]) -> Step[Grant]:
        """Reserve a call on ``key`` in Redis (keys without a limit always pass, with a
        warning the first time: see :class:`MemoryRateLimiter`); a call that finds every
        concurrency slot taken asks again every few tens of milliseconds while it may wait.
        In a batch, the first ask goes out with the batch; a call queued for a concurrency
        slot asks again alone."""
        check_args(ask, ReserveArgs, "reserve")
        self._configured(key)
        return self._reserve_steps(key, ask)

    def _reserve_steps(self, key: str, ask: ReserveArgs) -> Step[Grant]:
        """:meth:`reserve_steps` without the checks of its arguments (the Guard's own)."""
        cells = self._cells(key, ask.get("tenant"))
        if not cells:
            return Grant(True)
        call_id = ask.get("lease") or new_call_id()
        keys, args = self._reserve_call(cells, call_id, ask)
        until = time.monotonic() + wait_bound([limit for _, limit in cells], ask.get("max_wait"))
        queued = False
        while self._outage.up():
            try:
                grant = _grant((yield self._scripts.command(0, keys, args)))
            except redis_errors() as exc:
                self._outage.failed(exc)
                break
            left = until - time.monotonic()
            if not grant.queued and (grant.allowed or not queued):
                return grant
            if left <= 0 or not grant.queued:  # it leaves the queue now, not a moment later
                yield from self._settle_steps(key, {"tenant": ask.get("tenant"), "lease": call_id})
                return _final(grant)
            queued = True
            yield Pause(min(left, _poll(grant)))
            # asking again, it may wait only what is left (its place in the queue lapses then)
            keys, args = self._reserve_call(cells, call_id, _what_is_left(ask, until))
        rest = _what_is_left(ask, until)
        rest["lease"] = call_id  # (the share's concurrency lease, if any, by the same name)
        held = max(limit.lease_seconds for _, limit in cells)
        lease_seconds = ask.get("lease_seconds")
        if lease_seconds is not None:
            held = min(held, float(lease_seconds))
        self._taken_locally(call_id, until + held)  # (before: a cancelled wait settles there)
        fallback: Grant = yield from self._fallback._reserve_steps(key, rest)
        if not fallback.allowed:
            self._settled_locally(call_id)
            return fallback
        return dataclasses.replace(fallback, lease=call_id)  # named: its settle finds it

    def _taken_locally(self, call_id: str, until: float) -> None:
        """Note that the process's share reserved ``call_id``, to settle it there (until
        ``until``, a monotonic instant); lapsed ids are dropped as their number grows."""
        with self._local_lock:
            self._local[call_id] = until
            if len(self._local) >= self._local_purge:
                now = time.monotonic()
                self._local = {k: v for k, v in self._local.items() if v > now}
                self._local_purge = 2 * len(self._local) + 256

    def _settled_locally(self, lease: str | None) -> bool:
        """Whether ``lease`` names a reservation of the process's share (forgotten now)."""
        if lease is None:
            return False
        with self._local_lock:
            return self._local.pop(lease, None) is not None

    def _learn_call(self, key: str, taught: LearnArgs) -> tuple[list[str], list[Any]]:
        remaining = (
            taught.get("remaining_requests"),
            taught.get("remaining_tokens"),
            taught.get("remaining_input_tokens"),
            taught.get("remaining_output_tokens"),
        )
        keys: list[str] = []
        args: list[Any] = [
            self.clock_offset,
            *(_opt(v) for v in remaining),
            _opt(taught.get("pause")),
        ]
        for names, limit in self._cells(key, None, route_only=True):
            keys += names
            args += [*(_opt(v) for v in limit.limits()), limit.period, limit.hint_horizon()]
        return keys, args

    def learn_steps(self, key: str, **taught: Unpack[LearnArgs]) -> Step[None]:
        """Bring ``key``'s shared route-wide state down to what the provider reported."""
        check_args(taught, LearnArgs, "learn")
        self._configured(key)
        return self._learn_steps(key, taught)

    def _learn_steps(self, key: str, taught: LearnArgs) -> Step[None]:
        """:meth:`learn_steps` without the checks of its arguments (the Guard's own)."""
        keys, args = self._learn_call(key, taught)
        if not keys:
            return
        if self._outage.up():
            try:
                yield self._scripts.command(2, keys, args)
                return
            except redis_errors() as exc:
                self._outage.failed(exc)
        self._fallback._learn(key, taught)

    def _settle_call(self, key: str, settled: SettleArgs) -> tuple[list[str], list[Any]] | None:
        token_delta = settled.get("token_delta", 0.0)
        input_delta, output_delta = settled.get("input_delta"), settled.get("output_delta")
        if not token_delta and (input_delta is not None or output_delta is not None):
            token_delta = (input_delta or 0.0) + (output_delta or 0.0)
        deltas = (
            token_delta,
            max(token_delta, 0.0) if input_delta is None else input_delta,
            max(token_delta, 0.0) if output_delta is None else output_delta,
        )
        lease, request_delta = settled.get("lease"), settled.get("request_delta", 0.0)
        changes = (request_delta, *deltas)  # (the order of RateLimit.limits())
        keys: list[str] = []
        args: list[Any] = [self.clock_offset, *deltas, lease or "", request_delta]
        for names, limit in self._cells(key, settled.get("tenant")):
            if lease is None and not any(
                change and per_period is not None
                for change, per_period in zip(changes, limit.limits(), strict=True)
            ):
                continue  # nothing of it to correct, and no lease to give back: left alone
            keys += names
            args += [*(_opt(v) for v in limit.limits()), limit.period]
        return (keys, args) if keys else None

    def settle_steps(self, key: str, **settled: Unpack[SettleArgs]) -> Step[None]:
        """Correct a reservation in Redis, and give its concurrency ``lease`` back;
        ``request_delta=-1`` also gives back the request (a call never sent). Pass the
        grant's ``lease`` (every grant here names one under token limits): a reservation
        the process's own share granted in an outage is settled there, Redis back or not
        (without a ``lease``, a settle goes to Redis while it answers, and only where a
        limit meters what it corrects: tokens settled on a route limited by requests alone
        make no round trip)."""
        check_args(settled, SettleArgs, "settle")
        self._configured(key)
        return self._settle_steps(key, settled)

    def _settle_steps(self, key: str, settled: SettleArgs) -> Step[None]:
        """:meth:`settle_steps` without the checks of its arguments (the Guard's own)."""
        lease = settled.get("lease")
        if self._settled_locally(lease):  # the share reserved it: settled there, as taken
            self._fallback._settle(key, settled)
            return
        call = self._settle_call(key, settled)
        if call is None:
            return
        if self._outage.up():
            try:
                yield self._scripts.command(1, call[0], call[1])
                return
            except redis_errors() as exc:
                self._outage.failed(exc)
        if lease is None:  # (where it was taken is unknown: the share, as in an outage)
            self._fallback._settle(key, settled)
        # else: taken in Redis, which cannot be reached; the share never counted it (its
        # refund would be room the share never gave), and its Redis lease lapses on its own

    def release_steps(self, key: str, *, tenant: str | None = None, lease: str) -> Step[None]:
        """Give a concurrency lease back without settling tokens."""
        return self.settle_steps(key, tenant=tenant, lease=lease)

    reserve, areserve = entry_points(reserve_steps)
    learn, alearn = entry_points(learn_steps)
    settle, asettle = entry_points(settle_steps)
    release, arelease = entry_points(release_steps)

    def in_flight(self, key: str, *, tenant: str | None = None) -> int:
        """Calls holding a concurrency lease on ``key`` now (the most of any of its limits);
        by Redis's clock. With Redis down: those of this process's own share."""
        if self._outage.up():
            try:
                return self._in_flight(key, tenant)
            except redis_errors() as exc:
                self._outage.failed(exc)
        return self._fallback.in_flight(key, tenant=tenant)

    def _in_flight(self, key: str, tenant: str | None) -> int:
        client = self._store.client
        seconds, micros = cast(tuple[int, int], client.time())
        now = seconds + micros / 1e6 + self.clock_offset
        counts = [
            int(cast(int, client.zcount(names[2], f"({now}", math.inf)))
            for names, limit in self._cells(key, tenant)
            if limit.concurrency is not None  # (token limits hold leases too, until settled)
        ]
        return max(counts, default=0)


def _metered(limit: RateLimit) -> str:
    """A hash of what ``limit``'s TATs mean (:func:`~._rules.metered`), for their key's name."""
    return hash_id(repr(metered(limit)))


def share_of(limit: RateLimit, share: float) -> RateLimit:
    """``limit`` with ``share`` of its rates and concurrency (at least one call's worth), for a
    process that limits on its own while the shared state cannot be reached.

    A call larger than the share's burst but within the whole limit's still runs: it goes
    once the share's bucket is full and leaves it in debt, so the calls after it wait for
    the debt to be paid at the share's rate (N processes stay near N times the share on
    average). A call larger than the whole limit's burst (a batch call: than its share of
    it, less ``batch_headroom``) never fits, as without an outage.
    """
    if share >= 1:
        return limit
    changes: dict[str, Any] = {
        name: getattr(limit, name) * share
        for name in ("rpm", "tpm", "input_tpm", "output_tpm")
        if getattr(limit, name) is not None
    }
    if "rpm" in changes:
        changes["rpm"] = max(1.0, changes["rpm"])
    if limit.concurrency is not None:
        changes["concurrency"] = max(1, math.floor(limit.concurrency * share))
    fields = {f.name: getattr(limit, f.name) for f in dataclasses.fields(RateLimit)}
    return _Share(**{**fields, **changes}, whole=limit)


@dataclasses.dataclass(frozen=True)
class _Share(RateLimit):
    """A process's share of ``whole``: its own rates, and room for one call of ``whole``'s
    burst (see :func:`share_of`)."""

    whole: RateLimit | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.whole is None:
            return
        # a call's cost of the whole burst, in the share's seconds; a batch call's of the
        # whole burst less batch_headroom (what never fits with Redis up never fits here)
        for name, batch in (("_ceilings", False), ("_batch_ceilings", True)):
            capacity = self.capacity("batch" if batch else "interactive")
            ceilings = tuple(
                capacity * whole / own if whole is not None and own is not None else 0.0
                for whole, own in zip(self.whole.limits(), self.limits(), strict=True)
            )
            object.__setattr__(self, name, ceilings)


def _poll(grant: Grant) -> float:
    """How long a queued call waits before asking again (jittered, so pollers spread)."""
    return grant.retry_after * (0.5 + random.random())


def _what_is_left(ask: ReserveArgs, until: float) -> ReserveArgs:
    """``ask`` allowed to wait only until ``until``."""
    rest = ask.copy()
    rest["max_wait"] = max(0.0, until - time.monotonic())
    return rest


def _final(grant: Grant) -> Grant:
    if grant.queued:
        return Grant(False, grant.retry_after, reason=grant.reason)
    return grant


def _grant(reply: Any) -> Grant:
    allowed, retry_after, wait, reason, lease, queued = (
        part.decode() if isinstance(part, bytes) else str(part) for part in reply
    )
    return Grant(
        bool(int(allowed)),
        math.inf if retry_after == "inf" else float(retry_after),
        wait=float(wait),
        lease=lease or None,
        reason=reason,  # type: ignore[arg-type]
        queued=bool(int(queued)),
    )
