"""Chinese and Japanese read together, as the false-hit guards read any text: Japanese
function words (:mod:`._japanese`'s particles and auxiliaries), katakana loanwords in their
standard spelling, and the kinds of question either language asks (:mod:`._chinese`'s
question particle 吗 included). Text of other languages passes through unchanged.

.. versionadded:: 0.2.0
"""

# ruff: noqa: RUF001 (full-width punctuation, on purpose)

from __future__ import annotations

import re
import unicodedata

from . import _chinese, _japanese

__all__ = ["asks", "question_kind", "unparticled"]

# "…を教えて(ください)" (tell me ...) ending a request: its framing, as English "tell me"
_TELL_ME = re.compile(r"教えて(?=(?:ください|下さい)?[\s。.!！?？]*$)")


def unparticled(text: str) -> str:
    """``text`` in its NFKC form (half-width katakana full-width: "ﾊﾟｽﾜｰﾄﾞ" is "パスワード",
    as the embedders read it) and standard katakana spelling
    (:func:`._japanese.standard_katakana`), its Japanese function words as spaces
    (:func:`._japanese.unparticled`), and a request's closing "教えて" (tell me: "東京の天気を
    教えて") too, as the guards read English "tell"; a Chinese "A-not-A" question as its verb
    alone (:func:`._chinese.unasked`: "能不能退款" reads "能退款"); ASCII text as it is (the
    Chinese particles are function words by themselves: :data:`._words.CHINESE_FUNCTION`)."""
    if text.isascii():
        return text
    text = unicodedata.normalize("NFKC", text)
    if "教えて" in text:
        text = _TELL_ME.sub(" ", text)
    return _chinese.unasked(_japanese.unparticled(_japanese.standard_katakana(text)))


def question_kind(text: str, english: str) -> str:
    """The kind of question ``text`` asks: ``english`` (the kind its English words say), or
    where that is ``other``, the kind a Japanese or Chinese question is of."""
    return _chinese.question_kind(text, _japanese.question_kind(text, english))


def asks(text: str) -> bool:
    """Whether ``text`` is a Japanese or Chinese question (or a Japanese request) without a
    question mark: it ends with か, ください, 教えて, 方法 or 吗, or asks how (如何, 怎么)."""
    return _japanese.asks(text) or _chinese.asks(text)
