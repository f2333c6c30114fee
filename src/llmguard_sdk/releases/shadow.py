"""Shadow traffic: a share of live calls also sent to the candidate release in the
background, the pair compared, never shown to the user.

No call is shadowed while a canary of the same plan stands rolled back. A served call is
offered to a bounded queue (a full queue drops it: counted, never waited for); one worker
thread sends it to the candidate through a Guard of its own (its own breakers, the shadow's own
rate and spend caps, calls labelled ``arm="shadow"``) and compares the two answers with each
comparator. :meth:`Shadow.report` says how often they agreed, overall and per segment (the
call's feature, or ``ShadowPolicy.segment``). Closing the Guard abandons the shadow's call in
flight and drops those queued: nobody waits for their answers.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import logging
import math
import queue
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..budget._reserve import with_output_limit
from ..context import CallContext, CallEvent, Scope
from ..errors import ConfigurationError, LLMGuardError
from ..models import ChatRequest, ChatResponse
from ..providers._abort import Abort, abortable
from ..retry._testing import testing_attempts
from .comparators import COMPARATORS, Comparator
from .release import unpriced_routes, warn_unpriced

if TYPE_CHECKING:
    from ..budget.prices import PriceTable
    from ..guard import Guard
    from ..telemetry import Telemetry
    from .release import ReleasePlan

__all__ = ["COMPARATORS", "Comparator", "Shadow", "ShadowPolicy"]

logger = logging.getLogger("llmguard_sdk")

_Copy = tuple[ChatRequest, Scope, ChatResponse, str, "int | None"]
"""A served call queued for its copy: its request (as the caller sent it), scope, answer,
segment and the output limit it was served with."""
_MAX_SEGMENTS = 100
_COPY_MARGIN = 0.5  # a copy's output limit: the served answer's length and half as much...
_COPY_MARGIN_TOKENS = 64  # ... or this many tokens more, at least
_CLOSE_GRACE_S = 1.0  # how long a close waits for an abandoned call to end (its timeout if less)


def _copy_limit(served: ChatResponse, limit: int | None) -> int | None:
    """The output limit of a copy of a call served ``served`` under ``limit`` (``None``:
    none): the served answer's output tokens and a margin (half as many, 64 at least: the
    candidate's tokenizer may count the same text otherwise, and a copy longer than that
    disagrees on length anyway), at most ``limit``; ``limit`` where its length is not known
    (``None``: neither)."""
    used = served.usage.output_tokens if served.usage is not None else 0
    if not used:
        return limit
    grown = used + max(_COPY_MARGIN_TOKENS, math.ceil(used * _COPY_MARGIN))
    return min(grown, limit) if limit else grown


@dataclass(frozen=True)
class ShadowPolicy:
    """How much live traffic a candidate shadows, and what bounds it.

    Args:
        share: the share of served calls copied to the candidate.
        max_queue: calls waiting for the worker at most (beyond: dropped, counted).
        rate_per_s: shadow calls per second at most (this process; beyond: skipped).
        max_cost_usd: what the shadow calls may spend in this process (``None``: no cap),
            calls that got no answer included (what their attempts that went out cost).
            Each call is reserved before it goes, as a spend budget holds a call: its worst
            case (its input for each attempt its Guard may make, retries included, and its
            output limit, at the candidate's dearest route) must fit in what is left. A
            call whose output has no limit (no ``max_tokens``) is sent with the served
            answer's own length and half as much again (64 tokens at least), at most the
            limit the served call had (its release's ``max_tokens``, a budget's default),
            so the pair is compared as served; without a length, with that limit, else with
            ``Budgets.default_output_tokens`` (1024).
            A candidate route whose model has no price is not counted (the Guard logs a
            warning as it is built).
        timeout: seconds a shadow call may take (finite, > 0).
        comparators: your own comparisons, by name, beside :data:`COMPARATORS`.
        segment: ``ctx -> label`` for the report's segments (default: the call's feature).
        seed: makes the share's draws repeatable.

    .. versionadded:: 0.2.0
    """

    share: float = 0.05
    max_queue: int = 100
    rate_per_s: float = 10.0
    max_cost_usd: float | None = 1.0
    timeout: float = 30.0
    comparators: Mapping[str, Comparator] = field(default_factory=dict)
    segment: Callable[[CallContext], str] | None = None
    seed: int | None = None

    def __post_init__(self) -> None:
        _check_kinds(self)
        share, size, rate = self.share, self.max_queue, self.rate_per_s
        if not 0 <= share <= 1:
            raise ConfigurationError(f"shadow: share in [0, 1] (5 % is 0.05), got share {share}")
        if size < 1 or not rate > 0:
            raise ConfigurationError(f"shadow: max_queue >= 1, rate_per_s > 0, got {size}, {rate}")
        if self.max_cost_usd is not None and self.max_cost_usd < 0:
            raise ConfigurationError("shadow: max_cost_usd must be >= 0 or None")
        timeout = self.timeout  # what each shadow call's Guard.chat(timeout=...) accepts
        if isinstance(timeout, bool) or not (
            isinstance(timeout, int | float) and 0 < timeout < math.inf
        ):
            raise ConfigurationError(f"shadow: timeout must be finite seconds > 0, got {timeout!r}")
        if not all(callable(c) for c in self.comparators.values()):
            raise ConfigurationError("shadow comparators must be callable")


def _check_kinds(policy: ShadowPolicy) -> None:
    """A :class:`ConfigurationError` naming the first setting of the wrong kind
    (``max_cost_usd=nan`` turned the cap off: no spend compares above NaN)."""
    from .policy import is_number

    for name in ("share", "rate_per_s", "max_cost_usd"):
        value = getattr(policy, name)
        if not is_number(value) and not (name == "max_cost_usd" and value is None):
            raise ConfigurationError(f"shadow: {name} must be a number, got {value!r:.80}")
    for name, value in (("max_queue", policy.max_queue), ("seed", policy.seed)):
        if isinstance(value, bool) or not (
            isinstance(value, int) or (name == "seed" and value is None)
        ):
            raise ConfigurationError(f"shadow: {name} must be an int, got {value!r:.80}")
    if not isinstance(policy.comparators, Mapping):
        raise ConfigurationError("shadow: comparators must be a mapping of name to callable")
    if policy.segment is not None and not callable(policy.segment):
        raise ConfigurationError(f"shadow: segment must be callable, got {policy.segment!r:.80}")


@dataclass
class _Tally:
    pairs: int = 0
    agree: dict[str, int] = field(default_factory=dict)
    judged: dict[str, int] = field(default_factory=dict)

    def add(self, verdicts: Mapping[str, bool | None]) -> None:
        self.pairs += 1
        for name, verdict in verdicts.items():
            if verdict is not None:
                self.judged[name] = self.judged.get(name, 0) + 1
                self.agree[name] = self.agree.get(name, 0) + int(verdict)

    def shares(self) -> dict[str, float]:
        return {n: round(self.agree.get(n, 0) / j, 4) for n, j in self.judged.items() if j}


class Shadow:
    """A candidate's shadow traffic (see the module docs); built by the Guard."""

    def __init__(
        self, plan: ReleasePlan, telemetry: Telemetry | None, prices: PriceTable | None = None
    ) -> None:
        assert plan.shadow is not None
        assert plan.candidate is not None
        self.policy = plan.shadow
        self.enabled = True
        """``False`` pauses the shadow (calls are no longer offered)."""
        self.comparators = {**COMPARATORS, **self.policy.comparators}
        self._plan = plan
        self._prices = prices  # what prices the shadow's calls (its spend cap counts them)
        self._telemetry = telemetry
        self._rng = random.Random(self.policy.seed)
        self._queue: queue.Queue[_Copy] = queue.Queue(self.policy.max_queue)
        self._lock = threading.Lock()
        self._counts = {"offered": 0, "dropped_queue": 0, "skipped_rate": 0}
        self._counts.update(skipped_budget=0, candidate_errors=0, abandoned_at_close=0)
        self._spent = 0.0
        self._tokens, self._refilled = max(self.policy.rate_per_s, 1.0), time.monotonic()
        self._overall = _Tally()
        self._segments: dict[str, _Tally] = {}
        self._guard: Guard | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._abort: Abort | None = None  # how to abandon the call in flight
        if self.policy.max_cost_usd is not None and prices is not None:
            warn_unpriced(
                (plan.candidate,), prices, "shadow", "what the shadow's calls there cost is not "
                "counted, so max_cost_usd does not bound them; add the price "
                "(PriceTable.with_prices) or set max_cost_usd=None",
            )  # fmt: skip

    def offer(self, ctx: CallContext, response: ChatResponse) -> None:
        """Maybe copy a served call to the queue (never waits)."""
        if not self.enabled or self._stop.is_set() or ctx.base_request is None:
            return
        if self._rng.random() >= self.policy.share:
            return
        segment = self.policy.segment(ctx) if self.policy.segment else ctx.scope.feature or "-"
        with self._lock:
            self._counts["offered"] += 1
        try:
            limit = ctx.request.output_limit  # the served call's (its release's, a budget's)
            self._queue.put_nowait((ctx.base_request, ctx.scope, response, str(segment), limit))
        except queue.Full:
            with self._lock:
                self._counts["dropped_queue"] += 1
            return
        if self._thread is None:
            with self._lock:
                if self._thread is None:
                    self._thread = threading.Thread(
                        target=self._work, name="llmguard-shadow", daemon=True
                    )
                    self._thread.start()

    def _admit(self, request: ChatRequest, scope: Scope) -> str | None:
        """Why the call of ``request`` may not go (rate, budget), or None."""
        now = time.monotonic()
        rate = self.policy.rate_per_s
        self._tokens = min(max(rate, 1.0), self._tokens + (now - self._refilled) * rate)
        self._refilled = now
        cap = self.policy.max_cost_usd
        if cap is not None and (
            self._spent >= cap or self._spent + self._worst_usd(request, scope) > cap
        ):
            return "skipped_budget"
        if self._tokens < 1.0:
            return "skipped_rate"
        self._tokens -= 1.0
        return None

    def _bounded(
        self, request: ChatRequest, served: ChatResponse, limit: int | None
    ) -> ChatRequest:
        """``request`` as the candidate's call is sent. Under a spend cap, where neither it
        nor the candidate's parameters set an output limit, it gets one so that its
        reservation bounds what it costs: as long as the served answer was and a margin
        (:func:`_copy_limit`: a copy cut shorter than the served answer disagrees on length
        and text for nothing), else the served call's ``limit``, else the one a budgeted
        call is given (``Budgets.default_output_tokens``)."""
        candidate = self._plan.candidate
        assert candidate is not None
        if self.policy.max_cost_usd is None or candidate.apply(request).output_limit is not None:
            return request
        spend = self._shadow_guard()._stages.spend
        if spend is None:
            return request
        bounded = spend.bounded(request)  # (under the name the candidate's models take)
        tokens = _copy_limit(served, limit)
        return bounded if tokens is None else with_output_limit(bounded, tokens)

    def _worst_usd(self, request: ChatRequest, scope: Scope) -> float:
        """What the candidate's call of ``request`` is reserved, as a budget holds a call:
        its input and its output limit at the dearest of its priced routes (those without a
        price are not counted either), the input once for each attempt its Guard may make
        (each route's, retries included: one that timed out after its request went out is
        billed its prompt; the copy's Guard neither streams, nor hedges, nor filters, so no
        failed attempt is billed output)."""
        candidate = self._plan.candidate
        guard = self._shadow_guard()
        spend = guard._stages.spend
        if candidate is None or spend is None:
            return 0.0
        request = candidate.apply(request)
        unpriced = unpriced_routes(candidate, spend.prices)
        routes = [route for route in candidate.providers if route not in unpriced]
        ctx = CallContext(request, scope, time.monotonic() + self.policy.timeout)
        retry = guard._stages.retry
        attempts = testing_attempts(retry.attempts) if retry is not None else 1
        return spend.worst_case_usd(ctx, routes, prompts=attempts * max(1, len(routes)))

    def _work(self) -> None:
        try:
            while not self._stop.is_set():
                try:
                    item = self._queue.get(timeout=0.2)
                except queue.Empty:
                    continue
                try:
                    self._handle(*item)
                finally:
                    self._queue.task_done()
        finally:  # closed: what is queued is dropped, the shadow's Guard closed
            self._drop_queued()
            try:
                if self._guard is not None:
                    self._guard.close()
            except Exception:
                logger.exception("llmguard shadow: closing its Guard failed")

    def _handle(
        self,
        request: ChatRequest,
        scope: Scope,
        served: ChatResponse,
        segment: str,
        limit: int | None,
    ) -> None:
        request = self._bounded(request, served, limit)
        refused = self._admit(request, scope)
        if refused is not None:
            with self._lock:
                self._counts[refused] += 1
            return
        try:
            shadow = self._call(request, scope)
        except (LLMGuardError, OSError):
            with self._lock:  # a call the close abandoned is no fault of the candidate's
                self._counts[
                    "abandoned_at_close" if self._stop.is_set() else "candidate_errors"
                ] += 1
            return
        except Exception:
            logger.exception("llmguard shadow call failed")
            return
        self._compare(served, shadow, segment)

    def _call(self, request: ChatRequest, scope: Scope) -> ChatResponse:
        """The candidate's answer to ``request``, the call run under an :class:`Abort` that
        :meth:`close` fires (its socket shut down, its retries' waits cut short)."""
        guard = self._shadow_guard()
        headers = {
            k: v for k, v in (request.extra_headers or {}).items() if not v.startswith("llmguard-")
        }  # the served call's idempotency key stays with it
        request = request.model_copy(update={"extra_headers": headers or None})
        abort = Abort()
        with self._lock:  # (a close that set _stop before this lock: aborted here)
            self._abort = abort
            if self._stop.is_set():
                abort.abort()
        try:
            with abortable(abort):
                return guard.chat(
                    request=request, tenant=scope.tenant, feature=scope.feature,
                    user=scope.user, timeout=self.policy.timeout, cacheable=False,
                )  # fmt: skip
        finally:
            with self._lock:
                self._abort = None

    def _shadow_guard(self) -> Guard:
        """The Guard the shadow's calls go through (built at the first)."""
        return self._guard or self._build()

    def _build(self) -> Guard:
        from ..guard import Guard
        from .release import ReleasePlan

        assert self._plan.candidate is not None
        # warn_days far below zero: the serving Guard already warns about these models
        plan = ReleasePlan(self._plan.candidate, warn_days=-(10**9), prices=self._prices)
        guard = Guard(
            release=plan, store="memory", telemetry=self._telemetry or False, environ={},
            prices=self._prices, hooks=[self._unanswered],
        )  # fmt: skip
        controls = guard._stages.releases
        if controls is not None:
            controls._fixed_arm = "shadow"
        self._guard = guard
        return guard

    def _unanswered(self, event: CallEvent) -> None:
        """Count what a shadow call that got no answer cost (its attempts that went out: a
        timeout after the request was sent bills its input) against the spend cap."""
        if event.outcome != "ok" and event.cost_usd:
            with self._lock:
                self._spent += event.cost_usd

    def _compare(self, served: ChatResponse, shadow: ChatResponse, segment: str) -> None:
        verdicts: dict[str, bool | None] = {}
        for name, comparator in self.comparators.items():
            try:
                verdicts[name] = comparator(served, shadow)
            except Exception:
                logger.exception("llmguard shadow comparator %r failed", name)
                verdicts[name] = None
        with self._lock:
            self._spent += shadow.cost_usd or 0.0
            self._overall.add(verdicts)
            if segment not in self._segments and len(self._segments) >= _MAX_SEGMENTS:
                segment = "other"
            self._segments.setdefault(segment, _Tally()).add(verdicts)

    def report(self) -> dict[str, Any]:
        """Pairs compared, what was dropped or skipped and why, what the shadow spent, and
        the share of pairs each comparator found in agreement, overall and per segment."""
        with self._lock:
            return {
                **self._counts,
                "pairs": self._overall.pairs,
                "spent_usd": round(self._spent, 9),
                "agreement": self._overall.shares(),
                "segments": {
                    name: {"pairs": tally.pairs, "agreement": tally.shares()}
                    for name, tally in sorted(self._segments.items())
                },
            }

    def drain(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the queue to empty (for tests and benches)."""
        deadline = time.monotonic() + timeout
        while self._queue.unfinished_tasks:  # (looked at once at least: ``drain(0)`` too)
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)
        return True

    def close(self) -> None:
        """Stop the worker and close its Guard. Nobody waits for a shadow's answers: the
        call in flight is abandoned (its socket shut down, its retries' waits cut short;
        waited for at most 1 s, or the shadow's timeout if less) and those queued dropped,
        each counted in ``abandoned_at_close``."""
        self._stop.set()
        with self._lock:
            abort = self._abort
        if abort is not None:
            abort.abort()
        thread = self._thread  # (as it ends, it drops what is queued and closes its Guard)
        if thread is None:
            return
        grace = min(_CLOSE_GRACE_S, self.policy.timeout)
        thread.join(timeout=grace)
        if thread.is_alive():  # a call through a provider that registered no way to stop it
            logger.warning(
                "llmguard shadow: its call in flight did not stop within %g s of the close; "
                "it ends by the shadow's timeout (%g s), in the background", grace,
                self.policy.timeout,
            )  # fmt: skip

    def _drop_queued(self) -> None:
        """Drop the calls still queued (the worker is ending): none of them is sent."""
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                return
            self._queue.task_done()
            with self._lock:
                self._counts["abandoned_at_close"] += 1
