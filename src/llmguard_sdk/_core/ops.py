"""The ops of the plan: each piece of I/O it needs, as a small typed value.

The plan (:mod:`.plan`) yields them; a driver (:mod:`.drive`) performs them and sends the
answer back. Decisions that need no answer never become ops: they wait in the call's tail; a
decision an in-process backend makes at once never becomes one either (:func:`answer_of`).
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any, TypeAlias, TypeVar

from .._state.steps import start
from ..context import AttemptRecord
from ..errors import ProviderError
from ..models import ChatRequest, ChatResponse, StreamChunk
from ..providers.base import Provider
from ..store import Step

__all__ = [
    "Ask",
    "AwaitLeg",
    "Blocking",
    "Complete",
    "Emit",
    "HaltLegs",
    "LegEvent",
    "Next",
    "Op",
    "Open",
    "Preopened",
    "Race",
    "RaceOp",
    "Sleep",
    "StartLeg",
    "StopLegs",
    "answer_of",
]

T = TypeVar("T")


@dataclass(frozen=True)
class Ask:
    """A stage decision whose answer the plan needs (a permit, a rate-limit grant, a retry
    token): decided in place in memory, else in one round trip with what waits in the tail."""

    step: Step[Any]


def answer_of(step: Step[T]) -> Generator[Any, Any, T]:
    """``yield from answer_of(step)``: the answer of a decision, at once when it is decided in
    place (an in-process backend: no trip through the driver), else asked of the driver (an
    :class:`Ask`: one round trip that takes the tail along)."""
    ended, answer, rest = start(step)
    if ended:
        return answer  # type: ignore[no-any-return]
    return (yield Ask(rest))  # type: ignore[no-any-return]


@dataclass(frozen=True)
class Blocking:
    """Blocking work whose answer the plan needs (the stale cache lookup when no route
    served: a store read, an embedding): done in place by the sync driver, in a worker
    thread by the async one."""

    work: Callable[[], Any]


@dataclass(frozen=True)
class Sleep:
    """Wait ``seconds`` (what waits in the tail goes out first)."""

    seconds: float


@dataclass(frozen=True)
class Complete:
    """One non-streaming attempt on ``route``: its :class:`ChatResponse`."""

    route: Provider
    request: ChatRequest
    model: str
    deadline: float


@dataclass(frozen=True)
class Open:
    """Open a stream on ``route``: its chunk iterator (sync or async, as the driver is)."""

    route: Provider
    request: ChatRequest
    model: str
    deadline: float
    idle_timeout: float | None


@dataclass(frozen=True)
class Next:
    """The next chunk of an open stream, or None at its end (the driver closes a stream
    that ended or failed)."""

    chunks: Any


@dataclass(frozen=True)
class Emit:
    """Hand ``chunk`` to the caller of a stream."""

    chunk: StreamChunk


@dataclass(frozen=True)
class StartLeg:
    """Start one leg of a hedge race in the background: ``attempt`` (a whole answer, or a
    stream read to its first content)."""

    attempt: Complete | Open

    @property
    def route(self) -> Provider:
        """The leg's route."""
        return self.attempt.route


@dataclass(frozen=True)
class AwaitLeg:
    """The next leg to end (ready or failed), or None after ``timeout`` seconds."""

    timeout: float


@dataclass(frozen=True)
class HaltLegs:
    """The race is decided: stop every leg but ``keep``, and wait for those it stopped to end
    where they end at once (a thread its abort reached; a cancelled task); answer the events of
    the legs that ended meanwhile (an answer that came as a leg was stopped is charged as
    used). Their give-backs come with :class:`StopLegs`."""

    keep: str | None


@dataclass(frozen=True)
class StopLegs:
    """After :class:`HaltLegs`: once each leg stopped (every one but ``keep``) has ended, send
    its give-backs (``after``: its breaker permit, its rate-limit lease)."""

    keep: str | None
    after: dict[str, list[Step[Any]]] = field(default_factory=dict)


@dataclass
class Preopened:
    """A stream that won a race: its route, reservation and attempt record, the chunks read
    while racing and the live rest."""

    route: Provider
    reservation: Any
    record: AttemptRecord
    buffered: list[StreamChunk]
    chunks: Any


@dataclass(frozen=True)
class LegEvent:
    """How a race leg ended: ready (``value``: a response, or a :class:`Preopened` without
    route details: buffered chunks and the rest), failed (``error``; ``shown``: the chunks a
    stream leg had read before, what its provider bills beside its prompt), or with a bug
    (``unexpected``, raised to the caller as it is)."""

    route: str
    value: ChatResponse | tuple[list[StreamChunk], Any] | None = None
    error: ProviderError | None = None
    unexpected: BaseException | None = None
    shown: list[StreamChunk] = field(default_factory=list)


RaceOp: TypeAlias = "Ask | StartLeg | AwaitLeg | HaltLegs | StopLegs"


@dataclass(frozen=True)
class Race:
    """Run a hedge race: ``steps`` decides it (:func:`.plan.race`), the driver runs the legs."""

    steps: Generator[Any, Any, Any]


Op: TypeAlias = "Ask | Sleep | Complete | Open | Next | Emit | Race"
