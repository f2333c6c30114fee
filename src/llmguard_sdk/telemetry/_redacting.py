"""Content redacted for export by a function of the user's, which may fail: a failure costs
the content alone, never the call's telemetry nor an evaluation sample."""

from __future__ import annotations

import logging
from collections.abc import Callable

from ._repeats import log_repeated
from .redaction import redact_secrets

__all__ = ["REDACTION_FAILED", "redacted"]

REDACTION_FAILED = "[redaction failed]"
"""What is exported in place of content whose redact function failed."""

_LOG = logging.getLogger("llmguard_sdk.telemetry")


def redacted(redact: Callable[[str], str], text: str) -> str:
    """``text`` with credentials masked and ``redact`` applied; where ``redact`` fails
    (raises, or gives no string), :data:`REDACTION_FAILED` (never the text unredacted),
    logged once, then counted, by the error's class (whose message may quote the text)."""
    result: object
    try:
        result = redact(redact_secrets(text))
    except Exception as exc:
        result = exc  # (said below)
    if isinstance(result, str):
        return result
    log_repeated(
        _LOG,
        logging.WARNING,
        ("redact", redact),
        "llmguard telemetry: redact=%r failed (%s): captured content left out",
        redact,
        type(result).__name__,
    )
    return REDACTION_FAILED
