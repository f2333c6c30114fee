"""The breaker around Redis itself (:class:`RedisHealth`) and each stage's view of it
(:class:`Outage`)."""

from __future__ import annotations

import logging
import math
import random
import re
import threading
import time
from typing import TYPE_CHECKING

from ..errors import ConfigurationError

if TYPE_CHECKING:
    from .stores import RedisStore

__all__ = [
    "Outage",
    "RedisHealth",
    "caused_by",
    "exhausted",
    "failure",
    "forbidden",
    "lagging",
    "out_of_its_time",
    "refusal",
    "refused",
    "said",
    "tag",
    "unauthenticated",
]

logger = logging.getLogger("llmguard_sdk")
_LOAD_WARNING_SECONDS = 60.0  # a store warns of its full pool (busy loop) at most this often
# round trips in a row that their calls' deadlines cut short, Redis answering none, that pause
# Redis as a failure does (see RedisHealth.ran_out_of_time)
CUT_SHORT = 3
_ERROR_CODE = re.compile(r"^[A-Z]+ ")  # an error reply's code, as redis-py keeps it
# a refusal for the store's user's ACL permissions: NOPERM (a command, or its keys), or a
# script's own command refused (an ERR: "ACL failure in script" from Redis 7.2 on, "The user
# executing the script can't access at least one of the keys" before)
_ACL_REFUSAL = re.compile(r"ACL failure|can't access at least one of the keys")
_KEYS = "_llmguard_keys"  # the attribute of a refused command's error naming its keys (tag)


def refused(exc: BaseException) -> bool:
    """Whether ``exc`` is Redis answering that this command failed (a script's error, a key
    of another type, keys across slots, a command or key the store's user may not use, a
    script it lacks) rather than Redis unable to serve it (down, loading, read-only, out of
    memory, busy, a cluster failing over, the store's credentials refused ...): an answer
    that the next command gets again, so no outage, and no reason to leave Redis alone."""
    from redis.exceptions import (
        ClusterCrossSlotError,
        NoPermissionError,
        NoScriptError,
        ResponseError,
    )

    if isinstance(exc, (ClusterCrossSlotError, NoPermissionError, NoScriptError)):
        return True
    if type(exc) is not ResponseError:  # its subclasses: redirections, states of the server
        return False
    text, code = str(exc), getattr(exc, "status_code", None)
    if code == "ERR" or text.startswith("WRONGTYPE "):
        return True
    return code is None and not _ERROR_CODE.match(text)  # (redis-py < 7 drops "ERR ")


def forbidden(exc: BaseException) -> bool:
    """Whether ``exc`` is Redis refusing a command for the store's user's ACL permissions
    (the command itself, or one of its keys, also inside a script): a :func:`refused`
    command that every command like it gets again until the user is granted it."""
    from redis.exceptions import NoPermissionError

    if isinstance(exc, NoPermissionError):
        return True
    return refused(exc) and _ACL_REFUSAL.search(str(exc)) is not None


def unauthenticated(exc: BaseException) -> bool:
    """Whether ``exc`` is Redis refusing the store's credentials (WRONGPASS: a wrong
    username or password, or a disabled user; NOAUTH: none given where one is needed). No
    command of the store's can run: an outage, but one its URL causes (see :func:`failure`)."""
    from redis.exceptions import AuthenticationError

    return caused_by(exc, AuthenticationError)


def tag(exc: BaseException, keys: tuple[str, ...]) -> None:
    """Note the ``keys`` of the command that Redis refused with ``exc`` (see :func:`said`)."""
    setattr(exc, _KEYS, keys)


def said(exc: BaseException) -> str:
    """What Redis said in ``exc`` (with its error code, which redis-py keeps apart), and the
    first key of the refused command where noted."""
    text, code = str(exc), getattr(exc, "status_code", None)
    if isinstance(code, str) and code and not text.startswith(code):
        text = f"{code} {text}"
    keys: tuple[str, ...] = getattr(exc, _KEYS, ())
    if not keys:
        return text
    more = f" (and {len(keys) - 1} more)" if len(keys) > 1 else ""
    return f"{text}; the command's key: {keys[0]}{more}"


def refusal(exc: BaseException, key_prefix: str | None) -> str:
    """What a :func:`refused` command (``exc``) likely means, and what to do about it, for a
    store whose keys start with ``key_prefix``."""
    if forbidden(exc):
        keys = f" ('~{key_prefix}:*')" if key_prefix else ""
        return (
            "the store's Redis user lacks an ACL permission: grant it the keys under the "
            f"store's key_prefix{keys} and the commands EVALSHA, EVAL and those its scripts run"
        )
    return "a key of another kind under the store's key_prefix, or a script this Redis cannot run"


def failure(exc: BaseException, key_prefix: str | None) -> str:
    """Why Redis did not serve a command that failed with ``exc``, in the words of an error
    raised to the caller: it refused it (:func:`refusal`), refused the store's credentials,
    or could not be reached."""
    if refused(exc):
        return f"Redis refused it ({said(exc)}): {refusal(exc, key_prefix)}"
    if unauthenticated(exc):
        return f"Redis refused the store's credentials ({exc}): {_CREDENTIALS}"
    return f"Redis could not be reached ({exc})"


_CREDENTIALS = "check the username and password of the store's URL (and that the user is on)"


def exhausted(exc: BaseException) -> bool:
    """Whether ``exc`` is this process's own load rather than Redis failing: no connection of
    the store's pool came free in ``pool_timeout`` (redis-py's ``MaxConnectionsError``, also
    when a cluster client raises it as the cause of its own error). Redis said nothing, so
    no outage, and no reason to leave Redis alone."""
    from .connections import pool_exhausted

    return caused_by(exc, pool_exhausted())


def out_of_its_time(exc: BaseException) -> bool:
    """Whether ``exc`` is a round trip cut short by its call's deadline (see
    :mod:`._state.bounds`): Redis may well be up, the call had no more time for it."""
    from .bounds import out_of_time

    return caused_by(exc, out_of_time())


def lagging(exc: BaseException) -> bool:
    """Whether ``exc`` is a Redis timeout that this process's event loop caused, running late
    for most of the round trip (see :mod:`._state.lag`): its own load, as :func:`exhausted`."""
    from .lag import loop_busy

    return caused_by(exc, loop_busy())


def caused_by(exc: BaseException, kind: type[Exception]) -> bool:
    """Whether ``exc`` is a ``kind``, or raised from one (up to two causes deep)."""
    seen: BaseException | None = exc
    for _ in range(3):  # (a cluster client's wrapping: a cluster error from it)
        if seen is None:
            return False
        if isinstance(seen, kind):
            return True
        seen = seen.__cause__
    return False


class RedisHealth:
    """The breaker around Redis itself, shared by every stage of one store.

    After a failure, Redis is left alone for ``base`` seconds; each failure of the first
    attempt after such a pause doubles it (up to ``cap``, jittered), and a failure long after
    the last pause starts again from ``base``. While it is down, stages decide locally, so a
    dead Redis costs one connection attempt (or one socket timeout) per pause, not per call.
    ``attempt_seconds`` is the longest one attempt may take before it fails (a hung Redis
    fails it only then), so its failure still counts as the same outage. ``why`` keeps what
    the last failure of the outage under way tells its callers where the store's own URL
    causes it (refused credentials, in :func:`failure`'s words; ``""`` for Redis away, and
    once Redis answers), so a caller refused during the pause is told it too.

    When a pause ends, one caller tries Redis (the probe) while the others go on deciding
    locally until Redis answers (:meth:`succeeded`, which ends the outage), the probe fails
    (another pause), or ``attempt_seconds`` pass without either: a hung Redis then costs one
    socket timeout per pause, not one per call in flight. A caller that cannot decide locally
    (a budget that refuses calls while Redis is away) asks with ``waits=True`` and tries Redis
    as soon as the pause ends.

    A round trip that found no free connection of the store's pool in its ``pool_timeout``
    (:func:`exhausted`) pauses nothing: the pool is this process's own load, not Redis down.
    ``exhausted`` counts the decisions made without Redis for it. So does an async round
    trip's timeout that the event loop's own lag caused (:func:`lagging`), counted by
    ``lagged``. Such decisions come in episodes, as failures come in outages: one made more
    than ``wait_seconds`` (the store's ``pool_timeout``) + ``attempt_seconds`` + ``base``
    after the last (a wait for the pool, an attempt on Redis and a pause, with no decision
    made for load meanwhile) begins a new episode, counted by ``overloads``.

    A round trip cut short by its call's deadline (:mod:`._state.bounds`) is no failure:
    Redis may answer longer calls. But :data:`CUT_SHORT` of them in a row with no answer from
    Redis in between (:meth:`ran_out_of_time`: a hung Redis that only short calls reach) pause
    it as a failure does, so it stops costing every call its share of its deadline;
    ``cut_short`` counts them.

    Every thread that calls through the store shares this object: a change of its state (a
    failure, a probe taken, an outage ended, a decision counted) is made under a lock held
    for that arithmetic only; while Redis answers, :meth:`up`, :meth:`may_try` and
    :meth:`succeeded` take no lock.

    .. versionadded:: 0.2.0
    """

    def __init__(
        self,
        base: float = 1.0,
        cap: float = 30.0,
        attempt_seconds: float = 0.0,
        *,
        wait_seconds: float = 0.0,
    ) -> None:
        if not (0 < base <= cap):
            raise ConfigurationError("Redis retry pauses need 0 < base <= cap")
        self.base = base
        self.cap = cap
        self.attempt_seconds = attempt_seconds
        self.wait_seconds = wait_seconds
        self.failures = 0  # failures of the outage under way (0: Redis answered since)
        self.outages = 0  # outages so far (a failure long after the last pause starts one)
        self.down_until = 0.0
        self.why = ""  # the last failure's cause, where the store's URL causes it (see above)
        self._pause = 0.0
        self._probe_until = 0.0  # while a probe after a pause is under way
        self.exhausted = 0  # decisions made without Redis for a full pool (not outages)
        self.lagged = 0  # decisions made without Redis for a busy event loop (not outages)
        self.overloads = 0  # episodes of such decisions (see the class docs)
        self.cut_short = 0  # round trips cut short by their deadlines since Redis last answered
        self._loaded_at = -math.inf  # when the last decision was made for load
        self._warned: dict[str, float] = {}  # when each kind of load was last warned of
        # held for a change of the state above (never for I/O); a change writes the pause
        # before ``failures``, so a reader without it never sees an outage with no pause
        self._lock = threading.Lock()

    def pool_ran_out(self) -> bool:
        """A decision was made without Redis because the pool stayed full (see the class
        docs): count it; returns whether to warn of it (at most once a minute)."""
        with self._lock:
            self.exhausted += 1
            return self._loaded("pool")

    def loop_ran_late(self) -> bool:
        """A decision was made without Redis because the event loop's lag caused its round
        trip's timeout (see the class docs): count it; returns whether to warn of it (at
        most once a minute)."""
        with self._lock:
            self.lagged += 1
            return self._loaded("loop")

    def _loaded(self, kind: str) -> bool:
        """A decision was made for the load ``kind`` (under the lock): an episode begins
        after a quiet stretch (see the class docs); returns whether to warn of it now."""
        now = time.monotonic()
        if now - self._loaded_at > self.wait_seconds + self.attempt_seconds + self.base:
            self.overloads += 1
        self._loaded_at = now
        if now - self._warned.get(kind, -math.inf) < _LOAD_WARNING_SECONDS:
            return False
        self._warned[kind] = now
        return True

    def up(self) -> bool:
        """Whether Redis may be tried now: no pause, and no probe under way (see the class
        docs; :meth:`may_try` is the caller's question, which takes the probe)."""
        if not self.failures:
            return True
        now = time.monotonic()
        return now >= self.down_until and now >= self._probe_until

    def may_try(self, *, waits: bool = False) -> bool:
        """Whether this caller may try Redis now; the first caller after a pause takes the
        probe (see the class docs for ``waits``)."""
        if not self.failures:
            return True
        now = time.monotonic()
        if now < self.down_until:
            return False
        if waits:
            return True
        with self._lock:  # (one caller takes the probe)
            if not self.failures:
                return True  # Redis answered meanwhile
            if now < self.down_until or now < self._probe_until:
                return False  # paused again, or another caller's probe is under way
            self._probe_until = now + (self.attempt_seconds or self.base)
            return True

    def ran_out_of_time(self) -> bool:
        """A round trip sent to Redis was cut short by its call's deadline, unanswered (see
        the class docs): count it; the :data:`CUT_SHORT`-th in a row, and each after it,
        pauses Redis as :meth:`failed` does. Returns whether this one paused it."""
        with self._lock:
            self.cut_short += 1
            if self.cut_short < CUT_SHORT:
                return False
        pause = self.failed()
        if self.failures == 1:
            logger.warning(
                "Redis did not answer %d round trips in a row within what their calls' "
                "deadlines left them; stages decide locally, trying Redis again in %.1f s",
                self.cut_short,
                pause,
            )
        return True

    def succeeded(self) -> None:
        """Redis answered: the outage, if one was under way, is over."""
        if self.cut_short:
            self.cut_short = 0
        if self.failures:
            with self._lock:
                self._probe_until = 0.0
                self.failures = 0
                self.why = ""

    def failed(self, why: str = "") -> float:
        """Redis just failed (``why``: the cause to tell, see the class docs): pause it;
        returns the pause in seconds."""
        jitter = 0.8 + 0.4 * random.random()
        with self._lock:  # (callers failing at once: one failure, one pause)
            self.why = why  # (the last failure's, also where another caller paused it)
            now = time.monotonic()
            if now < self.down_until:  # another caller already paused it
                return self.down_until - now
            since = now - self.down_until
            probing = self.failures and since < max(self._pause, self.base) + self.attempt_seconds
            failures = self.failures + 1 if probing else 1
            self._pause = min(self.cap, self.base * 2 ** (failures - 1)) * jitter
            self.down_until = now + self._pause
            self._probe_until = 0.0
            self.failures = failures  # (after the pause: see __init__)
            if failures == 1:
                self.outages += 1
            return self._pause


class Outage:
    """One stage's view of its store's :class:`RedisHealth`: while Redis is paused the stage
    decides locally, and it says so once per outage (``instead`` says how).

    Without a store (``store=None``), the outage is this object's own, ``seconds`` long.
    ``waits``: the stage cannot decide locally (it refuses calls instead), so it tries Redis as
    soon as a pause ends rather than waiting for another caller's probe.
    """

    def __init__(
        self,
        what: str,
        instead: str,
        store: RedisStore | None = None,
        *,
        seconds: float = 5.0,
        waits: bool = False,
    ) -> None:
        self.what = what
        self.instead = instead
        self.waits = waits
        self.health = store.health if store is not None else RedisHealth(seconds, seconds)
        self._key_prefix = store.key_prefix if store is not None else None
        self._logged = 0  # the outage last logged
        self._refusal = ""  # the refusal last logged
        self._lock = threading.Lock()  # (threads failing at once: one of them logs)

    def why(self, exc: BaseException) -> str:
        """Why Redis did not serve a command of this stage that failed with ``exc``, in the
        words of an error raised to the caller (:func:`failure`)."""
        return failure(exc, self._key_prefix)

    def up(self) -> bool:
        """Whether this stage may try Redis now (:meth:`RedisHealth.may_try`)."""
        return self.health.may_try(waits=self.waits)

    def failed(self, exc: BaseException) -> None:
        """Redis just failed: pause it (for every stage of the store) and log once. An answer
        that refuses the command itself (:func:`refused`: a key of another kind, a command or
        key the store's user may not use) pauses nothing: it is logged (as an error, once
        while it stays the same, with what to do about it) and only this decision is made
        without Redis; so does a full connection pool (:func:`exhausted`: this process's
        load), or a timeout that the event loop's lag caused (:func:`lagging`), each warned
        of at most once a minute, and a wait cut short by its call's deadline
        (:func:`out_of_its_time`: not logged, the stage counts it). Refused credentials
        (:func:`unauthenticated`) are an outage, logged as an error that names them."""
        if refused(exc):
            with self._lock:
                news, self._refusal = self._refusal != str(exc), str(exc)
            if news:
                logger.error(
                    "%s: Redis refused a command (%s): %s; %s for the decisions it refuses "
                    "(Redis is not paused)",
                    self.what,
                    said(exc),
                    refusal(exc, self._key_prefix),
                    self.instead,
                )
            return
        if out_of_its_time(exc):  # (the call's time was up: only this decision is local)
            return
        if exhausted(exc):
            if self.health.pool_ran_out():
                logger.warning(
                    "%s: %s; %s for this decision. Redis is not paused: the store's connection "
                    "pool is too small for this process's load (warned once a minute; "
                    "store.health.exhausted counts them): raise the store's max_connections "
                    "(or pool_timeout)",
                    self.what,
                    exc,
                    self.instead,
                )
            return
        if lagging(exc):
            if self.health.loop_ran_late():
                logger.warning(
                    "%s: %s; %s for this decision. Redis is not paused: this process's event "
                    "loop was too busy to read Redis in time (warned once a minute; "
                    "store.health.lagged counts them): run fewer calls at once per event loop",
                    self.what,
                    exc,
                    self.instead,
                )
            return
        pause = self.health.failed(self.why(exc) if unauthenticated(exc) else "")
        outage = self.health.outages
        with self._lock:
            news = outage > self._logged
            self._logged = max(outage, self._logged)
        if news and unauthenticated(exc):
            logger.error(
                "%s: Redis refused the store's credentials (%s): %s; %s, trying Redis again "
                "in %.1f s",
                self.what,
                exc,
                _CREDENTIALS,
                self.instead,
                pause,
            )
        elif news:
            logger.warning(
                "%s: Redis unavailable (%s); %s, trying Redis again in %.1f s",
                self.what,
                exc,
                self.instead,
                pause,
            )
