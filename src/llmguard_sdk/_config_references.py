"""``${NAME}`` references in a configuration, and the secrets they keep out of it.

A reference in ``api_key``, ``base_url``, ``headers`` or ``store``, the whole value or a part
of it (``Bearer ${TOKEN}``), is read from the environment when the Guard is built; what is
shown of a value (errors, ``llmguard check``) never holds a secret: a URL's password, a
credential query parameter, a reference's value.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Mapping

from ._state.urls import redacted_url
from .errors import ConfigurationError

__all__ = ["CREDENTIAL_HEADER", "EMBEDDED", "REFERENCE", "read_references", "redacted"]

REFERENCE = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$")
"""A whole value that is one reference (``api_key = "${OPENAI_API_KEY}"``)."""
EMBEDDED = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")  # "Bearer ${TOKEN}"
"""A reference anywhere in a value."""
CREDENTIAL_HEADER = re.compile(r"(?i)authorization|key|token|secret|password")
"""A header or query parameter whose value is a credential."""
_QUERY_PARAMETER = re.compile(r"([?&])([^=&#]+)=([^&#]*)")


def redacted(url: str) -> str:
    """``url`` as errors and ``llmguard check`` show it: without its password
    (``user:***@``) nor the value of a query parameter named as a credential (``?key=***``,
    ``?password=***``); a ``${NAME}`` reference is shown as written."""

    def parameter(match: re.Match[str]) -> str:
        sign, name, value = match.groups()
        if not CREDENTIAL_HEADER.search(name) or REFERENCE.match(value):
            return match.group(0)
        return f"{sign}{name}=***"

    with contextlib.suppress(ValueError):  # (not a URL urlsplit reads: its query still)
        url = redacted_url(url)
    return _QUERY_PARAMETER.sub(parameter, url)


def read_references(text: str | None, environ: Mapping[str, str], where: str) -> str | None:
    """``text`` with each ``${NAME}`` reference replaced by the variable it names (a whole
    value, or within one: ``Bearer ${TOKEN}``, ``http://${HOST}/v1``, which were sent as
    written)."""
    if text is None:
        return None

    def read(match: re.Match[str]) -> str:
        value = environ.get(match.group(1))
        if not value:
            raise ConfigurationError(
                f"{where}: the environment variable {match.group(1)} is not set (or empty)"
            )
        return value

    return EMBEDDED.sub(read, text)
