"""httpx or httpx2: which library an async client is built with, and each one's errors.

httpx2 (openai-python 3.x and anthropic's SDK build on it) keeps httpx's API and error
classes under another module name; its connection pool hands out a connection in time that
grows with the pool, where httpx 0.28's pool (httpcore 1.0) rescans every connection once per
queued request and counts the idle ones again for each idle one, polling each idle socket on
every pass: ``bench/http_clients.py`` measures both.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
from types import ModuleType
from typing import Literal

from .errors import ConfigurationError

__all__ = ["HttpErrors", "Library", "library_module", "pick_library"]

Library = Literal["httpx", "httpx2"]
"""Which HTTP library's client or transport to build."""


def pick_library(library: Library | None) -> Library:
    """``library`` checked; ``None``: httpx2 when it is installed, else httpx."""
    if library is None:
        return "httpx2" if importlib.util.find_spec("httpx2") is not None else "httpx"
    if library not in ("httpx", "httpx2"):
        raise ConfigurationError(f"library must be 'httpx' or 'httpx2', not {library!r}")
    return library


def library_module(library: Library) -> ModuleType:
    """The imported module of ``library`` (a clear error when it is not installed)."""
    try:
        return importlib.import_module(library)
    except ImportError as exc:
        raise ConfigurationError(f"{library} is not installed: pip install {library}") from exc


@dataclasses.dataclass(frozen=True)
class HttpErrors:
    """One library's error classes, as the provider maps them."""

    any: type[Exception]
    """Every error of the library (``HTTPError``)."""
    not_sent: tuple[type[Exception], ...]
    """Raised before a byte of the request left: safe to send again."""
    timeout: type[Exception]
    decoding: type[Exception]

    @classmethod
    def of(cls, module: ModuleType) -> HttpErrors:
        """The error classes of httpx or httpx2 (``module``)."""
        return cls(
            any=module.HTTPError,
            not_sent=(
                module.ConnectError,
                module.ConnectTimeout,
                module.PoolTimeout,
                module.ProxyError,  # a proxy refused the tunnel (CONNECT)
            ),
            timeout=module.TimeoutException,
            decoding=module.DecodingError,
        )
