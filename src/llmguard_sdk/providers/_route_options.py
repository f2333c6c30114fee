"""An HTTP route's options, checked before any call: its pool size, its headers, the async
calls' library; whether its API takes OpenAI's ``prompt_cache_key``; and its URL as a repr
shows it (no password)."""

from __future__ import annotations

import sys

import httpx

from .._http_library import Library, pick_library
from ..errors import ConfigurationError

__all__ = ["async_library", "check_count", "header_safe", "shown", "takes_cache_key"]

_CACHE_KEY_HOSTS = ("api.openai.com", ".openai.azure.com")
"""The hosts whose chat completions take OpenAI's ``prompt_cache_key``: OpenAI's own API and
Azure OpenAI's resources (``<resource>.openai.azure.com``)."""


def shown(url: str) -> str:
    """``url`` without its password (``user:***@``), as a repr shows it."""
    from .._state.urls import redacted_url

    return redacted_url(url)


def takes_cache_key(host: str | None) -> bool:
    """Whether the API at ``host`` is known to take OpenAI's ``prompt_cache_key`` (OpenAI's
    own, Azure OpenAI's): other OpenAI-compatible servers may refuse a field they do not know
    (Groq answers 400, Mistral 422)."""
    host = (host or "").lower().rstrip(".")
    return any(host == h or (h.startswith(".") and host.endswith(h)) for h in _CACHE_KEY_HOSTS)


def check_count(option: str, value: object, *, optional: bool = True) -> None:
    """A whole number of at least 1 (or None when ``optional``): a string or a bool is
    refused, not read."""
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        either = " or None" if optional else ""
        raise ConfigurationError(f"{option} must be a whole number >= 1{either}, got {value!r:.40}")


def async_library(library: Library | None, transport: object) -> Library:
    """The async calls' library: ``async_transport``'s where one is given, else ``library``
    (``None``: httpx2 where installed)."""
    if transport is None or isinstance(transport, httpx.AsyncBaseTransport):
        chosen = pick_library(library) if transport is None else "httpx"
    else:
        httpx2 = sys.modules.get("httpx2")
        base = getattr(httpx2, "AsyncBaseTransport", ())
        chosen = "httpx2" if isinstance(transport, base) else pick_library(library)
    if library is not None and library != chosen:
        raise ConfigurationError(f"http_library={library!r} but async_transport is {chosen}'s")
    return chosen


def header_safe(text: str) -> bool:
    """Whether ``text`` can be a header's name or value: ASCII without line breaks."""
    return text.isascii() and "\r" not in text and "\n" not in text
