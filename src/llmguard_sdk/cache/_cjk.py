"""Chinese and Japanese read together, as the false-hit guards read any text: Japanese
function words (:mod:`._japanese`'s particles and auxiliaries), katakana loanwords in their
standard spelling, and the kinds of question either language asks (:mod:`._chinese`'s
question particle 吗 included). Text of other languages passes through unchanged.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

from . import _chinese, _japanese

__all__ = ["asks", "question_kind", "unparticled"]


def unparticled(text: str) -> str:
    """``text`` in its standard katakana spelling (:func:`._japanese.standard_katakana`), its
    Japanese function words as spaces (:func:`._japanese.unparticled`); other text as it
    is (the Chinese particles are function words by themselves: :data:`._words.
    CHINESE_FUNCTION`)."""
    return _japanese.unparticled(_japanese.standard_katakana(text))


def question_kind(text: str, english: str) -> str:
    """The kind of question ``text`` asks: ``english`` (the kind its English words say), or
    where that is ``other``, the kind a Japanese or Chinese question is of."""
    return _chinese.question_kind(text, _japanese.question_kind(text, english))


def asks(text: str) -> bool:
    """Whether ``text`` is a Japanese or Chinese question (or a Japanese request) without a
    question mark: it ends with か, ください or 吗."""
    return _japanese.asks(text) or _chinese.asks(text)
