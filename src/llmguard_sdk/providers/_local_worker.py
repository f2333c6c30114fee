"""The local model's worker: the one thread that owns the model, the queue of calls it serves,
and how it ends.

The worker holds its :class:`~llmguard_sdk.providers.local.LocalProvider` weakly: the thread
dereferences it only to read its settings before it loads the model (once its turn to load
came: loads take turns) and while it serves a call. So a provider dropped without ``close()``
(or in a Guard dropped without ``close()``) is collected, and its finalizer
(:meth:`_Worker.collected`) stops the worker as ``close()`` does, without waiting for it: the
thread ends and frees the model, and a :class:`ResourceWarning` says that ``close()`` was not
called, as an unclosed file does. A provider that never started its worker holds nothing and
warns of nothing.

A provider dropped (or closed) while its model loads stops the load: the load holds no
provider, so one dropped is collected at once. A load only queued (waiting its turn) loads
nothing, one under way stops at llama.cpp's next look at ``keep_going`` (its progress
callback), and a model that finished loading is freed, not kept.

What a load does, and whether it can be cut there (the load tells the worker, ``uncut``):

* waiting for its turn (one load at a time a process): cut at once (looked at every 50 ms);
* llama.cpp reading the file's header, hyperparameters and vocabulary, and setting up its
  devices and weight buffers: not cut (llama.cpp asks nothing before the first tensor);
* reading the weights: cut between tensors (llama.cpp's progress callback);
* after the last tensor, creating the context (allocating and clearing the KV cache,
  reserving the compute buffers: 2 to 8.5 s for 65,536 tokens of the bundled model on 2
  busy cores), llama-cpp-python's setup and the chat template's reading: not cut; the engine
  looks at ``keep_going`` as it ends, and frees the model it just loaded;
* nothing else: neither llama-cpp-python nor the engine runs a warm-up computation (the
  first call's prompt is the first one, and is cut at once by the abort callback).

``close()`` waits (bounded) for the thread where it can be stopped, and not at all while
the load is in a phase that cannot be: it returns, and the thread frees what the phase
loaded as it ends. A wait for the load (``wait_loaded``) ends at once too.

A worker that ends for any other reason (an error no call caught) logs that error, with its
traceback, once (the error is not raised on to :func:`threading.excepthook`, which printed the
traceback a second time), and fails the calls still queued and the one it served, so that none
waits for its deadline.

However the thread ends (closed, its provider dropped, an error), it closes the llama.cpp
model itself (:meth:`_Engine.close`): freed then, not when the last reference to it goes
(an error a caller keeps holds the worker's frames, and so the engine).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import traceback
import warnings
import weakref
from collections import deque
from typing import TYPE_CHECKING

from ..errors import ProviderBusyError, ProviderError, ProviderUnavailableError
from ..models import ChatRequest
from ._llama import _load_turn
from ._local_engine import _Engine, _Job, _Settings

if TYPE_CHECKING:
    from .local import LocalProvider

__all__: list[str] = []

logger = logging.getLogger("llmguard_sdk")
_CLOSE_POLL = 0.05  # seconds between close()'s looks at whether the load can still be cut


class _Worker:
    """The worker thread of one provider and the state it shares with the callers."""

    def __init__(self, route: str, model_file: str, max_queue: int) -> None:
        self.route = route
        self.model_file = model_file  # (for the log)
        self.max_queue = max_queue
        self.pending: deque[_Job] = deque()
        self.lock = threading.Lock()  # (pending, running, thread; closed is set under it, but
        # the provider's finalizer sets it without: see collected())
        # what wakes the idle worker: a call queued, close(), the finalizer. (SimpleQueue.put
        # takes no lock of Python's: safe in a finalizer, on any thread, this one's too.)
        self.wake: queue.SimpleQueue[None] = queue.SimpleQueue()
        self.closed = False
        self.died = False  # the thread ended of an error no call caught
        self.thread: threading.Thread | None = None
        self.running: _Job | None = None  # the job the worker runs
        self.engine: _Engine | None = None
        self.load_error: BaseException | None = None
        self.loaded = threading.Event()
        self.settled = threading.Event()  # the load ended, or close() came: wait_loaded's wait
        # the load is in a phase that llama.cpp does not interrupt: close() does not wait for it
        self.uncut = False

    def _closed_error(self) -> ProviderUnavailableError:
        if self.died:
            return ProviderUnavailableError(
                "the local model's worker thread ended of an error (logged)", route=self.route
            )
        return ProviderUnavailableError("the local model was closed", route=self.route)

    def load_failure(self) -> ProviderUnavailableError:
        """What a call learns when the model failed to load."""
        return ProviderUnavailableError(
            f"local model failed to load: {self.load_error!r}", route=self.route
        )

    # -- the callers' side -------------------------------------------------------------------

    def start(self, owner: LocalProvider) -> None:
        """Start the thread (once it started; a start that failed is a
        :class:`ProviderUnavailableError`, tried again by the next call); refused once closed."""
        with self.lock:
            if self.closed:
                raise self._closed_error()
            if self.thread is None:
                thread = threading.Thread(
                    target=self._run,
                    args=(weakref.ref(owner),),  # (never the provider itself: see the module)
                    name=f"llmguard-local-{self.route}",
                    daemon=True,
                )
                try:
                    thread.start()
                except RuntimeError as exc:  # (the process at its thread limit): next call tries
                    raise ProviderUnavailableError(
                        f"the local model's worker thread could not start: {exc}",
                        route=self.route,
                    ) from None
                self.thread = thread

    def submit(self, owner: LocalProvider, request: ChatRequest, deadline: float) -> _Job:
        """Queue a call (started if need be); refused at once when the queue is full."""
        self.start(owner)
        job = _Job(request, deadline)
        with self.lock:
            if self.closed:  # since start(): stop() has emptied the queue already
                raise self._closed_error()
            live = [j for j in self.pending if not j.cancelled.is_set()]
            self.pending = deque(live)
            running = self.running  # (set as the worker takes a job)
            idle = not live and (running is None or running.done)
            if not idle and len(live) >= self.max_queue:
                raise ProviderBusyError(
                    f"the local model is busy ({len(live)} waiting, at most {self.max_queue})",
                    route=self.route,
                )
            self.pending.append(job)
        self.wake.put(None)
        return job

    def wait_loaded(self, timeout: float) -> bool:
        """Wait (at most ``timeout`` seconds) until the load ends; True when it loaded the
        model. False at once when the provider is closed, even in a phase of the load that
        cannot be cut (see the module docs)."""
        self.settled.wait(timeout)
        return self.loaded.is_set() and self.load_error is None and not self.closed

    def stop(self) -> threading.Thread | None:
        """Refuse new calls, cancel the waiting ones, stop the current one at once (its
        prompt too) and let the thread end; the thread, if one was started."""
        with self.lock:
            self.closed = True
            waiting = list(self.pending)
            self.pending.clear()
            thread, running = self.thread, self.running
        self.wake.put(None)
        self.settled.set()  # (a wait for the load ends: there will be no model)
        for job in waiting:
            job.cancel()
            job.finish(self._closed_error())
        if running is not None:  # stopped now, even while it reads its prompt; told why
            running.stop_computing()
        return thread

    def close(self, wait: float) -> None:
        """:meth:`stop`, then wait (at most ``wait`` seconds) for the thread to end; not for
        a phase of the load that llama.cpp does not interrupt, nor its end: the thread frees
        what it loaded as that phase ends (see the module docs)."""
        thread = self.stop()
        if thread is None or thread is threading.current_thread():
            return
        end = time.monotonic() + wait
        while thread.is_alive():
            left = end - time.monotonic()
            if self.uncut or left <= 0:
                logger.debug(
                    "local model %s: closed while %s; the worker frees it as it ends",
                    self.model_file,
                    "a phase of its load that cannot be cut runs" if self.uncut else "busy",
                )
                return
            thread.join(timeout=min(left, _CLOSE_POLL))

    def collected(self) -> None:
        """The provider was collected unclosed: stop the worker, which frees the model and
        fails what is queued as it ends, and warn.

        This runs where the collection happens: any thread, the worker's too, maybe while it
        holds :attr:`lock` (a collection can start at any allocation). So it takes no lock
        and waits for nothing: it sets ``closed`` (which the worker reads, between jobs, in
        a load and between tokens) and wakes the worker through a lock-free queue."""
        self.closed = True
        running = self.running
        if running is not None:  # (none: the worker holds its provider while it serves)
            running.stop_computing()
        self.wake.put(None)
        if self.thread is not None:
            warnings.warn(
                f"LocalProvider {self.route!r} was not closed: its worker thread and model "
                "were freed when it was garbage collected; call close()",
                ResourceWarning,
                stacklevel=2,
            )

    # -- the thread --------------------------------------------------------------------------

    def _run(self, owner: weakref.ref[LocalProvider]) -> None:
        error: BaseException | None = None
        try:
            self._load(owner)
            while self._serve_next(owner):
                pass
        except BaseException as exc:  # logged, with its traceback, as the thread ends; not
            error = exc  # raised on, or threading.excepthook would print that traceback again
        finally:
            engine, self.engine = self.engine, None
            if engine is not None:  # freed now, whatever still holds the engine
                try:
                    engine.close()
                except Exception as exc:  # (logged with the thread's end)
                    error = error or exc
            self._fail_the_rest(error)

    def _load(self, owner: weakref.ref[LocalProvider]) -> None:
        def keep_going() -> bool:  # closed, or dropped (its finalizer closes the worker too)
            return not self.closed and owner() is not None

        try:
            # The load holds its provider weakly, its wait for its turn (another provider may
            # be loading) too: one dropped meanwhile is collected at once, its worker closed,
            # and its load stopped (one only queued loads nothing; a model loaded is freed).
            with _load_turn(keep_going):
                provider = owner()
                if provider is None:  # dropped before the thread ran: nothing to load
                    return
                settings = _Settings.of(provider)
                del provider
                self.engine = _Engine(settings, keep_going=keep_going, cuttable=self._cuttable)
        except Exception as exc:  # a broken GGUF, out of memory: every call learns why
            self.load_error = _without_frames(exc)  # (its frames held the half-built engine)
            if not keep_going():  # closed or dropped, which stopped the load: nothing failed
                logger.debug("local model %s: closed while it loaded", self.model_file)
            else:
                logger.warning("local model %s failed to load: %r", self.model_file, exc)
        finally:
            self.uncut = False
            self.loaded.set()
            self.settled.set()

    def _cuttable(self, can: bool) -> None:
        """The load tells whether ``keep_going`` false stops it at once (or soon) now."""
        self.uncut = not can

    def _next_job(self) -> _Job | None:
        """The next live job, or None once the provider is closed."""
        while True:
            with self.lock:
                if self.closed:
                    return None
                while self.pending and self.pending[0].cancelled.is_set():
                    self.pending.popleft()
                if self.pending:
                    self.running = self.pending.popleft()
                    return self.running
            # until a call, close() or the finalizer (each puts one: none is missed; one
            # left over from calls already served only turns the loop once more)
            self.wake.get()

    def _serve_next(self, owner: weakref.ref[LocalProvider]) -> bool:
        """Answer the next job (on its queue, errors too); False once closed. What it used
        (the provider, the job, its errors' frames) is let go before the next wait."""
        job = self._next_job()
        if job is None:
            return False
        self._serve(job, owner)  # (an error it does not catch ends the thread: see _fail_the_rest)
        with self.lock:
            self.running = None
        return True

    def _serve(self, job: _Job, owner: weakref.ref[LocalProvider]) -> None:
        engine, provider = self.engine, owner()
        if engine is None:
            job.finish(self.load_failure())
            return
        if provider is None:  # (collected: stop() ends the worker)
            job.finish(self._closed_error())
            return
        try:
            engine.generate(provider, job, stop=lambda: self.closed)
        except ProviderError as exc:  # typed already (a prompt that cannot fit)
            job.finish(exc)
        except Exception as exc:
            job.finish(ProviderUnavailableError(f"local model failed: {exc!r}", route=self.route))

    def _fail_the_rest(self, error: BaseException | None) -> None:
        """The thread ends: no call may wait for it (closed, or it died of ``error``, which is
        logged, closed or not: nothing else shows it)."""
        with self.lock:
            self.died = not self.closed
            self.closed = True
            waiting = list(self.pending)
            self.pending.clear()
            running, self.running = self.running, None
        if error is not None:
            logger.error(
                "local model %s: its worker thread ended of an error",
                self.model_file,
                exc_info=error,
            )
        told = self._closed_error()
        for job in waiting + ([running] if running is not None and not running.done else []):
            job.cancel()
            job.finish(told)


def _without_frames(exc: BaseException) -> BaseException:
    """``exc`` (and the errors it was raised from) without tracebacks, their frames cleared:
    kept for the provider's lifetime, it must not keep what those frames held alive."""
    seen: set[int] = set()
    chained: BaseException | None = exc
    while chained is not None and id(chained) not in seen:
        seen.add(id(chained))
        if chained.__traceback__ is not None:
            traceback.clear_frames(chained.__traceback__)
            chained.__traceback__ = None
        chained = chained.__cause__ or chained.__context__
    return exc
