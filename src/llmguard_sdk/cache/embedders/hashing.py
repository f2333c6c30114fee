"""The dependency-free default embedder: hashed words, word pairs and character n-grams,
weighted by rarity (see :mod:`llmguard_sdk.cache.embedders`)."""

from __future__ import annotations

import itertools
import math
import re
import unicodedata
import zlib
from collections.abc import Iterable, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING

from ..._lazy import np
from ...errors import ConfigurationError
from ...tokens import cl100k_encoding
from .._japanese import function_spans, standard_katakana, unparticled
from .._words import ASCII_WORD, CJK
from .base import finite_number, normalise, whole_number

if TYPE_CHECKING:
    import numpy.typing as npt

    from .base import Vectors

__all__ = ["HashingEmbedder"]

_WORD_CACHE_SIZE = 16_384  # words (and word pairs) kept with their hashed contributions (about
# 10 MB and 3 MB at most)
# Han and hiragana (Chinese; Japanese's kanji with their endings and particles) run without
# spaces: a run of them is read as its character bigrams (see _unspaced), a bigram of
# hiragana at a quarter of its weight (Japanese writes its grammar in hiragana, its content
# in kanji and katakana). A run of katakana is a word (a loanword: "インストール"), as a
# Latin one is, its final "ー" dropped from three morae on ("コンピューター" is "コンピュータ":
# ``_japanese.standard_katakana``). Japanese particles and auxiliaries
# (``_japanese.function_spans``: "の", "は", "です", "ください") part a run, each a word at
# that quarter weight, in no word pair: "東京の人口" reads "東京", "人口" and "の", as
# "Tokyo's population" would. (Not the Chinese question particle "吗": see ``_chinese``.)
_UNSPACED_CHARACTERS = "\u3041-\u309f\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_KATAKANA = "\u30a1-\u30fa\u30fc-\u30ff"  # (not "・", which parts words)
_UNSPACED = re.compile(f"[{_UNSPACED_CHARACTERS}]")
_HIRAGANA = re.compile("[\u3041-\u309f]+")
_HIRAGANA_WEIGHT = 0.25
# Else letters and digits of every script (on ASCII text, what [a-z0-9]+(?:'[a-z]+)? read: v1
# read nothing else, so a Russian or Chinese question embedded as its Latin words and numbers
# alone; v2 read a run of Han and kana as one word, so two Chinese questions one character
# apart shared nothing but a few character n-grams).
_WORD = re.compile(rf"[{_UNSPACED_CHARACTERS}]+|[{_KATAKANA}]+|[^\W_{CJK}]+(?:'[^\W\d_{CJK}]+)?")


@lru_cache(maxsize=_WORD_CACHE_SIZE)
def _rarity(word: str) -> float:
    """About 0.1 for the commonest words, 1 for rare ones (several tokens)."""
    encoding = cl100k_encoding()
    if encoding is None:
        return 1.0 if len(word) > 3 else 0.3
    if word.isdigit():  # cl100k encodes " 4417" as " ", "441", "7"
        return 1.0 + 0.1 * -(-len(word) // 3)  # (a new order number, say: no encoder call)
    tokens = encoding.encode(" " + word, disallowed_special=())
    if len(tokens) != 1:
        return 1.0 + 0.1 * (len(tokens) - 1)
    return max(0.05, math.log1p(tokens[0]) / math.log(100_000))


@lru_cache(maxsize=_WORD_CACHE_SIZE)
def _stem(word: str) -> str:
    for suffix in ("ingly", "edly", "ing", "ed", "es", "s", "ly"):
        if len(word) > len(suffix) + 3 and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


class HashingEmbedder:
    """The dependency-free default embedder (see the module docs).

    Args:
        dimension: number of hashed dimensions (1024 keeps collisions rare for sentences).
        ngram_sizes: character n-gram lengths taken inside each word (spelling variants,
            inflections and compounds still overlap). Chinese and Japanese, written without
            spaces, are read as overlapping character bigrams (a katakana word whole).
        char_weight / pair_weight: weight of a word's character n-grams and of adjacent word
            pairs, relative to the word itself.
    """

    def __init__(
        self,
        dimension: int = 1024,
        *,
        ngram_sizes: Sequence[int] = (3, 4, 5),
        char_weight: float = 0.5,
        pair_weight: float = 0.5,
    ) -> None:
        if not whole_number(dimension) or dimension < 16:
            raise ConfigurationError(
                f"HashingEmbedder dimension must be a whole number >= 16, got {dimension!r}"
            )
        listed = isinstance(ngram_sizes, Iterable) and not isinstance(ngram_sizes, str | bytes)
        lengths = tuple(ngram_sizes) if listed else ()
        if not lengths or not all(whole_number(n) and n >= 2 for n in lengths):
            raise ConfigurationError(
                f"ngram_sizes must be lengths of 2 or more, got {ngram_sizes!r}"
            )
        for option, weight in (("char_weight", char_weight), ("pair_weight", pair_weight)):
            if not finite_number(weight) or weight < 0:  # (NaN made every vector NaN)
                raise ConfigurationError(f"{option} must be a finite number >= 0, got {weight!r}")
        self.dimension = int(dimension)
        self._sizes = tuple(sorted({int(n) for n in lengths}))
        self._char_weight = char_weight
        self._pair_weight = pair_weight
        self._words: dict[str, tuple[npt.NDArray[np.intp], npt.NDArray[np.float32]]] = {}
        self._pairs: dict[tuple[str, str], tuple[int, float]] = {}
        sizes = "".join(str(n) for n in self._sizes)
        self.name = f"hashing-v3-d{dimension}-n{sizes}-c{char_weight:g}-p{pair_weight:g}"

    def __repr__(self) -> str:
        return f"HashingEmbedder({self.name})"

    def _bucket(self, feature: str) -> tuple[int, float]:
        """The dimension a feature hashes to, and its sign."""
        h = zlib.crc32(feature.encode("utf-8"))
        return h % self.dimension, 1.0 if h & 0x80000000 else -1.0

    def _word(self, word: str) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.float32]]:
        """A word's own contributions (the word, its character n-grams), computed once."""
        known = self._words.get(word)
        if known is not None:
            return known
        weight = _rarity(word)
        if _HIRAGANA.fullmatch(word) is not None:
            weight *= _HIRAGANA_WEIGHT
        features = [f"w{_stem(word)}"]
        weights = [weight]
        if self._char_weight and _UNSPACED.match(word) is None:  # (not a bigram's: the
            # bigram again)
            padded = f"<{word}>"
            grams = [padded[i : i + n] for n in self._sizes for i in range(len(padded) - n + 1)]
            share = weight * self._char_weight / math.sqrt(len(grams) or 1)
            features += ["c" + gram for gram in grams]
            weights += [share] * len(grams)
        # _bucket's dimension and sign, for every feature (the weight rounded to float32,
        # then signed: the same values as signing the float32 weight)
        hashes = [zlib.crc32(feature.encode("utf-8")) for feature in features]
        dimension = self.dimension
        found = (
            np.array([h % dimension for h in hashes], dtype=np.intp),
            np.array(
                [w if h & 0x80000000 else -w for h, w in zip(hashes, weights, strict=True)],
                dtype=np.float32,
            ),
        )
        if len(self._words) >= _WORD_CACHE_SIZE:
            self._words.clear()
        self._words[word] = found
        return found

    def embed(self, texts: Sequence[str]) -> Vectors:
        """Hash each text into a unit vector (see the class docs)."""
        if len(texts) == 1:  # one text (a cache's query): its row normalised on its own
            return _unit(self._counts(texts[0]))[None, :]
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for row, text in enumerate(texts):
            out[row] = self._counts(text)
        return normalise(out)

    def _counts(self, text: str) -> npt.NDArray[np.float32]:
        """The summed contributions of one text's words and word pairs (not normalised)."""
        text = standard_katakana(unicodedata.normalize("NFKC", text).lower())
        particles = [text[start:end] for start, end in function_spans(text)]  # (Japanese)
        if text.isascii():
            words = ASCII_WORD.findall(text)  # (what _WORD finds there)
        else:
            words = _WORD.findall(unparticled(text) if particles else text)
        if not text.isascii() and _UNSPACED.search(text) is not None:  # (Chinese, Japanese)
            words = _unspaced(words)
        if not words and not particles:
            return np.zeros(self.dimension, dtype=np.float32)
        known, pairs = self._words, self._pairs  # (dict reads first: most words are known)
        buckets, values = zip(
            *[known.get(word) or self._word(word) for word in words],
            *map(self._particle, particles),
            strict=True,
        )
        if self._pair_weight and len(words) > 1:
            pair_buckets, pair_values = zip(
                *[pairs.get(pair) or self._pair(*pair) for pair in itertools.pairwise(words)],
                strict=True,
            )
            buckets += (np.array(pair_buckets, dtype=np.intp),)
            values += (np.array(pair_values, dtype=np.float32),)
        # every contribution summed at once (np.add.at per word is slow), as float64
        return np.bincount(
            np.concatenate(buckets), weights=np.concatenate(values), minlength=self.dimension
        ).astype(np.float32)

    def _particle(self, word: str) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.float32]]:
        """A Japanese function word's contributions: at the weight of a hiragana bigram
        ("何" as a question's predicate too)."""
        buckets, values = self._words.get(word) or self._word(word)
        return buckets, values if _HIRAGANA.fullmatch(word) else values * _HIRAGANA_WEIGHT

    def _pair(self, first: str, second: str) -> tuple[int, float]:
        """An adjacent word pair's dimension and signed weight (computed once)."""
        known = self._pairs.get((first, second))
        if known is not None:
            return known
        bucket, sign = self._bucket(f"b{_stem(first)} {_stem(second)}")
        found = bucket, sign * min(_rarity(first), _rarity(second)) * self._pair_weight
        if len(self._pairs) >= _WORD_CACHE_SIZE:
            self._pairs.clear()
        self._pairs[first, second] = found
        return found


def _unspaced(words: list[str]) -> list[str]:
    """``words`` with each run of Han and hiragana read as its overlapping character bigrams
    (one character alone as itself): Chinese and Japanese run without spaces, so a run is a
    clause, and a question differing from another in one character shares most of its
    bigrams with it (as CJK search engines index them, Lucene's CJKAnalyzer)."""
    read: list[str] = []
    for word in words:
        if len(word) > 2 and _UNSPACED.match(word) is not None:
            read += [word[i : i + 2] for i in range(len(word) - 1)]
        else:
            read.append(word)
    return read


def _unit(vector: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """:func:`~llmguard_sdk.cache.embedders.base.normalise` of one row (the same values:
    numpy's sum of the squares, its square root correctly rounded to float32)."""
    norm = math.sqrt(float(np.add.reduce(vector * vector)))
    unit: npt.NDArray[np.float32] = vector / np.float32(norm or 1.0)
    return unit
