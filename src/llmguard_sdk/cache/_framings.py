"""Question framings for the strict guards (:mod:`llmguard_sdk.cache.guards`): how a
request asks, as opposed to what it asks. The module is private; its names are shared
with :mod:`llmguard_sdk.cache.guards` and :mod:`llmguard_sdk.cache.verifier` only."""

from __future__ import annotations

import re
from collections.abc import Callable

__all__ = [
    "ASK_THE",
    "CLOSERS",
    "OPENERS",
    "DIFFERENCE",
    "EMBEDDED_QUESTION",
    "EMPHASIS",
    "FEWEST",
    "FRAMINGS",
    "FRONTED",
    "GENERIC_SUBJECT",
    "GOOD",
    "LATER_FRAMING",
    "MANNER",
    "MODAL",
    "MOST",
    "OF_GERUND",
    "PLACED",
    "POLITE",
    "SAME_WORD",
    "THE_WORD",
    "TO_VERB",
    "WAYS",
    "WHO",
    "in_digits",
    "listed",
    "of_inverted",
    "unfronted",
]

# Question framings. A question's framing is how it asks, not what: "what is the best way
# to V", "what are some good ways to V", "what are the steps to V", "what should I do to V"
# and "how do I V" all ask for a method of doing V; "is it possible to V" and "can I V" both
# ask whether V can be done; "what is the meaning of X" and "what does X mean" both ask what
# X means. Before the strict guards compare content words and kinds of question, each
# request is rewritten to its intent (a kind) and the words that carry its content; framing
# words ("best", "way", "steps", "possible") are dropped only in these positions, so "the
# best laptop" keeps "best" and "learn Python fast" keeps "fast". A superlative of manner
# stays as its adjective: "the fastest way to V" is "V fast", not "V".
WHO = r"(?:i|you|one|we|someone|somebody|people|a person)"
MODAL = r"(?:do|does|can|could|should|would|will|might|must|shall)"
MANNER = {"fastest": "fast", "quickest": "fast", "easiest": "easy", "simplest": "easy"}
MANNER |= {"cheapest": "cheap", "safest": "safe"}
GOOD = (
    r"(?:best|good|great|right|proper|correct|ideal|recommended|optimal|effective"
    r"|most effective|" + "|".join(MANNER) + ")"
)
WAYS = r"(?:ways?|methods?|steps|process|procedure|approach(?:es)?)"
# "to" + a verb, not "to" + a noun phrase ("the way to the station"); "of" / "for" + a gerund.
TO_VERB = (
    r"(?:for (?P<subject>[a-z ]+?) )?to (?!(?:the|a|an|my|your|his|her|its|our|their|this"
    r"|that|these|those)\b)"
)
OF_GERUND = r"(?:of|for) (?=\w+ing\b)"
THE_WORD = r"(?:the (?:word|term|phrase|expression|acronym|abbreviation) )?"
# "What is the X of", and the instructions that ask it: "tell me / show me / give me the X of"
ASK_THE = (
    r"^(?:(?:what|which) (?:is|was|are|were)|(?:please )?(?:show|give|tell|find|return)"
    r"(?: me| us)?) (?:the )?"
)
FRAMINGS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern), kind)
    for pattern, kind in [
        # a method: "how do I V"
        (
            rf"^(?:what|which) (?:is |are |would be )?(?:some of the |the |a |an |some |any )?"
            rf"(?P<good>{GOOD} )?{WAYS} (?:{TO_VERB}|{OF_GERUND}"
            rf"|(?:that )?{WHO} (?:can|could|should|might) )",
            "general",
        ),
        (rf"^what (?:{MODAL}) {WHO} (?:need to |have to )?do (?:in order )?to ", "general"),
        (rf"^what steps (?:{MODAL}) {WHO} (?:need to |have to )?(?:take|follow) to ", "general"),
        (rf"^how (?:{MODAL}) {WHO} (?:best |go about (?=\w+ing\b))", "general"),
        # whether it can be done: "can I V"
        (rf"^is it (?:at all )?possible {TO_VERB}", "yes/no"),
        (rf"^(?:is|are) there (?:a |any )?(?:{GOOD} )?(?:ways?|methods?) {TO_VERB}", "yes/no"),
        (rf"^(?:am|are|is) {WHO} able to ", "yes/no"),
        # advice: "should I V"
        (
            rf"^(?:is|would) it (?:be )?(?:a good idea|a wise idea|a smart idea|wise|advisable"
            rf"|sensible) {TO_VERB}",
            "yes/no should",
        ),
        (r"^is it worth (?:it )?(?:to |(?=\w+ing\b))", "yes/no should"),
        # what a word means; what an abbreviation stands for
        (rf"^what (?:is |are )?(?:the )?(?:meaning|definition) of {THE_WORD}", "meaning"),
        (rf"^what (?:is )?meant by {THE_WORD}", "meaning"),
        (rf"^what do you mean by {THE_WORD}", "meaning"),
        (rf"^define {THE_WORD}", "meaning"),
        (rf"^what (?:does|do) {THE_WORD}(?P<meant>.+) mean$", "meaning"),
        (rf"^what (?:does|do) {THE_WORD}(?P<meant>.+) stand for$", "expansion"),
        (rf"^what (?:is |are )?{THE_WORD}(?P<meant>.+) short for$", "expansion"),
        (rf"^what (?:is |are )?the full (?:form|name) of {THE_WORD}", "expansion"),
        # a count: "what is the number of X", "count the X", "tell me the number of X" ask
        # "how many X"; "what is the amount of X" asks "how much X"
        (
            r"^(?:what|which) (?:is |are |was )?the (?:total |overall )?(?:number|count) of ",
            "how many",
        ),
        (r"^(?:what|which) (?:is |was )?the (?:total |overall )?amount of ", "how much"),
        (
            r"^(?:please )?(?:(?:show|give|tell)(?: me)?|find|list|return) the (?:total |overall )?"
            r"number of ",
            "how many",
        ),
        (r"^(?:please )?count (?:the |all (?:the )?)?(?:number of )?(?=\w)", "how many"),
        # a measure asked another way: "what is the age of X" asks "how old is X", "the
        # height of X" "how tall", "the length of X" "how long"; "the cost / price of X" asks
        # "how much does X cost" (its "cost" stays a content word)
        (rf"{ASK_THE}ages? of ", "how old"),
        (rf"{ASK_THE}heights? of ", "how tall"),
        (rf"{ASK_THE}lengths? of ", "how long"),
        (rf"{ASK_THE}(?P<cost>cost|price)s? of ", "how much"),
        # "some" only softens a question for a list: "what are some good books" asks "what
        # are good books" ("are some books good" keeps it)
        (r"^(?:what|which) are some (?:of (?:the )?)?(?=\w)", "general"),
        # asking for information as an instruction: "show me X", "list X", "give me X", "tell
        # me X", "find X", "name X" ask "what is / are X"
        (r"^(?:please )?(?:show|list|give|tell|find|name)(?: me| us)? (?=\w)", "general"),
        (r"^(?:please )?return (?=the |all )", "general"),  # "return the names of X"
        # "when", "why"
        (r"^(?:at )?what time (?=\w)", "when"),
        (r"^what (?:is |are )?(?:the )?(?:main )?reasons? (?:why|that) ", "why"),
        (r"^how come ", "why"),
    ]
)
# "How should one V", "can someone V": a generic subject is "you" (a function word).
GENERIC_SUBJECT = re.compile(
    rf"^((?:how |what |why |when |where )?{MODAL} )(?:one|someone|somebody|a person)\b"
)
# "Can you summarize ...?" is the instruction "Summarize ..."; "Explain how X works" is the
# question "How does X work?".
POLITE = re.compile(
    r"^(?:can|could|would|will) you (?:please )?(?=(?:explain|write|summarize|summarise|"
    r"translate|describe|list|define|compare|suggest|recommend|draft|rewrite|tell me|give me|"
    r"show me|help me)\b)"
)
# "Do you know how ...?", "I want to know why ...", "I wonder where ..." frame the question
# they embed (contractions are cut: "I'd like to know" reads "i like to know").
EMBEDDED_QUESTION = re.compile(
    r"^(?:please )?(?:explain|describe|tell me|show me|do you know|does (?:anyone|anybody) know"
    r"|i (?:would |do |really )?(?:want|wanted|need|like) to know|i (?:am |was )?wonder(?:ing)?)"
    r" (?=(?:what|how|why|when|where|who|which)\b)"
)
# Two things compared either way round: "the difference between A and B", "how is B
# different from A".
DIFFERENCE = (
    re.compile(
        r"^(?:what|which) (?:is |are )?(?:the )?(?:main |key )?differences? between "
        r"(?P<a>.+?) and (?P<b>.+)$"
    ),
    re.compile(r"^how (?:is|are|does|do) (?P<a>.+?) (?:different|differ) (?:from|than) (?P<b>.+)$"),
    re.compile(
        r"^(?:explain|describe|tell me) (?:the )?(?:main |key )?differences? between "
        r"(?P<a>.+?) and (?P<b>.+)$"
    ),
)
# Greetings and discourse markers that open a question ("Hi, how do I ...?", "So, can you
# ...?", "Well, what is ...?") and thanks that close it ask nothing; an opener is read as
# one only before a question word, an auxiliary verb or an instruction ("well water" stays).
OPENERS = re.compile(
    r"^(?:(?:hi|hello|hey|so|and|but|well|ok|okay|oh) )+(?=(?:what|which|who|whom|whose|when"
    r"|where|why|how|is|are|was|were|am|do|does|did|can|could|should|would|will|shall|may"
    r"|might|must|have|has|had|please|tell|show|give|list|explain|find|name)\b)"
)
CLOSERS = re.compile(r"(?: (?:thanks|thank you|thx|please))+$")
# Adverbs that only stress a question: "what exactly is ...", "does it really work".
EMPHASIS = frozenset({"really", "actually", "exactly", "basically"})
# "The highest number of X" is "the most X", "the lowest number of X" "the fewest X".
MOST = re.compile(r"\b(?:highest|largest|greatest|biggest|most) (?:number|amount) of\b")
FEWEST = re.compile(r"\b(?:lowest|smallest|least|fewest) number of\b")
# Words read as one word wherever they stand: a number written out is its digits ("fewer
# than three" / "fewer than 3"; "one" stays a word: "the one with"); "fewer" / "fewest" are
# "less" / "least" for what is counted; "distinct" is "different" ("the distinct / different
# countries"); and the superlatives of amount and size name one extreme: "the largest /
# biggest / highest / maximum X" is "the most X", "the smallest / lowest / minimum X" "the
# least X" ("highest" / "lowest" stay apart; "greatest" and "tallest" are left out: "the
# greatest player" is not "the biggest player", nor "the tallest building" "the largest").
SAME_WORD: dict[str, str] = dict(
    re.findall(
        r"(\w+):(\w+)",
        "two:2 three:3 four:4 five:5 six:6 seven:7 eight:8 nine:9 ten:10 eleven:11 twelve:12 "
        "fewer:less fewest:least distinct:different largest:most biggest:most highest:most "
        "maximum:most smallest:least lowest:least minimum:least",
    )
)
_NUMBER_WORD = re.compile(
    r"\b(?:" + "|".join(w for w, d in SAME_WORD.items() if d.isdigit()) + r")\b", re.IGNORECASE
)
# The same words in lower-cased text, ASCII rules (a quarter of the time: Unicode case-folding
# makes the pattern above slow): a prefilter, never missing a word the pattern replaces.
_LOWER_NUMBER_WORD = re.compile(_NUMBER_WORD.pattern, re.ASCII)


def in_digits(text: str) -> str:
    """``text`` with its numbers written out in digits ("three" is "3"). (A word the pattern
    matches case-insensitively that ``lower()`` does not turn into a number word, "sİx" with
    a dotted capital I, is left as it is.)"""
    if _LOWER_NUMBER_WORD.search(text.lower()) is None:  # (most texts: none written out)
        return text
    return _NUMBER_WORD.sub(lambda found: SAME_WORD.get(found[0].lower(), found[0]), text)


# "Where is X located?" asks "Where is X?".
PLACED = frozenset({"located", "situated"})
# An instruction that frames a later sentence: "Which country has the most makers? List its
# name." asks for the name of the country.
LATER_FRAMING = re.compile(
    r"(?<=[.?!;])\s+(?:please\s+)?(?:list|show|give|return|tell|find)(?:\s+(?:me|us))?\b",
    re.IGNORECASE,
)
# A phrase fronted before a question, set off by a comma, qualifies it where it stands at
# its end: "In 1980, how many cars were made?" asks "How many cars were made in 1980?".
FRONTED = re.compile(
    r"^(?P<front>(?:for|in|on|at|during|after|before|among|from|with|within|across|by)\b"
    r"[^,?.!;]*),\s*(?P<rest>(?:what|which|who|whom|whose|when|where|why|how|is|are|was|were"
    r"|do|does|did|can|could|should|would|will|list|show|give|find|return|count|name|tell)\b"
    r".*?)(?P<end>[?.!]*)\s*$",
    re.IGNORECASE | re.DOTALL,
)


def unfronted(text: str) -> str:
    """``text`` with a phrase fronted before its question moved to the question's end, and
    an instruction that opens a later sentence taken out (see above)."""
    text = LATER_FRAMING.sub(" ", text)
    found = FRONTED.match(text)
    return text if found is None else f"{found['rest']} {found['front']}{found['end']}"


# A list read in another order asks for the same things: "the name, age and country of X"
# is "the country, name and age of X". A comma between two content words in a sentence
# whose list ends with "and" / "or" reads as "and" ("1,000" and "If I go, will I ..." stay).
_LIST_COMMA = re.compile(r"(?<=[A-Za-z0-9])\s*,\s+(?=[A-Za-z0-9])")
_SENTENCE = re.compile(r"[^.?!;:]+[.?!;:]*")
_CONJUNCTION = re.compile(r"\b(?:and|or)\b", re.IGNORECASE)
_EDGE_WORD = re.compile(r"[A-Za-z0-9]+")


def listed(text: str, is_content: Callable[[str], bool]) -> str:
    """``text`` with the commas of its lists ("A, B and C") written as "and" (see above)."""

    def sentence(found: re.Match[str]) -> str:
        part = found.group(0)
        ends = [m.start() for m in _CONJUNCTION.finditer(part)]
        if not ends:
            return part

        def comma(at: re.Match[str]) -> str:
            before = _EDGE_WORD.findall(part[: at.start()])[-1:]
            after = _EDGE_WORD.findall(part[at.end() :])[:1]
            if not (at.start() < ends[-1] and before and after):
                return at.group(0)
            if after[0].lower() in ("and", "or"):
                return at.group(0)
            listing = is_content(before[0]) and is_content(after[0])
            return " and " if listing else at.group(0)

        return _LIST_COMMA.sub(comma, part)

    return _SENTENCE.sub(sentence, text)


# "The N of the M" names what "the M N" and "M's N" name: "the name of the country" is "the
# country name" ("the country's name"), "the capital of France" "France's capital". Read
# only where "N" opens a noun phrase (after a determiner, "is" / "are" or at the start), so
# "think of Python" is not "Python think".
_DETERMINERS = frozenset(
    [
        "the",
        "a",
        "an",
        "all",
        "each",
        "every",
        "this",
        "that",
        "these",
        "those",
        "his",
        "her",
        "its",
        "their",
        "my",
        "your",
        "our",
    ]
)
_OPENS_NOUN_PHRASE = _DETERMINERS | {"is", "are", "was", "were"}
# Prepositions and negations end the noun phrase "M" ("the names of the stadiums without
# any concert": "the stadiums", not "the stadiums without").
_PHRASE_ENDS = frozenset(
    [
        "without",
        "within",
        "below",
        "above",
        "under",
        "over",
        "between",
        "through",
        "during",
        "before",
        "after",
        "per",
        "across",
        "along",
        "near",
        "against",
        "among",
        "except",
        "via",
        "versus",
        "since",
        "until",
        "toward",
        "towards",
        "behind",
        "beyond",
        "around",
        "not",
        "no",
    ]
)


def of_inverted(
    words: list[str], is_content: Callable[[str], bool], *, head_only: bool = False
) -> list[str]:
    """``words`` with each "N of the M" (N: content words, maybe joined by "and" / "or"; M:
    content words) written "M N" (see above); with ``head_only``, only the last word of N
    follows M ("the most common citizenship of singers" is "the most common singer
    citizenship")."""
    words = list(words)
    at = 0
    while "of" in words[at:]:
        of = words.index("of", at)
        at = of + 1
        start = of
        while start > 0 and (
            is_content(words[start - 1])
            or (words[start - 1] in ("and", "or") and start < of and start > 1)
        ):
            start -= 1
        if start == of or not is_content(words[start]):
            continue
        if start > 0 and words[start - 1] not in _OPENS_NOUN_PHRASE:
            continue
        start = of - 1 if head_only else start
        begin = of + 1
        while begin < len(words) and words[begin] in _DETERMINERS:
            begin += 1
        end = begin
        while end < len(words) and is_content(words[end]) and words[end] not in _PHRASE_ENDS:
            end += 1
        if end == begin:
            continue
        words[start:end] = words[begin:end] + words[start:of]
        at = start + (end - begin) + (of - start)
    return words
