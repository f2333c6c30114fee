"""Keeping secrets and personal data out of logs, spans and exception messages.

* :func:`redact_secrets` masks API keys (``sk-...``, ``sk-ant-...``, ``AKIA...``, long
  ``key=`` / ``token=`` values), ``Bearer`` / ``Basic`` credentials, and every secret
  registered with :func:`register_secret` (each provider registers its own API key). It runs
  on every :class:`~llmguard_sdk.errors.ProviderError` message and body, and on everything
  telemetry exports.
* :func:`redact` does that and also masks e-mail addresses, phone numbers and payment card
  numbers (those that pass the Luhn check): the default for prompt and answer text, which
  telemetry captures only when the application opts in.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import base64
import re
import threading

__all__ = ["redact", "redact_secrets", "register_secret"]

_SECRET_PATTERNS = (
    re.compile(r"\bsk-[A-Za-z0-9_\-]{8,}"),
    re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    re.compile(r"\b(?:ghp|gho|github_pat|xox[abp])_[A-Za-z0-9_]{10,}"),
    re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/\-]+=*"),
    re.compile(
        r"(?i)\b(api[_-]?key|access[_-]?token|secret|password|token|key)"
        r"(\"?\s*[:=]\s*\"?)[^\s\"'&,;]{8,}"
    ),
)
_SPACE = re.compile(r"\s")
_BASE64 = re.compile(r"[A-Za-z0-9+/]+")
# (from the start of a run of address characters only: started inside one too, a long run
# without an "@" was scanned again from each position, 2.7 s for 40,000 characters)
_EMAIL = re.compile(r"(?<![A-Za-z0-9._%+\-])[A-Za-z0-9._%+\-]+@[A-Za-z0-9.\-]+\.[A-Za-z]{2,}\b")
_CARD = re.compile(r"\b(?:\d[ \-]?){12,18}\d\b")
_PHONE = re.compile(r"(?<![\w.])\+?\d[\d \-().]{7,}\d(?![\w.])")

_registered: set[str] = set()
_lock = threading.Lock()


def register_secret(value: str | None) -> None:
    """Mask ``value`` wherever it appears from now on (values under 8 characters are
    ignored: too short to be a credential, too likely to be ordinary text)."""
    if value and len(value) >= 8:
        with _lock:
            _registered.add(value)


def _mask_pattern(match: re.Match[str]) -> str:
    if match.lastindex and match.lastindex >= 2:  # key=value: keep the name
        return f"{match.group(1)}{match.group(2)}[secret]"
    if match.lastindex == 1:  # Bearer xxx
        scheme = match.group(1)
        if scheme.lower() == "basic" and _no_basic_credential(match.group(0)[len(scheme) :]):
            return match.group(0)  # "the basic plan": prose
        return f"{scheme} [secret]"
    return "[secret]"


def _no_basic_credential(text: str) -> bool:
    """Whether what follows ``Basic`` cannot be its credential, base64 of ``user:password``:
    base64 that decodes to bytes without a colon (``plan``, ``arithmetic``), or letters and
    digits no base64 is as long as (``words``). Anything else (a colon inside, other
    characters) counts as one."""
    token = text.strip().rstrip("=")
    if not _BASE64.fullmatch(token):
        return False
    if len(token) % 4 == 1:  # a length no base64 has ("basic words")
        return True
    decoded = base64.b64decode(token + "=" * (-len(token) % 4))
    return b":" not in decoded


def redact_secrets(text: str) -> str:
    """``text`` with credentials masked as ``[secret]``."""
    if not text:
        return text
    for secret in tuple(_registered):
        if secret in text:
            text = text.replace(secret, "[secret]")
    if not _may_match(text):
        return text
    for pattern in _SECRET_PATTERNS:
        text = pattern.sub(_mask_pattern, text)
    return text


def _may_match(text: str) -> bool:
    """Whether any of the secret patterns can match ``text``: each needs one of ``sk-``,
    ``AKIA`` / ``ASIA``, ``_`` (the token prefixes), a space (``Bearer x``), ``:`` or ``=``
    (``key=x``). Ids (``chatcmpl-...``) have none: one cheap test instead of five scans."""
    return (
        "_" in text
        or ":" in text
        or "=" in text
        or "sk-" in text
        or "AKIA" in text
        or "ASIA" in text
        or _SPACE.search(text) is not None
    )


def _luhn(digits: str) -> bool:
    total = 0
    for index, char in enumerate(reversed(digits)):
        value = int(char)
        if index % 2:
            value = value * 2 - 9 if value > 4 else value * 2
        total += value
    return total % 10 == 0


def _mask_card(match: re.Match[str]) -> str:
    digits = re.sub(r"\D", "", match.group(0))
    return "[card]" if 13 <= len(digits) <= 19 and _luhn(digits) else match.group(0)


def _mask_phone(match: re.Match[str]) -> str:
    text = match.group(0)
    digits = re.sub(r"\D", "", text)
    shortest = 8 if text.startswith("+") else 10  # not dates (8 digits) or short numbers
    return "[phone]" if shortest <= len(digits) <= 15 else text


def redact(text: str) -> str:
    """``text`` with credentials, e-mail addresses, card numbers and phone numbers masked."""
    if not text:
        return text
    text = redact_secrets(text)
    text = _EMAIL.sub("[email]", text)
    text = _CARD.sub(_mask_card, text)
    return _PHONE.sub(_mask_phone, text)
