"""Personal data masked in captured content besides e-mail addresses, phone and card numbers:
US social security numbers, IBANs and IP addresses (see
:class:`~llmguard_sdk.telemetry.redaction.Redactor`).

Every pattern here is linear in the text: each either matches a bounded number of characters
(an SSN, an IPv4 address, an IBAN's at most 34 characters, an IPv6 candidate's at most 45) or
starts only where a run of its characters starts (a look-behind on the same characters), so
no character is scanned more than a bounded number of times whatever the text.
"""

from __future__ import annotations

import re
import socket

__all__ = ["mask_iban", "mask_ip", "mask_ssn"]

# 123-45-6789 only (nine bare digits are too often something else); not inside a longer
# dashed number (a part number, a card's groups)
_SSN = re.compile(r"(?<![\d\-])(\d{3})-(\d{2})-(\d{4})(?![\d\-])")
# country, check digits, then up to 30 letters and digits in groups of four, spaced or not
_IBAN = re.compile(r"(?<![A-Za-z0-9])[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,3})?\b")
_OCTET = r"(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
_IPV4 = re.compile(rf"(?<![\w.]){_OCTET}(?:\.{_OCTET}){{3}}(?!\.?\d|\w)")
_IPV6 = re.compile(r"(?<![\w:.])[0-9A-Fa-f:.]{2,45}(?![\w:])")

# each country's IBAN length (ISO 13616 registry)
_IBAN_LENGTHS = {
    **dict.fromkeys(("NO",), 15),
    **dict.fromkeys(("BE",), 16),
    **dict.fromkeys(("DK", "FI", "FO", "GL", "NL"), 18),
    **dict.fromkeys(("MK", "SI"), 19),
    **dict.fromkeys(("AT", "BA", "EE", "KZ", "LT", "LU", "XK"), 20),
    **dict.fromkeys(("CH", "CR", "HR", "LI", "LV"), 21),
    **dict.fromkeys(("BG", "BH", "DE", "GB", "GE", "IE", "ME", "RS", "VA"), 22),
    **dict.fromkeys(("AE", "GI", "IL", "IQ", "TL"), 23),
    **dict.fromkeys(("AD", "CZ", "ES", "MD", "PK", "RO", "SA", "SE", "SK", "TN", "VG"), 24),
    **dict.fromkeys(("PT", "ST"), 25),
    **dict.fromkeys(("IS", "TR"), 26),
    **dict.fromkeys(("FR", "GR", "IT", "MC", "MR", "SM"), 27),
    **dict.fromkeys(("AL", "AZ", "BY", "CY", "DO", "GT", "HU", "LB", "PL", "SV"), 28),
    **dict.fromkeys(("BR", "EG", "PS", "QA", "UA"), 29),
    **dict.fromkeys(("JO", "KW", "MU"), 30),
    **dict.fromkeys(("MT",), 31),
    **dict.fromkeys(("LC", "SC"), 32),
}


def _ssn(match: re.Match[str]) -> str:
    area, group, serial = match.groups()
    never_issued = area in ("000", "666") or area[0] == "9" or group == "00" or serial == "0000"
    return match.group(0) if never_issued else "[ssn]"


def mask_ssn(text: str) -> str:
    """``text`` with US social security numbers (``123-45-6789``, in the ranges ever issued)
    masked as ``[ssn]``."""
    return _SSN.sub(_ssn, text) if "-" in text else text


def _iban_valid(compact: str) -> bool:
    """Whether ``compact`` (no spaces) has its country's length and passes ISO 7064 mod 97."""
    if _IBAN_LENGTHS.get(compact[:2]) != len(compact):
        return False
    rearranged = compact[4:] + compact[:4]
    return int("".join(str(int(char, 36)) for char in rearranged)) % 97 == 1


def _iban(match: re.Match[str]) -> str:
    text = match.group(0)
    length = _IBAN_LENGTHS.get(text[:2])
    if length is None:
        return text
    # the pattern may have run on into a following group of digits: cut at the length
    kept = 0
    for end, char in enumerate(text, 1):
        kept += char != " "
        if kept == length:
            if _iban_valid(text[:end].replace(" ", "")):
                return "[iban]" + text[end:]
            break
    return text


def mask_iban(text: str) -> str:
    """``text`` with IBANs (spaced in fours or not, of a known country's length, passing the
    mod-97 check) masked as ``[iban]``."""
    return _IBAN.sub(_iban, text)


def _ipv6(match: re.Match[str]) -> str:
    text = match.group(0)
    core = text.rstrip(".")
    if core.count(":") < 2:
        return text
    try:
        socket.inet_pton(socket.AF_INET6, core)
    except (OSError, ValueError):
        return text
    return "[ip]" + text[len(core) :]


def mask_ip(text: str) -> str:
    """``text`` with IPv4 and IPv6 addresses masked as ``[ip]``."""
    if ":" in text:  # first: an IPv4-mapped one (``::ffff:192.0.2.1``) is masked whole
        text = _IPV6.sub(_ipv6, text)
    return _IPV4.sub("[ip]", text) if "." in text else text
