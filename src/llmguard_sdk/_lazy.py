"""Modules imported on first use, so that ``import llmguard_sdk`` stays light.

``from ._lazy import np`` gives a stand-in for numpy that imports it at its first attribute
read (the semantic cache's first vector), after which it holds numpy's attributes as its own,
as fast as the module itself. Type checkers see numpy: the modules that use it import
``numpy.typing`` under ``TYPE_CHECKING`` only.
"""

from __future__ import annotations

import importlib
import sys
import threading
import types
from typing import TYPE_CHECKING, Any

__all__ = ["LazyModule", "np", "warm"]


class LazyModule(types.ModuleType):
    """Stands for the module ``name`` and imports it at the first attribute read."""

    def __getattr__(self, attr: str) -> Any:
        module = importlib.import_module(self.__name__)
        own = {k: v for k, v in vars(module).items() if not k.startswith("__")}
        self.__dict__.update(own)  # later reads find them without this method
        return getattr(module, attr)


if TYPE_CHECKING:
    import numpy as np
else:
    np = LazyModule("numpy")


def warm(name: str) -> threading.Thread | None:
    """Start importing the module ``name`` in a daemon thread unless it is imported already;
    returns the thread (None: nothing to import, or no thread could start: the first use
    imports it then). A Guard with a semantic cache calls it for numpy as it is built (a
    tenth of a second, more on a busy machine): its first call no longer imports it inside
    its deadline (a use meanwhile waits for the import under way: Python's import lock)."""
    if name in sys.modules:
        return None
    thread = threading.Thread(
        target=importlib.import_module, args=(name,), name="llmguard-import", daemon=True
    )
    try:
        thread.start()
    except RuntimeError:  # "can't start new thread": only a head start is lost
        return None
    return thread
