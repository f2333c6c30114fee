"""llama.cpp's log, without the lines of the computations the local model aborts on purpose.

A computation aborted by its abort callback (a caller that left, a deadline, ``close()``:
see ``_local_engine``) makes llama.cpp log four lines, at warning and error level
(``graph_compute: ... failed with error 1``, ``process_ubatch: failed to compute graph``,
``decode: removing memory module entries ...``, ``llama_decode: failed to decode, ret = 2``).
llama-cpp-python's log callback prints some of them on the process's stderr: a library must
not write there on an expected event.

The log callback is process-wide (``llama_log_set``). :func:`install_log_filter` puts a filter
in front of the callback in place (llama-cpp-python's own, or the application's): every line
goes on to it as before, except those lines while the thread that logs them runs a computation
of ours (:func:`expected_aborts`) whose abort flag we set. Other models in the process, and
other errors of ours, are logged as before. A callback set after :func:`install_log_filter`
replaces the filter (its owner then sees those lines too); the filter is put in place once a
process, never again in front of a later one (which may forward to it: a loop).
"""

from __future__ import annotations

import contextlib
import ctypes
import re
import threading
from collections.abc import Iterator
from typing import Any

__all__: list[str] = []

_CONT = 5  # GGML_LOG_LEVEL_CONT: the last line goes on (the other levels moved between versions)
# what llama.cpp logs about a computation that its abort callback stopped (GGML_STATUS_ABORTED
# is 1; llama_decode's 2 says aborted), in the wordings of llama.cpp's versions
_ABORT_LINE = re.compile(
    rb"failed with error 1\s*$|compute status: 1\s*$|failed to decode, ret = 2\s*$"
    rb"|removing (?:memory module|KV cache) entries for seq_id|\baborted\b",
    re.IGNORECASE,
)

_lock = threading.Lock()
_local = threading.local()  # .flag: the abort flag of the computation this thread runs
_installed: Any = None  # our callback (kept alive: llama.cpp holds a pointer to it)
_forward: Any = None  # the callback in place before ours, and its user data
_forward_data: Any = None


@contextlib.contextmanager
def expected_aborts(flag: ctypes.Array[ctypes.c_char]) -> Iterator[None]:
    """While the block runs on this thread, llama.cpp's lines about a computation aborted by
    ``flag`` (set: ``flag[0] == b"\\1"``) are dropped; every other line is logged."""
    outer = getattr(_local, "flag", None)
    _local.flag = flag
    try:
        yield
    finally:
        _local.flag = outer


def _ours(level: int, text: bytes | None) -> bool:
    """Whether a line is one of an abort this thread asked for (see the module docs)."""
    if level == _CONT:  # the rest of the last line: dropped with it
        return bool(getattr(_local, "dropping", False))
    flag = getattr(_local, "flag", None)
    dropping = (
        flag is not None
        and flag[0] != b"\x00"
        and text is not None
        and _ABORT_LINE.search(text) is not None
    )
    _local.dropping = dropping
    return dropping


def _filter(level: int, text: bytes | None, user_data: Any) -> None:
    try:
        if _ours(level, text):
            return
    except Exception:  # never fail in llama.cpp's hands: the line is logged as before
        pass
    _forward(level, text, _forward_data)


def install_log_filter() -> None:
    """Put the filter in front of llama.cpp's log callback, once a process (the callback then in
    place, or llama-cpp-python's, gets every other line)."""
    global _installed, _forward, _forward_data
    import llama_cpp

    with _lock:
        if _installed is not None:
            return
        current, data = _current_callback(llama_cpp)
        _forward, _forward_data = current, data
        _installed = llama_cpp.llama_log_callback(_filter)
        llama_cpp.llama_log_set(_installed, None)


def _current_callback(llama_cpp: Any) -> tuple[Any, Any]:
    """The log callback in place and its user data; llama-cpp-python's where it cannot be read
    (a llama.cpp without ``llama_log_get``)."""
    import llama_cpp._logger as own

    get = getattr(llama_cpp, "llama_log_get", None)
    if get is None:
        return own.llama_log_callback, None
    callback = llama_cpp.llama_log_callback()
    data = ctypes.c_void_p()
    get(ctypes.byref(callback), ctypes.byref(data))
    if not callback:  # (none set: llama.cpp prints to stderr; llama-cpp-python's does too)
        return own.llama_log_callback, None
    return callback, data.value
