"""The ``llmguard`` command's parser: every command's module (a Guard, the providers, the
caches' embedders...), imported by :func:`~llmguard_sdk.cli.main` where a Ctrl-C during
that import is one line, not a traceback."""

from __future__ import annotations

import argparse

from .._version import __version__
from ._budget import BUDGET
from ._cache import CACHE
from ._check import CHECK
from ._command import Command, Group, register
from ._cost import COST
from ._demo import DEMO
from ._drill import DRILL
from ._eval import EVAL
from ._release import RELEASE
from ._report import REPORT

__all__ = ["COMMANDS", "parser"]

COMMANDS: tuple[Command | Group, ...] = (
    DEMO, DRILL, COST, BUDGET, CACHE, EVAL, REPORT, CHECK, RELEASE,
)  # fmt: skip


def parser() -> argparse.ArgumentParser:
    """The ``llmguard`` parser, each command's runner bound as ``run``."""
    root = argparse.ArgumentParser(
        prog="llmguard",
        description="llmguard-sdk: keep LLM calls fast, available and affordable.",
    )
    root.add_argument("--version", action="version", version=f"llmguard-sdk {__version__}")
    commands = root.add_subparsers(dest="command", metavar="COMMAND")
    for command in COMMANDS:
        register(commands, command)
    return root
