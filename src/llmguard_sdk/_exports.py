"""A package's public names, each imported from its module at its first read (PEP 562)."""

from __future__ import annotations

import importlib
import sys
import types
from collections.abc import Callable
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    namespace: dict[str, Any], homes: dict[str, str], rest: str | None = None
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module ``__getattr__`` and ``__dir__`` of the package whose globals are
    ``namespace``. A name of ``homes`` (a submodule: the names it defines, space-separated),
    or of its ``__all__`` when ``rest`` names the submodule of all the others, is imported
    from there at its first read, then held in ``namespace`` as a plain attribute; another
    name is tried as a submodule (one as the eager imports made an attribute)."""
    package = namespace["__name__"]
    home = {name: module for module, names in homes.items() for name in names.split()}
    if rest is not None:
        public = (name for name in namespace["__all__"] if not name.startswith("__"))
        home.update((name, rest) for name in public if name not in home)
    named_as_module = {name for name, module in home.items() if name == module}
    if named_as_module:  # (cache.calibrate, the function, in calibrate.py)
        _keep_names(sys.modules[package], named_as_module)

    def __getattr__(name: str) -> Any:
        module = home.get(name)
        if module is not None:
            value = getattr(importlib.import_module(f"{package}.{module}"), name)
        elif not name.startswith("__"):
            try:
                value = importlib.import_module(f"{package}.{name}")
            except ModuleNotFoundError as error:
                if error.name != f"{package}.{name}":
                    raise  # (a package the submodule needs is missing: say that one)
                raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        namespace[name] = value  # (later reads: a plain attribute)
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *namespace["__all__"]})

    return __getattr__, __dir__


def _keep_names(package: types.ModuleType, names: set[str]) -> None:
    """``package``'s public names in ``names`` kept as the objects their same-named
    submodules define: the import system binds a submodule on its package as it is imported
    (``from .calibrate import Scorer`` in another module), over the eager imports' name."""
    prefix = f"{package.__name__}."

    class _Package(types.ModuleType):
        def __setattr__(self, name: str, value: Any) -> None:
            module = isinstance(value, types.ModuleType) and value.__name__ == prefix + name
            if name in names and module and hasattr(value, name):
                value = getattr(value, name)
            super().__setattr__(name, value)

    package.__class__ = _Package
