"""A Guard's releases at work: each call's arm chosen when it starts (:meth:`ReleaseControl.
assign`), its outcome counted when it ends (:meth:`ReleaseControl.observe`), the counters
exchanged with the store and the canary decided in a background thread, retiring models
warned about.

Private: :class:`~llmguard_sdk.Guard` builds one from its ``release=`` argument; users reach
it as ``guard.releases``.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import random
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from .._ids import UniqueIds
from .._state.stores import Outage, RedisStore, Store, redis_errors
from ..budget._reserve import with_output_limit
from ..budget.prices import PriceTable
from ..context import CallContext
from ..errors import (
    AllRoutesFailedError,
    BudgetExceededError,
    ConfigurationError,
    GuardrailRejectedError,
    RateLimitExceededError,
    RequestValidationError,
    StoreUnavailableError,
)
from ..models import ChatResponse
from ..providers.base import Provider
from ..router import DeploymentGroup
from .backends import MemoryReleaseBackend, RedisReleaseBackend, ReleaseBackend
from .policy import (
    CanaryPolicy,
    Stage,
    decide,
    in_canary,
    observation,
    promoted,
    rolled_back,
)
from .release import (
    Arm,
    Release,
    ReleaseEvent,
    ReleasePlan,
    read_clock,
    retirements,
    warn_unpriced,
)
from .stored import move_by_hand, status_of

if TYPE_CHECKING:
    from ..telemetry import Telemetry
    from .shadow import Shadow

__all__ = ["ReleaseControl", "entries"]

logger = logging.getLogger("llmguard_sdk")
_FEEDBACK_MEMORY = 10_000  # calls whose arm feedback can still find
_CALL_IDS = UniqueIds(random_digits=8)  # an answer's call_id where telemetry gave none
_CHECK_EVERY_S = 3600.0  # retirement checks
_HOLD_FLUSHES = 10  # flush intervals a candidate holds its canary's key after an exchange


def entries(plan: ReleasePlan) -> tuple[Provider | DeploymentGroup, ...]:
    """The Guard's chain: the release's routes, then the candidate's (each object once)."""
    if not isinstance(plan, ReleasePlan):
        raise ConfigurationError(f"release must be a Release or a ReleasePlan, got {plan!r}")
    seen: list[Provider | DeploymentGroup] = []
    for release in (plan.release, plan.candidate):
        for entry in release.routes if release is not None else ():
            if not any(entry is other for other in seen):
                seen.append(entry)
    return tuple(seen)


class ReleaseControl:
    """See the module docs. ``backend``: where the canary's stage lives (default: the
    store's kind); ``arm``: ``"shadow"`` for the Guard a shadow sends its calls through."""

    def __init__(
        self,
        plan: ReleasePlan,
        store: Store,
        prices: PriceTable | None,
        telemetry: Telemetry | None,
        *,
        backend: ReleaseBackend | None = None,
        arm: Arm | None = None,
    ) -> None:
        from .._core.routing import Routing

        self.plan = plan
        self.prices = plan.prices or prices or PriceTable.default_table()
        self.policy: CanaryPolicy | None = plan.canary
        self._telemetry = telemetry
        self._fixed_arm = arm
        self._routing = {r.id: Routing(r.routes) for r in (plan.release, plan.candidate) if r}
        self._lock = threading.Lock()
        self._flushing = threading.Lock()
        # per stage version: the control's and the canary's counters taken under it
        self._pending: dict[int, tuple[dict[str, float], dict[str, float]]] = {}
        self._stage: Stage | None = None
        self._waits_for: str | None = None  # another candidate holding the canary's key
        self._arms: OrderedDict[str, tuple[Arm, int]] = OrderedDict()  # (arm, stage version)
        self._rng = random.Random()
        self._warned: set[tuple[str, dt.date, dt.date]] = set()
        self._next_check = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.backend: ReleaseBackend | None = backend
        if self.policy is not None and backend is None:
            if isinstance(store, RedisStore):
                self.backend = RedisReleaseBackend(store)
            else:
                self.backend = MemoryReleaseBackend(plan.clock)
                logger.warning(
                    "llmguard release: the canary of %r is kept in this process's memory: a "
                    "restart starts it again at its first stage (a promoted candidate too), and "
                    "each process runs its own; give the Guard a Redis store to keep and share it",
                    plan.store_key,
                )  # fmt: skip
        self._outage = Outage(
            "releases", "keeping the last canary stage",
            store if isinstance(store, RedisStore) else None,
        )  # fmt: skip
        if self.policy is not None and plan.candidate is not None:
            warn_unpriced(
                (plan.release, plan.candidate), self.prices, "canary", "their calls have no "
                "cost, so the canary's costly check (cost_tolerance) never trips; add the price "
                "(PriceTable.with_prices)",
            )  # fmt: skip
        self.shadow: Shadow | None = None
        if plan.shadow is not None and arm is None:
            from .shadow import Shadow

            self.shadow = Shadow(plan, telemetry, self.prices)
        self.check_retirements()

    # -- the call path ----------------------------------------------------------------------

    def serving(self, key: str | None, stage: Stage | None = None) -> tuple[Release, Arm]:
        """The release a call with sticky id ``key`` is served by at ``stage`` (default: the
        stage now), and its arm."""
        plan, policy = self.plan, self.policy
        stage = self._stage if stage is None else stage
        if self._fixed_arm is not None:
            return plan.release, self._fixed_arm
        if plan.candidate is None or stage is None or policy is None:
            return plan.release, "control"
        share = stage.share(policy)
        if share >= 1.0:
            return plan.candidate, "control"
        if share <= 0.0:
            return plan.release, "control"
        inside = (
            in_canary(f"{plan.store_key}:{key}", share)
            if key is not None
            else self._rng.random() < share
        )
        return (plan.candidate, "canary") if inside else (plan.release, "control")

    def assign(self, ctx: CallContext, prices: PriceTable | None = None) -> None:
        """Choose the call's release and arm: its routes, parameters and prompt."""
        if time.monotonic() >= self._next_check:
            self.check_retirements()
        if self._thread is None:
            self._start()  # the first call starts the exchange with the store
        sticky = self.policy.sticky_by if self.policy is not None else "user"
        key = ctx.scope.user if sticky == "user" else ctx.scope.tenant
        stage = self._stage  # (read once: the arm and the stage its outcome counts under)
        release, arm = self.serving(key, stage)
        ctx.release, ctx.arm, ctx.base_request = release.id, arm, ctx.request
        ctx.stage_version = stage.version if stage is not None else None
        ctx.prompt_version = release.prompt_version
        ctx.request = release.apply(ctx.request)  # before a ranking counts its tokens
        ctx.route_order = self._routing[release.id].ranked(ctx, prices)
        if arm == "canary" and self.plan.fallback_to_current:  # after the candidate's routes
            own = {route.name for route in ctx.route_order}
            current = self._routing[self.plan.release.id].ranked(ctx, prices)
            ctx.fallback_routes = tuple(r for r in current if r.name not in own)
            ctx.route_order += ctx.fallback_routes
        ctx.cache_tags = (f"release:{release.id}",)

    def fall_back(self, ctx: CallContext) -> bool:
        """Serve the canary call ``ctx`` from the current release from now on (its
        candidate's routes all failed, or refused its request as wrong; its fallback routes
        are next): the request becomes the
        one the current release shapes from the call's own (its prompt and parameters; an
        output limit the Guard set or lowered, a budget's, is kept), and the call's release,
        prompt version and release cache tag become the current release's (what telemetry
        records; the arm stays the canary's, which counts the candidate's failure). False,
        nothing changed, for a call that is not a canary call still on its candidate."""
        current, candidate = self.plan.release, self.plan.candidate
        base = ctx.base_request
        if ctx.arm != "canary" or candidate is None or ctx.release != candidate.id or base is None:
            return False
        request = current.apply(base)
        limit, own = ctx.request.most_output, request.most_output
        bounded = limit is not None and limit != candidate.apply(base).most_output
        if bounded and limit is not None and (own is None or own > limit):
            request = with_output_limit(request, limit)  # the Guard's bound, kept
        tag = f"release:{candidate.id}"
        ctx.cache_tags = tuple(f"release:{current.id}" if t == tag else t for t in ctx.cache_tags)
        ctx.request, ctx.release, ctx.prompt_version = request, current.id, current.prompt_version
        ctx.input_count = None  # counted anew, from the request sent now
        ctx.route_counts.clear()
        ctx.tokenizer_counts.clear()
        return True

    def observe(
        self,
        ctx: CallContext,
        response: ChatResponse | None,
        error: BaseException | None,
        cancelled: bool,
    ) -> None:
        """Count a finished call on its arm; offer it to the shadow. A call its caller
        cancelled (a timeout of the caller's own) counts as a call that took at least as
        long as it ran: a candidate that hangs is slow, not unseen."""
        if ctx.arm is None:
            return
        stage = self._stage
        version = ctx.stage_version  # the stage the call was served at: its evidence
        counted = (
            stage is not None and stage.status == "canary" and ctx.arm in ("control", "canary")
        )
        if cancelled:
            if counted:
                delta = observation(ctx.elapsed(), None, failed=False, rejected=False)
                self._count(ctx.arm, version, delta, None)
            return
        # every route of the arm failed: an answer stood in, or the call went on to the
        # current release's routes (served there, or refused there: by a budget, say)
        stood_in = _stood_in(ctx, response) or _fell_back(ctx, response, self.plan.release.id)
        if response is not None and response.metadata.get("cache") and not stood_in:
            return  # a cache hit says nothing about the release
        call_id = response.metadata.get("call_id") if response is not None else None
        if response is not None and call_id is None:  # (telemetry off: feedback needs one)
            call_id = response.metadata["call_id"] = _CALL_IDS.next()
        if counted and not _refused_by_guard(ctx, error, stood_in):
            rejected = isinstance(error, GuardrailRejectedError) and error.stage == "output"
            # the user's own fault (a bad request) or a spend budget is no sign of the arm's
            failed = stood_in or (
                error is not None
                and not isinstance(error, (RequestValidationError, BudgetExceededError))
            )
            if error is None or rejected or failed:
                cost = response.cost_usd if response is not None else None
                delta = observation(ctx.elapsed(), cost, failed=failed, rejected=rejected)
                # (an answer that stood in, the current release's say, is not the arm's: its
                # feedback says nothing of the arm)
                self._count(ctx.arm, version, delta, None if stood_in else call_id)
        # the release's calls only: a promoted candidate's would be shadowed to itself; and
        # none to a candidate rolled back (the canary found it bad: its calls cost, for nothing)
        shadowed = ctx.arm == "control" and ctx.release == self.plan.release.id
        shadowed = shadowed and (stage is None or stage.status != "rolled_back")
        if self.shadow is not None and shadowed and response is not None and not stood_in:
            self.shadow.offer(ctx, response)

    def _count(
        self, arm: Arm, version: int | None, delta: Mapping[str, float], call_id: Any
    ) -> None:
        """Add ``delta`` to ``arm``'s counters of the stage at ``version`` (the call's; None:
        served before any stage was read, nothing counted)."""
        if version is None:
            return
        with self._lock:
            counters = self._pending.setdefault(version, ({}, {}))[0 if arm == "control" else 1]
            for name, value in delta.items():
                counters[name] = counters.get(name, 0.0) + value
            if isinstance(call_id, str):
                self._arms[call_id] = (arm, version)
                if len(self._arms) > _FEEDBACK_MEMORY:
                    self._arms.popitem(last=False)

    def feedback(self, call_id: str, score: float) -> bool:
        """Count a feedback score on the arm of the call ``call_id`` (if remembered): one a
        call, the first (each is a trial of the test: one user's repeated presses on one
        answer, or a grader retried, were as many scores, enough to roll a candidate back),
        and only while the stage the call was served at lasts (a score for a call of a stage
        since promoted is no evidence of the next one). Whether it counted.

        Raises:
            RequestValidationError: ``call_id`` is not a string, or ``score`` not a finite
                number (nothing is counted).
        """
        if not isinstance(call_id, str):  # (a list raised TypeError: unhashable)
            raise RequestValidationError(f"feedback call_id must be a string, not {call_id!r}")
        if isinstance(score, bool) or not (isinstance(score, int | float) and math.isfinite(score)):
            raise RequestValidationError(f"feedback score must be a finite number, not {score!r}")
        if self.policy is None:
            return False
        with self._lock:  # (taken: a second score for the call finds it no more)
            served = self._arms.pop(call_id, None)
        stage = self._stage
        if served is None or stage is None or stage.version != served[1]:
            return False  # (a call served at a stage since moved on: no evidence of this one)
        low = 1.0 if score < self.policy.feedback_threshold else 0.0
        # under the stage the call was served at (its share, its counters)
        self._count(served[0], served[1], {"fb": 1.0, "fb_low": low}, None)
        return True

    # -- the background exchange --------------------------------------------------------------

    def _start(self) -> None:
        if self._thread is None and self.backend is not None and not self._stop.is_set():
            with self._lock:
                if self._thread is None:
                    self._thread = threading.Thread(
                        target=self._loop, name="llmguard-canary", daemon=True
                    )
                    self._thread.start()

    def _loop(self) -> None:
        assert self.policy is not None
        while not self._stop.is_set():
            try:
                self.flush()
            except Exception:  # the next round tries again; calls go on meanwhile
                logger.exception("llmguard releases: exchanging canary counters failed")
            self._stop.wait(self.policy.flush_interval)

    def flush(self) -> Stage | None:
        """Send this process's counters, read the stage, decide; the stage now."""
        with self._flushing:  # one exchange at a time: stages are taken in order
            return self._flush()

    def _flush(self) -> Stage | None:
        backend, policy, candidate = self.backend, self.policy, self.plan.candidate
        if backend is None or policy is None or candidate is None:
            return None
        if not self._outage.up():  # the counters wait for Redis, counted under their stage
            return self._stage
        with self._lock:  # the counters of the stage now; those of stages before it are
            # no evidence of it (the store would drop them too: their stage moved on)
            version = self._stage.version if self._stage is not None else 0
            control, canary = self._pending.pop(version, ({}, {}))
            self._pending.clear()
        try:
            found = backend.exchange(
                self.plan.store_key, candidate.id, version, control, canary, policy.stages,
                hold=_HOLD_FLUSHES * policy.flush_interval, min_calls=policy.min_calls,
            )  # fmt: skip
            stage = self._own(found.stage)
            decision = decide(stage, found.control, found.canary, policy) if stage else None
            if stage is not None and decision is not None:
                now = read_clock(self.plan.clock)
                new = (
                    rolled_back(stage, decision.reason, now)
                    if decision.action == "rollback"
                    else promoted(stage, policy, decision.reason, now)
                )
                _, stage = backend.transition(
                    self.plan.store_key, stage.version, new.index, new.status, new.reason,
                    candidate.id,
                )  # fmt: skip
        except redis_errors() as exc:
            self._outage.failed(exc)
            return self._stage
        self._moved(stage)
        return stage

    def _own(self, stage: Stage | None) -> Stage | None:
        """``stage`` if it is the plan's candidate's canary; None (serve the release, count
        nothing) while another candidate's holds the key, said once a wait."""
        candidate = self.plan.candidate.id if self.plan.candidate is not None else ""
        if stage is None or stage.candidate == candidate:
            self._waits_for = None
            return stage
        if self._waits_for != stage.candidate:
            self._waits_for = stage.candidate
            logger.info(
                "llmguard release: the canary under %r is %s's, whose Guards still serve it: "
                "%s waits for them to stop (its calls are served by %s)",
                self.plan.store_key, stage.candidate, candidate, self.plan.release.id,
            )  # fmt: skip
        return None

    def _moved(self, stage: Stage | None) -> None:
        """Take ``stage`` as this process's; tell the hooks when it changed."""
        before, self._stage = self._stage, stage
        if stage is None or before is None or stage.version == before.version:
            return
        if (stage.index, stage.status) == (before.index, before.status):
            return
        kind: Literal["promoted", "rolled_back", "stage"] = (
            stage.status if stage.status != "canary" else "stage"
        )
        share = stage.share(self.policy) if self.policy is not None else 0.0
        self.emit(ReleaseEvent(kind, stage.candidate, f"share {share:g}: {stage.reason}"))

    def start_now(self) -> None:
        """Read the stage from the store now (a Guard's first call starts the background
        exchange; until its first answer, calls are served by the current release)."""
        self.flush()
        self._start()

    # -- events -------------------------------------------------------------------------------

    def emit(self, event: ReleaseEvent) -> None:
        """Log ``event``, count it in telemetry, give it to the plan's hooks."""
        level = logging.WARNING if event.kind in ("retiring", "rolled_back") else logging.INFO
        logger.log(level, "llmguard release %s: %s %s", event.kind, event.release, event.detail)
        if self._telemetry is not None:
            self._telemetry.on_release_event(event)
        for hook in self.plan.hooks:
            try:
                hook(event)
            except Exception:
                logger.exception("llmguard release hook %r failed", hook)

    def check_retirements(self) -> None:
        """Warn (once a day per model) about pinned models retiring within ``warn_days``."""
        self._next_check = time.monotonic() + _CHECK_EVERY_S
        if self._fixed_arm is not None:
            return
        now = read_clock(self.plan.clock)  # (a ConfigurationError as the Guard is built)
        today = dt.datetime.fromtimestamp(now, dt.timezone.utc).date()
        with self._lock:  # earlier days' marks (one a model a day, for good) are done with
            for old in [mark for mark in self._warned if mark[2] != today]:
                self._warned.discard(old)
        for release, route, day in retirements(self.plan, self.prices, today):
            mark = (route.model or "", day, today)
            with self._lock:  # two threads checking at once warn once
                if mark in self._warned:
                    continue
                self._warned.add(mark)
            left = (day - today).days
            when = f"in {left} days" if left >= 0 else f"{-left} days ago"
            detail = f"route {route.name!r}: model {route.model} retires {day} ({when})"
            self.emit(ReleaseEvent("retiring", release.id, detail, route.model, day))

    # -- by hand ------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """The canary's stage and each arm's guardrail figures, one shape whatever the plan:
        ``key`` (the name the stage is stored under), ``release`` (the current release's id)
        and ``canary``: ``None`` when the plan has no canary or none is stored yet, else the
        stage (its ``min_calls`` too), with ``control``, ``candidate`` (each arm's figures;
        ``calls_needed``: the calls it still serves before the stage can be promoted, ``None``
        once the canary ended), ``log_likelihood_ratios`` and ``bound`` beside it (see
        :func:`status_of`).

        Raises:
            StoreUnavailableError: the canary lives in Redis, which could not be reached.
        """
        release = self.plan.release.id
        if self.backend is None or self.policy is None:
            return {"key": self.plan.store_key, "release": release, "canary": None}
        try:
            return status_of(self.backend, self.plan.store_key, self.policy, release=release)
        except redis_errors() as exc:
            raise self._unreachable("its status was not read", exc) from exc

    def promote(self) -> Stage:
        """Move the canary to its next stage now, in every process (a rolled-back one: back
        to the stage it was rolled back from).

        Raises:
            StoreUnavailableError: Redis could not be reached (nothing was moved).
            CanaryNotFoundError: no canary is under way any more (its state expired: 30 days
                without an exchange of a serving Guard or a move; nothing was moved).
            ReleaseConflictError: other processes kept moving it (nothing was moved).
        """
        return self._move("promote")

    def rollback(self) -> Stage:
        """Send every call back to the release now, in every process.

        Raises:
            StoreUnavailableError: Redis could not be reached (nothing was moved).
            CanaryNotFoundError: no canary is under way any more (see :meth:`promote`).
            ReleaseConflictError: other processes kept moving it (nothing was moved).
        """
        return self._move("rollback")

    def _move(self, action: str) -> Stage:
        canary = self._canary()
        with self._flushing:
            if self._stage is None:  # before the first call: its candidate is stored first
                self._flush()
            try:
                stage = move_by_hand(*canary, action)
            except redis_errors() as exc:
                done = "rolled back" if action == "rollback" else "promoted"
                raise self._unreachable(f"it was not {done}", exc) from exc
            self._moved(self._own(stage))  # (another candidate's, moved by hand: not ours)
        return stage

    def _unreachable(self, what: str, exc: Exception) -> StoreUnavailableError:
        """The error of a move or read by hand that Redis did not answer (its pause noted)."""
        self._outage.failed(exc)
        key = self.plan.store_key
        return StoreUnavailableError(f"the canary under {key!r}: {what}, {self._outage.why(exc)}")

    def _canary(self) -> tuple[ReleaseBackend, str, CanaryPolicy]:
        if self.backend is None or self.policy is None:
            raise ConfigurationError("this Guard's release plan has no canary")
        return self.backend, self.plan.store_key, self.policy

    def close(self) -> None:
        """Stop the background exchange (one last one) and the shadow."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
            try:
                self.flush()
            except Exception:
                logger.exception("llmguard releases: the last canary exchange failed")
        if self.shadow is not None:
            self.shadow.close()


_OWN_REFUSALS = (RateLimitExceededError, BudgetExceededError)


def _refused_by_guard(ctx: CallContext, error: BaseException | None, stood_in: bool) -> bool:
    """Whether the Guard itself refused the call (its own rate limiter, a per-tenant limit
    say, or a spend budget) on every route it tried: no sign of the arm's health. A
    provider's 429 (:class:`~llmguard_sdk.errors.RateLimitedError`) is the route failing."""
    if isinstance(error, _OWN_REFUSALS) and not stood_in:
        return True  # (after the arm's routes failed: theirs is the sign, below)
    if not isinstance(error, AllRoutesFailedError) and not stood_in:
        return False  # served (after any route the limiter skipped), or failed on its own
    fallback = {route.name for route in ctx.fallback_routes}  # (the arm's routes' errors)
    errors = [e for name, e in ctx.route_errors.items() if name not in fallback]
    return bool(errors) and all(isinstance(e, _OWN_REFUSALS) for e in errors)


def _fell_back(ctx: CallContext, response: ChatResponse | None, current: str) -> bool:
    """Whether the call went on to its fallback routes, the arm's own routes all failed: a
    canary call served by the current release's routes (``response`` came from one), or
    made the current release's (``current``: its id) and ended there without an answer."""
    if ctx.arm == "canary" and ctx.fallback_routes and ctx.release == current:
        return True  # (see ReleaseControl.fall_back)
    served = ctx.route if response is not None else None
    return served is not None and any(r.name == served for r in ctx.fallback_routes)


def _stood_in(ctx: CallContext, response: ChatResponse | None) -> bool:
    """Whether ``response`` stood in for routes that all failed: the Guard's degraded answer,
    or a stale cached one (stale-if-error) after the routes' errors."""
    if response is None:
        return False
    return bool(response.metadata.get("degraded")) or bool(
        response.metadata.get("cache") and ctx.route_errors
    )
