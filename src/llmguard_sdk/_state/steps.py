"""Decisions as steps, run together: what every stage's state operation is made of.

Each stage's decision is a *step* (a generator that yields the Lua script :class:`Command`
it needs and receives the answer); a :class:`Batch` runs the steps of many stages together,
one pipeline per round, so a guarded call waits for Redis twice: once before its provider
call and once after.

Private: the machinery behind every backend. Nothing here imports redis until a
:class:`Batch` sends commands to a Redis store.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Awaitable, Callable, Coroutine, Generator, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Concatenate, TypeAlias, TypeVar, cast

import anyio
import anyio.to_thread
from typing_extensions import ParamSpec

from .._loops import on_asyncio
from .bounds import answered_by, left, out_of_time, ran_out
from .connections import closed_under, resends_bounded
from .health import tag
from .lag import judged, lags

if TYPE_CHECKING:
    import redis.asyncio

    from .stores import RedisStore

__all__ = [
    "Batch",
    "Call",
    "Command",
    "Outcome",
    "Pause",
    "Step",
    "answer",
    "arun",
    "awaiting",
    "blocking",
    "bounded",
    "done",
    "entry_points",
    "in_place",
    "run",
    "start",
    "work",
]

T = TypeVar("T")
S = TypeVar("S")
P = ParamSpec("P")

Step: TypeAlias = Generator[Any, Any, T]
"""One decision of a stage, written as a generator: it yields what it needs (a
:class:`Command`, a tuple of them, a :class:`Pause` or a :class:`Call`), receives the answer
(a Redis error is thrown into it) and returns its result. :class:`Batch` runs many at once."""


@dataclass(frozen=True)
class Command:
    """One Lua script call of a decision: EVALSHA of ``source`` on ``store``, with ``keys``
    (one hash tag) and ``args``. Built by :meth:`RedisScripts.command`. ``by``: a
    :func:`time.monotonic` instant past which its answer is not worth waiting for (see
    :mod:`._state.bounds`; ``None``: as long as the store's timeouts let it)."""

    store: RedisStore
    source: str
    sha: str
    keys: tuple[str, ...]
    args: tuple[Any, ...]
    by: float | None = None


def bounded(command: Command, by: float | None) -> Command:
    """``command``, its answer waited for until ``by`` at most (``None``: ``command``)."""
    return command if by is None else dataclasses.replace(command, by=by)


@dataclass(frozen=True)
class Pause:
    """Wait ``seconds`` before the step goes on (bounded by the step itself)."""

    seconds: float


@dataclass(frozen=True)
class Call:
    """Work outside Redis with a sync and an async way to do it (a memory backend's method
    and its async twin; blocking work, run in a worker thread by async code)."""

    sync: Callable[[], Any]
    aio: Callable[[], Awaitable[Any]]


def work(fn: Callable[[], T]) -> Call:
    """A :class:`Call` for blocking work: inline in sync code, in a worker thread in async."""

    async def in_thread() -> T:
        return await anyio.to_thread.run_sync(fn)

    return Call(fn, in_thread)


def answer(command: Command) -> Step[Any]:
    """A step that sends ``command`` alone and returns its answer (a Redis error is raised)."""
    return (yield command)


def done(value: T) -> Step[T]:
    """A step that needs nothing: it returns ``value``."""
    return value
    yield  # pragma: no cover - makes this a generator


# -- an operation written once: its steps, and the entry points derived from them ------------
#
# A backend writes each operation once. Redis backends write it as steps (``x_steps``) and
# derive ``x, ax = entry_points(x_steps)``; in-process backends write the plain method ``x``
# (it never waits) and derive ``x_steps, ax = in_place(x)``. The derived methods keep the
# signature of what they derive from, for mypy and for ``help()``.


_Async: TypeAlias = Callable[Concatenate[S, P], Coroutine[Any, Any, T]]
"""The async entry point of an operation (a method taking the operation's arguments)."""


def blocking(steps: Callable[Concatenate[S, P], Step[T]]) -> Callable[Concatenate[S, P], T]:
    """The blocking entry point of an operation written as steps (run alone, one round
    trip per request it makes)."""

    @functools.wraps(steps)
    def call(self: S, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return run(steps(self, *args, **kwargs))

    return _renamed(call, steps, "")


def awaiting(
    steps: Callable[Concatenate[S, P], Step[T]],
) -> Callable[Concatenate[S, P], Coroutine[Any, Any, T]]:
    """The async entry point of an operation written as steps."""

    @functools.wraps(steps)
    async def call(self: S, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await arun(steps(self, *args, **kwargs))

    return _renamed(call, steps, "a")


def entry_points(
    steps: Callable[Concatenate[S, P], Step[T]],
) -> tuple[Callable[Concatenate[S, P], T], _Async[S, P, T]]:
    """(:func:`blocking`, :func:`awaiting`) of ``steps``: ``x, ax = entry_points(x_steps)``."""
    return blocking(steps), awaiting(steps)


def in_place(
    operation: Callable[Concatenate[S, P], T],
) -> tuple[
    Callable[Concatenate[S, P], Step[T]], Callable[Concatenate[S, P], Coroutine[Any, Any, T]]
]:
    """The steps and the async entry point of an in-process operation that never waits:
    ``x_steps, ax = in_place(x)``. The steps run the operation when they are started (a
    batch or a tail starts them at once; a give-back kept for later runs then); the async
    twin does no I/O, so it never blocks a loop."""

    @functools.wraps(operation)
    def steps(self: S, /, *args: P.args, **kwargs: P.kwargs) -> Step[T]:
        return operation(self, *args, **kwargs)
        yield  # pragma: no cover - a generator: the operation runs when the step is started

    @functools.wraps(operation)
    async def call(self: S, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return operation(self, *args, **kwargs)

    steps.__name__ = f"{operation.__name__}_steps"
    steps.__doc__ = f":meth:`{operation.__name__}` as a step (no I/O)."
    call.__name__ = f"a{operation.__name__}"
    call.__doc__ = f"Async twin of :meth:`{operation.__name__}` (no I/O)."
    return steps, call


F = TypeVar("F", bound=Callable[..., Any])


def _renamed(call: F, steps: Callable[..., Any], prefix: str) -> F:
    """Name a derived entry point after its operation; the async one documents itself as
    the twin, the blocking one keeps the operation's docstring."""
    plain = steps.__name__.removesuffix("_steps")
    call.__name__ = prefix + plain
    call.__qualname__ = steps.__qualname__.removesuffix(steps.__name__) + call.__name__
    if prefix:
        call.__doc__ = f"Async twin of :meth:`{plain}`."
    return call


def start(step: Step[T]) -> tuple[bool, Any, Step[T]]:
    """Run ``step`` up to its first request: ``(True, value, step)`` when it ended without
    one (in-process state, decided in place), else ``(False, None, rest)`` where ``rest``
    goes on from that request when a :class:`Batch` runs it."""
    try:
        request = step.send(None)
    except StopIteration as finished:
        return True, finished.value, step
    return False, None, _going_on(step, request)


def _going_on(step: Step[T], request: Any) -> Step[T]:
    try:
        while True:
            try:
                reply = yield request
            except Exception as exc:  # a Redis error the batch throws in
                request = step.throw(exc)
            else:
                request = step.send(reply)
    except StopIteration as finished:
        value: T = finished.value
        return value
    finally:
        step.close()


@dataclass
class Outcome:
    """How one step of a :class:`Batch` ended: its ``value``, or the ``error`` it raised."""

    value: Any = None
    error: BaseException | None = None

    def result(self) -> Any:
        """The value, or the error raised."""
        if self.error is not None:
            raise self.error
        return self.value


class Batch:
    """Runs decision steps together, round by round: in each round every step's Redis
    commands go out in **one pipeline per store** (EVALSHA; the commands of a script Redis
    lacks are sent again with it, EVAL) and the longest :class:`Pause` is waited; a :class:`Call`
    is made as soon as a step asks for it. On Redis Cluster the pipeline writes each node's
    commands before reading any answer, so one round costs one round trip of latency however
    many nodes it touches.

    A Redis failure is thrown into every step whose commands it hit (each falls back the
    way its stage does); a step's own exception ends that step only (:class:`Outcome`).

    A run cut short (cancelled) closes the steps still going: a step closed then can give
    back neither what it took in earlier rounds nor what its command in flight did. So a step
    that takes something records it, before its command goes out, in a record its caller owns
    (a rate-limit ``Reservation``, the leases of ``Routing.reach_steps``), and the caller
    gives back what the record holds however the run ended.

    ``by``: asked at each round, the :func:`time.monotonic` instant until which that round's
    commands that carry no bound of their own (:attr:`Command.by`) wait for Redis (a guarded
    call's, see :mod:`.bounds`; ``None``: the store's timeouts).
    """

    def __init__(
        self, steps: Iterable[Step[Any]] = (), by: Callable[[], float | None] | None = None
    ) -> None:
        self.steps: list[Step[Any]] = list(steps)
        self.by = by
        # how each step ended, as the steps end: after a run cut short (cancelled), those
        # that had ended are here, the others left as Outcome() (no value, no error)
        self.outcomes: list[Outcome] = []

    def add(self, step: Step[Any]) -> int:
        """Add a step; returns its index in the outcomes."""
        self.steps.append(step)
        return len(self.steps) - 1

    def __len__(self) -> int:
        return len(self.steps)

    def run(self) -> list[Outcome]:
        """Run every step to its end with blocking I/O."""
        outcomes = self.outcomes = [Outcome() for _ in self.steps]
        live: dict[int, Any] = {}
        try:
            for index in range(len(self.steps)):
                self._advance(index, None, None, live, outcomes)
            while live:
                replies = self._round(live)
                following: dict[int, Any] = {}
                for index in live:
                    self._advance(index, *replies[index], following, outcomes)
                live = following
        except BaseException:
            self._abandon(live)
            raise
        return outcomes

    async def arun(self) -> list[Outcome]:
        """Async twin of :meth:`run`. An anyio cancellation does not cut a round trip to
        Redis short (each is bounded by its store's timeouts): the steps learn what their
        commands did, and a call cancelled meanwhile gives back what they took. It does end a
        pause, or a wait for a concurrency slot, at once. asyncio's own cancellation
        (``task.cancel()``) goes through the shield and cuts the round trip: see the class
        docs for what the steps it closes took."""
        outcomes = self.outcomes = [Outcome() for _ in self.steps]
        live: dict[int, Any] = {}
        try:
            for index in range(len(self.steps)):
                await self._aadvance(index, None, None, live, outcomes)
            while live:
                replies = await self._around(live)
                following: dict[int, Any] = {}
                for index in live:
                    await self._aadvance(index, *replies[index], following, outcomes)
                live = following
        except BaseException:
            self._abandon(live)
            raise
        return outcomes

    # -- the steps' side ---------------------------------------------------------------------

    def _step(
        self,
        index: int,
        value: Any,
        error: BaseException | None,
        live: dict[int, Any],
        outcomes: list[Outcome],
    ) -> Call | None:
        """Resume step ``index`` with its answer: it ends, or asks for Redis or a pause
        (noted in ``live``), or asks for a :class:`Call` (returned, to be made at once)."""
        step = self.steps[index]
        try:
            request = step.throw(error) if error is not None else step.send(value)
        except StopIteration as finished:
            outcomes[index].value = finished.value
            return None
        except Exception as exc:
            outcomes[index].error = exc
            return None
        if isinstance(request, Call):
            return request
        live[index] = request
        return None

    def _advance(self, index: int, value: Any, error: BaseException | None, *rest: Any) -> None:
        """Resume step ``index`` until it needs Redis (or a pause) or ends; a :class:`Call`
        it asks for is made at once (no round trip to wait for)."""
        while (call := self._step(index, value, error, *rest)) is not None:
            try:
                value, error = call.sync(), None
            except Exception as exc:
                value, error = None, exc

    async def _aadvance(
        self, index: int, value: Any, error: BaseException | None, *rest: Any
    ) -> None:
        """Async twin of :meth:`_advance`."""
        while (call := self._step(index, value, error, *rest)) is not None:
            try:
                value, error = await call.aio(), None
            except Exception as exc:
                value, error = None, exc

    def _abandon(self, live: dict[int, Any]) -> None:
        for index in live:
            self.steps[index].close()

    # -- one round ---------------------------------------------------------------------------

    def _sort(
        self, live: dict[int, Any]
    ) -> tuple[dict[RedisStore, list[tuple[int, int, Command]]], float]:
        commands: dict[RedisStore, list[tuple[int, int, Command]]] = {}
        pause = 0.0
        by = None if self.by is None else self.by()
        for index, request in live.items():
            if isinstance(request, Command):
                command = request if request.by is not None else bounded(request, by)
                commands.setdefault(request.store, []).append((index, -1, command))
            elif isinstance(request, tuple):
                for position, command in enumerate(request):
                    command = command if command.by is not None else bounded(command, by)
                    commands.setdefault(command.store, []).append((index, position, command))
            elif isinstance(request, Pause):
                pause = max(pause, request.seconds)
            else:
                raise TypeError(f"a step yielded {request!r}, not a Command, Pause or Call")
        return commands, pause

    @staticmethod
    def _gather(
        live: dict[int, Any], answers: dict[tuple[int, int], Any]
    ) -> dict[int, tuple[Any, BaseException | None]]:
        replies: dict[int, tuple[Any, BaseException | None]] = {}
        for index, request in live.items():
            if isinstance(request, Command):
                answer = answers[(index, -1)]
                failed = answer if isinstance(answer, Exception) else None
                replies[index] = (None, failed) if failed is not None else (answer, None)
            elif isinstance(request, tuple):
                found = [answers[(index, position)] for position in range(len(request))]
                failure = next((a for a in found if isinstance(a, Exception)), None)
                replies[index] = (None, failure) if failure is not None else (tuple(found), None)
            else:  # a pause
                replies[index] = (None, None)
        return replies

    def _round(self, live: dict[int, Any]) -> dict[int, tuple[Any, BaseException | None]]:
        commands, pause = self._sort(live)
        answers: dict[tuple[int, int], Any] = {}
        for store, items in commands.items():
            for (index, position, _), answer in zip(
                items, _execute(store, [c for _, _, c in items]), strict=True
            ):
                answers[(index, position)] = answer
        if pause > 0:
            time.sleep(pause)
        return self._gather(live, answers)

    async def _around(self, live: dict[int, Any]) -> dict[int, tuple[Any, BaseException | None]]:
        commands, pause = self._sort(live)
        answers: dict[tuple[int, int], Any] = {}
        for store, items in commands.items():
            with anyio.CancelScope(shield=True):  # (see arun)
                found = await _aexecute(store, [c for _, _, c in items])
            for (index, position, _), answer in zip(items, found, strict=True):
                answers[(index, position)] = answer
        if pause > 0:
            await anyio.sleep(pause)
        return self._gather(live, answers)


def run(step: Step[T]) -> T:
    """Run one step with blocking I/O; its result (or its exception)."""
    value: T = Batch([step]).run()[0].result()
    return value


async def arun(step: Step[T]) -> T:
    """Async twin of :func:`run`."""
    value: T = (await Batch([step]).arun())[0].result()
    return value


def _pack(pipe: Any, commands: Sequence[Command], client: Any, cluster: bool, whole: bool) -> None:
    """Each command into ``pipe``: EVALSHA, or EVAL of its script (``whole``)."""
    for command in commands:
        options: dict[str, Any] = {}
        if cluster and command.keys:  # its node, from the client's slot map (no lookup sent)
            options["target_nodes"] = client.get_node_from_key(command.keys[0])
        script = ("EVAL", command.source) if whole else ("EVALSHA", command.sha)
        pipe.execute_command(*script, len(command.keys), *command.keys, *command.args, **options)


def _missing(replies: Sequence[Any]) -> list[int]:
    from redis.exceptions import NoScriptError

    return [index for index, reply in enumerate(replies) if isinstance(reply, NoScriptError)]


def _merged(replies: list[Any], missing: Sequence[int], again: Sequence[Any]) -> None:
    for index, reply in zip(missing, again, strict=True):
        replies[index] = reply


def _tagged(replies: list[Any], commands: Sequence[Command]) -> list[Any]:
    """``replies``, each error noted with its command's keys (for what is logged of it)."""
    for reply, command in zip(replies, commands, strict=True):
        if isinstance(reply, Exception):
            tag(reply, command.keys)
    return replies


def _sent(store: RedisStore, client: Any, commands: Sequence[Command], whole: bool) -> list[Any]:
    pipe = client.pipeline(transaction=False)
    _pack(pipe, commands, client, store.cluster, whole)
    with resends_bounded(store), closed_under():  # (a cluster's re-sends end in time)
        return list(pipe.execute(raise_on_error=False))


async def _asent(
    store: RedisStore, client: Any, commands: Sequence[Command], whole: bool
) -> list[Any]:
    pipe = client.pipeline(transaction=False)
    _pack(pipe, commands, client, store.cluster, whole)
    with resends_bounded(store), closed_under():
        return list(await pipe.execute(raise_on_error=False))


def _round_by(commands: Sequence[Command]) -> float | None:
    """Until when a round of ``commands`` (on one store) waits for Redis: the latest of their
    bounds, ``None`` (the store's timeouts) when one has none (see :mod:`.bounds`)."""
    latest = None
    for command in commands:
        if command.by is None:
            return None
        latest = command.by if latest is None else max(latest, command.by)
    return latest


def _execute(store: RedisStore, commands: Sequence[Command]) -> list[Any]:
    """Send ``commands`` in one pipeline; each answer, or the exception in its place. Those
    whose script Redis lacks (restarted, or its scripts flushed) go again in a round of their
    own, each with its script (EVAL: no SCRIPT LOAD that another flush could undo before
    they run, nor one the store's user may not send); the others keep their answers. Commands
    that are each bounded (:attr:`Command.by`) wait until the latest bound at most."""
    by = _round_by(commands)
    with answered_by(by):
        seconds = left()
        if seconds is not None and seconds <= 0:
            return [ran_out(seconds)] * len(commands)  # (not sent)
        return _noted(store, _in_time(_executed(store, commands), by, seconds))


def _noted(store: RedisStore, replies: list[Any]) -> list[Any]:
    """``replies``; a round that its bound cut short, unanswered, counted by the store's
    health (:meth:`.health.RedisHealth.ran_out_of_time`: a few in a row pause Redis)."""
    if replies and all(isinstance(reply, out_of_time()) for reply in replies):
        store.health.ran_out_of_time()
    return replies


def _in_time(replies: list[Any], by: float | None, seconds: float | None) -> list[Any]:
    """``replies``; once a round's bound ran out (``by``, ``seconds`` after it began), its
    commands that failed for their connection (not Redis's error reply) as
    :func:`.bounds.out_of_time`'s error: however the client met the bound's cut (a cluster
    client fails the commands after the one cut short as "connection closed", asks for the
    slot map ...), the call's time was up, not Redis's."""
    if by is None or seconds is None or time.monotonic() < by:
        return replies
    from redis.exceptions import ConnectionError, TimeoutError

    found = []
    for reply in replies:
        if isinstance(reply, (ConnectionError, TimeoutError)):
            late = ran_out(seconds)
            late.__cause__ = reply
            reply = late
        found.append(reply)
    return found


def _executed(store: RedisStore, commands: Sequence[Command]) -> list[Any]:
    try:
        client = store.client
        replies = _sent(store, client, commands, whole=False)
    except Exception as exc:  # Redis failed as a whole: every command gets the error
        return [exc] * len(commands)
    store.health.succeeded()  # (a probe after a pause answered: the outage is over)
    missing = _missing(replies)
    if missing:
        try:
            again = _sent(store, client, [commands[index] for index in missing], whole=True)
        except Exception as exc:  # (the others ran: their answers stand)
            again = [exc] * len(missing)
        _merged(replies, missing, again)
    return _tagged(replies, commands)


async def _aexecute(store: RedisStore, commands: Sequence[Command]) -> list[Any]:
    """Async twin of :func:`_execute`; a Redis timeout that this event loop's own lag
    caused is :func:`.lag.loop_busy`'s error (see :mod:`.lag`)."""
    if not on_asyncio():  # redis-py's async client runs on asyncio only: trio's go to a thread
        return list(await anyio.to_thread.run_sync(_execute, store, commands))
    by = _round_by(commands)
    with answered_by(by):
        seconds = left()
        if seconds is not None and seconds <= 0:
            return [ran_out(seconds)] * len(commands)  # (not sent)
        return _noted(store, _in_time(await _aexecuted(store, commands), by, seconds))


async def _aexecuted(store: RedisStore, commands: Sequence[Command]) -> list[Any]:
    began = time.monotonic()
    with lags.get().watching() as late:
        try:
            async with store.async_round_trip():
                client = store.aclient
                if store.cluster:  # the slot map (fetched once, on first use)
                    await cast("redis.asyncio.RedisCluster", client).initialize()
                replies = await _asent(store, client, commands, whole=False)
                store.health.succeeded()
                missing = _missing(replies)
                if missing:
                    try:
                        again = await _asent(
                            store, client, [commands[index] for index in missing], whole=True
                        )
                    except Exception as exc:
                        again = [judged(exc, time.monotonic() - began, late())] * len(missing)
                    _merged(replies, missing, again)
        except Exception as exc:
            return [judged(exc, time.monotonic() - began, late())] * len(commands)
    return _tagged(replies, commands)
