"""The local model's engine: the loaded llama.cpp model and its token loop (used only from
the provider's worker thread), and the job a call hands it."""

from __future__ import annotations

import codecs
import ctypes
import logging
import os
import queue
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import (
    BadRequestError,
    ConfigurationError,
    ContextLengthExceededError,
    ProviderTimeoutError,
    ProviderUnavailableError,
)
from ..models import ChatRequest, StreamChunk, Usage
from ._emitter import _Emitter
from ._llama import _load_llama, _response_grammar, _usable_cpus, local_seed
from ._llama_log import expected_aborts, install_log_filter

if TYPE_CHECKING:
    from .local import LocalProvider

__all__: list[str] = []

_DEFAULT_TEMPERATURE = 0.2
_MIN_REPLY_TOKENS = 16
logger = logging.getLogger("llmguard_sdk")


@dataclass
class _Job:
    request: ChatRequest
    deadline: float
    out: queue.SimpleQueue[StreamChunk | BaseException | None] = field(
        default_factory=queue.SimpleQueue
    )
    cancelled: threading.Event = field(default_factory=threading.Event)
    # read by llama.cpp while it computes (see _abort_callback): b"\1" stops it at once
    abort_flag: ctypes.Array[ctypes.c_char] = field(
        default_factory=lambda: ctypes.create_string_buffer(2)
    )

    done: bool = False  # the last item is handed over: the worker is as good as free

    def finish(self, item: StreamChunk | BaseException | None) -> None:
        """Hand the caller the job's last item: None (the answer is whole) or its error."""
        self.done = True
        self.out.put(item)

    def cancel(self) -> None:
        """The caller is gone: the worker stops, even in the middle of reading the prompt."""
        self.cancelled.set()
        self.stop_computing()

    def stop_computing(self) -> None:
        """Abort the model's computation for this job (at its next graph node)."""
        self.abort_flag[0] = b"\x01"


_STOPPED_LOADED = "the model's load was stopped as it ended (the model was freed)"


@dataclass(frozen=True)
class _Settings:
    """What the model's load reads of its provider (its attributes of the same names), read
    before the load begins: the load holds no provider, so one dropped while its model loads
    is collected at once, and its finalizer (which closes the worker) stops the load."""

    name: str
    path: Path
    n_ctx: int
    n_threads: int
    n_gpu_layers: int
    seed: int
    extra_buffers: bool
    prompt_lookup_tokens: int | None

    @classmethod
    def of(cls, owner: LocalProvider) -> _Settings:
        return cls(**{setting.name: getattr(owner, setting.name) for setting in fields(cls)})


class _Engine:
    """The loaded model; used only from the worker thread (:meth:`count` from any thread),
    which frees it (:meth:`close`) as it ends.

    It keeps no reference to its provider (the worker holds that weakly, see ``_local_worker``):
    its load reads a copy of the provider's settings (:class:`_Settings`), and the provider is
    handed to each method that reads its settings later."""

    def __init__(
        self,
        settings: _Settings,
        keep_going: Callable[[], bool],
        cuttable: Callable[[bool], None] | None = None,
    ) -> None:
        """Load the model; ``keep_going()`` false (the provider closed or dropped) stops the
        load (ValueError) as soon as llama.cpp asks, or frees a model that finished loading.
        ``cuttable`` is told when it would not stop at once (see ``_load_llama``)."""
        import llama_cpp

        self.closed = False
        # held to read the model from another thread (count_tokens), and to free it
        self._using = threading.Lock()
        draft = None
        if settings.prompt_lookup_tokens is not None:
            from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

            draft = LlamaPromptLookupDecoding(num_pred_tokens=settings.prompt_lookup_tokens)
        self.route = settings.name
        self.llm: llama_cpp.Llama = _load_llama(
            extra_buffers=settings.extra_buffers,
            keep_going=keep_going,  # close() stops the load too
            cuttable=cuttable,
            model_path=str(settings.path),
            n_ctx=settings.n_ctx,
            n_threads=settings.n_threads,
            n_threads_batch=_usable_cpus(),
            n_gpu_layers=settings.n_gpu_layers,
            seed=settings.seed,
            draft_model=draft,
            # A draft model needs the logits of every token; llama-cpp-python sizes that
            # buffer from this argument, so it must be set when drafting (else > 512 fails).
            logits_all=draft is not None,
            verbose=False,
        )
        try:
            self._read_template(settings.path.name)
            if not keep_going():  # closed or dropped after llama.cpp's last look at it
                raise ValueError(_STOPPED_LOADED)
        except BaseException:  # (no chat template, stopped, ...): the model is freed now
            self.close()
            raise
        self._abort = _abort_callback()
        install_log_filter()  # our aborts are expected: llama.cpp's lines about them are not shown
        self._go_on = ctypes.create_string_buffer(2)  # the flag read between jobs: never set

    def close(self) -> None:
        """Free the model and its context now, once (not when the last reference to them goes:
        a caller's kept error, whose traceback holds the worker's frames, kept them). Called on
        the worker's thread, which alone computes; a token count under way on another thread
        ends first."""
        with self._using:
            if self.closed:
                return
            self.closed = True
            self.llm.close()

    def count(self, messages: list[dict[str, str]]) -> int | None:
        """The prompt's token count, from any thread; None once the model is freed."""
        with self._using:
            return None if self.closed else len(self.tokens(messages))

    def _read_template(self, file: str) -> None:
        """The chat template's formatter, and the tokens that end a turn."""
        import llama_cpp
        from llama_cpp import llama_chat_format

        template = self.llm.metadata.get("tokenizer.chat_template")
        if not template:
            raise ConfigurationError(f"{file} has no chat template")
        import jinja2  # (llama-cpp-python's dependency)

        # what a template raises for messages it refuses (its raise_exception()), or when broken
        self.template_errors: tuple[type[Exception], ...] = (ValueError, jinja2.TemplateError)
        # OpenAI's developer message is the system message of a template without that role,
        # a tool's result (its text names the tool) a user's message
        self.renamed_roles = {
            role: kept for role, kept in (("developer", "system"), ("tool", "user"))
            if role not in template
        }  # fmt: skip
        eos = self.llm.token_eos()
        # every token that ends a turn (<|im_end|>, <|eot_id|>, ...), not only EOS
        vocab = llama_cpp.llama_model_get_vocab(self.llm.model)
        self.ends_turn: Callable[[int], bool] = partial(llama_cpp.llama_vocab_is_eog, vocab)
        self.formatter = llama_chat_format.Jinja2ChatFormatter(
            template=template,
            eos_token=self.llm.detokenize([eos], special=True).decode("utf-8", "replace"),
            bos_token=self.llm.detokenize([self.llm.token_bos()], special=True).decode(
                "utf-8", "replace"
            ),
            stop_token_ids=[eos],
        )

    def tokens(self, messages: list[dict[str, str]]) -> list[int]:
        """The prompt's tokens: the chat template's markup read as markup (its control tokens),
        each message's content read as text, so that a caller's ``<|im_end|>`` cannot end a
        turn nor start one of another role."""
        renamed = self.renamed_roles
        if renamed:
            messages = [{**m, "role": renamed.get(m["role"], m["role"])} for m in messages]
        prompt = self._render(messages)
        # the same render with each content a marker: what lies between markers is markup
        pieces = _MARKER.split(
            self._render([{**m, "content": _marker(i)} for i, m in enumerate(messages)])
        )
        contents = [m["content"] for m in messages]
        shape = _content_shape(pieces, contents, prompt)
        tokenize = self.llm.tokenize
        tokens: list[int] = []
        for at, piece in enumerate(pieces):
            if at % 2 == 0:  # the template's own text
                tokens += tokenize(piece.encode("utf-8"), add_bos=False, special=True)
            else:  # a message's content, never read as markup
                text = shape(contents[int(piece)])
                tokens += tokenize(text.encode("utf-8"), add_bos=False, special=False)
        return tokens

    def _render(self, messages: list[dict[str, str]]) -> str:
        try:
            return self.formatter(messages=messages).prompt  # type: ignore[arg-type]
        except self.template_errors as exc:
            raise BadRequestError(
                f"the local model's chat template refused the messages: {exc}",
                route=self.route,
            ) from exc

    def fit(
        self, owner: LocalProvider, request: ChatRequest
    ) -> tuple[list[int], dict[str, Any] | None]:
        """The prompt's tokens, trimmed to leave room for the reply (see the module docs)."""
        messages = owner._messages(request)
        wanted = request.output_limit or 256
        if owner.max_tokens is not None:  # the route cuts answers shorter still
            wanted = min(wanted, owner.max_tokens)
        reply_room = min(wanted, owner.n_ctx // 2)
        budget = owner.n_ctx - max(reply_room, _MIN_REPLY_TOKENS)
        tokens = self.tokens(messages)
        if len(tokens) <= budget:
            return tokens, None
        lead = [m for m in messages if m["role"] in ("system", "developer")]
        turns = [m for m in messages if m["role"] not in ("system", "developer")]
        dropped = 0
        if len(turns) > 1:
            latest, tokens = self._latest_turns(lead, turns, budget)
            dropped = len(turns) - latest
            turns = turns[dropped:]
        truncated = False
        # the last message loses its start, down to half the room while the system messages
        # (their ends) give way; then the rest if it must: a long system message (documents)
        # no longer cuts a short question to nothing
        last = [(turns[-1], budget // 2)] if turns else []
        for target, floor in last + [(m, 0) for m in lead[::-1]] + [(t, 0) for t, _ in last]:
            if len(tokens) <= budget:
                break
            content = self.llm.tokenize(target["content"].encode("utf-8"), add_bos=False)
            cut = min(len(tokens) - budget + 1, len(content) - floor)
            if cut <= 0:
                continue
            truncated = True
            kept = content[cut:] if turns and target is turns[-1] else content[:-cut]
            target["content"] = self.llm.detokenize(kept).decode("utf-8", "ignore")
            tokens = self.tokens(lead + turns)
        if len(tokens) > budget:
            raise ContextLengthExceededError(
                "the prompt cannot be trimmed to fit the local model's context",
                route=self.route,
            )
        return tokens, {
            "dropped_messages": dropped,
            "truncated": truncated,
            "prompt_tokens": len(tokens),
            "n_ctx": owner.n_ctx,
        }

    def _latest_turns(
        self, lead: list[dict[str, str]], turns: list[dict[str, str]], budget: int
    ) -> tuple[int, list[int]]:
        """How many of the latest ``turns`` fit in ``budget`` after ``lead`` (at least one;
        all of them do not), and the prompt's tokens with them.

        Fewer turns never take more tokens, so the count is found by doubling it and then
        halving the gap: a few renders of about the kept size each, where dropping one turn
        at a time rendered the rest after each drop (quadratic in the history).
        """
        sizes: dict[int, list[int]] = {}

        def fits(kept: int) -> bool:
            sizes[kept] = self.tokens(lead + turns[-kept:])
            return len(sizes[kept]) <= budget

        good, bad = 0, len(turns)  # good: fits (0: none found yet); bad: does not fit
        probe = 1
        while probe < bad and fits(probe):
            good, probe = probe, probe * 2
        bad = min(probe, bad)
        while bad - good > 1:
            middle = (good + bad) // 2
            good, bad = (middle, bad) if fits(middle) else (good, middle)
        kept = max(good, 1)
        return kept, sizes[kept]  # (always rendered: fits(1) is the first probe)

    def reused(self, tokens: list[int]) -> int:
        """How many of ``tokens`` llama.cpp keeps from the previous call's KV cache.

        ``Llama.generate`` keeps the longest common prefix of the cached tokens and the new
        prompt. When that is the whole prompt it computes the last token again (for its
        logits), unless the cache is exactly the prompt, last computed by a decode (not a
        restored state): llama-cpp-python 0.3.x then samples from the logits it holds.
        """
        llm = self.llm
        if llm.n_tokens <= 0:
            return 0
        shared = int(llm.longest_token_prefix(llm.input_ids[: llm.n_tokens].tolist(), tokens))
        if shared < len(tokens):
            return shared
        # (older llama-cpp-python has no _requires_eval: it always computed the token again)
        held = llm.n_tokens == len(tokens) and getattr(llm, "_requires_eval", True) is False
        return shared if held else shared - 1

    def _read_all_but_last(self, tokens: list[int]) -> None:
        """Compute the prompt but its last token (after the prefix the KV cache holds), so
        that ``Llama.generate`` computes the last one alone, on every call.

        A call of a prompt the cache holds (the same call again) computes its last token
        alone (see :meth:`reused`); a first call after the load computed it inside the
        prompt's batch, and kernels that round a batch otherwise than a single token
        (llamafile's sgemm for F16 and Q8_0 weights on CPUs, GPU kernels) gave it logits a
        little different: at temperature > 0 the same seed gave another answer on the first
        call only. Nothing more is computed: the prompt's tokens are read in two batches."""
        llm = self.llm
        head = tokens[:-1]
        shared = 0
        if llm.n_tokens > 0:
            cached = llm.input_ids[: llm.n_tokens].tolist()
            shared = int(llm.longest_token_prefix(cached, head))
        if shared < len(head):
            llm.n_tokens = shared  # (eval drops the cache past it)
            llm.eval(head[shared:])

    def generate(self, owner: LocalProvider, job: _Job, stop: Callable[[], bool]) -> None:
        """Answer ``job`` on its queue; a job cancelled, or the provider closed (``stop``),
        aborts llama.cpp's computation (of a long prompt too) at once."""
        self._watch(job.abort_flag)
        try:
            with expected_aborts(job.abort_flag):
                self._generate(owner, job, stop)
        except RuntimeError:  # llama_decode returned 2: aborted (or failed, then re-raised)
            if not self._halted(job, stop):
                raise
            # the aborted batch is not in the KV cache, nor its logits held: compute them again
            self.llm._requires_eval = True
        finally:
            self._watch(self._go_on)

    def _watch(self, flag: ctypes.Array[ctypes.c_char]) -> None:
        """Let llama.cpp's computation be aborted by ``flag``."""
        if self._abort is not None:
            import llama_cpp

            llama_cpp.llama_set_abort_callback(
                self.llm.ctx, self._abort, ctypes.cast(flag, ctypes.c_void_p)
            )

    def _halted(self, job: _Job, stop: Callable[[], bool]) -> bool:
        """Whether ``job`` must end now, saying why to a caller that still waits: the provider
        was closed, the caller left, or the job's time ran out."""
        route = self.route
        if stop():
            job.finish(ProviderUnavailableError("the local model was closed", route=route))
            return True
        if job.cancelled.is_set():
            return True
        if time.monotonic() > job.deadline:
            job.finish(ProviderTimeoutError("the local model ran out of time", route=route))
            return True
        return False

    def _generate(self, owner: LocalProvider, job: _Job, stop: Callable[[], bool]) -> None:
        request = job.request
        tokens, trimmed = self.fit(owner, request)
        cached = self.reused(tokens)
        limit = min(request.output_limit or owner.n_ctx, owner.n_ctx - len(tokens))
        if owner.max_tokens is not None:
            limit = min(limit, owner.max_tokens)
        stops = [request.stop] if isinstance(request.stop, str) else list(request.stop or [])
        emitter = _Emitter(job, owner.model or owner.name, owner.name, stops)
        temperature = _first(owner.temperature, request.temperature, _DEFAULT_TEMPERATURE)
        self.llm.set_seed(local_seed(request.seed) if request.seed is not None else owner.seed)
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        generated: list[int] = []
        finish = "length"
        emitter.emit(StreamChunk(text="", model=emitter.model, route=owner.name))
        self._read_all_but_last(tokens)
        for token in self.llm.generate(
            tokens,
            temp=temperature,
            top_p=_first(owner.top_p, request.top_p, 0.95),
            repeat_penalty=_first(owner.repeat_penalty, 1.0),
            reset=True,
            grammar=_response_grammar(request.response_format),  # JSON when asked for
        ):
            if self._halted(job, stop):
                return
            if self.ends_turn(token):
                finish = "stop"
                break
            generated.append(token)
            piece = decoder.decode(self.llm.detokenize([token], prev_tokens=tokens + generated))
            if emitter.text(piece):
                finish = "stop"
                break
            if len(generated) >= limit:
                break
        emitter.text(decoder.decode(b"", final=True), flush=True)
        emitter.emit(
            StreamChunk(
                finish_reason=finish,
                usage=Usage(
                    input_tokens=len(tokens),
                    output_tokens=len(generated),
                    cached_input_tokens=cached,
                ),
                model=emitter.model,
                route=owner.name,
                metadata={"context_trimmed": trimmed} if trimmed is not None else {},
            )
        )
        job.finish(None)


def _abort_callback() -> Any:
    """libc's ``strlen`` as llama.cpp's abort callback, or None where no libc is found (a
    computation then ends only at its end).

    ggml asks the callback at every node of the graph it computes: hundreds a token, and a
    batch of the prompt is one graph. A Python callback would take the GIL each time (behind
    a busy thread, up to 5 ms a node). ``strlen`` reads a job's ``abort_flag`` without Python:
    its length, 0 or 1, is the bool the callback returns."""
    import llama_cpp

    try:
        libc = ctypes.cdll.msvcrt if os.name == "nt" else ctypes.CDLL(None)
        address = ctypes.cast(libc.strlen, ctypes.c_void_p).value
    except (OSError, AttributeError):
        return None
    return None if address is None else llama_cpp.ggml_abort_callback(address)


_MARKER = re.compile("\ue000([0-9]+)\ue001")  # (private-use characters: no template's text)


def _marker(index: int) -> str:
    return f"\ue000{index}\ue001"


def _content_shape(pieces: list[str], contents: list[str], prompt: str) -> Callable[[str], str]:
    """How the template writes a message's content into the prompt: as it is, or trimmed
    (Llama 3's and Gemma's templates). Any other change of the content is not followed: the
    content is then written as it is (as text, as always)."""
    for shape in (_as_is, str.strip):
        rendered = (
            shape(contents[int(piece)]) if at % 2 else piece for at, piece in enumerate(pieces)
        )
        if "".join(rendered) == prompt:
            return shape
    logger.debug("local model: the chat template changes contents; they are written as they are")
    return _as_is


def _as_is(text: str) -> str:
    return text


def _first(*values: float | None) -> float:
    """The first value that is set (the last one always is)."""
    return next(value for value in values if value is not None)
