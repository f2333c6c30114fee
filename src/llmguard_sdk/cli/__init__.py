"""The ``llmguard`` command: ``demo``, ``drill``, ``cost``, ``budget``, ``cache``, ``eval``,
``report``, ``check`` and ``release``.

``llmguard demo`` needs no network and no configuration: it starts local fake providers,
sends a burst of traffic through a Guard and prints what happened. Each command is declared
once, as data (:mod:`._command`), in its own module.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from collections.abc import Sequence
from typing import TextIO

from .._version import __version__
from ._budget import BUDGET
from ._cache import CACHE
from ._check import CHECK
from ._command import Command, Group, register
from ._cost import COST
from ._demo import DEMO, DemoSummary, run_demo
from ._drill import DRILL
from ._eval import EVAL
from ._release import RELEASE
from ._report import REPORT

__all__ = ["DemoSummary", "main", "run_demo"]

_COMMANDS: tuple[Command | Group, ...] = (
    DEMO, DRILL, COST, BUDGET, CACHE, EVAL, REPORT, CHECK, RELEASE,
)  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``llmguard`` command line; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="llmguard",
        description="llmguard-sdk: keep LLM calls fast, available and affordable.",
    )
    parser.add_argument("--version", action="version", version=f"llmguard-sdk {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in _COMMANDS:
        register(commands, command)
    args = parser.parse_args(argv)
    run = getattr(args, "run", None)
    if run is None:
        parser.print_help()
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
