"""An API key given in code, checked one way by every route and embedder that sends one."""

from __future__ import annotations

from .errors import ConfigurationError
from .telemetry.redaction import register_secret

__all__ = ["check_api_key"]


def check_api_key(api_key: str | None) -> None:
    """Refuse an ``api_key`` that is empty or has whitespace around it (a ``.env`` line's end)
    with :class:`~llmguard_sdk.errors.ConfigurationError` (it went as no key, or a broken
    header: a 401 at the first call); a good one is masked in every error message and
    telemetry export from now on. ``None`` is no key."""
    if api_key is None:
        return
    if not isinstance(api_key, str):
        raise ConfigurationError(f"api_key must be a string, got {type(api_key).__name__}")
    if not api_key or api_key != api_key.strip():
        raise ConfigurationError("api_key is empty or has surrounding whitespace")
    register_secret(api_key)
