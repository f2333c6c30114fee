r"""Keeping secrets and personal data out of logs, spans and exception messages.

* :func:`redact_secrets` masks API keys (OpenAI ``sk-...``, Anthropic ``sk-ant-...``, AWS
  ``AKIA...`` / ``ASIA...``, Google ``AIza...``, GitHub ``ghp_`` / ``gho_`` / ``ghu_`` /
  ``ghs_`` / ``ghr_`` / ``github_pat_``, Slack ``xoxb-`` and the like), JSON Web Tokens
  (``eyJ...``), private key PEM blocks, long ``key=`` / ``token=`` / ``secret=`` values,
  ``Bearer`` / ``Basic`` credentials, and every secret registered with
  :func:`register_secret` (each provider registers its own API key), all as ``[secret]``.
  It runs on every :class:`~llmguard_sdk.errors.ProviderError` message and body, and on
  everything telemetry exports.
* :func:`redact` does that and also masks personal data: the default for prompt and answer
  text, which telemetry captures only when the application opts in. Its kinds, each with its
  placeholder: e-mail addresses ``[email]``, phone numbers ``[phone]``, payment card numbers
  that pass the Luhn check ``[card]``, US social security numbers written ``123-45-6789``
  (in the ranges ever issued) ``[ssn]``, IBANs of their country's length that pass the
  mod-97 check ``[iban]``.
* :class:`Redactor` builds another such function: the default kinds (:data:`DEFAULT_KINDS`)
  and the opt-in ones (:data:`OPT_IN_KINDS`: ``"ip"``, IPv4 and IPv6 addresses as ``[ip]``,
  off by default for version numbers such as ``1.2.3.4``), your own patterns (each match
  masked as ``[name]``) and your own functions::

      Telemetry(capture_content=True, redact=Redactor(
          DEFAULT_KINDS | {"ip"},
          patterns={"employee_id": r"\bEMP-\d{6}\b"},
          functions=[mask_customer_names],
      ))

Every built-in pattern is linear in the text (no nested quantifiers; each variable-length run
either succeeds once it starts or starts only where a run of its characters starts), so a
megabyte of adversarial text costs as much as a megabyte of prose. Your own patterns run as
you write them.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import base64
import re
import threading
from collections.abc import Callable, Iterable, Mapping

from ..errors import ConfigurationError
from ._pii import mask_iban, mask_ip, mask_ssn

__all__ = [
    "DEFAULT_KINDS",
    "OPT_IN_KINDS",
    "Redactor",
    "redact",
    "redact_secrets",
    "register_secret",
]

_SECRET_PATTERNS = (
    re.compile(r"\bsk-[A-Za-z0-9_\-]{8,}"),
    re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    re.compile(r"\b(?:gh[pousr]|github_pat|xox[abp])_[A-Za-z0-9_]{10,}"),
    re.compile(r"\b(?:xox[abposre]|xapp)-[A-Za-z0-9\-]{10,}"),
    re.compile(r"\bAIza[0-9A-Za-z_\-]{35}"),
    # a JSON Web Token: header, payload (base64url of JSON: "eyJ") and signature; the run
    # starts only where a run of its characters starts (not again inside "eyJ-eyJ-...")
    re.compile(r"(?<![A-Za-z0-9_\-])eyJ[A-Za-z0-9_\-]{5,}\.[A-Za-z0-9_\-]{5,}\.[A-Za-z0-9_\-]*"),
    re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/\-]+=*"),
    re.compile(
        r"(?i)\b((?:aws_)?secret_access_key|client_secret|refresh_token|auth_token"
        r"|api[_-]?key|access[_-]?token|secret|password|token|key)"
        r"(\"?\s*[:=]\s*\"?)[^\s\"'&,;]{8,}"
    ),
)
_SPACE = re.compile(r"\s")
_BASE64 = re.compile(r"[A-Za-z0-9+/]+")
# (from the start of a run of address characters only: started inside one too, a long run
# without an "@" was scanned again from each position, 2.7 s for 40,000 characters)
_EMAIL = re.compile(r"(?<![A-Za-z0-9._%+\-])[A-Za-z0-9._%+\-]+@[A-Za-z0-9.\-]+\.[A-Za-z]{2,}\b")
_CARD = re.compile(r"\b(?:\d[ \-]?){12,18}\d\b")
# A phone number is a run of digits and separators read whole, once: it was
# ``(?<![\w.])\+?\d[\d \-().]{7,}\d(?![\w.])``, whose engine scanned the rest of a run such as
# "(1.(1.(1." again from each digit where none of its ends would do (5 s for 24,000
# characters). Where that pattern can end (after a digit not followed by a word character or
# a dot) does not depend on where it starts, so its match is the run cut at the last such end.
_PHONE_RUN = re.compile(r"(?<![\w.])\+?\d[\d \-().]*")
_WORD_OR_DOT = re.compile(r"[\w.]")
_PHONE_SHORTEST = 9  # \d[...]{7,}\d
_PEM_BEGIN = re.compile(r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----")
_PEM_END = re.compile(r"-----END [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----")
_PEM_BODY = re.compile(r"[A-Za-z0-9+/=:,\-\s]*")

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
    return _mask_all(text) if _may_match(text) else text


def _mask_all(text: str) -> str:
    """``text`` with private key blocks and every secret pattern masked."""
    if "PRIVATE KEY" in text:
        text = _mask_private_keys(text)
    for pattern in _SECRET_PATTERNS:
        text = pattern.sub(_mask_pattern, text)
    return text


def _mask_private_keys(text: str) -> str:
    """``text`` with each PEM private key block masked as ``[secret]``, from its ``BEGIN``
    line to its ``END`` line; one cut short (no ``END``: a truncated message) up to the end
    of its base64 body. Linear: once no ``END`` follows, none is looked for again."""
    parts: list[str] = []
    position = 0
    ends = True
    while begin := _PEM_BEGIN.search(text, position):
        end = _PEM_END.search(text, begin.end()) if ends else None
        if end is None:
            ends = False
            body = _PEM_BODY.match(text, begin.end())
            stop = body.end() if body else begin.end()
        else:
            stop = end.end()
        parts += (text[position : begin.start()], "[secret]")
        position = stop
    return "".join(parts) + text[position:] if parts else text


def _may_match(text: str) -> bool:
    """Whether any of the secret patterns can match ``text``: each needs one of ``sk-``,
    ``AKIA`` / ``ASIA``, ``AIza``, ``eyJ``, ``xox`` / ``xapp-``, ``_`` (the token prefixes),
    a space (``Bearer x``, a private key block), ``:`` or ``=`` (``key=x``). Ids
    (``chatcmpl-...``) have none: one cheap test instead of every scan."""
    return (
        "_" in text
        or ":" in text
        or "=" in text
        or "sk-" in text
        or "AKIA" in text
        or "ASIA" in text
        or "AIza" in text
        or "eyJ" in text
        or "xox" in text
        or "xapp-" in text
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
    run = match.group(0)
    end = _phone_end(run, match.string, match.end())
    if end < _PHONE_SHORTEST + run.startswith("+"):
        return run
    text = run[:end]
    digits = re.sub(r"\D", "", text)
    shortest = 8 if text.startswith("+") else 10  # not dates (8 digits) or short numbers
    return ("[phone]" if shortest <= len(digits) <= 15 else text) + run[end:]


def _phone_end(run: str, text: str, stop: int) -> int:
    """Where in ``run`` (ending at ``stop`` in ``text``) a phone number can end at the
    latest: after a digit followed by no word character and no dot (0: nowhere)."""
    if run[-1].isdecimal() and not _WORD_OR_DOT.match(text, stop):
        return len(run)
    for end in range(len(run) - 1, 0, -1):
        if run[end - 1].isdecimal() and run[end] in " -()":
            return end
    return 0


def _mask_email(text: str) -> str:
    return _EMAIL.sub("[email]", text) if "@" in text else text


def _mask_cards(text: str) -> str:
    return _CARD.sub(_mask_card, text)


def _mask_phones(text: str) -> str:
    return _PHONE_RUN.sub(_mask_phone, text)


# in this order: an IBAN's or an address's digits are no card or phone number
_KINDS: dict[str, Callable[[str], str]] = {
    "email": _mask_email,
    "iban": mask_iban,
    "ip": mask_ip,
    "ssn": mask_ssn,
    "card": _mask_cards,
    "phone": _mask_phones,
}
DEFAULT_KINDS = frozenset({"email", "phone", "card", "ssn", "iban"})
"""The kinds of personal data :func:`redact` (and a plain :class:`Redactor`) masks: few false
positives (a card number must pass the Luhn check, an IBAN the mod-97 check)."""
OPT_IN_KINDS = frozenset({"ip"})
"""The kinds masked only when asked for: ``"ip"`` (IPv4 and IPv6 addresses; an IPv4 address
reads like a four-part version number)."""
_NAME = re.compile(r"[a-z][a-z0-9_]{0,39}")


class Redactor:
    """A ``redact`` function for :class:`~llmguard_sdk.telemetry.Telemetry` and
    :class:`~llmguard_sdk.telemetry.sampling.EvalSink`: credentials masked (as
    :func:`redact_secrets`), then the ``kinds`` of personal data asked for, then each of
    ``patterns`` (every match of the regular expression masked as ``[name]``), then each of
    ``functions`` in turn (a function of a string returning the string to export).

    Args:
        kinds: names from :data:`DEFAULT_KINDS` and :data:`OPT_IN_KINDS` (default: the
            default kinds; ``DEFAULT_KINDS | {"ip"}`` adds IP addresses).
        patterns: ``{name: regex}``; a name is lower-case letters, digits and ``_``; a
            regex that matches the empty string is refused (it would mask between every two
            characters). Keep them linear: they run as written.
        functions: applied last, to the text every other step has masked.

    Raises:
        ConfigurationError: an unknown kind, a bad name or regex, a function that is no
            function.
    """

    def __init__(
        self,
        kinds: Iterable[str] = DEFAULT_KINDS,
        *,
        patterns: Mapping[str, str | re.Pattern[str]] | None = None,
        functions: Iterable[Callable[[str], str]] = (),
    ) -> None:
        wanted = frozenset((kinds,) if isinstance(kinds, str) else kinds)
        unknown = sorted(wanted - _KINDS.keys())
        if unknown:
            raise ConfigurationError(f"unknown redaction kinds {unknown}; known: {sorted(_KINDS)}")
        self.kinds = wanted
        self._steps = [mask for kind, mask in _KINDS.items() if kind in wanted]
        self._patterns = [_user_pattern(name, regex) for name, regex in (patterns or {}).items()]
        self._functions = tuple(functions)
        for function in self._functions:
            if not callable(function):
                raise ConfigurationError(
                    f"functions must be functions of a string, not {function!r}"
                )

    def __call__(self, text: str) -> str:
        """``text`` masked (see the class docs)."""
        if not text:
            return text
        text = redact_secrets(text)
        for step in self._steps:
            text = step(text)
        for pattern, placeholder in self._patterns:
            text = pattern.sub(placeholder, text)
        for function in self._functions:
            text = function(text)
        return text

    def __repr__(self) -> str:
        names = ", ".join(placeholder for _, placeholder in self._patterns)
        functions = len(self._functions)
        return f"Redactor(kinds={sorted(self.kinds)}, patterns=[{names}], functions={functions})"


def _user_pattern(name: object, regex: object) -> tuple[re.Pattern[str], str]:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ConfigurationError(
            f"a redaction pattern's name is lower-case letters, digits and _, not {name!r}"
        )
    try:
        compiled = regex if isinstance(regex, re.Pattern) else re.compile(str(regex))
    except re.error as exc:
        raise ConfigurationError(f"redaction pattern {name!r}: {exc}") from None
    if not isinstance(compiled.pattern, str):
        raise ConfigurationError(f"redaction pattern {name!r} must match text, not bytes")
    if compiled.search("") is not None:
        raise ConfigurationError(f"redaction pattern {name!r} matches the empty string")
    return compiled, f"[{name}]"


_DEFAULT = Redactor()


def redact(text: str) -> str:
    """``text`` with credentials and the :data:`DEFAULT_KINDS` of personal data masked:
    e-mail addresses, IBANs, SSNs, card numbers and phone numbers."""
    return _DEFAULT(text)
