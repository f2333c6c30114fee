"""An attempt cut off without the provider's usage is charged for its images and audio too.

The hold of a call counts its images and input audio (``budget/_media.py``), but an attempt
cut off before the provider reported its usage (a call that timed out after its request went
out, a stream cut off after content) was charged from the SDK's count of its text alone: a
call with four images settled some 60 tokens where the provider billed 6,000. Its estimate
now adds the media as the hold counts them: images and input audio among its input tokens
(the audio at the audio rate), and an answer asked in audio at the output audio rate.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from llmguard_sdk import Guard, OpenAICompatibleProvider, ProviderError, StreamInterruptedError
from llmguard_sdk.budget import Budget, Budgets, Price, PriceTable
from llmguard_sdk.testing import FakeProvider, Fault

from .test_budget_media import _png, _wav

GPT_4O_IMAGE = 1445  # OpenAI's tokens for a 2048 x 768 image (8 tiles), as the hold counts it
PRICES = PriceTable.default_table().with_prices(
    {
        "gpt-4o": Price(input=2.5, output=10.0),
        "gpt-audio": Price(input=2.5, output=10.0, input_audio=32.0, output_audio=64.0),
    }
)
QUESTION = {"type": "text", "text": "what is in it?"}


def _image(url: str) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": url}}


def _asking(*parts: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"role": "user", "content": [QUESTION, *parts]}]


def _spent_by(guard: Guard, call: Callable[[], None]) -> float:
    """What ``call`` added to the guard's global budget (all of it settled)."""
    (before,) = guard.budget_status()
    call()
    (after,) = guard.budget_status()
    assert after["held_usd"] == 0
    return float(after["spent_usd"] - before["spent_usd"])


def _guard(fake: FakeProvider, redis_url: str, prefix: str, **options: Any) -> Guard:
    return Guard(
        OpenAICompatibleProvider(fake.base_url, model=fake.model, name="openai"),
        store=redis_url,
        key_prefix=prefix,
        budgets=Budgets([Budget(limit_usd=10.0)], prices=PRICES),
        retry=None,
        environ={},
        **options,
    )


def test_a_call_cut_off_by_its_deadline_is_charged_for_its_image(
    redis_url: str, redis_prefix: str
) -> None:
    """The provider answers after the deadline: its request went out and is billed, its
    image with it (the same question without the image is charged that much less)."""
    with FakeProvider(model="gpt-4o") as fake:
        guard = _guard(fake, redis_url, redis_prefix, timeout=1.0)
        try:
            image = _image(_png(2048, 768))
            guard.chat(_asking(image), max_tokens=16)  # (the first call loads the encoding)
            fake.always(Fault(latency=2.0))

            def asked(messages: list[dict[str, Any]]) -> Callable[[], None]:
                def call() -> None:
                    with pytest.raises(ProviderError, match="waiting for the answer"):
                        guard.chat(messages, max_tokens=16)

                return call

            with_image = _spent_by(guard, asked(_asking(image)))
            text_alone = _spent_by(guard, asked(_asking()))
        finally:
            guard.close()
    assert text_alone > 0
    assert with_image - text_alone == pytest.approx(GPT_4O_IMAGE * 2.5 / 1e6)


def _cut_stream(
    guard: Guard, fake: FakeProvider, messages: Any, **options: Any
) -> Callable[[], None]:
    def call() -> None:
        fake.script(Fault(cut_stream_after=2))
        stream = guard.chat(messages, stream=True, max_tokens=16, **options)
        with stream, pytest.raises(StreamInterruptedError):
            list(stream)

    return call


def test_a_stream_cut_off_after_content_is_charged_for_its_input_audio(
    redis_url: str, redis_prefix: str
) -> None:
    """10 s of speech: 321 tokens (32 a second, as held) at gpt-audio's $32/M audio rate."""
    speech = {"type": "input_audio", "input_audio": {"data": _wav(10.0), "format": "wav"}}
    with FakeProvider(model="gpt-audio") as fake:
        guard = _guard(fake, redis_url, redis_prefix)
        try:
            with_audio = _spent_by(guard, _cut_stream(guard, fake, _asking(speech)))
            text_alone = _spent_by(guard, _cut_stream(guard, fake, _asking()))
        finally:
            guard.close()
    # (80,044 bytes at 16,000 a second: 321 tokens, as the hold counted them)
    assert with_audio - text_alone == pytest.approx(321 * 32.0 / 1e6)


def test_a_cut_off_answer_asked_in_audio_is_charged_at_the_output_audio_rate(
    redis_url: str, redis_prefix: str
) -> None:
    """Its delivered tokens are held and charged as audio: $64/M against $10/M as text."""
    spoken = {"extra_body": {"modalities": ["text", "audio"], "audio": {"format": "wav"}}}
    with FakeProvider(model="gpt-audio") as fake:
        guard = _guard(fake, redis_url, redis_prefix)
        try:
            as_audio = _spent_by(guard, _cut_stream(guard, fake, _asking(), **spoken))
            as_text = _spent_by(guard, _cut_stream(guard, fake, _asking()))
        finally:
            guard.close()
    delivered = (as_audio - as_text) / ((64.0 - 10.0) / 1e6)  # the output tokens counted
    assert delivered == pytest.approx(round(delivered))
    assert delivered >= 1
