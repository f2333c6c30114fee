"""Japanese grammar words, for the false-hit guards and the hashing embedder: the particles
and auxiliaries Japanese writes in hiragana between its content words (kanji, katakana),
read as function words as English's "the", "of", "is", "do" are.

Japanese writes no spaces: "東京の人口は何人ですか" (how many people live in Tokyo) is
"東京" + "の" ('s) + "人口" (population) + "は" (topic) + "何人" (how many people) +
"です" (is) + "か" (question). Two wordings of one question differ in these grammar words
("東京の人口は？" / "東京の人口は何人ですか？", "天気を教えて" / "天気を教えてください"),
two questions in a content word ("東京" / "大阪", "人口" / "面積").

Each hiragana run is read as the listed grammar words covering the most of it (a run of
particles, endings and copula, "のでしょうか" = "の" + "でしょう" + "か"); the characters
they leave are content, as every character was before: a word written in hiragana
("どこ" where, "いつ" when, "ない" not, "たい" want) keeps its characters, but for any
that is a one-character particle ("とけい" a clock: "け", "い"). Text without hiragana (Chinese,
English) is read as before.

Katakana writes loanwords and foreign names ("コンピューター", "ロンドン"): a run of it is a
word, whose final prolonged sound mark is a spelling variant (:func:`standard_katakana`),
and which names something, as a capitalised English word does (:func:`loanwords`).

.. versionadded:: 0.2.0
"""

# ruff: noqa: RUF001, RUF002, RUF003 (full-width punctuation, on purpose)

from __future__ import annotations

import re
import unicodedata
from collections.abc import Collection
from functools import lru_cache

__all__ = [
    "JAPANESE_FUNCTION",
    "asks",
    "function_spans",
    "holds_loanword",
    "japanese",
    "loanwords",
    "question_kind",
    "standard_katakana",
    "unparticled",
]

_HIRAGANA = re.compile("[\u3041-\u309f]")
_HAN = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_GRAMMAR = {
    "case and topic particles (subject, object, to, at, 's, also, from, until, than)": (
        "は が を に へ で と の も から まで より など"
    ),
    "endings that join clauses (and then, because, although, but)": (
        "て ので のに けど けれど けれども"
    ),
    "copula, politeness and past (English's is, did, please)": (
        "です でした でしょう だった だろう ます ました ましょう ください"
        " んです んでした んだ んでしょう"
    ),
    "する (do): 'キャンセルする方法' / 'キャンセル方法'": (
        "する します しました しましょう して した"
    ),
}
JAPANESE_FUNCTION = frozenset(w for words in _GRAMMAR.values() for w in words.split())
"""Hiragana words read as function words anywhere in Japanese text (``_GRAMMAR`` groups
them). Not listed: negation (ない, ません: a content word, as English "not"), wishes
and ability (たい, られる), "or" (や), the interrogatives (どこ, いつ, なぜ), and the past
and copula alone, "た" and "だ" ("また" again / "まだ" still, "ただ", "だれ")."""
_FINAL = ("か", "かな", "かしら", "ね", "よ", "よね")
# ... that end a sentence only: mid-sentence "か" is "or" or an indefinite ("何か"
# something, "どこか" somewhere) and "ね", "よ" often part of a word ("ねこ", "よい"). These
# and "何" below follow a word (not a space, not the text's start): so a text's content
# words, joined by spaces, read as content words again (the strict guards re-read them).
_SENTENCE_END = r"\s*(?:[?？。!！、,.]|$)"
_AT_END = re.compile(rf"(?:[かなねよ]|しら)*{_SENTENCE_END}")
# "何" (what) as a question's predicate ("Xは何ですか", "Xは何人？": what is X), which says
# no more than "Xは？" does (English "what is X" / "X?"); elsewhere ("何を食べますか":
# what do you eat) a content word
_WHAT = ("何", "なに", "なん")
_AS_PREDICATE = re.compile(
    rf"[{_HAN}]?(?:です|でしょう|だ|でした|だった)?(?:か|かな|かしら)?{_SENTENCE_END}"
)
_HONORIFIC = re.compile(rf"[おご](?=[{_HAN}])")  # "ご注文" (your order) is "注文"
_FIRST: dict[str, list[str]] = {}
for _word in sorted([*JAPANESE_FUNCTION, *_FINAL, *_WHAT], key=len, reverse=True):
    _FIRST.setdefault(_word[0], []).append(_word)
_STARTS = re.compile(f"[{''.join(_FIRST)}おご]")  # where a function word may start
_CACHED_LENGTH = 1_000  # characters: longer texts are read again (a cache of prompts would
# hold them all)

# interrogatives, for a question's kind; not an indefinite ("何か" something, "どこも"
# everywhere, "いつでも" any time, "どうぞ" please)
_INTERROGATIVE = re.compile(
    "(?:何|誰|なに|なん|だれ|どなた|どこ|いつ|なぜ|どう|どの|どれ|どちら|どっち|どんな"
    "|いくら|いくつ)(?!か|も|でも|ぞ)"
)
_TOPIC_ONLY = re.compile(r"(?:は|って)\s*[?？]\s*$")  # "東京の人口は？": what about X
_QUESTION_END = re.compile(r"(?:か|かな|かしら)[\s。.!！]*$|[?？]\s*$")
# ... and requests: please, tell me, "…する方法" (how to ...)
_REQUEST_END = re.compile(r"(?:か|かな|かしら|ください|下さい|教えて|方法は?)[\s。.!！]*$")


def japanese(text: str) -> bool:
    """Whether ``text`` is (partly) Japanese: it holds hiragana."""
    return not text.isascii() and _HIRAGANA.search(text) is not None


def function_spans(text: str) -> tuple[tuple[int, int], ...]:
    """Where ``text``'s Japanese function words are, as ``(start, end)`` pairs in order: the
    listed words (:data:`JAPANESE_FUNCTION`) covering the most characters of each hiragana
    run (the fewest words among such readings), sentence-final particles, "何" as a
    question's predicate, and the honorific prefixes お / ご before a kanji. ``()`` for text
    without hiragana."""
    if not japanese(text):
        return ()
    if len(text) > _CACHED_LENGTH:
        return _spans(text)
    return _cached_spans(text)


def _spans(text: str) -> tuple[tuple[int, int], ...]:
    options: dict[int, list[int]] = {}
    for start in _STARTS.finditer(text):
        ends = _ends(text, start.start())
        if ends:
            options[start.start()] = ends
    size = len(text)
    # best[i]: (characters covered, -words) reading text[i:]; step[i]: the word taken at i
    best = [(0, 0)] * (size + 1)
    step = [0] * (size + 1)
    for at in range(size - 1, -1, -1):
        best[at] = best[at + 1]
        for end in options.get(at, ()):
            covered, words = best[end]
            found = (covered + end - at, words - 1)
            if found > best[at]:
                best[at], step[at] = found, end
    spans = []
    at = 0
    while at < size:
        if step[at]:
            spans.append((at, step[at]))
            at = step[at]
        else:
            at += 1
    return tuple(spans)


_cached_spans = lru_cache(maxsize=4096)(_spans)  # (a lookup reads its query a dozen times)


def _ends(text: str, at: int) -> list[int]:
    """The ends of the function words that may start at ``at``."""
    ends = []
    for word in _FIRST.get(text[at], ()):
        if not text.startswith(word, at):
            continue
        end = at + len(word)
        if word not in JAPANESE_FUNCTION:
            after = _AS_PREDICATE if word in _WHAT else _AT_END
            if at == 0 or text[at - 1].isspace() or after.match(text, end) is None:
                continue
        ends.append(end)
    if text[at] in "おご" and _HONORIFIC.match(text, at) is not None:
        ends.append(at + 1)
    return ends


def unparticled(text: str) -> str:
    """``text`` with its Japanese function words (:func:`function_spans`) as spaces; text
    without hiragana as it is."""
    spans = function_spans(text)
    if not spans:
        return text
    parts = []
    at = 0
    for start, end in spans:
        parts += [text[at:start], " "]
        at = end
    parts.append(text[at:])
    return "".join(parts)


def question_kind(text: str, english: str) -> str:
    """The kind of question ``text`` asks, as the strict guards name English ones:
    ``english`` (the kind its English words say), but where that is ``other`` and ``text``
    a Japanese question: ``general`` (an interrogative: 何, どこ, いつ ...; or a topic
    alone, "東京の人口は？" what about Tokyo's population) or ``yes/no`` (ending with か,
    or "？" without an interrogative: "東京は寒いですか", "東京は寒い？")."""
    if english != "other" or not japanese(text):
        return english
    if _INTERROGATIVE.search(text) is not None or _TOPIC_ONLY.search(text) is not None:
        return "general"
    return "yes/no" if _QUESTION_END.search(text) is not None else english


def asks(text: str) -> bool:
    """Whether ``text`` is a Japanese question or request without a question mark: it ends
    with the question particle か (かな, かしら), ください (please), 教えて (tell me) or
    方法 (how to: "Pythonをインストールする方法", as English "how to install Python")."""
    return japanese(text) and _REQUEST_END.search(text) is not None


# Katakana: letters (not "・", which parts words) and the prolonged sound mark "ー"
_KATAKANA_RUN = re.compile("[\u30a1-\u30fa\u30fc]+")
# small kana that join the kana before them into one mora ("ピュ", "シャ"; not "ッ")
_JOINING = "ァィゥェォャュョヮ"
_LOANWORD = re.compile(f"(?![{_JOINING}])[\u30a1-\u30fa][\u30a1-\u30fa\u30fc]+")
_LONG_MARK = "ー"


def standard_katakana(text: str) -> str:
    """``text`` with the prolonged sound mark "ー" that ends a katakana word of three morae
    or more dropped, as JIS Z 8301 writes such words: "コンピューター" is "コンピュータ",
    "サーバー" "サーバ"; words of two morae keep it ("カバー" a cover is not "カバ" a hippo,
    "シャワー" a shower). Full-width katakana only (NFKC turns half-width into it); ``text``
    itself where nothing is dropped."""
    if text.isascii() or _LONG_MARK not in text:
        return text
    return _KATAKANA_RUN.sub(_shortened, text)


def _shortened(found: re.Match[str]) -> str:
    word = found[0]
    stem = word.rstrip(_LONG_MARK)
    morae = len(stem) - sum(stem.count(kana) for kana in _JOINING)
    return stem if morae >= 3 and stem != word else word


def loanwords(text: str) -> set[str]:
    """The katakana words of ``text`` (NFKC, :func:`standard_katakana`), two kana or more:
    loanwords and foreign names, which the entity guard reads as names ("ロンドン", "パリ")."""
    if text.isascii():
        return set()
    return set(_LOANWORD.findall(standard_katakana(unicodedata.normalize("NFKC", text))))


def holds_loanword(text: str, word: str, words: Collection[str] = ()) -> bool:
    """Whether ``text`` holds the katakana ``word`` (one of :func:`loanwords`): as a whole
    katakana word, or in a compound whose rest is one of ``words`` (the other loanwords of
    ``word``'s own text) on either side: "リセット" is in "パスワードリセット" for a text that
    names "パスワード" too. A longer word is another word ("アンインストール" uninstall holds
    no "インストール" install, "メールアドレス" no "アドレス", "カバー" no "カバ")."""
    if text.isascii():
        return False
    for run in _KATAKANA_RUN.findall(standard_katakana(unicodedata.normalize("NFKC", text))):
        at = run.find(word)
        while at >= 0:
            rest = (run[:at], run[at + len(word) :])
            if all(not part or standard_katakana(part) in words for part in rest):
                return True
            at = run.find(word, at + 1)
    return False
