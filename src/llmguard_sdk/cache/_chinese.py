"""Chinese questions, for the false-hit guards: the question particle 吗 (嗎) that ends a
yes/no question, with or without a question mark, and the kinds of question Chinese asks.

"今天下雨吗" (is it raining today) is "今天下雨" (it is raining today) + "吗": a question
and a statement one particle apart, as English "is it raining" and "it is raining" are an
auxiliary apart. The particle is a function word to the guards (:data:`._words.
CHINESE_FUNCTION`) and says what kind of sentence it ends: a yes/no question, with a question
mark or without. Only a sentence-final 吗 is the particle: "吗啡" (morphine) holds the
character, and "干吗" (what ... doing) is an interrogative. (The hashing embedder reads it as
a character, in the bigram of the character before it: weighed as a Japanese particle, "取消
订单" / "我可以取消订单吗" and "附近有酒吗" / "附近有酒吧吗" came over the threshold, served
with the strict guards off.) A request asking how (如何, 怎么) or about a topic ("我的订单呢")
is a question without a question mark too.

.. versionadded:: 0.2.0
"""

# ruff: noqa: RUF001, RUF002, RUF003 (full-width punctuation, on purpose)

from __future__ import annotations

import re

from ._japanese import japanese

__all__ = ["A_NOT_A", "asks", "question_kind", "unasked"]

_HAN = re.compile("[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
A_NOT_A = re.compile(r"(?<!一)([\u4e00-\u9fff]{1,2})[不没沒]\1")
"""A verb or adjective, 不 / 没 and itself again: the "A-not-A" yes/no question ("能不能退款"
can I get a refund, "是不是免费" is it free, "有没有折扣" is there a discount, "喜欢不喜欢");
its 不 negates nothing. Not after 一 ("一动不动": motionless)."""
# 吗 / 嗎 ending the text (not "干吗" / "幹嗎": what ... doing)
_FINAL = re.compile(r"(?<![干幹])[吗嗎][\s?？。.!！,，;；]*$")
# interrogatives (what, who, which / where, how, why, how many, when); not "几乎"
# (almost), "哪怕" (even if)
_INTERROGATIVE = re.compile(
    "什么|什麼|甚么|啥|谁|誰|哪(?!怕)|怎|如何|为何|為何|何时|何時|何处|何處|几(?!乎)|幾(?!乎)"
    "|多少|多久|干吗|幹嗎|干嘛|幹嘛"
)
_TOPIC_ONLY = re.compile(r"呢\s*[?？]?\s*$")  # "我的订单呢？": what about my order
_QUESTION_MARK = re.compile(r"[?？]\s*$")
_HOW = re.compile("如何|怎")  # how: 怎么, 怎麼, 怎样, 怎樣


def _chinese(text: str) -> bool:
    return not text.isascii() and _HAN.search(text) is not None and not japanese(text)


def question_kind(text: str, english: str) -> str:
    """The kind of question ``text`` asks, as the strict guards name English ones:
    ``english`` (the kind its English words say), but where that is ``other`` and ``text``
    Chinese: ``yes/no`` (ending with 吗, whatever it holds: "你想吃点什么吗" do you want
    something to eat; or asking "A-not-A": "能不能退款" can I get a refund), ``general``
    (an interrogative: 什么, 谁, 哪, 怎么, 几 ...; or a topic and 呢, "我的订单呢？" what
    about my order) or ``yes/no`` again (a question mark without an interrogative:
    "今天下雨？")."""
    if english != "other" or not _chinese(text):
        return english
    if _FINAL.search(text) is not None or A_NOT_A.search(text) is not None:
        return "yes/no"
    if _INTERROGATIVE.search(text) is not None or _TOPIC_ONLY.search(text) is not None:
        return "general"
    return "yes/no" if _QUESTION_MARK.search(text) is not None else english


def asks(text: str) -> bool:
    """Whether ``text`` is a Chinese question without a question mark: it ends with the
    question particle 吗 (嗎) or a topic and 呢 ("我的订单呢" what about my order), asks
    "A-not-A" ("是不是免费" is it free), or asks how (如何, 怎么: "如何取消订单" how do I
    cancel an order, as English "how ..." is a question)."""
    if not _chinese(text):
        return False
    return any(found.search(text) is not None for found in (_FINAL, A_NOT_A, _TOPIC_ONLY, _HOW))


def unasked(text: str) -> str:
    """``text`` with each "A-not-A" question form (:data:`A_NOT_A`) read as its verb alone,
    as the question particle 吗 is a function word: "能不能退款" reads "能退款", the words of
    "能退款吗" (can I get a refund); :func:`question_kind` says it is a yes/no question."""
    if not _chinese(text):
        return text
    return A_NOT_A.sub(r"\1", text)
