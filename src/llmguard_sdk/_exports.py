"""A package's public names, each imported from its module at its first read (PEP 562)."""

from __future__ import annotations

import importlib
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
