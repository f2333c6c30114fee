"""Modules imported on first use, so that ``import llmguard_sdk`` stays light.

``from ._lazy import np`` gives a stand-in for numpy that imports it at its first attribute
read (the semantic cache's first vector), after which it holds numpy's attributes as its own,
as fast as the module itself. Type checkers see numpy: the modules that use it import
``numpy.typing`` under ``TYPE_CHECKING`` only.
"""

from __future__ import annotations

import importlib
import types
from typing import TYPE_CHECKING, Any

__all__ = ["LazyModule", "np"]


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
