"""Redaction of more credentials (JWTs, private keys, Slack, GitHub, Google, AWS secret
values), SSNs, IBANs and (opt-in) IP addresses, a Redactor with the application's own patterns
and functions, and every pattern linear in the text (a megabyte of adversarial text is read
once: the harness's timeout bounds the tests, no timing is asserted)."""

from __future__ import annotations

import json
import logging
import random
import re

import pytest

from llmguard_sdk.errors import ConfigurationError
from llmguard_sdk.telemetry import redaction
from llmguard_sdk.telemetry.redaction import (
    DEFAULT_KINDS,
    OPT_IN_KINDS,
    Redactor,
    redact,
    redact_secrets,
)
from llmguard_sdk.testing import FakeProvider

from .test_telemetry import MakeGuard, _everything_exported, exporters

JWT = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.SflKxwRJSMeKKF2QT4fwpM"
PEM = (
    "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6\n"
    "ffAt0gBaHDA+/xhyHLk=\n-----END RSA PRIVATE KEY-----"
)
IBANS = [
    "DE89 3704 0044 0532 0130 00",
    "GB82WEST12345698765432",
    "FR14 2004 1010 0505 0001 3M02 606",
    "NL91ABNA0417164300",
    "BE68 5390 0754 7034",
]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"token {JWT} expired", "token [secret] expired"),
        (f"Authorization: Bearer {JWT}", "Authorization: Bearer [secret]"),
        (f"key:\n{PEM}\nthanks", "key:\n[secret]\nthanks"),
        ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk=\nAAAA", "[secret]"),  # cut short
        ("slack xoxb-1234567890-0987654321-AbCdEfGhIjKl now", "slack [secret] now"),
        ("app xapp-1-A0123456789-abcdef now", "app [secret] now"),
        ("gh ghs_abcdefghijklmnop1234 ghu_abcdefghijklmnop", "gh [secret] [secret]"),
        ("github_pat_11ABCDEFG0123456789_abcdefghijkl", "[secret]"),
        ("maps AIzaSyA-abcdefghijklmnopqrstuvwxyz01234", "maps [secret]"),
        ("sk-ant-api03-abcdefghijklmnop and sk-proj-abcdefghij", "[secret] and [secret]"),
        ("AKIAIOSFODNN7EXAMPLE", "[secret]"),
        ("aws_secret_access_key=wJalrXUtnFEMI/K7MDENG", "aws_secret_access_key=[secret]"),
        ('"client_secret": "abcdefghij12"', '"client_secret": "[secret]"'),
    ],
)
def test_more_credentials_are_masked_everywhere(text: str, expected: str) -> None:
    assert redact_secrets(text) == expected
    assert redact(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "eyJ is how a JWT starts",
        "xoxo, see you",
        "the private key of the argument",
        "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----",  # public
        "I think AIza is a name",
    ],
)
def test_prose_like_credentials_is_left(text: str) -> None:
    assert redact_secrets(text) == text


def test_ssns_in_the_ranges_ever_issued_are_masked() -> None:
    assert redact("SSN 123-45-6789.") == "SSN [ssn]."
    for never in ("000-12-3456", "666-12-3456", "912-34-5678", "123-00-4567", "123-45-0000"):
        assert redact(f"id {never}") == f"id {never}"
    assert "[ssn]" not in redact("part 12-123-45-6789-1")  # inside a longer number


@pytest.mark.parametrize("iban", IBANS)
def test_ibans_passing_the_mod_97_check_are_masked(iban: str) -> None:
    assert redact(f"pay to {iban}, thanks") == "pay to [iban], thanks"
    assert redact(f"pay to {iban} 2024") == "pay to [iban] 2024"  # a number after it


@pytest.mark.parametrize(
    "text",
    [
        "DE88 3704 0044 0532 0130 00",  # check digits off by one
        "DE89 3704 0044 0532 0130 0",  # a German IBAN is 22 characters
        "ZZ89 3704 0044 0532 0130 00",  # no such country
        "AB12 CDEF GHIJ KLMN",  # a product code
    ],
)
def test_what_fails_the_iban_checks_is_no_iban(text: str) -> None:
    assert "[iban]" not in redact(text)


def test_ip_addresses_are_masked_only_when_asked() -> None:
    text = "from 10.0.0.1 and fe80::1%eth0, mapped ::ffff:192.0.2.1, build v1.2.3.4"
    assert "fe80::1" in redact(text)
    masked = Redactor(DEFAULT_KINDS | {"ip"})(text)
    assert masked == "from [ip] and [ip]%eth0, mapped [ip], build v1.2.3.4"
    assert Redactor({"ip"})("host 2001:db8::8a2e:370:7334.") == "host [ip]."
    for text in ("at 12:30:45", "std::vector", "1.2.3", "10.0.0.256", "dead:beef"):
        assert Redactor({"ip"})(text) == text


def test_a_redactor_adds_the_applications_patterns_and_functions() -> None:
    redactor = Redactor(
        patterns={"employee_id": r"\bEMP-\d{6}\b", "ticket": re.compile(r"\bT#\d+")},
        functions=[lambda text: text.replace("Alice", "[name]")],
    )
    text = "Alice (EMP-123456, a@b.example) on T#42 key sk-abcdefghijk"
    assert redactor(text) == "[name] ([employee_id], [email]) on [ticket] key [secret]"
    assert "EMP-123456" in redact(text)  # the default knows none of them


def test_a_redactor_can_leave_default_kinds_off() -> None:
    text = "call +1 415 555 0100 or a@b.example, key sk-abcdefghijk"
    assert Redactor({"email"})(text) == "call +1 415 555 0100 or [email], key [secret]"
    assert Redactor(())(text) == "call +1 415 555 0100 or a@b.example, key [secret]"


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"kinds": {"email", "names"}}, "unknown redaction kinds"),
        ({"patterns": {"Employee": r"E\d"}}, "name"),
        ({"patterns": {"any": r"\d*"}}, "empty string"),
        ({"patterns": {"broken": r"(\d"}}, "broken"),
        ({"functions": ["not a function"]}, "functions"),
    ],
)
def test_a_bad_redactor_is_a_configuration_error(options: dict[str, object], words: str) -> None:
    with pytest.raises(ConfigurationError, match=words):
        Redactor(**options)  # type: ignore[arg-type]


def test_the_kinds_are_documented_sets() -> None:
    assert {"email", "phone", "card", "ssn", "iban"} == DEFAULT_KINDS
    assert {"ip"} == OPT_IN_KINDS


# each a run that makes one pattern start (or almost match) at every position: read once, a
# megabyte of each is masked in about a second. "(1." took the phone pattern 5 s for 24,000
# characters (quadratic: hours for a megabyte) before it was bounded
ADVERSARIAL = [
    "(1.", "1-", "a-", "a@", "eyJ-", "eyJa.", "-----BEGIN PRIVATE KEY-----", "DE89 ", "1.",
    "1:", "f:", "123-45-", "key: ", "bearer ", "xoxb-", "+1 ",
]  # fmt: skip


@pytest.mark.parametrize("piece", ADVERSARIAL)
def test_a_megabyte_of_adversarial_text_is_read_once(piece: str) -> None:
    run = piece * (1_000_000 // len(piece))
    redactor = Redactor(DEFAULT_KINDS | OPT_IN_KINDS)
    assert redactor(f"{run}; write to bob@example.com").endswith("; write to [email]")


def test_captured_content_is_masked_on_spans_and_logs(
    fake: FakeProvider, make_guard: MakeGuard, caplog: pytest.LogCaptureFixture
) -> None:
    """Through the real OpenTelemetry SDK's in-memory exporters: the default masks the new
    kinds; a Redactor adds IP addresses and the application's own pattern."""
    prompt = (
        f"jwt {JWT}, ssn 123-45-6789, iban {IBANS[0]}, host 10.1.2.3, staff EMP-123456\n{PEM}\nend"
    )
    caplog.set_level(logging.DEBUG, logger="llmguard_sdk.calls")
    redactor = Redactor(DEFAULT_KINDS | {"ip"}, patterns={"employee_id": r"\bEMP-\d{6}\b"})
    for redact_option, expected in (
        ({}, "jwt [secret], ssn [ssn], iban [iban], host 10.1.2.3, staff EMP-123456\n"),
        (
            {"redact": redactor},
            "jwt [secret], ssn [ssn], iban [iban], host [ip], staff [employee_id]\n",
        ),
    ):
        caplog.clear()
        exported, meter_provider = exporters(capture_content=True, **redact_option)
        guard = make_guard(fake, telemetry=exported.telemetry)
        guard.chat([{"role": "user", "content": prompt}])
        spans = [s for s in exported.finished() if "gen_ai.input.messages" in (s.attributes or {})]
        captured = json.loads(str(spans[0].attributes["gen_ai.input.messages"]))  # type: ignore[index]
        assert captured[0]["parts"][0]["content"] == f"{expected}[secret]\nend"
        (record,) = [r for r in caplog.records if r.name == "llmguard_sdk.calls"]
        assert record.llmguard["prompt"] == f"{expected}[secret]\nend"  # type: ignore[attr-defined]
        everything = _everything_exported(exported, caplog.records)
        for secret in (JWT, "123-45-6789", IBANS[0], "MIIEowIBAAKCAQEA"):
            assert secret not in everything
        meter_provider.shutdown()
        exported.tracer_provider.shutdown()


# the phone pattern before each run was read once (quadratic on "(1.(1.(1."), and its masking
_QUADRATIC_PHONE = re.compile(r"(?<![\w.])\+?\d[\d \-().]{7,}\d(?![\w.])")
_PHONE_PIECES = [
    "1",
    "23",
    "456",
    "7890",
    " ",
    "-",
    "(",
    ")",
    ".",
    "+",
    "a",
    "  ",
    "\n",
    "_",
    "\u0663",
]


def _as_before(match: re.Match[str]) -> str:
    text = match.group(0)
    digits = re.sub(r"\D", "", text)
    shortest = 8 if text.startswith("+") else 10
    return "[phone]" if shortest <= len(digits) <= 15 else text


def test_phone_numbers_are_masked_exactly_as_the_quadratic_pattern_masked_them() -> None:
    draw = random.Random(7)
    for _ in range(20_000):
        text = "".join(draw.choice(_PHONE_PIECES) for _ in range(draw.randint(1, 16)))
        assert redaction._mask_phones(text) == _QUADRATIC_PHONE.sub(_as_before, text), text
