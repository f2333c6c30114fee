"""State a forked child must not share with its parent: renewed in the child.

A server that builds its Guard, then forks its workers (``gunicorn --preload``, Celery's
prefork pool), hands each worker a copy of the Guard's state. Some of it belongs to one
process: kept-alive connections (two processes writing into one socket) and a spend journal's
file (its lock held by the parent). :func:`per_process` names an object and how it makes such
state: made now, and again in every child this process forks, as it starts.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["per_process"]

T = TypeVar("T")

_RENEWED: weakref.WeakKeyDictionary[Any, Callable[[Any], None]] = weakref.WeakKeyDictionary()


def per_process(owner: T, renew: Callable[[T], None]) -> None:
    """Call ``renew(owner)`` now, and in each child this process forks from now on (``owner``
    is held weakly: one collected is forgotten)."""
    renew(owner)
    _RENEWED[owner] = renew


def _forked() -> None:
    for owner, renew in list(_RENEWED.items()):
        renew(owner)


if hasattr(os, "register_at_fork"):  # (not on Windows)
    os.register_at_fork(after_in_child=_forked)
