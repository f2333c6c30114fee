"""Guardrails run: each input or output filter's answer (its replacement, validated, or
``None`` to keep what it got), a refusal raised with its ``stage``, and an async filter's wait
bounded by the call's deadline.

A chain of filters is a small plan (a generator): it yields each awaitable a filter returned
(an ``async def`` filter, or a plain one returning an awaitable) as a :class:`Pending` and
receives its result, or has its error thrown in. :func:`run` drives a plan in sync calls: an
awaitable runs on the process's one filter loop, in a daemon thread, which the call waits for
until its deadline (then abandons it, cancelled), so that a sync call made inside a running
event loop works too, and a client a filter keeps serves every sync call. :func:`arun` drives
it in async calls: awaited on the caller's event loop under a cancel scope that ends at the
deadline, so other tasks run while it waits. A filter that waits past the deadline fails the
call with :class:`~llmguard_sdk.errors.ProviderTimeoutError`. Sync filters run where the call
runs, as before: a chain of them yields nothing (no thread, no loop).

An async filter that calls blocking code (``time.sleep`` in an ``async def``) holds the
shared filter loop: no other sync call's async filter runs meanwhile. Each sync call waits
for its own filter until its own deadline (and a grace), then fails with
:class:`~llmguard_sdk.errors.ProviderTimeoutError`; a call whose wait ends so finds out
whether the loop still turns (a callback posted at its deadline ran within the grace), and
if it does not, the loop is given up: later calls get a fresh one, and the old one runs on
until the waits it has left end (each finishes, or ends at its call's deadline), then shuts
down as ``asyncio.run()``'s loop does at its end: the async generators still open on it are
closed (a :class:`~llmguard_sdk.PerLoop` object kept there, and a filter's own unfinished
generator, whose ``finally`` runs), waited for 10 s at most. A client a filter kept on it
fails on the fresh one with a :class:`~llmguard_sdk.errors.ConfigurationError` that says
so. At interpreter exit the loop is shut down the same way (the waits it has left
cancelled: a daemon thread's sync call still waiting never ends, the thread dying with the
process), and so are loops given up that still wait for calls' filters, waited for 5 s at
most in all. A loop held by a sync call that a filter made
(``guard.chat`` in an ``async def`` filter) is not given up: that call is bounded by its own
deadline. An interrupt of a sync call's wait (Ctrl-C) cancels the filter's task and is
thrown into the plan, as an async call's cancellation is: the call is reported as cancelled.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import contextvars
import inspect
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import anyio
from pydantic import ValidationError

from .._forks import per_process
from .._loops import off_its_loop
from .._problems import problems
from ..errors import (
    ConfigurationError,
    GuardrailRejectedError,
    ProviderTimeoutError,
    RequestValidationError,
)
from ..models import ChatRequest, ChatResponse, validate_request

__all__ = ["Pending", "Plan", "arun", "inputs", "late", "outputs", "resolve", "run"]

T = TypeVar("T")

_GRACE_S = 1.0
"""How long a sync call waits, past its deadline, for a cancelled async filter's wait to end
before it abandons it (a filter that ignores its cancellation)."""


@dataclass(frozen=True)
class Pending:
    """An awaitable a filter returned: what to await, by when (``time.monotonic()``), and
    which filter and stage it is (named in the timeout's message)."""

    awaitable: Awaitable[Any]
    deadline: float
    what: str
    stage: str


Plan = Generator[Pending, Any, T]
"""Filters run in order: yields each :class:`Pending` wait, receives its result."""


def inputs(
    filters: Sequence[Callable[[ChatRequest], Any]], request: ChatRequest, deadline: float
) -> Plan[ChatRequest]:
    """``request`` through the input filters, in order: each replacement validated as the
    caller's request was."""
    return _through(filters, request, "input", deadline)


def outputs(
    filters: Sequence[Callable[[ChatResponse], Any]], response: ChatResponse, deadline: float
) -> Plan[ChatResponse]:
    """``response`` through the output filters, in order: each replacement validated (a
    return of another kind: ConfigurationError)."""
    return _through(filters, response, "output", deadline)


def _through(
    filters: Sequence[Callable[[Any], Any]], value: Any, stage: str, deadline: float
) -> Plan[Any]:
    kind, validated = _KINDS[stage]
    for fn in filters:
        try:
            result = fn(value)
            if result is not None and inspect.isawaitable(result):
                result = yield Pending(result, deadline, f"{stage} filter {fn!r}", stage)
        except GuardrailRejectedError as exc:
            if not exc.stage:
                exc.stage = stage
            raise
        if result is None or result is value:
            continue
        if not isinstance(result, kind):
            raise ConfigurationError(
                f"{stage} filter {fn!r} returned {type(result).__name__}, "
                f"expected {kind.__name__} or None"
            )
        value = validated(fn, result)
    return value


def _filtered_request(input_filter: object, request: Any) -> ChatRequest:
    """An input filter's new request, validated as the caller's was (``model_copy`` builds
    one without validation: dicts for messages, a negative ``max_tokens``, sent as given)."""
    try:
        return validate_request(dict(request))
    except RequestValidationError as exc:
        raise RequestValidationError(
            f"input filter {input_filter!r} returned an invalid request: {exc}", exc.details
        ) from None


def _filtered_response(output_filter: object, response: Any) -> ChatResponse:
    """An output filter's new response, validated (``model_copy`` builds one without
    validation: a ``text`` of None reached the caller and failed the cache's store)."""
    try:
        return ChatResponse.model_validate(dict(response))
    except ValidationError as exc:
        found = "; ".join(problems(exc, "response"))
        raise ConfigurationError(
            f"output filter {output_filter!r} returned an invalid response: {found}"
        ) from None


_KINDS: dict[str, tuple[type[Any], Callable[[object, Any], Any]]] = {
    "input": (ChatRequest, _filtered_request),
    "output": (ChatResponse, _filtered_response),
}
"""Per stage: what its filters return, and how a replacement is validated."""


Outcome = tuple[bool, Any]
"""A wait's end: ``(True, its result)`` or ``(False, its exception)``."""

_STARTED: Outcome = (True, None)


def run(plan: Plan[T]) -> T:
    """Drive ``plan`` in a sync call: each wait on the process's filter loop, in its
    thread, until its deadline."""
    step = _resume(plan, _STARTED)
    while isinstance(step, Pending):
        step = _resume(plan, _blocking(step))
    return step


async def arun(plan: Plan[T]) -> T:
    """Drive ``plan`` in an async call: each wait awaited on the caller's loop until its
    deadline (a cancel of the call is thrown into the plan too: its records see it)."""
    return await _rest(plan, _resume(plan, _STARTED))


def resolve(plan: Plan[T]) -> T | Awaitable[T]:
    """Run ``plan`` here until its first wait: its result, or (it has one) an awaitable that
    goes on from there (a chain of filters acting as one filter: a cascade's checks). The
    caller's driver bounds that awaitable by the deadline."""
    step = _resume(plan, _STARTED)
    return _Rest(plan, step) if isinstance(step, Pending) else step


async def _rest(plan: Plan[T], step: Pending | T) -> T:
    while isinstance(step, Pending):
        step = _resume(plan, await _outcome(_awaited(step)))
    return step


class _Rest(Generic[T]):
    """The rest of a plan (:func:`resolve`), awaitable once; ``step``: the wait it is in,
    which the driver's timeout names (the user's filter, not the chain's)."""

    def __init__(self, plan: Plan[T], step: Pending) -> None:
        self.plan, self.step = plan, step

    def __await__(self) -> Generator[Any, Any, T]:
        return self._run().__await__()

    async def _run(self) -> T:
        step: Pending | T = self.step
        while isinstance(step, Pending):
            self.step = step
            step = _resume(self.plan, await _outcome(step.awaitable))
        return step


def _resume(plan: Plan[T], outcome: Outcome) -> Pending | T:
    """The plan's next wait, or its result, once ``outcome`` is sent (or thrown) in."""
    ok, value = outcome
    try:
        return plan.send(value) if ok else plan.throw(value)
    except StopIteration as stop:
        result: T = stop.value
        return result


async def _outcome(awaitable: Awaitable[Any]) -> Outcome:
    try:
        return True, await awaitable
    except BaseException as exc:  # (thrown into the plan: its refusals and records see it)
        return False, exc


def _late(pending: Pending) -> ProviderTimeoutError:
    """The call's timeout error for a filter that waited past the deadline (an input
    filter's: no request went out; a chain of filters acting as one: the one it waited
    in)."""
    while isinstance(pending.awaitable, _Rest):
        pending = pending.awaitable.step
    error = ProviderTimeoutError(
        f"{pending.what} did not finish within the call's deadline",
        request_sent=pending.stage != "input",
    )
    error._filter_late = True  # (see :func:`late`)
    return error


def late(error: BaseException) -> bool:
    """Whether ``error`` is a filter's wait past the call's deadline: the call's time is
    spent, and the error names the filter (a cascade raises it, where a tier's provider
    errors escalate: the next tier has no time left)."""
    return isinstance(error, ProviderTimeoutError) and error._filter_late


async def _settled(pending: Pending) -> Outcome:
    """:func:`_awaited`'s outcome (one coroutine: a wait cancelled before it began leaves
    none unawaited)."""
    return await _outcome(_awaited(pending))


async def _awaited(pending: Pending) -> Any:
    with anyio.move_on_after(max(0.0, pending.deadline - time.monotonic())):
        return await pending.awaitable
    raise _late(pending)  # (reached only when the deadline cancelled the wait)


def _own_context() -> contextvars.Context:
    """The caller's context variables for the filters' event loop, less the name of the
    async library the caller runs under (a sync call made inside a running loop), which
    would tell anyio that the filters' loop is the caller's."""
    context = contextvars.copy_context()
    sniffio = sys.modules.get("sniffio")
    if sniffio is not None:
        context.run(sniffio.current_async_library_cvar.set, None)
    return context


class _FilterLoop:
    """The process's one event loop for sync calls' async filters, run by a daemon thread
    made on first use (and again in a forked child, which has no such thread): a client a
    filter keeps (an ``httpx.AsyncClient``) stays on the loop it was first used on. A loop
    that a filter's blocking code holds is given up (:meth:`give_up`): the next call makes
    a fresh one (a client kept on the old one then fails there: :func:`_bound_elsewhere`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        # loops given up and still winding down: their _retired task, their thread
        self._retiring: list[tuple[concurrent.futures.Future[None], threading.Thread]] = []
        self.made = 0
        self.exiting = False  # (:meth:`stop` ran: the interpreter exits)
        """How many filter loops this process made (a fork's parent's count too)."""

    def renew(self) -> None:
        """Forget the loop (a forked child: its thread did not come along)."""
        self._lock = threading.Lock()
        self._loop = self._thread = None
        self._retiring = []

    def inside(self) -> bool:
        """Whether a sync call made on this thread must not wait on the shared loop: this
        is the loop's thread (a filter on it made the call), or a thread running a loop of
        its own for such a call (:func:`_on_own_loop`), which the shared loop waits for (a
        wait there: a deadlock until the call's deadline)."""
        return self._thread is threading.current_thread() or getattr(_OWN_LOOP, "on", False)

    def loop(self) -> asyncio.AbstractEventLoop:
        """The running loop (started now if there is none)."""
        loop = self._loop
        if loop is None:
            with self._lock:
                if self._loop is None:
                    loop = asyncio.new_event_loop()
                    self._thread = threading.Thread(
                        target=_serve, args=(loop,), name="llmguard-filters", daemon=True
                    )
                    self._thread.start()
                    self._loop = loop
                    self.made += 1
                loop = self._loop
        return loop

    def submit(self, pending: Pending) -> _Submitted:
        """``pending`` awaited on the running loop, with the caller's context variables:
        never on one given up meanwhile (a given-up loop that stopped ran none of it: the
        call waited until its deadline, or failed with ``Event loop is closed``)."""
        waited = _settled(pending)
        context = _own_context()  # (the task gets the context it is submitted in)
        while True:
            loop = self.loop()
            with self._lock:  # (:meth:`give_up` forgets the loop under it)
                if self._loop is loop:
                    future = context.run(asyncio.run_coroutine_threadsafe, waited, loop)
                    return _Submitted(future, loop, self._thread, self.made)

    def give_up(self, loop: asyncio.AbstractEventLoop) -> None:
        """Forget ``loop`` (if it is still this one): a filter's blocking code holds it. It
        runs on until the waits it has left end (once that code returns: each finishes, or
        ends at its call's deadline), then stops."""
        with self._lock:
            if self._loop is not loop or self._thread is None:
                return  # (given up already)
            retired = asyncio.run_coroutine_threadsafe(_retired(), loop)
            alive = [(task, thread) for task, thread in self._retiring if thread.is_alive()]
            self._retiring = [*alive, (retired, self._thread)]
            self._loop = self._thread = None

    def stop(self) -> None:
        """At interpreter exit: the running loop's tasks cancelled, then its shutdown run
        (:func:`_serve`: a :class:`~llmguard_sdk.PerLoop` object kept on it closed, a
        filter's unfinished generator's ``finally`` run), and so for the loops given up that
        still wait for calls' filters (:func:`_retired`); waited for :data:`_EXIT_S` at most
        in all (a loop that blocking code holds ends with the process, as before)."""
        with self._lock:
            loop, thread = self._loop, self._thread
            retiring, self._retiring = self._retiring, []
            self._loop = self._thread = None
            self.exiting = True
        threads = [held for _, held in retiring]
        for retired, _ in retiring:
            retired.cancel()  # (done already: nothing; else it ends as at exit below)
        if loop is not None and thread is not None:
            with contextlib.suppress(RuntimeError):  # (closed meanwhile)
                asyncio.run_coroutine_threadsafe(_ended(), loop)
            threads.append(thread)
        until = time.monotonic() + _EXIT_S
        for held in threads:
            if held is not threading.current_thread():
                held.join(max(0.0, until - time.monotonic()))


@dataclass(frozen=True)
class _Submitted:
    """A wait submitted to a filter loop: its future, the loop, the loop's thread, and the
    loop's number (1: the process's first)."""

    future: concurrent.futures.Future[Outcome]
    loop: asyncio.AbstractEventLoop
    thread: threading.Thread | None
    number: int


async def _retired() -> None:
    """Stop the running loop (given up) once its other tasks are done; cancelled (at
    interpreter exit: :meth:`_FilterLoop.stop`), once they are cancelled (:func:`_ended`)."""
    this = asyncio.current_task()
    try:
        while others := asyncio.all_tasks() - {this}:
            await asyncio.wait(others)
    except asyncio.CancelledError:
        await _ended()
        return
    asyncio.get_running_loop().stop()


async def _ended() -> None:
    """Stop the running loop at interpreter exit: its other tasks (a daemon thread's sync
    call still waiting) cancelled, and waited for the grace at most."""
    others = asyncio.all_tasks() - {asyncio.current_task()}
    for task in others:
        task.cancel()
    if others:
        await asyncio.wait(others, timeout=_GRACE_S)
    asyncio.get_running_loop().stop()


def _serve(loop: asyncio.AbstractEventLoop) -> None:
    """Run ``loop`` until it is given up and its waits ended; then shut it down as
    ``asyncio.run()`` does at its end (:func:`_shut_down`) and close it."""
    loop.run_forever()
    try:
        _shut_down(loop)
    finally:
        loop.close()  # (its default executor: shut down, not waited for)


def _shut_down(loop: asyncio.AbstractEventLoop) -> None:
    """Close the async generators still open on ``loop`` (``loop.shutdown_asyncgens()``, as
    at ``asyncio.run()``'s end): a :class:`~llmguard_sdk.PerLoop` object kept on it is
    closed (an ``httpx.AsyncClient`` a filter keeps), and so is a generator of a filter's
    left unfinished (its ``finally`` runs). Waited for :data:`_SHUTDOWN_S` at most; a close
    still running then is cancelled, and waited for a grace more."""
    closing = loop.create_task(loop.shutdown_asyncgens())
    loop.run_until_complete(asyncio.wait({closing}, timeout=_SHUTDOWN_S))
    if not closing.done():
        closing.cancel()
        loop.run_until_complete(asyncio.wait({closing}, timeout=_GRACE_S))


_SHUTDOWN_S = 10.0
"""How long a stopped filter loop waits for its async generators' close at most (a
:class:`~llmguard_sdk.PerLoop` object's close is bounded by 5 s of its own)."""

_EXIT_S = 5.0
"""How long interpreter exit waits for the filter loop's shutdown at most (then the process
ends, and the loop's daemon thread with it)."""


_LOOP = _FilterLoop()
_OWN_LOOP = threading.local()
""":func:`_on_own_loop`'s worker threads: ``on`` is True."""
per_process(_LOOP, _FilterLoop.renew)
# ``atexit``, not ``threading``'s own exit hooks: those run before the other threads are
# joined, whose sync calls may still need the loop; ``atexit``'s run once only daemon
# threads are left (a forked child inherits it, and stops its own loop)
atexit.register(_LOOP.stop)


def _blocking(pending: Pending) -> Outcome:
    """``pending`` awaited on the process's filter loop (with the caller's context
    variables), cancelled there at its deadline, waited for a grace past it (then
    abandoned, cancelled again: it ignored its cancellation, or blocking code holds the
    loop, which is then given up). An interrupt of the wait (Ctrl-C) cancels its task and
    is its outcome: thrown into the plan, whose records see it."""
    if _LOOP.inside():  # (that loop waits on this call: a loop of its own, in a thread)
        return _on_own_loop(pending)
    submitted: _Submitted | None = None
    try:
        submitted = _LOOP.submit(pending)
        outcome = _bound_elsewhere(_waited(submitted, pending), pending, submitted.number)
    except BaseException as exc:  # interrupted (KeyboardInterrupt): its filter cancelled
        if submitted is not None:
            submitted.future.cancel()
        outcome = False, exc
    ok, error = outcome
    if not ok and _LOOP.exiting and isinstance(error, _CANCELLED):
        _until_exit()
    return outcome


_CANCELLED = (asyncio.CancelledError, concurrent.futures.CancelledError)


def _until_exit() -> None:
    """A daemon thread's wait that the interpreter's exit cancelled (:meth:`_FilterLoop.stop`)
    never ends: the thread dies with the process, as daemon threads do, its call neither
    returning nor raising that cancellation (a ``CancelledError`` out of a sync call, its
    traceback on stderr as the process ends)."""
    if threading.current_thread().daemon:
        threading.Event().wait()


def _waited(submitted: _Submitted, pending: Pending) -> Outcome:
    """The wait's outcome, waited for until ``pending``'s deadline, then for the grace; a
    loop that did not run a callback posted at the deadline within the grace is held by
    blocking code: given up (not while its thread is in a sync call a filter made: that
    call holds it, bounded by its own deadline)."""
    future, loop = submitted.future, submitted.loop
    try:
        return future.result(max(0.0, pending.deadline - time.monotonic()))
    except concurrent.futures.TimeoutError:
        pass
    turned = threading.Event()
    with contextlib.suppress(RuntimeError):  # (closed: given up, and its waits ended)
        loop.call_soon_threadsafe(turned.set)
    try:
        return future.result(_GRACE_S)
    except concurrent.futures.TimeoutError:
        future.cancel()
        if not turned.is_set() and not _in_a_nested_call(submitted.thread):
            _LOOP.give_up(loop)
        return False, _late(pending)


def _in_a_nested_call(thread: threading.Thread | None) -> bool:
    """Whether ``thread`` (a filter loop's) is in a sync call of this library that a filter
    made (``guard.chat`` inside an ``async def`` filter): a frame of this package lies
    between its innermost frame and the filter's wait (else the filter's own code holds
    the loop, or code it calls)."""
    frame = None if thread is None else sys._current_frames().get(thread.ident or -1)
    while frame is not None and frame.f_code not in _WAITS:
        if frame.f_globals.get("__name__", "").startswith(_PACKAGE):
            return True
        frame = frame.f_back
    return False


_PACKAGE = __name__.split(".", 1)[0] + "."
_WAITS = {_awaited.__code__, _outcome.__code__, _Rest._run.__code__}
"""The frames that await a filter on the loop (:func:`_settled`'s, a chain's)."""


def _bound_elsewhere(outcome: Outcome, pending: Pending, number: int) -> Outcome:
    """``outcome``, but a filter's loop error on a filter loop that is not the process's
    first (one was given up, or the process forked) as a
    :class:`~llmguard_sdk.errors.ConfigurationError` that says why: a client the filter
    keeps is tied to the loop it was first used on (``Event loop is closed``)."""
    ok, error = outcome
    if ok or number == 1 or not off_its_loop(error):
        return outcome
    problem = ConfigurationError(
        f"{pending.what} failed on the filter loop of sync calls ({error}): it is not the "
        "loop the filter first ran on (that one was given up, as a filter's blocking code "
        "held it, or the process forked), and a client the filter keeps (an "
        "httpx.AsyncClient) is tied to the loop it was first used on. Keep one per event "
        "loop: llmguard_sdk.PerLoop(factory).get() in the filter"
    )
    problem.__cause__ = error
    return False, problem


def _on_own_loop(pending: Pending) -> Outcome:
    """``pending`` awaited on an event loop of its own in a worker thread, waited for until
    its deadline and the grace (a sync call made by its filter there: a loop of its own
    too, as the shared loop waits for this one)."""
    ended: list[Outcome] = []

    def wait() -> None:
        _OWN_LOOP.on = True  # (a sync call made by its filter: a loop of its own too)
        try:
            ended.append(anyio.run(_outcome, _awaited(pending)))
        except BaseException as exc:  # (no event loop could run it)
            ended.append((False, exc))

    worker = threading.Thread(
        target=_own_context().run, args=(wait,), name="llmguard-filter", daemon=True
    )
    worker.start()
    worker.join(max(0.0, pending.deadline - time.monotonic()) + _GRACE_S)
    return ended[0] if ended else (False, _late(pending))
