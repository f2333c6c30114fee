"""False-hit guards: reasons to refuse a semantic match that the similarity alone would accept.

Embeddings place "cancel my order" next to "cancel my subscription", "is it safe?" next to
"is it not safe?", and "version 2.9" next to "version 2.10". Each guard compares the query
with the cached entry's query and names what differs; any named difference refuses the hit.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import re
from collections.abc import Callable

from ._cjk import asks, question_kind, unparticled
from ._entities import names_missing
from ._framings import (
    CLOSERS,
    DIFFERENCE,
    EMBEDDED_QUESTION,
    EMPHASIS,
    FEWEST,
    FRAMINGS,
    GENERIC_SUBJECT,
    MANNER,
    MOST,
    OPENERS,
    PLACED,
    POLITE,
    SAME_WORD,
    in_digits,
    listed,
    of_inverted,
    unfronted,
)
from ._words import CASED_WORD, ascii_digits, minor, negated, unspaced, word_count, words_of

__all__ = [
    "AGREED_ALLOWANCE",
    "Verifier",
    "content_words",
    "guard_rejection",
    "request_terms",
    "strict_agreement",
    "strict_rejection",
    "term_of",
]

Verifier = Callable[[str, str], bool]
"""Decides a borderline match: gets (query, cached query) and returns True to accept it."""

_NUMBER = re.compile(r"\d+(?:[.,:/-]\d+)*", re.ASCII)  # (read after ascii_digits)
# Sentence negation only: "without" or "none of" are too often paraphrases of positive text.
# (English here; other languages' in :func:`._words.negated`.)
_NEGATION = re.compile(r"\b(?:not|no(?!-)|never|neither|nor|cannot)\b|n['\u2019]t\b", re.IGNORECASE)
# In a short query every content word carries the meaning: "cancel my order" / "cancel my
# subscription", "reset my password on the mobile app" / "... on the web site". There, any
# word of one side replaced by another word is a different question; in longer text such
# swaps are usually synonyms.
_SHORT_QUERY_WORDS = 6


def _word_set(words: str) -> frozenset[str]:
    """A list of words written as one string, spaces between."""
    return frozenset(words.split())


# Negation flips a question or a short statement; in a paragraph it sits in one clause among
# many and is paraphrased freely ("without waiting" / "you don't have to wait").
_NEGATION_SCOPE_WORDS = 15
# (Each bound on words is counted language-fairly, by :func:`._words.word_count`: a Han
# character is 0.4 of a word, a kana 0.2.)
_STOP = _word_set(
    "a an the and or but if of to in on at by for with from into about as is are was "
    "were be been being do does did have has had i me my we our you your he him his "
    "she her it its they them their this that these those what which who whom whose "
    "how why when where can could would should will shall may might must please tell "
    "show give get make let there here so than then also just any some all each every "
    "more most other such only own same too very s t"
)


def _numbers(text: str) -> set[str]:
    return set(_NUMBER.findall(ascii_digits(text)))


def _numbers_differ(query: str, cached: str) -> bool:
    """The numbers differ, also with those written out read as digits ("three" / "3"); one
    written out on one side only is left to the other guards ("two dogs" / "the dogs")."""
    numbers, cached_numbers = _numbers(query), _numbers(cached)
    if numbers == cached_numbers:
        return False
    spelt, cached_spelt = in_digits(query), in_digits(cached)  # (the text itself: no words)
    if spelt is not query:
        numbers = _numbers(spelt)
    if cached_spelt is not cached:
        cached_numbers = _numbers(cached_spelt)
    return numbers != cached_numbers


def _negated(text: str) -> bool:
    return _NEGATION.search(text) is not None or negated(text)


# Irregular past forms and participles of common verbs, read as the verb ("spoken" is
# "speak", "made" is "make"); forms that are also common other words ("left", "found",
# "bit", "drunk", "shot") are not listed.
_IRREGULAR = dict(
    re.findall(
        r"(\w+):(\w+)",
        "spoke:speak spoken:speak wrote:write written:write made:make went:go gone:go "
        "got:get gotten:get took:take taken:take gave:give given:give came:come saw:see "
        "seen:see knew:know known:know grew:grow grown:grow drew:draw drawn:draw threw:throw "
        "thrown:throw flew:fly flown:fly ate:eat eaten:eat drove:drive driven:drive rode:ride "
        "ridden:ride rose:rise risen:rise chose:choose chosen:choose broke:break broken:break "
        "froze:freeze frozen:freeze stole:steal stolen:steal forgot:forget forgotten:forget "
        "began:begin begun:begin ran:run won:win sold:sell told:tell bought:buy brought:bring "
        "thought:think taught:teach caught:catch fought:fight sought:seek held:hold "
        "built:build sent:send spent:spend lent:lend meant:mean felt:feel kept:keep lost:lose "
        "paid:pay said:say met:meet understood:understand wore:wear worn:wear hidden:hide "
        "shook:shake shaken:shake sang:sing sung:sing swam:swim heard:hear became:become "
        "slept:sleep dealt:deal created:create creating:create",
    )
)
_VOWEL = re.compile(r"[aeiou]|(?<=[^aeiou])y")


def _measure(stem: str) -> int:
    """Porter's measure: how many vowel-consonant sequences ``stem`` has."""
    pattern = "".join("v" if _VOWEL.match(stem, i) else "c" for i in range(len(stem)))
    return len(re.findall(r"v+c+", pattern))


def _short_syllable(stem: str) -> bool:
    """Ends consonant-vowel-consonant, the last not w, x or y ("hop", "nam", "liv")."""
    tail = "".join("v" if _VOWEL.match(stem, i) else "c" for i in range(len(stem)))[-3:]
    return tail == "cvc" and stem[-1] not in "wxy"


def _unsuffixed(word: str) -> str:
    """``word`` without "-ed" / "-ing", as Porter's step 1b restores it: "stopped" is
    "stop", "named" "name", "living" "live", "enabled" "enable"; the rest must hold a vowel
    ("bed", "sing" and "string" stay)."""
    for suffix in ("ing", "ed"):
        rest = word[: -len(suffix)]
        if word.endswith(suffix) and len(rest) >= 2 and _VOWEL.search(rest):
            if len(rest) >= 4 and rest[-1] == rest[-2] and rest[-1] not in "aeioulsfz":
                return rest[:-1]  # "stopp", "runn"
            if len(rest) >= 5 and rest.endswith(("at", "bl", "iz", "is")):
                return rest + "e"  # "updat", "enabl", "organiz"
            return rest + "e" if _measure(rest) == 1 and _short_syllable(rest) else rest
    return word


def _stem(word: str) -> str:
    """A light suffix stripper: "preprocessed", "preprocesses", "preprocess" agree, and so
    do "country" / "countries", "car" / "cars", "id" / "ids" (a plural of three letters
    only after a consonant: "gas", "yes" and "bus" stay), "use" / "used" / "using", "name"
    / "named", "stop" / "stopped", "speak" / "spoken"; "plan" / "plane" and "car" / "care"
    stay apart (a final "e" after a short syllable is kept, as Porter's stemmer keeps it)."""
    word = _IRREGULAR.get(word, word)
    word = SAME_WORD.get(word, word)
    if len(word) > 5 and word.endswith(("sses", "shes", "ches", "xes", "zes")):
        return word[:-2]
    plural = len(word) > 3 or (len(word) == 3 and word[1] not in "aeiouy")
    if plural and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    word = _unsuffixed(word)
    # "countri": "country", "countries" (from "countrie"), "studied"; not "key", "die"
    if len(word) > 3 and (word.endswith("ie") or (word[-1] == "y" and word[-2] not in "aeiou")):
        return word[:-2] + "i" if word.endswith("ie") else word[:-1] + "i"
    if word.endswith("e") and len(word) > 2:  # "use", "change", "compare"; not "plane"
        rest = word[:-1]
        if _measure(rest) > 1 or (_measure(rest) == 1 and not _short_syllable(rest)):
            return rest
    return word


def content_words(text: str) -> set[str]:
    """Lower-cased, lightly stemmed words of ``text`` without function words."""
    words = words_of(unparticled(ascii_digits(text).lower()))  # (Japanese particles out: ._cjk)
    return {_stem(w) for w in words if w not in _STOP and not minor(w)}


# The strict guards (the zero-configuration default, without a verifier): a short request,
# a question or an instruction, asks for exactly what its content words name, so any content
# word on one side only, content words in another order ("Celsius to Fahrenheit") or another
# kind of question ("why" / "when", "how" / "can I") makes it another request.
_STRICT_WORDS = 12
# Quantifiers and degree words change what is asked ("the best" / "the most", "only"):
# function words for the standard guards, content words for the strict ones.
_STRICT_STOP = _STOP - {"more", "most", "only", "any", "some", "other", "same", "too"}
_WH = {"what": "general", "which": "general", "how": "general", "why": "why", "when": "when"}
_WH |= {"where": "where", "who": "who", "whom": "who", "whose": "whose"}
_ADVICE = frozenset({"should", "ought"})
_HOW_QUANTITY = frozenset({"much", "many", "long", "old", "far", "often", "big", "tall", "fast"})
_AUX = _word_set(
    "is are was were am do does did can could should would will shall may might must have has had"
)
_REQUEST_VERBS = _word_set(
    "explain write tell give show list describe summarize summarise translate define "
    "compare find make create generate help suggest recommend calculate convert name "
    "draft rewrite fix"
)


def _tokens(text: str) -> list[str]:
    """Words with contractions cut ("what's" -> "what", "can't" -> "can"), lower-cased but
    for acronyms, which keep their case (and so their last letter: "HTTP" / "HTTPS"; a
    plural "IDs" is "ID")."""
    text = unparticled(ascii_digits(text))  # (Japanese particles out: ._cjk)
    words = (re.split("['\u2019]", w)[0] for w in CASED_WORD.findall(text))
    return [w if _acronym(w) else w.lower() for w in words]


def _acronym(word: str) -> bool:
    """ "HTTP", "ID", and their plurals "HTTPs", "IDs" (not "Is", "As")."""
    if word[-1:] == "s" and len(word) > 2:
        word = word[:-1]
    return len(word) > 1 and word.isupper()


def _framed(words: list[str]) -> tuple[str, list[str]]:
    """The intent of a request (a kind of question, as :func:`_question_kind` names them,
    or ``meaning`` / ``expansion``) and its words without the framing."""
    words = [w for w in words if w not in EMPHASIS]
    text = CLOSERS.sub("", OPENERS.sub("", " ".join(words)))
    text = GENERIC_SUBJECT.sub(r"\1you", text)
    text = EMBEDDED_QUESTION.sub("", POLITE.sub("", text))
    text = FEWEST.sub("fewest", MOST.sub("most", text))
    for pattern in DIFFERENCE:
        found = pattern.match(text)
        if found is not None:
            a, b = found["a"].split(), found["b"].split()
            first, second = sorted((a, b), key=lambda part: _strict_terms(part))
            return "general", ["difference", *first, "and", *second]
    for pattern, kind in FRAMINGS:
        found = pattern.match(text)
        if found is None:
            continue
        groups = found.groupdict()
        if groups.get("meant") is not None:
            return kind, groups["meant"].split()
        rest = [*(groups.get("subject") or "").split(), *text[found.end() :].split()]
        manner = MANNER.get((groups.get("good") or "").strip())
        extra = "cost" if groups.get("cost") else manner  # "the price of X": "X cost"
        return kind, [*rest, extra] if extra else rest
    words = text.split()
    kind = _question_kind(words)
    if kind.startswith("how "):  # "how many": the kind carries "many", as a framing would
        at = words.index("how")
        return kind, words[: at + 1] + words[at + 2 :]
    return kind, [w for w in words if w not in PLACED] if kind == "where" else words


def _question_kind(words: list[str]) -> str:
    """``why``, ``when``, ``where``, ``who``, ``whose``, ``how much`` (and other ``how``
    + quantity), ``general`` (what / which / how), ``yes/no should`` (opens with "should"),
    ``yes/no`` (opens with another auxiliary verb) or ``other`` (an instruction or a
    statement)."""
    for i, word in enumerate(words):
        kind = _WH.get(word)
        if kind is None:
            continue
        following = words[i + 1] if i + 1 < len(words) else ""
        return f"how {following}" if word == "how" and following in _HOW_QUANTITY else kind
    if words and words[0] in _ADVICE:
        return "yes/no should"  # "should I V?" asks for advice, "can I V?" whether it is possible
    return "yes/no" if words and words[0] in _AUX else "other"


def _compatible(first: str, second: str) -> bool:
    return first == second or {first, second} == {"general", "other"}


def _is_request(text: str, words: list[str]) -> bool:
    if text.rstrip().endswith(("?", "\uff1f", "\u061f")) or asks(text):  # (か, 吗: ._cjk)
        return True
    return bool(words) and (words[0] in _REQUEST_VERBS or words[0] in _WH or words[0] in _AUX)


def _strict_terms(words: list[str], *, inverted: str = "") -> list[str]:
    """Content words in order of first use (stemmed), for the strict guards, the words of a
    list joined by "and" / "or" in a fixed order ("minimum and maximum" is "maximum and
    minimum", "name, age and city" is "age, city and name"); ``inverted`` ``"all"``: "the
    N of the M" read as "M N", ``"head"``: "the A N of the M" read as "A M N"."""
    if inverted:
        words = of_inverted(words, _is_content, head_only=inverted == "head")
    kept = [term_of(w) for w in words]
    group = list(range(len(kept)))  # each word's list: the position of its first item
    for i, word in enumerate(words):
        if word not in ("and", "or"):
            continue
        # the content words next to the conjunction, function words skipped ("X and their Y")
        left = next((j for j in range(i - 1, -1, -1) if kept[j] is not None), None)
        right = next((j for j in range(i + 1, len(kept)) if kept[j] is not None), None)
        if left is not None and right is not None:
            group[right] = group[left]
    items: dict[int, list[int]] = {}
    for position, first in enumerate(group):
        items.setdefault(first, []).append(position)
    for positions in items.values():
        ordered = sorted(t for t in (kept[p] for p in positions) if t is not None)
        if len(ordered) == len(positions) > 1:
            for position, term in zip(positions, ordered, strict=True):
                kept[position] = term
    return list(dict.fromkeys(t for t in kept if t is not None))


def _is_content(word: str) -> bool:
    return term_of(word) is not None


def term_of(word: str) -> str | None:
    """A word as the strict guards compare it (stemmed; acronyms as written), or ``None``
    for a function word."""
    if _acronym(word):
        return word[:-1] if word[-1] == "s" else word
    word = word.lower()
    return None if word in _STRICT_STOP or minor(word) else _stem(word)


def request_terms(query: str, cached: str) -> tuple[list[str], list[str]] | None:
    """The content words (in order of first use) of two short requests, as the strict guards
    compare them; ``None`` where the strict guards do not judge the pair (statements, or
    more than 12 content words in all, a Han character counting 0.4 of a word and a kana
    0.2); ``([], [])`` for two kinds of question."""
    words, cached_words = _read(query), _read(cached)
    if not (_is_request(query, words) or _is_request(cached, cached_words)):
        return None
    (kind, framed), (cached_kind, cached_framed) = _framed(words), _framed(cached_words)
    kind, cached_kind = question_kind(query, kind), question_kind(cached, cached_kind)
    terms, cached_terms = _strict_terms(framed), _strict_terms(cached_framed)
    if word_count(set(terms) | set(cached_terms)) > _STRICT_WORDS:
        return None
    if not _compatible(kind, cached_kind):
        return [], []
    return _in_one_order(terms, framed, cached_terms, cached_framed)


def _read(text: str) -> list[str]:
    """A short text's words as the strict guards read them (a fronted phrase moved back, a
    list's items in a fixed order)."""
    return _tokens(listed(unfronted(text), _is_content))


_DIRECTED = _word_set("from to into onto than versus vs")


def _reordered(query: str, cached: str) -> bool:
    """Two short texts that are not requests (statements, or instructions the guards do not
    read as requests) whose words are the same words, content words (two or more) in another
    order: "Transfer £50 from my savings to my current account" / "... from my current
    account to my savings", "the dog bit the man" / "the man bit the dog". A rewording that
    moves words about with words of its own ("X has Y as its default" / "the default of X
    is Y", the passive) is not judged here, nor are texts without a word that gives their
    words a direction ("from", "to", "than" ...): a statement's phrases move freely ("playing
    golf on a golf course" / "on a golf course playing golf")."""
    words, cached_words = _read(query), _read(cached)
    if sorted(words) != sorted(cached_words) or _DIRECTED.isdisjoint(words):
        return False
    terms, cached_terms = _strict_terms(words), _strict_terms(cached_words)
    if len(terms) < 2:
        return False
    if word_count(set(terms)) > _STRICT_WORDS:
        return False
    mine, theirs = _in_one_order(terms, words, cached_terms, cached_words)
    return mine != theirs


def _in_one_order(
    terms: list[str], framed: list[str], cached_terms: list[str], cached_framed: list[str]
) -> tuple[list[str], list[str]]:
    """Both sides' terms, each as written or with "the N of the M" read as "M N" (or "the A
    N of the M" as "A M N"), in the first of these readings where the words both share come
    in the same order ("the causes of inflation" / "what causes inflation", "the capital of
    France" / "France's capital")."""
    readings = [terms, *(_strict_terms(framed, inverted=how) for how in ("all", "head"))]
    cached_readings = [
        cached_terms,
        *(_strict_terms(cached_framed, inverted=how) for how in ("all", "head")),
    ]
    for mine in readings:
        for theirs in cached_readings:
            shared = set(mine) & set(theirs)
            if [t for t in mine if t in shared] == [t for t in theirs if t in shared]:
                return mine, theirs
    return terms, cached_terms


def strict_rejection(query: str, cached: str) -> str | None:
    """The strict guards' reason to refuse a match of two short requests, or ``None``.

    They judge requests (a question or an instruction) of up to 12 content words in all (a
    Han character counting 0.4 of a word, a kana 0.2, as :func:`guard_rejection` counts):
    ``"question_kind"`` (why / when / where / who / how much / yes-no / should-I / what-how
    / what-X-means / what-X-stands-for differ; a Japanese or Chinese question is yes-no or
    general, a Chinese one ending in 吗 yes-no with a question mark or without: "今天下雨吗"
    is no statement "今天下雨"), ``"term"`` (a content word, quantifiers such
    as "most" or "only" included, on one side only: "learn Python" / "learn Python fast")
    and ``"order"`` (the same words in another order: "Celsius to Fahrenheit" / "Fahrenheit
    to Celsius"). Each request's framing is read as its intent first: "what is the best way
    to V", "what are some good ways to V", "what are the steps to V" and "what should I do
    to V" ask "how do I V"; "is it possible to V" and "is there a way to V" ask "can I V"
    ("should I V" and "is it a good idea to V" ask for advice: another kind); "what is the
    meaning of X" asks "what does X mean"; "the difference between A and B" is that between
    B and A; "what time" asks "when"; "show me / list / give me / tell me / find / name X"
    ask "what is X" (as "return the X" and "what are some X" do, and such an instruction
    opening a later sentence); "what is the number of X" and "count the X" ask "how many
    X"; "the highest number of X" is "the most X"; a plural is its singular; two words
    joined by "and" / "or" are the same either way round, and so are the items of a list ("A,
    B and C"); "the N of the M" may read "M N" ("the capital of France" / "France's
    capital"); "-ed" / "-ing" forms and irregular verbs are their verb ("spoken" / "speak");
    "do you know how ..." asks "how ..."; "what is the age / height / length / price of X"
    asks "how old / tall / long / much"; "the largest / biggest / highest / maximum X" is
    "the most X" and "the smallest / lowest / minimum / fewest X" "the least X", "fewer" is
    "less", "distinct" is "different" and "three" is "3". Framing words count as content
    anywhere else ("the best laptop" is not "a laptop"), and "the fastest way to V" is "V
    fast". Two short statements (or instructions not read as requests: "Transfer £50 from
    my savings to my current account") are refused only for ``"order"``: the same words, the
    content words (two or more) in another order around a word that gives them a direction
    ("from", "to", "than"); longer texts and the rest of statements are left to
    :func:`guard_rejection`.
    """
    found = request_terms(query, cached)
    if found is None:
        return "order" if _reordered(query, cached) else None
    terms, cached_terms = found
    if not terms and not cached_terms:
        return "question_kind"
    if set(terms) != set(cached_terms):
        return "term"
    return "order" if terms != cached_terms else None


AGREED_ALLOWANCE = 0.125
"""How far below its threshold a cache with the strict guards serves a pair that
:func:`strict_agreement` reads as the same request: only framing and function words differ
("how do I install Docker" / "what are the steps to install Docker"), which lowers the
similarity without changing what is asked."""


def strict_agreement(query: str, cached: str) -> bool:
    """Whether the strict guards read two short requests as the same request: a compatible
    kind of question, and the same content words (at least one) in the same order, their
    framings aside (see :func:`strict_rejection`)."""
    found = request_terms(query, cached)
    return found is not None and bool(found[0]) and found[0] == found[1]


def _key_words(text: str) -> set[str]:
    """:func:`content_words` of a request without its framing ("the best way to")."""
    words = _tokens(text)
    if not _is_request(text, words):
        return content_words(text)
    return content_words(" ".join(_framed(words)[1]))


def guard_rejection(
    query: str, cached: str, *, strict: bool = False, key_terms: bool = True
) -> str | None:
    """Why a semantic match of ``query`` to ``cached`` must be refused, or ``None``.

    The reasons: ``"number"`` (the numbers differ; "three" is "3"), ``"negation"`` (one is
    negated, the other not; for texts of up to 15 content words), ``"entity"`` (each
    names something that does not occur in the other: identifiers, code, proper names,
    katakana words, "ロンドン" / "パリ", a final "ー" aside: "コンピューター" is "コンピュータ";
    a longer one is another word: "アンインストール" / "インストール"),
    ``"key_term"`` (short queries, up to 6 content words, where each side has a content word
    the other lacks, as in "cancel my order" / "cancel my subscription"; not with
    ``key_terms=False``, where a verifier judges substitutions, but for those of Chinese or
    Japanese words, which an English encoder cannot judge); with ``strict``, those of
    :func:`strict_rejection` too, and key terms compared without the requests' framings (as
    :func:`strict_rejection` reads them). Words are counted language-fairly: a Han
    character (Chinese and Japanese run without spaces, read a character at a time) counts
    0.4 of a word and a kana 0.2 (:func:`._words.word_count`).
    """
    if _numbers_differ(query, cached):
        return "number"
    words, cached_words = content_words(query), content_words(cached)
    short = word_count(words | cached_words) <= _NEGATION_SCOPE_WORDS
    if short and _negated(query) != _negated(cached):
        return "negation"
    if names_missing(query, cached) and names_missing(cached, query):
        return "entity"
    if strict:  # their framings aside ("the best way to V" / "the steps to V" is no swap)
        words, cached_words = _key_words(query), _key_words(cached)
    substituted = bool(words - cached_words) and bool(cached_words - words)
    judged = key_terms or unspaced(words ^ cached_words)  # (no verifier reads Han or kana)
    if judged and substituted and word_count(words | cached_words) <= _SHORT_QUERY_WORDS:
        return "key_term"
    return strict_rejection(query, cached) if strict else None
