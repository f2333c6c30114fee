"""An HTTP route's options, checked before any call: its pool size, its headers, the async
calls' library; whether its API takes OpenAI's ``prompt_cache_key``; its URL as a repr
shows it (no password), and the server it names (telemetry's ``server.address``)."""

from __future__ import annotations

import sys
from urllib.parse import urlsplit

import httpx

from .._http_library import Library, pick_library
from ..errors import ConfigurationError

__all__ = [
    "async_library",
    "check_count",
    "header_safe",
    "server_of",
    "shown",
    "takes_cache_key",
]

_CACHE_KEY_HOSTS = ("api.openai.com", ".openai.azure.com")
"""The hosts whose chat completions take OpenAI's ``prompt_cache_key``: OpenAI's own API and
Azure OpenAI's resources (``<resource>.openai.azure.com``)."""
_FOUNDRY_HOSTS = (".services.ai.azure.com", ".cognitiveservices.azure.com")
"""Azure AI Foundry's resources: Azure OpenAI's API under ``/openai/`` (its models take the
key), and under ``/models`` the model inference API, whose models of other vendors may not
(it refuses a parameter it does not define unless told otherwise)."""


def shown(url: str) -> str:
    """``url`` without its password (``user:***@``), as a repr shows it."""
    from .._state.urls import redacted_url

    return redacted_url(url)


def takes_cache_key(base_url: str) -> bool:
    """Whether the API at ``base_url`` is known to take OpenAI's ``prompt_cache_key``:
    OpenAI's own, Azure OpenAI's (its hosts, and an Azure AI Foundry host's ``/openai/...``
    paths: ``/openai/deployments/<name>``, ``/openai/v1``; not its ``/models`` inference API).
    Other OpenAI-compatible servers may refuse a field they do not know (Groq answers 400,
    Mistral 422)."""
    parts = urlsplit(base_url)
    host = (parts.hostname or "").lower().rstrip(".")
    if _on(host, _CACHE_KEY_HOSTS):
        return True
    first = parts.path.lstrip("/").partition("/")[0]
    return _on(host, _FOUNDRY_HOSTS) and first.lower() == "openai"


def server_of(base_url: str) -> tuple[str | None, int | None]:
    """The host and port of ``base_url`` (its scheme's port when it names none): telemetry's
    ``server.address`` and ``server.port``; ``(None, None)`` where it names no host."""
    parts = urlsplit(base_url)
    try:
        port = parts.port
    except ValueError:
        port = None
    if not parts.hostname:
        return None, None
    return parts.hostname, port or (443 if parts.scheme == "https" else 80)


def _on(host: str, hosts: tuple[str, ...]) -> bool:
    """Whether ``host`` is one of ``hosts`` (one starting with a dot: any host under it)."""
    return any(host == h or (h.startswith(".") and host.endswith(h)) for h in hosts)


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
