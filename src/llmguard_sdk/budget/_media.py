"""What a request's images and input audio add to its budget hold: an upper bound of their tokens.

The SDK counts a request's text (:func:`~llmguard_sdk.tokens.count_request_tokens`); its
hold adds, for each route's model, the tokens its image and audio parts may be billed:

* An image part (chat's ``image_url``, Responses' ``input_image``, Anthropic's ``image``),
  by OpenAI's documented rule: ``detail: "low"``, 85 tokens; otherwise 85 tokens and 170 per
  512-px tile of the image fitted in 2048 x 2048 with its shorter side at most 768 px. The
  size of a data URL's PNG, GIF, WebP or JPEG is read from its first bytes (at most 64 KiB
  decoded); an image of unknown size (a URL, another format) counts 1,536 tokens, the most
  one image can count by this rule (1,445: a 2048 x 768 image) or by OpenAI's patch rule
  (1,536 patches of 32 px). Models with a rule of their own: ``gpt-4o-mini`` counts 2,833
  tokens and 5,667 per tile (2,833 at ``"low"``); OpenAI's patch-based models, the ``-mini``
  and ``-nano`` models from ``gpt-4.1`` on and ``o4-mini``, count their 32-px patches (at
  most 1,536) times 1.62, 2.46 and 1.72, whatever the detail; Claude counts width x height /
  750, at most 1,600 (unknown size: 1,600), whatever the detail.
* An ``input_audio`` part (base64 ``data``): 32 tokens per second (Gemini's documented rate,
  the highest a provider publishes; OpenAI's audio models count fewer), its duration from its
  WAV header's byte rate, else its MP3 frames' (a Xing, Info or VBRI header's frame count,
  else the first frame's bitrate over the whole), else its length at 1,000 bytes a second
  (8 kbit/s: MP3's lowest bitrate). They are held at the model's input audio rate.

Other parts (files, documents, audio by reference) are not counted. An attempt the provider
reported no usage for (cut off, timed out after its request went out) is charged with the
same counts beside the SDK's count of its text (:meth:`Media.counted_in`).

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import binascii
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..models import ChatRequest, Usage

__all__ = ["Media", "request_media"]

Size = tuple[int, int] | None
_HEAD = 64 * 1024  # bytes of an image decoded at most to find its size
_UNSIZED = 1536  # OpenAI's most for one image: 1,536 patches (tiles: 85 + 8 x 170 = 1,445)
_CLAUDE_MOST = 1600
_AUDIO_TOKENS_PER_SECOND = 32
_LOWEST_BYTE_RATE = 1000  # 8 kbit/s
_PATCH_MODEL = re.compile(r"gpt-\d[\d.]*-(mini|nano)")
_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}  # JPEG frame headers
# MPEG audio layer III bitrates (kbit/s) by bitrate index: MPEG-1, then MPEG-2 and 2.5
_MP3_KBPS = (
    (0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320),
    (0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160),
)
_MP3_RATES = {3: (44100, 48000, 32000), 2: (22050, 24000, 16000), 0: (11025, 12000, 8000)}


@dataclass(frozen=True)
class Media:
    """A request's images (each ``(detail, size)``), its input audio in seconds, and whether
    it asks for an answer in audio (``modalities`` with ``"audio"``, or ``audio``)."""

    images: tuple[tuple[str, Size], ...] = ()
    audio_seconds: float = 0.0
    speaks: bool = False

    def tokens(self, model: str | None) -> tuple[int, int]:
        """(image tokens, audio tokens) of these parts at most, as ``model`` counts them."""
        name = (model or "").lower().rpartition("/")[2]
        images = sum(_image_tokens(name, detail, size) for detail, size in self.images)
        return images, math.ceil(self.audio_seconds * _AUDIO_TOKENS_PER_SECOND)

    def counted_in(self, usage: Usage, model: str | None) -> Usage:
        """``usage`` as the SDK counted it (the text alone: an attempt the provider reported
        no usage for) with these parts counted as the hold counts them for ``model``: the
        image and audio tokens among the input tokens (the audio ones as such), and every
        output token as audio when the answer was asked in audio."""
        images, heard = self.tokens(model)
        if not (images or heard or self.speaks):
            return usage
        update = {
            "input_tokens": usage.input_tokens + images + heard,
            "audio_input_tokens": usage.audio_input_tokens + heard,
        }
        if self.speaks:
            update["audio_output_tokens"] = usage.output_tokens
        return usage.model_copy(update=update)


def request_media(request: ChatRequest) -> Media:
    """The image and audio parts of ``request``'s messages (see the module docs)."""
    images: list[tuple[str, Size]] = []
    seconds = 0.0
    for message in request.messages:
        if not isinstance(message.content, list):
            continue
        for part in message.content:
            kind = part.get("type")
            if kind in ("image_url", "input_image", "image"):
                images.append(_image(part))
            elif kind == "input_audio":
                seconds += _audio_seconds(part.get("input_audio"))
    extra = request.extra_body or {}
    modalities = extra.get("modalities")
    audio = extra.get("audio")
    speaks = (audio is not None and isinstance(audio, Mapping)) or (
        isinstance(modalities, list) and "audio" in modalities
    )
    if not images and not seconds and not speaks:
        return _NONE
    return Media(tuple(images), seconds, speaks)


_NONE = Media()


# -- images ---------------------------------------------------------------------------------


def _image(part: Mapping[str, Any]) -> tuple[str, Size]:
    """``(detail, size)`` of an image part of any of the shapes taken."""
    url: object = part.get("image_url")
    detail: object = part.get("detail")
    if isinstance(url, Mapping):  # chat's {"url": ..., "detail": ...}
        chat: Mapping[str, object] = url
        url, detail = chat.get("url"), chat.get("detail")
    source = part.get("source")
    if isinstance(source, Mapping) and source.get("type") == "base64":  # Anthropic's
        url = f"data:{source.get('media_type')};base64,{source.get('data')}"
    size = _image_size(url) if isinstance(url, str) else None
    return (detail if isinstance(detail, str) else "auto"), size


def _image_tokens(name: str, detail: str, size: Size) -> int:
    if "claude" in name:
        return _CLAUDE_MOST if size is None else min(_CLAUDE_MOST, math.ceil(_area(size) / 750))
    patches = _UNSIZED if size is None else _patches(size)
    if name.startswith("o4-mini"):
        return math.ceil(patches * 1.72)
    if name.startswith("gpt-4o-mini"):
        return 2833 + (0 if detail == "low" else 5667 * (8 if size is None else _tiles(size)))
    patch_model = _PATCH_MODEL.match(name)
    if patch_model is not None:
        return math.ceil(patches * (1.62 if patch_model.group(1) == "mini" else 2.46))
    if detail == "low":
        return 85
    return _UNSIZED if size is None else 85 + 170 * _tiles(size)


def _area(size: tuple[int, int]) -> int:
    return size[0] * size[1]


def _tiles(size: tuple[int, int]) -> int:
    """OpenAI's 512-px tiles of an image fitted in 2048 x 2048, its shorter side at most 768."""
    width, height = float(size[0]), float(size[1])
    scale = min(1.0, 2048 / max(width, height))
    width, height = width * scale, height * scale
    scale = min(1.0, 768 / min(width, height))
    return math.ceil(width * scale / 512) * math.ceil(height * scale / 512)


def _patches(size: tuple[int, int]) -> int:
    """OpenAI's 32-px patches of an image (an image of more is scaled down to 1,536)."""
    return min(_UNSIZED, math.ceil(size[0] / 32) * math.ceil(size[1] / 32))


def _image_size(url: str) -> Size:
    """The size of a data URL's image from its first bytes (None: not read)."""
    if not url.startswith("data:"):
        return None
    comma = url.find(",", 0, 256)  # (the data is not copied: it may be megabytes)
    if comma < 0 or not url[:comma].endswith(";base64"):
        return None
    head = _decoded(url, 0, _HEAD, comma + 1)
    if head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR":
        found = (_big(head, 16, 4), _big(head, 20, 4))
    elif head[:6] in (b"GIF87a", b"GIF89a"):
        found = (_little(head, 6, 2), _little(head, 8, 2))
    elif head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        found = _webp(head)
    elif head[:2] == b"\xff\xd8":
        found = _jpeg(head)
    else:
        return None
    return found if found[0] > 0 and found[1] > 0 else None


def _webp(head: bytes) -> tuple[int, int]:
    chunk = head[12:16]
    if chunk == b"VP8 " and head[23:26] == b"\x9d\x01\x2a":
        return _little(head, 26, 2) & 0x3FFF, _little(head, 28, 2) & 0x3FFF
    if chunk == b"VP8L" and head[20:21] == b"\x2f":
        bits = _little(head, 21, 4)
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8X":
        return _little(head, 24, 3) + 1, _little(head, 27, 3) + 1
    return 0, 0


def _jpeg(head: bytes) -> tuple[int, int]:
    """A JPEG's size from its frame header, walking its segments (0, 0: not within ``head``)."""
    at = 2
    while at + 9 <= len(head) and head[at] == 0xFF:
        marker = head[at + 1]
        if marker == 0xFF:  # fill
            at += 1
        elif marker in _SOF:
            return _big(head, at + 7, 2), _big(head, at + 5, 2)
        elif 0xD0 <= marker <= 0xD8 or marker == 0x01:  # no length
            at += 2
        else:
            at += 2 + _big(head, at + 2, 2)
    return 0, 0


# -- audio ----------------------------------------------------------------------------------


def _audio_seconds(audio: object) -> float:
    """An ``input_audio``'s duration at most, in seconds (0: no base64 ``data``)."""
    data = audio.get("data") if isinstance(audio, Mapping) else None
    if not isinstance(data, str) or not data:
        return 0.0
    size = (len(data) - (data[-2:].count("="))) * 3 // 4  # (not copied: it may be megabytes)
    head = _decoded(data, 0, 4096)
    if head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        rate = _wav_byte_rate(head)
        if rate:
            return size / rate
    start = 0
    if head[:3] == b"ID3":  # an ID3v2 tag (a cover image, say) before the first frame
        start = 10 + sum((byte & 0x7F) << (7 * (3 - i)) for i, byte in enumerate(head[6:10]))
        head = _decoded(data, start, 4096)
    seconds = _mp3_seconds(head, size - start)
    return seconds if seconds is not None else size / _LOWEST_BYTE_RATE


def _wav_byte_rate(head: bytes) -> int:
    at = 12
    while at + 8 <= len(head):
        chunk, length = head[at : at + 4], _little(head, at + 4, 4)
        if chunk == b"fmt " and length >= 16:
            return _little(head, at + 16, 4)
        at += 8 + length + (length & 1)
    return 0


def _mp3_seconds(head: bytes, size: int) -> float | None:
    """Seconds of MPEG layer III audio of ``size`` bytes whose first frame is in ``head``."""
    at = next(
        (i for i in range(min(len(head) - 4, 1024)) if head[i] == 0xFF and head[i + 1] >= 0xE0),
        None,
    )
    if at is None:
        return None
    version, layer = (head[at + 1] >> 3) & 3, (head[at + 1] >> 1) & 3
    index, rate_index = head[at + 2] >> 4, (head[at + 2] >> 2) & 3
    if version == 1 or layer != 1 or not 0 < index < 15 or rate_index == 3:
        return None
    sample_rate = _MP3_RATES[version][rate_index]
    per_frame = 1152 if version == 3 else 576
    mono = head[at + 3] >> 6 == 3
    side = (17 if mono else 32) if version == 3 else (9 if mono else 17)
    tag = at + 4 + side
    frames = 0
    if head[tag : tag + 4] in (b"Xing", b"Info") and _big(head, tag + 4, 4) & 1:
        frames = _big(head, tag + 8, 4)
    elif head[at + 36 : at + 40] == b"VBRI":
        frames = _big(head, at + 50, 4)
    if frames:
        return frames * per_frame / sample_rate
    kbps = _MP3_KBPS[version != 3][index]
    return size * 8 / (kbps * 1000)


# -- bytes ----------------------------------------------------------------------------------


def _decoded(data: str, start: int, length: int, offset: int = 0) -> bytes:
    """Bytes ``start`` to ``start + length`` of the base64 text at ``offset`` in ``data``,
    decoding only those."""
    first = offset + start // 3 * 4
    text = data[first : first + (length // 3 + 2) * 4]
    text = text[: len(text) - len(text) % 4]
    try:
        return binascii.a2b_base64(text)[start % 3 : start % 3 + length]
    except (binascii.Error, ValueError):
        return b""


def _big(data: bytes, at: int, length: int) -> int:
    return int.from_bytes(data[at : at + length], "big")


def _little(data: bytes, at: int, length: int) -> int:
    return int.from_bytes(data[at : at + length], "little")
