"""Keyword arguments typed once (a ``TypedDict`` used with ``Unpack``) and checked at run
time too: mypy sees a misspelt keyword, and so does a caller without mypy."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .errors import ConfigurationError

__all__ = ["check_keywords"]

_KNOWN: dict[Any, frozenset[str]] = {}  # each TypedDict's keywords (a few types)


def check_keywords(
    given: Mapping[str, object],
    typed: Any,
    what: str,
    error: type[Exception] = ConfigurationError,
) -> None:
    """Raise :class:`~llmguard_sdk.errors.ConfigurationError` (or ``error``: a call's
    keywords are a :class:`~llmguard_sdk.errors.RequestValidationError`) naming the keywords
    of ``given`` that the TypedDict ``typed`` does not declare."""
    known = _KNOWN.get(typed)
    if known is None:
        known = _KNOWN[typed] = typed.__required_keys__ | typed.__optional_keys__
    if not given.keys() <= known:
        unknown = given.keys() - known
        raise error(f"{what} got unknown keyword(s) {sorted(unknown)}; it takes {sorted(known)}")
