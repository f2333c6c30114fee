"""A call's budget hold counts its images and its input audio, not its text alone.

40 calls at once with 4 images each were held for their text (some 20 tokens each) and
settled at what the provider billed for the images too: their budget of $0.05 settled far past
its cap. Each image is now held at what the route's model may bill for it (OpenAI's rule, its
size read from a data URL's header), input audio at 32 tokens a second at the model's audio
rate, and an answer asked in audio at the output audio rate.
"""

from __future__ import annotations

import base64
import io
import struct
import wave
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from llmguard_sdk import BudgetExceededError, Guard, OpenAICompatibleProvider
from llmguard_sdk.budget import Budget, Budgets
from llmguard_sdk.budget._media import Media, request_media
from llmguard_sdk.models import ChatRequest
from llmguard_sdk.testing import FakeProvider, Fault

from .conftest import genai_prices_or_skip

genai_prices_or_skip()

HELLO = [{"role": "user", "content": "say hello"}]
GPT_4O_IMAGE = 1445  # OpenAI's tokens for a 2048 x 768 image at detail "high" (8 tiles)


def _png(width: int, height: int) -> str:
    """A data URL of a PNG's first bytes (its header: all the size reading needs)."""
    head = b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR"
    head += struct.pack(">II", width, height) + b"\x08\x02\x00\x00\x00" + bytes(4)
    return "data:image/png;base64," + base64.b64encode(head).decode()


def _wav(seconds: float, rate: int = 16000) -> str:
    out = io.BytesIO()
    with wave.open(out, "wb") as sound:
        sound.setnchannels(1)
        sound.setsampwidth(2)
        sound.setframerate(rate)
        sound.writeframes(bytes(int(seconds * rate) * 2))
    return base64.b64encode(out.getvalue()).decode()


def _image(url: str, detail: str = "auto") -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": url, "detail": detail}}


FOUR_IMAGES = [
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "what differs between these?"},
            _image(_png(2048, 768)),
            _image(_png(2048, 768), "high"),
            _image("https://example.com/a.png"),  # size unknown: the most one image counts
            _image("https://example.com/b.png"),
        ],
    }
]


def _bills_images(body: dict[str, Any], counted: dict[str, Any]) -> dict[str, Any]:
    """The fake bills each image part as gpt-4o bills a 2048 x 768 one, as OpenAI does."""
    parts = [p for m in body["messages"] if isinstance(m["content"], list) for p in m["content"]]
    images = sum(p.get("type") == "image_url" for p in parts) * GPT_4O_IMAGE
    prompt = counted["prompt_tokens"] + images
    total = prompt + counted["completion_tokens"]
    return {**counted, "prompt_tokens": prompt, "total_tokens": total}


def _guard(fake: FakeProvider, redis_url: str, prefix: str, limit: float) -> Guard:
    return Guard(
        OpenAICompatibleProvider(fake.base_url, model=fake.model, name="openai"),
        store=redis_url,
        key_prefix=prefix,
        budgets=Budgets([Budget(limit_usd=limit)]),
        retry_budget=None,
        environ={},
    )


def test_forty_calls_with_four_images_each_stay_under_their_cap(
    redis_url: str, redis_prefix: str
) -> None:
    """Each call is billed some $0.0145 for its images; 40 of them at once settled $0.58
    on a $0.05 cap (11x). Held at their images' worst case, the calls that fit are served and
    the others refused before they are sent: the settled spend stays under the cap."""
    with FakeProvider(model="gpt-4o", usage=_bills_images) as fake:
        fake.always(Fault(latency=0.3))  # all 40 in flight at once
        guard = _guard(fake, redis_url, redis_prefix, 0.05)
        try:

            def call(_: int) -> float | None:
                try:
                    return guard.chat(FOUR_IMAGES, max_tokens=16).cost_usd
                except BudgetExceededError:
                    return None

            with ThreadPoolExecutor(40) as pool:
                costs = list(pool.map(call, range(40)))
            served = [cost for cost in costs if cost is not None]
            (row,) = guard.budget_status()
        finally:
            guard.close()
    assert served, "the calls that fit are served"
    assert len(served) < 40
    assert fake.stats.requests == len(served)  # the refused ones never went out
    assert min(served) > 4 * GPT_4O_IMAGE * 2.5 / 1e6  # each was billed its images
    assert row["spent_usd"] == pytest.approx(sum(served))
    assert row["spent_usd"] <= 0.05
    assert row["held_usd"] == 0


def test_input_audio_is_held_at_the_audio_rate(redis_url: str, redis_prefix: str) -> None:
    """30 s of speech is held as 960 tokens at gpt-audio's $32/M input audio rate ($0.031):
    a $0.02 budget refuses the call before it is sent (it was held as 20 text tokens and sent)."""
    speech = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "transcribe this"},
                {"type": "input_audio", "input_audio": {"data": _wav(30.0), "format": "wav"}},
            ],
        }
    ]
    with FakeProvider(model="gpt-audio") as fake:
        guard = _guard(fake, redis_url, redis_prefix, 0.02)
        try:
            with pytest.raises(BudgetExceededError, match="over the whole limit"):
                guard.chat(speech, max_tokens=16)
            assert fake.stats.requests == 0
            guard.chat([{"role": "user", "content": "hi"}], max_tokens=16)  # text alone fits
        finally:
            guard.close()


def test_an_answer_asked_in_audio_is_held_at_the_output_audio_rate(
    redis_url: str, redis_prefix: str
) -> None:
    """1,000 output tokens of gpt-audio: $0.01 as text, $0.064 as audio (its $64/M rate)."""
    with FakeProvider(model="gpt-audio") as fake:
        guard = _guard(fake, redis_url, redis_prefix, 0.05)
        try:
            assert guard.chat(HELLO, max_tokens=1000).text
            with pytest.raises(BudgetExceededError, match="over the whole limit"):
                guard.chat(
                    HELLO,
                    max_tokens=1000,
                    extra_body={"modalities": ["text", "audio"], "audio": {"format": "wav"}},
                )
            assert fake.stats.requests == 1
        finally:
            guard.close()


@pytest.mark.parametrize(
    ("model", "detail", "size", "tokens"),
    [
        ("gpt-4o", "low", None, 85),
        ("gpt-4o", "high", (1024, 1024), 765),  # 768 x 768: 4 tiles
        ("gpt-4o", "auto", (2048, 4096), 1105),  # 768 x 1536: 6 tiles
        ("gpt-4o", "auto", (2048, 768), GPT_4O_IMAGE),  # 8 tiles: the most
        ("gpt-4o", "auto", None, 1536),  # unknown size: 1,536 patches, the most of any rule
        ("openai/gpt-4o-mini", "auto", None, 2833 + 8 * 5667),
        ("gpt-4o-mini", "low", (4000, 4000), 2833),
        ("gpt-4.1-mini", "low", None, 2489),  # 1,536 patches x 1.62, whatever the detail
        ("gpt-5-nano", "auto", (64, 64), 10),  # 4 patches x 2.46
        ("o4-mini", "auto", (320, 320), 172),  # 100 patches x 1.72
        ("claude-sonnet-4-5", "low", (1092, 1092), 1590),  # width x height / 750
        ("claude-sonnet-4-5", "auto", None, 1600),
    ],
)
def test_each_image_counts_what_the_model_may_bill(
    model: str, detail: str, size: tuple[int, int] | None, tokens: int
) -> None:
    assert Media(images=((detail, size),)).tokens(model) == (tokens, 0)


def test_sizes_and_durations_are_read_from_the_parts() -> None:
    request = ChatRequest.model_validate(
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        _image(_png(300, 200), "low"),
                        {"type": "input_image", "image_url": _png(640, 480)},  # Responses' shape
                        {
                            "type": "image",  # Anthropic's shape
                            "source": {
                                "type": "base64",
                                "media_type": "image/png",
                                "data": _png(10, 20).partition(",")[2],
                            },
                        },
                        {
                            "type": "input_audio",
                            "input_audio": {"data": _wav(2.5), "format": "wav"},
                        },
                        {
                            "type": "input_audio",
                            "input_audio": {"data": "AAAA" * 250, "format": "mp3"},
                        },
                    ],
                }
            ]
        }
    )
    media = request_media(request)
    assert media.images == (("low", (300, 200)), ("auto", (640, 480)), ("auto", (10, 20)))
    # the WAV's duration from its byte rate; 750 bytes of no known format at 1,000 bytes/s
    assert media.audio_seconds == pytest.approx(2.5 + 0.75, abs=0.01)
    assert media.tokens("gpt-4o")[1] == 105  # 3.25 s (and the WAV's header) x 32 a second
    text = ChatRequest.model_validate({"messages": [{"role": "user", "content": "hi"}]})
    assert request_media(text) == Media()
