"""Words that ask opposite or sibling things though a sentence encoder puts them close.

Contextual word vectors place a word next to its opposite: in "is the clinic open on
Sundays?" / "... closed on Sundays?" MiniLM's vectors for "open" and "closed" agree at 0.76,
"safe" / "unsafe" at 0.89, "weekdays" / "weekends" at 0.82, "within" / "after" (the
cooling-off period) at 0.85: above the :class:`~llmguard_sdk.cache.ParaphraseVerifier`'s
threshold. :func:`contrasting` names such a substitution, so the verifier refuses it
whatever its vectors say. It reads the guards' terms (lightly stemmed words, see
:func:`~llmguard_sdk.cache.guards.term_of`) by four general rules, not a list of pairs
seen in one data set:

- one word is the other with a negating prefix ("safe" / "unsafe", "legal" / "illegal",
  "agree" / "disagree", "profit" / "nonprofit", "install" / "uninstall");
- the two share a stem under opposing prefixes ("include" / "exclude", "import" /
  "export", "upload" / "download", "encrypt" / "decrypt", "overpaid" / "underpaid");
- the two are siblings, one start with two endings of three letters or more ("weekday" /
  "weekend", "download" / "downgrade", "password" / "passport");
- the two are different prepositions of time, place or scope ("before" / "after",
  "within" / "after", "above" / "below"), but for the few that mean the same ("over" /
  "above", "until" / "till");

and a short list of common opposites that share no stem ("open" / "closed", "buy" /
"sell", "maximum" / "minimum").

.. versionadded:: 0.2.0
"""

from __future__ import annotations

from .guards import term_of

__all__ = ["contrasting"]

_NEGATING = ("un", "in", "im", "il", "ir", "dis", "non", "non-")
_OPPOSING = ("in", "ex", "im", "en", "de", "up", "down", "over", "under", "out", "pre", "post")
_SIBLING_START = 4  # letters two siblings share at least ("week")
_SIBLING_ENDING = 3  # letters each sibling has after them at least ("day" / "end")
_STEM = 3  # letters a word keeps after a prefix, at least ("legal" in "illegal")

_PREPOSITION_WORDS = (
    "after before within without during until till since above below over under beneath "
    "underneath beyond inside outside between among across through throughout against "
    "toward towards near behind ahead upon onto off out up down per via versus except "
    "excluding including unlike despite around along beside besides opposite past"
)
# Prepositions that mean the same where a request uses them ("over 18" / "above 18").
_SAME_PREPOSITION_WORDS = (
    "over above",
    "under below beneath underneath",
    "until till",
    "toward towards",
    "inside within",
    "besides beside",
)

# Common opposites that share no stem, as "a:b" (each side may list several, "|"-joined).
_OPPOSITE_PAIRS = (
    "open:close|shut on:off enable:disable include:exclude allow:ban|forbid|prohibit|block "
    "accept:reject|decline|refuse increase:decrease|reduce|lower raise:lower buy:sell "
    "lend:borrow send:receive push:pull start:stop|finish|end begin:end|finish "
    "add:remove|delete|subtract create:delete enter:exit|leave entrance:exit join:leave "
    "arrive:depart|leave arrival:departure win:lose pass:fail hire:fire deposit:withdraw "
    "credit:debit income:expense profit:loss gain:loss first:last early:late "
    "maximum:minimum max:min highest:lowest high:low upper:lower top:bottom front:back "
    "left:right north:south east:west inside:outside internal:external hot:cold "
    "warm:cold|cool heat:cool cheap:expensive cheapest:dearest fast:slow long:short "
    "big:small large:small heavy:light dark:light old:new|young hard:soft|easy "
    "difficult:easy wet:dry full:empty rich:poor public:private male:female men:women "
    "man:woman boy:girl husband:wife day:night morning:evening|afternoon|night "
    "summer:winter weekday:weekend true:false right:wrong positive:negative good:bad "
    "best:worst better:worse safe:dangerous|risky love:hate like:hate more:less "
    "most:least plus:minus multiply:divide sunrise:sunset asleep:awake sleep:wake "
    "present:absent past:future yesterday:tomorrow ancient:modern ascend:descend "
    "forward:backward incoming:outgoing inbound:outbound maximize:minimize "
    "minimise:maximise tall:short thick:thin wide:narrow deep:shallow loud:quiet "
    "allowed:banned|forbidden|prohibited"
)


def _terms(words: str) -> frozenset[str]:
    return frozenset(term_of(w) or w for w in words.split())


_PREPOSITIONS = _terms(_PREPOSITION_WORDS)
_SAME_PREPOSITION = tuple(_terms(words) for words in _SAME_PREPOSITION_WORDS)


def _opposites() -> frozenset[frozenset[str]]:
    found: set[frozenset[str]] = set()
    for pair in _OPPOSITE_PAIRS.split():
        left, _, right = pair.partition(":")
        for a in left.split("|"):
            for b in right.split("|"):
                first, second = term_of(a) or a, term_of(b) or b
                if first != second:
                    found.add(frozenset((first, second)))
    return frozenset(found)


_OPPOSITES = _opposites()


def _prefixed(longer: str, shorter: str, prefixes: tuple[str, ...]) -> bool:
    """``longer`` is ``shorter`` under one of ``prefixes`` (their stems cut alike or not:
    "unsaf" / "safe")."""
    for prefix in prefixes:
        rest = longer[len(prefix) :]
        if longer.startswith(prefix) and len(rest) >= _STEM and len(shorter) >= _STEM:
            short, long = sorted((rest, shorter), key=len)
            if long.startswith(short):
                return True
    return False


def _opposed(first: str, second: str) -> bool:
    """The same stem under two opposing prefixes ("includ" / "exclud")."""
    for a in _OPPOSING:
        for b in _OPPOSING:
            if a != b and first.startswith(a) and second.startswith(b):
                rest = first[len(a) :]
                if len(rest) >= _STEM and rest == second[len(b) :]:
                    return True
    return False


def _siblings(first: str, second: str) -> bool:
    """One start, two endings of three letters or more ("weekday" / "weekend")."""
    shared = 0
    for a, b in zip(first, second, strict=False):
        if a != b:
            break
        shared += 1
    return (
        shared >= _SIBLING_START
        and len(first) - shared >= _SIBLING_ENDING
        and len(second) - shared >= _SIBLING_ENDING
    )


def contrasting(first: str, second: str) -> bool:
    """Whether two different terms (as :func:`~llmguard_sdk.cache.guards.term_of` gives
    them) ask opposite or sibling things (see the module docs)."""
    if first == second:
        return False
    if first in _PREPOSITIONS and second in _PREPOSITIONS:  # ("until" is no "un-" "till")
        return not any(first in same and second in same for same in _SAME_PREPOSITION)
    if frozenset((first, second)) in _OPPOSITES:
        return True
    longer, shorter = sorted((first, second), key=len, reverse=True)
    return (
        _prefixed(longer, shorter, _NEGATING) or _opposed(first, second) or _siblings(first, second)
    )
