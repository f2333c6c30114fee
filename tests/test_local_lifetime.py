"""How long the local model lives: a provider dropped without close() (or in a Guard dropped
without close()) frees its worker thread and its model, with a ResourceWarning as an unclosed
file gives; one closed first gives none."""

from __future__ import annotations

import contextlib
import gc
import inspect
import logging
import subprocess
import sys
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

import pytest

from llmguard_sdk import Guard, LocalProvider, ProviderUnavailableError
from llmguard_sdk.models import ChatRequest
from llmguard_sdk.providers._llama import _load_llama, _load_turn
from llmguard_sdk.providers._local_engine import _Engine
from llmguard_sdk.providers._local_worker import _Worker
from tests.conftest import require_module
from tests.localmodel import QUESTION
from tests.test_local_safety import Hold

pytestmark = pytest.mark.local_model

HI = ChatRequest.model_validate({"messages": [{"role": "user", "content": "Hi."}], "max_tokens": 2})


def worker_of(name: str) -> threading.Thread:
    """The worker thread of the provider named ``name`` (started, alive)."""
    found = [t for t in threading.enumerate() if t.name == f"llmguard-local-{name}"]
    assert len(found) == 1, found
    return found[0]


def new_models(call: Callable[[], Any]) -> tuple[Any, list[weakref.ref[Any]]]:
    """What ``call()`` returns, and weak references to the llama.cpp models it loaded."""
    import llama_cpp

    gc.collect()
    before = {id(o) for o in gc.get_objects() if isinstance(o, llama_cpp.Llama)}
    result = call()
    loaded = [
        weakref.ref(o)
        for o in gc.get_objects()
        if isinstance(o, llama_cpp.Llama) and id(o) not in before
    ]
    assert loaded
    return result, loaded


def ended(thread: threading.Thread, models: list[weakref.ref[Any]]) -> None:
    """``thread`` ends within a bound, and the models it held are freed."""
    thread.join(60)
    assert not thread.is_alive()
    gc.collect()
    assert [ref for ref in models if ref() is not None] == []


def dropped(held: list[Any], name: str, thread: threading.Thread | None = None) -> list[str]:
    """Drop what ``held`` holds (its only reference), collect it, wait (bounded) for
    ``thread`` to end; the ResourceWarnings issued meanwhile about the provider ``name``. (The
    worker may hold its provider a moment longer, or through a load: it then warns.)"""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        held.clear()
        gc.collect()
        if thread is not None:
            thread.join(120)
    messages = [str(w.message) for w in seen if w.category is ResourceWarning]
    return [message for message in messages if repr(name) in message]


def test_a_provider_dropped_unclosed_ends_its_worker_and_frees_its_model() -> None:
    # The worker thread held the provider (its bound method was the thread's target): a
    # provider dropped without close() was never collected, and its thread waited for the
    # next call, holding the model, for the process's lifetime.
    def make() -> list[LocalProvider]:
        provider = LocalProvider(name="dropped", n_ctx=256)
        assert provider.complete(HI, model="m", deadline=time.monotonic() + 120).text is not None
        return [provider]

    held, models = new_models(make)
    thread = worker_of("dropped")
    warned = dropped(held, "dropped", thread)
    assert len(warned) == 1, warned
    assert "close()" in warned[0]
    ended(thread, models)


def test_a_guard_dropped_unclosed_ends_its_local_worker() -> None:
    def make() -> list[Guard]:
        guard = Guard(LocalProvider(name="guarded", n_ctx=256), timeout=120, environ={})
        assert guard.chat(QUESTION, max_tokens=2).route == "guarded"
        return [guard]

    held, models = new_models(make)
    thread = worker_of("guarded")
    assert len(dropped(held, "guarded", thread)) == 1
    ended(thread, models)


def test_a_provider_closed_and_then_dropped_gives_no_warning() -> None:
    provider = LocalProvider(name="closed-first", n_ctx=256)
    provider.complete(HI, model="m", deadline=time.monotonic() + 120)
    thread = worker_of("closed-first")
    provider.close()
    assert not thread.is_alive()
    held = [provider]
    del provider
    assert dropped(held, "closed-first") == []


def test_a_provider_never_used_holds_nothing_and_gives_no_warning() -> None:
    assert dropped([LocalProvider(name="unused", n_ctx=256)], "unused") == []


def llama_ids() -> set[int]:
    """The ids of the llama.cpp models alive now (after a collection)."""
    import llama_cpp

    gc.collect()
    return {id(o) for o in gc.get_objects() if isinstance(o, llama_cpp.Llama)}


def test_a_provider_dropped_as_its_model_loads_ends_and_keeps_no_model() -> None:
    # warm_up started the load; the provider is dropped wherever the load then is (waiting,
    # loading, loaded): it is collected, the worker ends, no model is kept.
    before = llama_ids()
    held = [LocalProvider(name="loading", n_ctx=256, warm_up=True)]
    thread = worker_of("loading")
    assert len(dropped(held, "loading", thread)) == 1
    assert not thread.is_alive()
    assert llama_ids() - before == set()


@pytest.mark.parametrize(
    ("function", "line", "stopped"),
    [  # llama.cpp's progress callback says stop: llama-cpp-python's ValueError
        (_load_llama, "return llama_cpp.Llama(**kwargs)", "Failed to load model"),
        (_Engine.__init__, "self._read_template(", "stopped as it ended"),  # loaded: freed
    ],
    ids=["as-llama-cpp-loads", "as-the-load-ends"],
)
def test_a_provider_dropped_while_its_model_loads_stops_the_load(
    function: Callable[..., Any], line: str, stopped: str
) -> None:
    # The load held its provider (its settings were read from it as the model loaded): a
    # provider dropped unclosed while its model loaded was collected only once the load had
    # ended (seconds, gigabytes for a big model, all for nothing). Here the load is held at
    # ``line`` while the provider is dropped.
    before = llama_ids()
    load = Hold(function, line)
    threading.settrace(load.trace)  # (the worker, started by warm_up, is traced)
    try:
        held = [LocalProvider(name="drop-in-load", n_ctx=256, warm_up=True)]
        assert load.held.wait(120)  # the load is under way, held at the line
    finally:
        threading.settrace(None)
    worker, thread = held[0]._worker, worker_of("drop-in-load")
    try:
        warned = dropped(held, "drop-in-load")  # collected at once, its load still held
    finally:
        load.go_on.set()
    thread.join(60)
    assert not thread.is_alive()
    assert len(warned) == 1, warned
    assert isinstance(worker.load_error, ValueError)  # stopped
    assert stopped in str(worker.load_error)
    assert worker.engine is None
    assert llama_ids() - before == set()  # no model kept


def test_a_provider_collected_on_its_worker_s_thread_under_its_lock_ends_the_worker() -> None:
    # A collection runs where an allocation starts it: on the worker's thread too, while it
    # holds its lock. The finalizer took that lock (not reentrant): the worker waited for
    # itself for ever, holding the model. Here a provider in a reference cycle (only a
    # collection frees it) is collected by the worker itself, at a line under its lock.
    lines, first = inspect.getsourcelines(_Worker._next_job)
    line = first + next(i for i, text in enumerate(lines) if "if self.closed:" in text)
    armed = threading.Event()

    def at_line(frame: FrameType, event: str, arg: object) -> Any:
        if event == "line" and frame.f_lineno == line and armed.is_set():
            armed.clear()
            gc.collect()  # (on the worker's thread, the lock held)
        return at_line

    def trace(frame: FrameType, event: str, arg: object) -> Any:
        return at_line if frame.f_code is _Worker._next_job.__code__ else None

    gc.disable()  # (no collection but the worker's)
    try:
        threading.settrace(trace)  # (the worker, started by warm_up, is traced)
        try:
            provider = LocalProvider(name="cyclic", n_ctx=256, warm_up=True)
        finally:
            threading.settrace(None)
        provider.complete(HI, model="m", deadline=time.monotonic() + 120)
        provider.cycle = provider  # type: ignore[attr-defined]
        worker = provider._worker
        thread = worker_of("cyclic")
        del provider
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            armed.set()
            worker.wake.put(None)  # the worker looks at its queue again: collects at the line
            thread.join(60)
        assert not armed.is_set()  # (collected there)
        assert not thread.is_alive()
        assert [w for w in seen if "'cyclic'" in str(w.message)]
    finally:
        gc.enable()


@contextlib.contextmanager
def another_load(name: str) -> Iterator[None]:
    """A provider ``name`` whose load holds its turn (loads take turns: one lock a process)
    in the block; then its load goes on, and it is closed."""
    first_load = Hold(_load_llama, "return llama_cpp.Llama(**kwargs)")
    threading.settrace(first_load.trace)  # (the first worker, started by warm_up, is traced)
    try:
        first = LocalProvider(name=name, n_ctx=256, warm_up=True)
        assert first_load.held.wait(120)  # the first load holds its turn
    finally:
        threading.settrace(None)
    try:
        yield
    finally:
        first_load.go_on.set()
    assert first.wait_loaded(120)  # the first load went on
    first.close()


def test_close_while_the_load_waits_for_another_load_ends_the_worker() -> None:
    # A provider closed while its worker waited for another provider's load kept that thread
    # until the other load ended (minutes for a big model; close() gave up after 10 s), and
    # then loaded its model for nothing.
    with another_load("first"):
        second = LocalProvider(name="second", n_ctx=256, warm_up=True)
        waiting = worker_of("second")
        second.close()  # while the first load still holds its turn
        assert not waiting.is_alive()
        assert second._worker.loaded.is_set()
        assert isinstance(second._worker.load_error, ValueError)  # stopped, never loaded
        assert second._worker.engine is None


def test_a_provider_dropped_while_its_load_waits_for_another_load_loads_nothing() -> None:
    # The worker held its provider through its whole load, its wait for its turn too: a
    # provider dropped unclosed while another provider's model loaded was not collected, and
    # loaded its model for nothing when its turn came (and only then was freed).
    with another_load("first-of-two"):
        second = [LocalProvider(name="second-of-two", n_ctx=256, warm_up=True)]
        worker, waiting = second[0]._worker, worker_of("second-of-two")
        waits_its_turn(waiting)
        warned = dropped(second, "second-of-two")  # collected at once
        waiting.join(30)
        assert not waiting.is_alive()  # ended while the first load still holds its turn
        assert len(warned) == 1, warned
        assert isinstance(worker.load_error, ValueError)  # stopped, never loaded
        assert "before it began" in str(worker.load_error)
        assert worker.engine is None


def waits_its_turn(thread: threading.Thread) -> None:
    """Wait (bounded) until ``thread`` waits for its turn to load a model."""
    turn = _load_turn.__wrapped__.__code__  # type: ignore[attr-defined]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        frame: FrameType | None = sys._current_frames().get(thread.ident or 0)
        while frame is not None and frame.f_code is not turn:
            frame = frame.f_back
        if frame is not None:
            return
        time.sleep(0.01)
    raise AssertionError(f"{thread.name} never waited for its turn to load")


class Died(BaseException):
    """What ends the worker thread in the tests below (no call's error handling catches it)."""


def dying_provider(name: str, **options: Any) -> tuple[LocalProvider, threading.Event]:
    """A provider (warmed up) whose worker thread dies of :class:`Died`, raised in its
    ``_serve`` as the next call is served, once the event returned is set."""
    serve, armed = _Worker._serve.__code__, threading.Event()

    def trace(frame: FrameType, event: str, arg: object) -> Any:
        if frame.f_code is serve and armed.is_set():
            raise Died  # (raised in the worker's _serve as it is called)
        return None

    threading.settrace(trace)  # (the worker, started by warm_up, is traced)
    try:
        return LocalProvider(name=name, warm_up=True, **options), armed
    finally:
        threading.settrace(None)


def test_a_worker_that_dies_fails_its_calls_at_once_and_logs_why_once(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # A worker thread ended by an error no call caught left its call (and those queued) to
    # wait for their deadline: minutes by default, for ever with math.inf. And the error the
    # call says was "(logged)" was not: the log said the thread ended, not of what. Then it
    # was logged, and raised on too: threading.excepthook printed its traceback again.
    ended_with: list[BaseException | None] = []

    def excepthook(args: threading.ExceptHookArgs) -> None:
        ended_with.append(args.exc_value)
        threading.__excepthook__(args)  # (Python's own: prints the traceback to stderr)

    monkeypatch.setattr(threading, "excepthook", excepthook)
    provider, armed = dying_provider("dies", n_ctx=256)
    try:
        assert provider.wait_loaded(120)
        thread = worker_of("dies")
        armed.set()
        with caplog.at_level(logging.ERROR, logger="llmguard_sdk"):
            with pytest.raises(ProviderUnavailableError, match=r"ended of an error \(logged\)"):
                provider.complete(HI, model="m", deadline=time.monotonic() + 30)
            thread.join(60)
        assert not thread.is_alive()
        assert ended_with == []  # not raised on to threading.excepthook
        assert "Traceback" not in capsys.readouterr().err  # nor printed there
        [logged] = [r for r in caplog.records if "ended of an error" in r.getMessage()]
        assert logged.exc_info is not None
        assert isinstance(logged.exc_info[1], Died)
        assert caplog.text.count("Traceback") == 1  # logged once, with its traceback
        with pytest.raises(ProviderUnavailableError, match="ended of an error"):
            provider.complete(HI, model="m", deadline=time.monotonic() + 30)
    finally:
        provider.close()


def test_a_worker_that_dies_as_it_closes_logs_why(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # The error of a worker that died once closed was not logged (only a worker that died
    # open was): threading.excepthook alone showed it. It is not raised on to that hook any
    # more, so it must be logged, whether or not the worker was closed.
    ended_with: list[BaseException | None] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: ended_with.append(args.exc_value))
    next_job = _Worker._next_job.__code__

    def at_line(frame: FrameType, event: str, arg: object) -> Any:
        if event == "line" and frame.f_locals["self"].closed:
            raise Died  # (in the worker's _next_job, once close() woke it)
        return at_line

    def trace(frame: FrameType, event: str, arg: object) -> Any:
        return at_line if frame.f_code is next_job else None

    threading.settrace(trace)  # (the worker, started by warm_up, is traced)
    try:
        provider = LocalProvider(name="dies-closing", n_ctx=256, warm_up=True)
    finally:
        threading.settrace(None)
    assert provider.wait_loaded(120)
    thread = worker_of("dies-closing")
    with caplog.at_level(logging.ERROR, logger="llmguard_sdk"):
        provider.close()
        thread.join(60)
    assert not thread.is_alive()
    assert ended_with == []
    [logged] = [r for r in caplog.records if "ended of an error" in r.getMessage()]
    assert logged.exc_info is not None
    assert isinstance(logged.exc_info[1], Died)
    with pytest.raises(ProviderUnavailableError, match="was closed"):
        provider.complete(HI, model="m", deadline=time.monotonic() + 30)


def test_a_worker_thread_that_cannot_start_is_a_typed_error_and_tried_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # When the worker thread could not start (the process at its thread limit), the call got
    # the thread library's RuntimeError, and the provider kept the thread as started: every
    # later call was queued for a worker that never ran, and waited for its deadline.
    def refuse(thread: threading.Thread) -> None:
        raise RuntimeError("can't start new thread")

    provider = LocalProvider(name="no-thread", n_ctx=256)
    try:
        with monkeypatch.context() as patched:
            patched.setattr(threading.Thread, "start", refuse)
            with pytest.raises(ProviderUnavailableError, match="can't start new thread"):
                provider.complete(HI, model="m", deadline=time.monotonic() + 30)
        answer = provider.complete(HI, model="m", deadline=time.monotonic() + 120)
        assert answer.route == "no-thread"
    finally:
        provider.close()


def test_from_config_builds_a_local_route_without_a_thread_and_its_call_says_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A local route is built cold (no warm_up): the process at its thread limit does not
    # fail Guard.from_config; the route's first call says why, a typed error naming it.
    start = threading.Thread.start

    def refuse_workers(thread: threading.Thread) -> None:
        if thread.name.startswith("llmguard-local-"):
            raise RuntimeError("can't start new thread")
        start(thread)

    monkeypatch.setattr(threading.Thread, "start", refuse_workers)
    config = {"routes": [{"model": "local/bundled", "name": "cold"}]}
    guard = Guard.from_config(config, environ={}, retry=None)
    try:
        with pytest.raises(ProviderUnavailableError, match="could not start") as raised:
            guard.chat(QUESTION, max_tokens=2)
        assert raised.value.route == "cold"
    finally:
        guard.close()


@pytest.mark.parametrize("first", ["llmguard_sdk.providers.local", "llama_cpp"])
def test_a_process_that_used_llama_cpp_ends_without_resource_warnings(first: str) -> None:
    """llama-cpp-python's ``_utils`` opens /dev/null twice at import and never closes it:
    every process that used the local provider (whichever it imported first) ended with two
    "unclosed file '/dev/null'" ResourceWarnings (``-X dev``, ``-W error``, a test run)."""
    require_module("llama_cpp", "the local provider needs llama-cpp-python")
    second = "llama_cpp" if first != "llama_cpp" else "llmguard_sdk.providers.local"
    result = subprocess.run(
        [sys.executable, "-X", "dev", "-W", "error::ResourceWarning", "-c",
         f"import {first}\nimport {second}\n"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "/dev/null" not in result.stderr
    assert "ResourceWarning" not in result.stderr
