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

llama.cpp's log levels (``enum ggml_log_level``) were renumbered between its versions (ERROR
was 2, then 3, now 4; CONT, "the last line goes on", came later). :func:`log_levels` reads
them from the installed llama-cpp-python: its ``GGMLLogLevel`` enum (newer releases), else the
``ggml.h`` its wheel ships, else the table of the llama.cpp this module was written for.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import re
import threading
from collections.abc import Callable, Iterable, Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

__all__: list[str] = []

# ggml_log_level of llama.cpp since late 2024 (llama-cpp-python 0.3.x's ggml.h), by name
_TABLE: dict[str, int] = {"NONE": 0, "DEBUG": 1, "INFO": 2, "WARN": 3, "ERROR": 4, "CONT": 5}
_PREFIX = "GGML_LOG_LEVEL_"
_ENUM = re.compile(r"enum\s+ggml_log_level\s*\{(.*?)\}", re.DOTALL)
_MEMBER = re.compile(r"\bGGML_LOG_LEVEL_([A-Z]+)\s*=\s*([0-9]+)")
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
_cont: int | None = _TABLE["CONT"]  # the level of a line that goes on (set as the filter is put)


def log_levels() -> dict[str, int]:
    """llama.cpp's log levels by name (``"DEBUG"``, ``"WARN"``, ``"CONT"``, ...), as the
    installed llama-cpp-python defines them (see the module docs); read once."""
    return dict(_installed_levels())


@functools.lru_cache(maxsize=1)
def _installed_levels() -> dict[str, int]:
    return _first_levels((_enum_levels, _header_levels))


def _first_levels(sources: Iterable[Callable[[], dict[str, int] | None]]) -> dict[str, int]:
    """The levels of the first source that has them (one that fails has none), else the table."""
    for source in sources:
        try:
            found = source()
        except Exception:  # an odd install: the next source, at worst the table
            found = None
        if found:
            return found
    return dict(_TABLE)


def _enum_levels() -> dict[str, int] | None:
    """llama-cpp-python's ``GGMLLogLevel`` enum (in ``llama_cpp._ggml`` since 0.3.x's later
    releases), or its module-level ``GGML_LOG_LEVEL_*`` constants where it has those."""
    import llama_cpp

    ggml: Any = None
    with contextlib.suppress(ImportError):
        import llama_cpp._ggml as ggml
    enum = getattr(ggml, "GGMLLogLevel", None) or getattr(llama_cpp, "GGMLLogLevel", None)
    if enum is not None:
        return {m.name.removeprefix(_PREFIX): int(m.value) for m in enum}
    constants = {
        name.removeprefix(_PREFIX): value
        for name, value in vars(llama_cpp).items()
        if name.startswith(_PREFIX) and type(value) is int
    }
    return constants or None


def _header_levels() -> dict[str, int] | None:
    """The ``ggml_log_level`` enum of the ``ggml.h`` that llama-cpp-python's wheel ships."""
    for file in metadata.files("llama_cpp_python") or ():
        if file.name == "ggml.h":
            text = Path(file.locate()).read_text(encoding="utf-8", errors="replace")
            return parse_levels(text)
    return None


def parse_levels(header: str) -> dict[str, int] | None:
    """The members of ``enum ggml_log_level`` in a C header's text (None: no such enum)."""
    enum = _ENUM.search(header)
    if enum is None:
        return None
    body = re.sub(r"//[^\n]*|/\*.*?\*/", "", enum.group(1), flags=re.DOTALL)
    return {name: int(value) for name, value in _MEMBER.findall(body)} or None


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
    if level == _cont:  # the rest of the last line: dropped with it
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
    global _installed, _forward, _forward_data, _cont
    import llama_cpp

    with _lock:
        if _installed is not None:
            return
        _cont = log_levels().get("CONT")  # (None: a llama.cpp without continued lines)
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
