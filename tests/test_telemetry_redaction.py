"""redact_secrets: the quick test that skips the patterns for text none of them can match
(response ids) masks exactly what running every pattern masks."""

from __future__ import annotations

import random

import pytest

from llmguard_sdk.telemetry import redaction
from llmguard_sdk.telemetry.redaction import redact_secrets, register_secret

# pieces that make the patterns match, almost match, or not: their prefixes, separators,
# every kind of space (a no-break space too), long runs of key characters
_PIECES = (
    "sk-", "sk", "AKIA", "ASIA", "ghp", "gho", "github_pat", "xoxb", "xoxz", "_", "-", ":",
    "=", '"', " ", "\t", "\n", "\u00a0", "\u2003", "Bearer", "basic", "BEARER", "key",
    "api_key", "Access-Token", "password", "secret", "token", "abcdefgh", "ABCDEFGHIJKLMNOP",
    "0123456789", "chatcmpl", "msg", "x", ".", "/", "+", "&", ",", ";", "eyJ", "eyJhbGci",
    "xoxb-", "xapp-", "AIza", "ghs", "-----BEGIN PRIVATE KEY-----", "-----END EC PRIVATE KEY-----",
    "PRIVATE KEY", "secret_access_key", "client_secret",
)  # fmt: skip


def _every_pattern(text: str) -> str:
    """``text`` through every secret pattern (private key blocks too), skipping none."""
    return redaction._mask_all(text)


def test_text_no_pattern_can_match_comes_back_as_it_is() -> None:
    for text in ("chatcmpl-9f8e7d6c5b4a3f2e1d0c", "resp-0123456789abcdef", "abc.def/ghi+jkl"):
        assert redact_secrets(text) is text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("id-sk-abcdefghijklmnop", "id-[secret]"),
        ("AKIAABCDEFGHIJKLMNOP", "[secret]"),
        ("ghp_abcdefghijklmnop", "[secret]"),
        ("Bearer\u00a0abcdefgh", "Bearer [secret]"),
        ('api_key:"abcdefghij"', 'api_key:"[secret]"'),
        ("token=abcdefghij", "token=[secret]"),
    ],
)
def test_each_credential_form_is_still_masked(text: str, expected: str) -> None:
    assert redact_secrets(text) == expected


def test_the_quick_test_masks_what_every_pattern_masks() -> None:
    draw = random.Random(22)
    for _ in range(5000):
        text = "".join(draw.choice(_PIECES) for _ in range(draw.randint(1, 8)))
        assert redact_secrets(text) == _every_pattern(text), text


def test_a_registered_secret_is_masked_in_text_without_a_pattern() -> None:
    register_secret("chatcmpl-private-value")
    try:
        assert redact_secrets("id chatcmpl-private-value") == "id [secret]"
        assert redact_secrets("chatcmpl-private-value") == "[secret]"
    finally:
        redaction._registered.discard("chatcmpl-private-value")


@pytest.mark.parametrize(
    "text",
    [
        "What is the price of the basic plan?",  # the eval sink replayed "... basic [secret]?"
        "Explain basic arithmetic to a child",
        "BASIC programs from the eighties",
        "basic words first",  # five letters: no base64 is that long
    ],
)
def test_the_word_basic_in_prose_is_no_credential(text: str) -> None:
    assert redact_secrets(text) == text


@pytest.mark.parametrize(
    "credential",
    ["dXNlcjpwYXNz", "YWxhZGRpbjpvcGVuc2VzYW1l", "dXNlcjpwYXNzd29yZA==", "dXNlcjpwYXNzd29yZA"],
)
def test_basic_credentials_are_masked(credential: str) -> None:
    """What follows ``Basic`` is base64 of ``user:password`` (padded or not)."""
    assert redact_secrets(f"Authorization: Basic {credential}") == "Authorization: Basic [secret]"
    assert credential not in redact_secrets(f"sent basic {credential} to the proxy")


# a long run of address characters with no "@" (a slug, a dotted path, a hyphenated key):
# each position of it was a new start of the e-mail pattern, which scanned the rest of the
# run again (quadratic: 2.7 s of CPU for 40,000 characters, about 70 s for these 200,000)
LONG_RUNS = ["a-" * 100_000, "a." * 100_000, "1-" * 100_000]


@pytest.mark.parametrize("run", LONG_RUNS, ids=["hyphens", "dots", "digits"])
def test_a_long_run_without_an_address_is_read_once(run: str) -> None:
    text = f"{run} then write to bob@example.com"
    assert redaction.redact(text) == f"{run} then write to [email]"


def test_an_address_is_masked_whole_from_the_start_of_its_run() -> None:
    assert redaction.redact("cc:-bob.smith+tag@example.co.uk.") == "cc:[email]."
