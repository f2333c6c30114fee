"""A provider's error that quotes the prompt (a 400 naming the offending input) reaches the
spans' status and ``exception`` events: with ``capture_content`` off, the e-mail addresses,
phone and card numbers in it are masked there as captured content is; they were exported."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from llmguard_sdk import Guard, ProviderError
from llmguard_sdk.testing import FakeProvider, Fault

from .test_telemetry import Exported, exporting

MakeGuard = Callable[..., Guard]
otel = pytest.fixture(exporting, name="otel")

EMAIL, PHONE, CARD = "bob.smith@example.com", "+1 415 555 0134", "4111 1111 1111 1111"
PROMPT = f"Write to {EMAIL}, call {PHONE}, charge {CARD}."


def test_personal_data_a_provider_error_quotes_is_masked_on_spans(
    fake: FakeProvider, make_guard: MakeGuard, otel: Exported
) -> None:
    guard = make_guard(fake, telemetry=otel.telemetry, retry=None)
    fake.always(Fault(status=400, error_message=f"Invalid content: '{PROMPT}'"))
    with pytest.raises(ProviderError) as raised:
        guard.chat([{"role": "user", "content": PROMPT}])
    assert EMAIL in str(raised.value)  # the caller's own exception keeps the provider's words
    texts = []
    for span in otel.finished():
        texts.append(span.status.description or "")
        texts.extend(str(event.attributes) for event in span.events)
    exported = "\n".join(texts)
    assert "Invalid content" in exported  # the message is still there
    assert "[email]" in exported
    for personal in (EMAIL, PHONE, CARD):
        assert personal not in exported, personal
