"""The ``llmguard`` command: ``demo``, ``drill``, ``cost``, ``budget``, ``cache``, ``eval``,
``report``, ``check`` and ``release``.

``llmguard demo`` needs no network and no configuration: it starts local fake providers,
sends a burst of traffic through a Guard and prints what happened. Each command is declared
once, as data (:mod:`._command`), in its own module.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from ._demo import DemoSummary, run_demo

__all__ = ["DemoSummary", "main", "run_demo"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``llmguard`` command line; returns the exit status (130, said in one line, for
    a Ctrl-C: while the commands' modules are imported too)."""
    try:
        from ._commands import parser  # (the heavy part: a Guard, its providers, caches)

        root = parser()
        args = root.parse_args(argv)
    except KeyboardInterrupt:  # (a command's own run says its name: _command._reporting)
        print("llmguard: interrupted", file=sys.stderr)
        return 130  # (128 + SIGINT, as a shell reports a command Ctrl-C ended)
    run = getattr(args, "run", None)
    if run is None:
        root.print_help()
        return 0
    try:
        with warnings.catch_warnings():  # the printer is this run's: a caller keeps its own
            warnings.showwarning = _one_line
            status: int = run(args)
        sys.stdout.flush()  # here, where a reader gone early is met (not at exit)
    except BrokenPipeError:  # `llmguard cost models | head`: the reader had enough
        _silence_stdout()
        return 1
    return status


def __getattr__(name: str) -> Any:
    """``DemoSummary`` and ``run_demo``, imported at their first use (``main`` imports the
    commands' modules where a Ctrl-C is caught)."""
    if name in ("DemoSummary", "run_demo"):
        from . import _demo

        return getattr(_demo, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _one_line(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    """A warning as the command says it: ``llmguard: warning: ...``, one line (Python's
    printer named the file and line that warned, then printed that line of source)."""
    text = " ".join(str(message).split())
    print(f"llmguard: warning: {text}", file=sys.stderr if file is None else file)


def _silence_stdout() -> None:
    """Point stdout at the null device, so the interpreter's last flush finds no closed pipe
    (Python's documented way out of a BrokenPipeError)."""
    try:
        descriptor = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # not a file (a test's capture)
        return
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, descriptor)
    os.close(null)
