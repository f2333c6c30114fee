"""How the local model is freed: its worker closes llama.cpp's model itself however it ends
(closed, dropped, dead), once, not when the last reference goes; and close() does not wait for
a phase of the load that llama.cpp cannot cut (what that phase loaded is freed as it ends)."""

from __future__ import annotations

import math
import sys
import threading
import time
from collections.abc import Callable
from types import CodeType, FrameType
from typing import Any

import pytest

from llmguard_sdk import ContextLengthExceededError, LocalProvider, ProviderUnavailableError
from llmguard_sdk.models import ChatRequest
from llmguard_sdk.providers._local_engine import _Engine
from tests.test_local_lifetime import HI, dropped, dying_provider, llama_ids, worker_of
from tests.test_local_safety import Hold

pytestmark = pytest.mark.local_model

pytest.importorskip("llama_cpp", reason="the local provider needs llama-cpp-python")

TOO_LONG = ChatRequest.model_validate(
    {
        "messages": [
            *({"role": "system", "content": f"Rule {i}."} for i in range(12)),
            {"role": "user", "content": "Hi"},
        ],
        "max_tokens": 8,
    }
)  # (its turn markers alone do not fit in 64 tokens)


def closed(llm: Any) -> bool:
    """Whether a ``llama_cpp.Llama`` was closed: its llama.cpp model and context freed."""
    return llm._model.model is None and llm._ctx.ctx is None


def counted_closes(llm: Any) -> list[int]:
    """How many times ``llm.close()`` is called from now on (in a one-item list)."""
    calls, close = [0], llm.close

    def counted() -> None:
        calls[0] += 1
        close()

    llm.close = counted
    return calls


def in_call(thread: threading.Thread, code: CodeType, within: float = 60) -> bool:
    """Wait (bounded) until ``thread`` runs ``code`` (its frame is on the thread's stack);
    False when the thread ended or ``within`` seconds passed first."""
    deadline = time.monotonic() + within
    while thread.is_alive() and time.monotonic() < deadline:
        frame: FrameType | None = sys._current_frames().get(thread.ident or 0)
        while frame is not None:
            if frame.f_code is code:
                return True
            frame = frame.f_back
        time.sleep(0.005)
    return False


@pytest.mark.parametrize("ending", ["close", "drop", "death"])
def test_the_worker_closes_its_llama_model_once_however_it_ends(ending: str) -> None:
    # The worker let go of its engine and left the llama.cpp model to the garbage collector:
    # while anything else held it, the model and its context stayed in memory after close(),
    # the provider's collection or the worker's death. An error the model raised and a caller
    # kept is one such holder: its traceback holds the worker's frames, the engine among them
    # (here the test holds the model itself, so that the provider can be dropped too).
    name = f"ends-by-{ending}"
    provider, armed = dying_provider(name, n_ctx=64)
    held = [provider]
    assert provider.wait_loaded(120)
    with pytest.raises(ContextLengthExceededError) as kept:  # what a caller may keep
        provider.complete(TOO_LONG, model="m", deadline=time.monotonic() + 60)
    engine = provider._worker.engine
    assert engine is not None
    llm, thread = engine.llm, worker_of(name)
    closes = counted_closes(llm)
    del engine
    if ending == "close":
        provider.close()
    elif ending == "death":
        armed.set()
        with pytest.raises(ProviderUnavailableError, match="ended of an error"):
            provider.complete(HI, model="m", deadline=time.monotonic() + 60)
        thread.join(60)
        provider.close()  # (after the worker's end: nothing more to free)
    else:
        del kept, provider  # (the error's frames hold the provider too)
        assert len(dropped(held, name, thread)) == 1
    thread.join(60)
    assert not thread.is_alive()
    assert closed(llm)  # freed, though still referenced
    assert closes == [1]  # once


class Phase(Hold):
    """A phase of the load that llama.cpp cannot cut, held at ``text`` in ``function`` (a
    trace of the worker) until ``go_on`` is set, or for 5 s at most: shorter than close()'s
    wait for a worker it can stop (10 s), so that a close() that waited for the phase
    returned after it. ``over`` is set as the phase ends."""

    def __init__(self, function: Callable[..., Any], text: str) -> None:
        super().__init__(function, text)
        self.over = threading.Event()

    def _line(self, frame: FrameType, event: str, arg: object) -> Any:
        if event == "line" and frame.f_lineno == self.line and not self.held.is_set():
            self.held.set()
            self.go_on.wait(5)
            self.over.set()
        return self._line


def _uncut_phases() -> list[Any]:
    import llama_cpp._internals as internals

    return [
        pytest.param(
            internals.LlamaModel.__init__,
            "llama_cpp.llama_model_load_from_file(",  # header, vocabulary, devices first
            id="header-and-vocabulary",
        ),
        pytest.param(
            internals.LlamaContext.__init__,
            "llama_cpp.llama_init_from_model(",  # the KV cache and compute buffers
            id="context",
        ),
    ]


@pytest.mark.parametrize(("function", "line"), _uncut_phases())
def test_close_does_not_wait_for_a_load_phase_that_cannot_be_cut(
    function: Callable[..., Any], line: str
) -> None:
    # close() waited (up to 10 s) for a worker in a phase of the load that llama.cpp does not
    # interrupt: creating a context of 65,536 tokens took up to 8.5 s here, and close() as long
    # (the model only to be freed as the load ended). A wait for the load (wait_loaded, with
    # no bound) went on to the phase's end too. The phase is held here while close() runs.
    before = llama_ids()
    phase = Phase(function, line)
    threading.settrace(phase.trace)  # (the worker, started by warm_up, is traced)
    try:
        provider = LocalProvider(name="uncut", n_ctx=256, warm_up=True)
        assert phase.held.wait(120)
    finally:
        threading.settrace(None)
    thread, waited = worker_of("uncut"), list[bool]()
    waiter = threading.Thread(target=lambda: waited.append(provider.wait_loaded(math.inf)))
    try:
        waiter.start()
        assert in_call(waiter, threading.Event.wait.__code__)  # it waits for the load
        provider.close()
        waiter.join(30)
        assert not phase.over.is_set()  # close() and the wait ended as the phase went on
        assert not waiter.is_alive()
        assert waited == [False]
    finally:
        phase.go_on.set()
    thread.join(60)
    assert not thread.is_alive()
    assert isinstance(provider._worker.load_error, ValueError)  # the load stopped after it
    assert provider._worker.engine is None
    assert llama_ids() - before == set()  # what the phase loaded was freed


def test_a_token_count_under_way_ends_before_the_worker_frees_the_model() -> None:
    # The worker frees the model itself as it ends; a token count on another thread (the
    # rate limits ask one for each call) must not read the model freed under it. The count
    # is held (a trace of its thread) in the tokenizer while the provider closes.
    provider = LocalProvider(name="counted", n_ctx=256, warm_up=True)
    assert provider.wait_loaded(120)
    hold = Hold(_Engine.tokens, "tokenize = self.llm.tokenize")
    counts: list[int | None] = []

    def count() -> None:
        sys.settrace(hold.trace)
        try:
            counts.append(provider.count_tokens(HI))
        finally:
            sys.settrace(None)

    counter, closer = threading.Thread(target=count), threading.Thread(target=provider.close)
    thread = worker_of("counted")
    counter.start()
    try:
        assert hold.held.wait(60)
        closer.start()
        assert in_call(thread, _Engine.close.__code__)  # the worker is about to free the model
    finally:
        hold.go_on.set()
        counter.join(60)
        closer.join(60)
    thread.join(60)
    assert not thread.is_alive()
    assert len(counts) == 1
    assert isinstance(counts[0], int)
    assert counts[0] > 0
    assert provider.count_tokens(HI) is None  # the model is freed
