"""Live monitoring of the semantic cache's false-hit rate.

How do I know my threshold is still right? :class:`FalseHitMonitor` sends a sampled share of
semantic hits to the model again, in the background and never shown to the user, within a
budget (``sample_rate`` of the hits, at most ``max_checks_per_minute``, one worker, a bounded
queue: when it is full a sample is dropped, never waited for). It compares the fresh answer
with the cached one (``compare(cached_text, fresh_text) -> bool``, True when they agree;
default: the cache's embedder finds them at least ``agreement`` similar; an answer that is
none of the model's, a Guard's degraded text or an answer from a cache, is no verdict) and
keeps, per cache namespace, the verdicts of the last ``window`` checks; a :meth:`report
<FalseHitMonitor.report>` (what :meth:`ResponseCache.report_false_hit
<llmguard_sdk.cache.ResponseCache.report_false_hit>` calls) counts as a wrong verdict.

The estimated false-hit rate (:meth:`FalseHitMonitor.rate`; :meth:`FalseHitMonitor.metrics`
for every namespace, and the ``llmguard.cache.false_hit_rate`` gauge with a ``namespace``
attribute when a ``meter`` is given) is wrong verdicts over verdicts. Once at least
``min_checks`` verdicts put it above ``target``, the monitor raises that namespace's
threshold by ``raise_step`` (up to ``max_raise``), then stops its semantic hits; each action
starts a fresh window. While semantic hits are stopped, the would-be hits are still sampled
and checked. Recovery undoes one step per full window back at or under ``target``: serving
resumes first, then each further such window lowers the raise by ``raise_step`` (never below
0), each again starting a fresh window.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import logging
import queue
import random
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from numbers import Integral, Real
from typing import TYPE_CHECKING, Any

from ..context import Scope, current_scope, scoped
from ..errors import ConfigurationError
from ..models import ChatRequest, ChatResponse

if TYPE_CHECKING:
    from .embedders import Embedder

__all__ = ["FalseHitMonitor", "MonitorState"]

logger = logging.getLogger("llmguard_sdk")

Compare = Callable[[str, str], bool]
_Sample = tuple[str, ChatRequest, str, Scope]  # namespace, request, cached text, scope


@dataclass(frozen=True)
class MonitorState:
    """One namespace as the monitor sees it."""

    false_hit_rate: float
    """Wrong verdicts over verdicts in the current window (0 without verdicts)."""
    verdicts: int
    threshold_raise: float
    """What the monitor added to the cache's threshold."""
    semantic_stopped: bool
    checks: int
    """Background checks done since the start (all windows)."""
    dropped: int
    """Samples dropped by the budget or a full queue."""


@dataclass
class _Namespace:
    verdicts: deque[bool]
    raise_: float = 0.0
    stopped: bool = False
    checks: int = 0
    dropped: int = 0


class FalseHitMonitor:
    """Samples semantic hits, re-asks the model in the background, and acts on the estimated
    false-hit rate (see the module docs).

    Args:
        ask: sends a request to the model and returns its answer (for example a provider's
            ``complete`` with its model and a deadline bound in, or a Guard's ``chat`` with
            the cache turned off for the call); it runs in the scope of the lookup whose
            hit it checks (:func:`~llmguard_sdk.context.current_scope`: a Guard's call
            without ``tenant=`` is that tenant's).
        target: the highest acceptable false-hit rate (0.05: at most 1 wrong in 20).
        sample_rate: the share of semantic hits checked.
        compare: ``compare(cached_text, fresh_text) -> bool`` (True: they agree).
        agreement: the default comparison's similarity for agreement.
        max_checks_per_minute / queue_size: the budget of background calls, and how many
            may wait for the worker (more are dropped, never waited for).
        meter: an OpenTelemetry meter for the ``llmguard.cache.false_hit_rate`` gauge.
        window / min_checks: verdicts kept per namespace, and needed before acting.
        raise_step / max_raise: how the threshold rises before semantic hits stop.
        clock / rng: injected for tests.
    """

    def __init__(
        self,
        ask: Callable[[ChatRequest], ChatResponse],
        *,
        target: float = 0.05,
        sample_rate: float = 0.05,
        compare: Compare | None = None,
        agreement: float = 0.6,
        max_checks_per_minute: float = 30.0,
        queue_size: int = 64,
        meter: Any = None,
        window: int = 100,
        min_checks: int = 20,
        raise_step: float = 0.05,
        max_raise: float = 0.15,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        _check_kinds(
            ask, target=target, sample_rate=sample_rate, agreement=agreement,
            max_checks_per_minute=max_checks_per_minute, raise_step=raise_step,
            max_raise=max_raise, window=window, min_checks=min_checks, queue_size=queue_size,
        )  # fmt: skip
        if not 0.0 < target < 1.0 or not 0.0 <= sample_rate <= 1.0:
            raise ConfigurationError("target must be in (0, 1) and sample_rate in [0, 1]")
        if window < 1 or not 1 <= min_checks <= window or not max_checks_per_minute > 0:
            raise ConfigurationError("need window >= min_checks >= 1 and a positive budget")
        if not raise_step >= 0 or not max_raise >= 0 or queue_size < 1:  # (NaN too)
            raise ConfigurationError("raise_step, max_raise must not be negative")
        if not -1.0 <= agreement <= 1.0:
            raise ConfigurationError("agreement must be a similarity in [-1, 1]")
        self.ask = ask
        self._compare = compare
        self._embedder: Embedder | None = None
        self.target, self.sample_rate, self.agreement = target, sample_rate, agreement
        self.window, self.min_checks = window, min_checks
        self.raise_step, self.max_raise = raise_step, max_raise
        self._rate_per_second = max_checks_per_minute / 60.0
        self._capacity = max(1.0, min(max_checks_per_minute, 10.0))
        self._tokens = self._capacity
        self._refilled = clock()
        self._clock = clock
        self._rng = rng or random.Random()
        self._namespaces: dict[str, _Namespace] = {}
        self._lock = threading.Lock()
        self._queue: queue.Queue[_Sample | None] = queue.Queue(queue_size)
        self._worker: threading.Thread | None = None
        self._leaving = False  # the worker took a stop, found nothing queued and is leaving
        self._idle = threading.Condition(self._lock)
        self._pending = 0
        if meter is not None:
            meter.create_observable_gauge(
                "llmguard.cache.false_hit_rate",
                callbacks=[self._observe],
                description="Estimated share of wrong semantic cache hits, per namespace",
            )

    # -- what the cache asks ------------------------------------------------------------------

    def threshold_raise(self, namespace: str) -> float:
        """What to add to the cache's threshold for ``namespace``."""
        found = self._namespaces.get(namespace)
        return found.raise_ if found is not None else 0.0

    def serving(self, namespace: str) -> bool:
        """Whether semantic hits may be served for ``namespace``."""
        found = self._namespaces.get(namespace)
        return found is None or not found.stopped

    def use_embedder(self, embedder: Embedder) -> None:
        """The embedder of the default comparison (the cache sets its own)."""
        if self._embedder is None:
            self._embedder = embedder

    def sample(
        self, namespace: str, request: ChatRequest, cached_text: str, scope: Scope | None = None
    ) -> bool:
        """Maybe check this semantic hit (or would-be hit) in the background; whether it was
        queued. Never blocks. ``scope``: the lookup's (the tenant, feature and user its
        re-check is asked for: ``ask`` runs in it, see :func:`~llmguard_sdk.scoped`;
        ``None``: the caller's :func:`~llmguard_sdk.context.current_scope`)."""
        if self._rng.random() >= self.sample_rate:
            return False
        scope = scope if scope is not None else current_scope()
        with self._lock:
            state = self._state(namespace)
            if not self._take_token():
                state.dropped += 1
                return False
            try:
                self._queue.put_nowait((namespace, request, cached_text, scope))
            except queue.Full:
                self._tokens += 1.0  # (given back: no check was queued for it)
                state.dropped += 1
                return False
            self._pending += 1
            self._start_worker()
        return True

    def report(self, namespace: str) -> None:
        """A user-reported false hit: a wrong verdict."""
        self.record(namespace, agreed=False)

    def record(self, namespace: str, *, agreed: bool) -> None:
        """Add one verdict for ``namespace`` and act on the estimate."""
        with self._lock:
            state = self._state(namespace)
            state.verdicts.append(agreed)
            self._act(namespace, state)

    # -- what users read ------------------------------------------------------------------

    def rate(self, namespace: str) -> float:
        """The estimated false-hit rate of ``namespace`` (0 without verdicts)."""
        found = self._namespaces.get(namespace)
        if found is None or not found.verdicts:
            return 0.0
        return found.verdicts.count(False) / len(found.verdicts)

    def metrics(self) -> dict[str, MonitorState]:
        """Every namespace's :class:`MonitorState`."""
        with self._lock:
            return {
                name: MonitorState(
                    false_hit_rate=self.rate(name),
                    verdicts=len(state.verdicts),
                    threshold_raise=state.raise_,
                    semantic_stopped=state.stopped,
                    checks=state.checks,
                    dropped=state.dropped,
                )
                for name, state in self._namespaces.items()
            }

    def wait_idle(self, timeout: float = 10.0) -> bool:
        """Wait (at most ``timeout`` seconds) until every queued check is done."""
        deadline = time.monotonic() + timeout
        with self._idle:
            while self._pending:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._idle.wait(left)
        return True

    def close(self, timeout: float = 5.0) -> None:
        """Stop the worker: queued checks not yet started are dropped, and a check under way
        is waited for at most ``timeout`` seconds. A sample queued after the stop (a monitor
        shared with a cache still open) is checked all the same, within the same wait: the
        worker leaves only once nothing is queued, and a sample after that starts another."""
        worker = self._worker
        if worker is None:
            return
        with self._idle:  # (a sample queues under this lock too)
            while True:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is not None:
                    self._pending -= 1
            self._idle.notify_all()
            if worker.is_alive() and not self._leaving:  # (else a stop for the next worker)
                self._queue.put_nowait(None)  # room: the queue was just emptied
        worker.join(timeout)

    # -- inside ---------------------------------------------------------------------------

    def _state(self, namespace: str) -> _Namespace:
        state = self._namespaces.get(namespace)
        if state is None:
            state = self._namespaces[namespace] = _Namespace(deque(maxlen=self.window))
        return state

    def _take_token(self) -> bool:
        now = self._clock()
        self._tokens = min(
            self._capacity, self._tokens + (now - self._refilled) * self._rate_per_second
        )
        self._refilled = now
        if self._tokens < 1.0:
            return False
        self._tokens -= 1.0
        return True

    def _act(self, namespace: str, state: _Namespace) -> None:
        if len(state.verdicts) < self.min_checks:
            return
        rate = state.verdicts.count(False) / len(state.verdicts)
        if rate > self.target and not state.stopped:
            self._tighten(namespace, state, rate)
        elif rate <= self.target and len(state.verdicts) == self.window:
            self._relax(namespace, state)

    def _tighten(self, namespace: str, state: _Namespace, rate: float) -> None:
        """Raise the threshold a step, or stop semantic hits at ``max_raise``."""
        if state.raise_ + self.raise_step <= self.max_raise + 1e-9 and self.raise_step:
            state.raise_ = round(state.raise_ + self.raise_step, 6)
            logger.warning(
                "cache namespace %r: estimated false-hit rate %.3f over target %.3f; "
                "threshold raised by %.2f",
                namespace,
                rate,
                self.target,
                state.raise_,
            )
        else:
            state.stopped = True
            logger.warning(
                "cache namespace %r: estimated false-hit rate %.3f over target %.3f; "
                "semantic hits stopped",
                namespace,
                rate,
                self.target,
            )
        state.verdicts.clear()

    def _relax(self, namespace: str, state: _Namespace) -> None:
        """After a full window at or under target: undo one step of :meth:`_tighten` (resume
        semantic hits, else lower the raise by ``raise_step``, never below 0)."""
        if state.stopped:
            state.stopped = False
            logger.warning("cache namespace %r: semantic hits resumed", namespace)
        elif state.raise_ > 0.0:
            state.raise_ = max(0.0, round(state.raise_ - self.raise_step, 6))
            logger.warning(
                "cache namespace %r: false-hit rate back under target; threshold raise "
                "lowered to %.2f",
                namespace,
                state.raise_,
            )
        else:
            return
        state.verdicts.clear()

    def _start_worker(self) -> None:
        """(Under the lock.) Start a worker unless one is running and not leaving."""
        if self._worker is None or not self._worker.is_alive() or self._leaving:
            self._leaving = False
            self._worker = threading.Thread(
                target=self._run, name="llmguard-cache-monitor", daemon=True
            )
            self._worker.start()

    def _left_over(self) -> _Sample | None:
        """After a stop: a sample queued since (further stops skipped), or ``None`` when
        none is, and the worker leaves (decided under the lock that a sample queues under, so
        a sample queued later starts another worker)."""
        with self._lock:
            while True:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    self._leaving = True
                    return None
                if item is not None:
                    return item

    def _run(self) -> None:
        stopping = False  # a stop was taken: check what is queued, then leave
        while True:
            item = self._left_over() if stopping else self._queue.get()
            if item is None:
                if stopping:
                    return
                stopping = True
                continue
            namespace, request, cached_text, scope = item
            try:
                # (a Guard's chat given as ask: the tenant's call, its budget and limits)
                with scoped(tenant=scope.tenant, feature=scope.feature, user=scope.user):
                    self._check(namespace, request, cached_text)
            except Exception:
                logger.exception("cache monitor: a background check failed (not counted)")
            finally:
                with self._idle:
                    self._pending -= 1
                    self._idle.notify_all()

    def _check(self, namespace: str, request: ChatRequest, cached_text: str) -> None:
        answer = self.ask(request)
        if answer.metadata.get("degraded") or answer.metadata.get("cache"):
            # no answer of the model to compare: a Guard's degraded text in an outage, or
            # an answer from a cache (a Guard asked with its cache on): no verdict
            logger.debug("cache monitor: a re-check got no fresh answer (not counted)")
            return
        fresh = answer.text or ""
        agreed = self._agree(cached_text, fresh)
        with self._lock:
            self._state(namespace).checks += 1
        self.record(namespace, agreed=agreed)

    def _agree(self, cached_text: str, fresh_text: str) -> bool:
        if self._compare is not None:
            return self._compare(cached_text, fresh_text)
        if " ".join(cached_text.split()).lower() == " ".join(fresh_text.split()).lower():
            return True
        if self._embedder is None:
            return False
        first, second = self._embedder.embed([cached_text, fresh_text])
        return float(first @ second) >= self.agreement

    def _observe(self, options: Any = None) -> list[Any]:
        from opentelemetry.metrics import Observation

        return [
            Observation(state.false_hit_rate, {"namespace": name})
            for name, state in self.metrics().items()
        ]


_WHOLE = frozenset({"window", "min_checks", "queue_size"})


def _check_kinds(ask: object, **options: object) -> None:
    """``ask`` can be called; the numbers are numbers, the counts whole numbers (a text was
    a ``TypeError`` from a comparison, an ``ask`` of ``None`` failed every check)."""
    if not callable(ask):
        raise ConfigurationError(f"ask must be a function of a ChatRequest, got {ask!r}")
    for name, value in options.items():
        whole = name in _WHOLE
        if isinstance(value, bool) or not isinstance(value, Integral if whole else Real):
            kind = "a whole number" if whole else "a number"
            raise ConfigurationError(f"{name} must be {kind}, got {value!r}")
