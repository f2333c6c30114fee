"""BERT's WordPiece tokenizer, read from a model's ``vocab.txt``: pure Python, no download.

It follows the reference (``BertTokenizer`` of Hugging Face transformers): clean the text
(drop control characters, turn whitespace into spaces), put spaces around CJK ideographs,
lower-case and strip accents when the model is uncased, split on whitespace and punctuation,
then cut each word into the longest pieces found in the vocabulary (``##`` marks a piece that
continues a word; a word that cannot be cut becomes ``[UNK]``).

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path

from ...errors import ConfigurationError

__all__ = ["WordPieceTokenizer"]

_MAX_WORD_CHARS = 100
# Runs of what the cleaning does not turn into a space (tab, newline, carriage return and
# Unicode's Zs are spaces), found one at a time.
_UNSPACED = re.compile("[^ \t\n\r\u00a0\u1680\u2000-\u200a\u202f\u205f\u3000]+")


def _is_punctuation(char: str) -> bool:
    code = ord(char)
    if 33 <= code <= 47 or 58 <= code <= 64 or 91 <= code <= 96 or 123 <= code <= 126:
        return True
    return unicodedata.category(char).startswith("P")


def _is_cjk(code: int) -> bool:
    return (
        0x4E00 <= code <= 0x9FFF
        or 0x3400 <= code <= 0x4DBF
        or 0x20000 <= code <= 0x2A6DF
        or 0x2A700 <= code <= 0x2B81F
        or 0x2B820 <= code <= 0x2CEAF
        or 0xF900 <= code <= 0xFAFF
        or 0x2F800 <= code <= 0x2FA1F
    )


def _strip_accents(text: str) -> str:
    decomposed = unicodedata.normalize("NFD", text)
    return "".join(c for c in decomposed if unicodedata.category(c) != "Mn")


def _clean(text: str) -> str:
    out = []
    for char in text:
        code = ord(char)
        if code in (0, 0xFFFD):
            continue
        if char in " \t\n\r" or unicodedata.category(char) == "Zs":
            out.append(" ")
        elif unicodedata.category(char).startswith("C"):
            continue
        elif _is_cjk(code):
            out.append(f" {char} ")
        else:
            out.append(char)
    return "".join(out)


class WordPieceTokenizer:
    """Turns text into the token ids a BERT model expects, ``[CLS] ... [SEP]`` included.

    Args:
        vocab_path: the model's ``vocab.txt`` (one piece per line; the line number is its id).
        lowercase: True for uncased models (also strips accents, as the reference does).
    """

    def __init__(self, vocab_path: str | Path, *, lowercase: bool = True) -> None:
        try:
            pieces = Path(vocab_path).read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise ConfigurationError(f"cannot read the vocabulary: {exc}") from None
        self.vocab = {piece: index for index, piece in enumerate(pieces)}
        missing = [t for t in ("[CLS]", "[SEP]", "[UNK]") if t not in self.vocab]
        if missing:
            raise ConfigurationError(f"the vocabulary lacks {', '.join(missing)}")
        self.lowercase = lowercase
        self.cls_id = self.vocab["[CLS]"]
        self.sep_id = self.vocab["[SEP]"]
        self.unk_id = self.vocab["[UNK]"]
        self._word_ids = lru_cache(maxsize=50_000)(self._pieces)

    def word_ids(self, word: str) -> tuple[int, ...]:
        """The word-piece ids of one word (as :meth:`words` yields it)."""
        return self._word_ids(word)

    def words(self, text: str) -> Iterator[str]:
        """The text's words and punctuation marks, normalised as the model expects, in order
        (lazily: a caller that stops early leaves the rest of a long text unread)."""
        for unspaced in _UNSPACED.finditer(text):
            for chunk in _clean(unspaced.group()).split():
                if self.lowercase:
                    chunk = _strip_accents(chunk.lower())
                start = 0
                for i, char in enumerate(chunk):
                    if _is_punctuation(char):
                        if start < i:
                            yield chunk[start:i]
                        yield char
                        start = i + 1
                if start < len(chunk):
                    yield chunk[start:]

    def _pieces(self, word: str) -> tuple[int, ...]:
        """Greedy longest-match-first pieces of one word, or ``[UNK]``."""
        if len(word) > _MAX_WORD_CHARS:
            return (self.unk_id,)
        ids: list[int] = []
        start = 0
        while start < len(word):
            end = len(word)
            while end > start:
                piece = word[start:end] if start == 0 else f"##{word[start:end]}"
                found = self.vocab.get(piece)
                if found is not None:
                    ids.append(found)
                    break
                end -= 1
            else:
                return (self.unk_id,)
            start = end
        return tuple(ids)

    def encode(self, text: str, max_tokens: int = 512) -> list[int]:
        """Token ids of ``text`` between ``[CLS]`` and ``[SEP]``, cut to ``max_tokens`` in all."""
        if max_tokens < 2:
            raise ConfigurationError("max_tokens must leave room for [CLS] and [SEP]")
        ids = [self.cls_id]
        for word in self.words(text):
            ids.extend(self._word_ids(word))
            if len(ids) >= max_tokens - 1:
                del ids[max_tokens - 1 :]
                break
        ids.append(self.sep_id)
        return ids
