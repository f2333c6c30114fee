"""The strict guards of the zero-configuration default: short requests that differ in a
content word, in word order or in the kind of question are different requests; wordings of
one intent ("what is the best way to V" / "how do I V") are one request."""

from __future__ import annotations

import pytest

from llmguard_sdk.cache import HashingEmbedder, Pair, ResponseCache, calibrate
from llmguard_sdk.cache._framings import listed, of_inverted
from llmguard_sdk.cache.guards import (
    AGREED_ALLOWANCE,
    guard_rejection,
    strict_agreement,
    strict_rejection,
)
from llmguard_sdk.models import ChatRequest, ChatResponse, Message


def _table(text: str) -> list[tuple[str, ...]]:
    """``query | cached [| reason]`` per line; ``#`` lines are comments."""
    rows = (line.strip() for line in text.strip().splitlines())
    return [tuple(cell.strip() for cell in row.split("|")) for row in rows if row[:1] != "#"]


OTHER_REQUESTS = _table(
    """
How do I learn Python fast? | How do I learn Python? | term
How do I cancel my subscription? | How do I cancel my order? | term
How do I convert Fahrenheit to Celsius? | How do I convert Celsius to Fahrenheit? | order
When is the sky blue? | Why is the sky blue? | question_kind
Can I learn Python in a month? | How can I learn Python in a month? | question_kind
How much does the premium plan cost? | How does the premium plan cost? | question_kind
What does HTTPS stand for? | What does HTTP stand for? | term
What is the most popular language? | What is the popular language? | term
Write a short poem about cats. | Write a poem about cats. | term
# question framings must not hide a qualifier, another thing or another intent;
# "best" outside a "best way to" framing is content: the best laptop is not any laptop
What is the best laptop for programming? | What is a laptop for programming? | term
What is the best way to learn Python fast? | How do I learn Python? | term
What is the easiest way to learn Python? | How do I learn Python? | term
What is the best way for kids to learn Spanish? | How do I learn Spanish? | term
What is the best way to learn Spanish? | How do I learn Italian? | term
# "of" + a noun, "to" + a noun: no framing
What are the steps of mitosis? | What is mitosis? | term
What is the way to the station? | What is the station? | term
What time does the sun set? | What time does the sun rise? | term
What is the difference between weather and climate? | How is weather related to climate? | term
# another intent
How should one prepare for an exam? | Why should one prepare for an exam? | question_kind
How do I wake up early? | Why do I wake up early? | question_kind
Should I eat eggs every day? | Can I eat eggs every day? | question_kind
Is it a good idea to buy a used car? | Is it possible to buy a used car? | question_kind
Is it possible to learn Python in a month? | How do I learn Python in a month? | question_kind
What is the meaning of life? | What is life? | question_kind
What does NASA stand for? | What does NASA mean? | question_kind
What does NASA stand for? | What does NASA do? | question_kind
# an instruction that asks for information keeps what it asks for
List the steps to install Docker. | How do I install Docker? | term
Write a poem about cats. | What is a poem about cats? | term
Find a cheap hotel in Paris. | Find a cheap hotel in Rome. | term
Are all of the results wrong? | Are any of the results wrong? | term
Do only some students pass? | Do all students pass? | term
How many students are in grade 10? | What is the number of students in grade 11? | term
How long is the Nile? | How many is the Nile? | question_kind
# plurals agree, but a plural does not hide another word; "every" is "all", not "any"
What are the countries in Europe? | What are the counties in Europe? | term
Is the gas bill due? | Is the bill due? | term
Are every one of the results wrong? | Are any of the results wrong? | term
# "return the X" frames a request; "return my X" is an act, not a question
Return my order. | What is my order? | term
Which airline has the most flights? | Which airline has the most delayed flights? | term
Which airline has the most flights? | Which airline has the fewest flights? | term
How many cars are there? Show their names. | How many cars are there? | term
What are some good books on economics? | What are the only good books on economics? | term
Are some books on economics good? | Are books on economics good? | term
In 1980, how many cars were made? | How many cars were made? | term
In Paris, how do I rent a car? | In Rome, how do I rent a car? | term
From Oslo, how many flights go to Rome? | From Rome, how many flights go to Oslo? | order
# a list in another order is the same list, not another set of words
What are the name, age and country of X? | What are the name, age and city of X? | term
# "the N of the M" is "M N" only where "N" opens a noun phrase
What do you think of Python? | What does Python think of you? | order
What is the capital of France? | What is the capital of Spain? | term
# inflections agree, but a final "e" after a short syllable keeps two words apart
How do I plan a trip? | How do I plane a trip? | term
What is the best car for a family? | What is the best care for a family? | term
Which languages are spoken in France? | Which languages are written in France? | term
# an embedded question keeps what it asks
Do you know why the sky is blue? | Why is the sea blue? | term
Do you know Python? | What is Python? | question_kind
# a greeting or a discourse marker opens a question only before one
So far what is the best laptop? | What is the best laptop? | term
Hi, what is the price? | What is the price and the tax? | term
# a measure asked another way keeps its kind and its object
What is the age of the universe? | How old is the earth? | term
What is the age of the universe? | How long is the universe? | question_kind
What is the price of a ticket to Paris? | How much does a ticket to Rome cost? | term
# one extreme is not the other; "greatest" (also "best") and "tallest" name no amount
Which stadium has the highest capacity? | Which stadium has the lowest capacity? | term
What is the maximum salary? | What is the minimum salary? | term
Which airport has the most flights? | Which airport has the least flights? | term
Who is the greatest basketball player? | Who is the biggest basketball player? | term
What is the tallest building? | What is the largest building? | term
What are the distinct colours? | What are the similar colours? | term
Which dogs have three owners? | Which dogs have two owners? | term
"""
)

REWORDINGS = _table(
    """
How can I reset my password? | How do I reset my password?
What's the capital of France? | What is the capital of France?
How can I improve my English? | What can I do to improve my English?
Explain how photosynthesis works. | Can you explain how photosynthesis works?
# statements and long texts are left to the standard guards
The function iterates over file paths. | The function cycles through file paths.
# question framings of one intent; the framing words count only where they frame it
What is the best way to learn Python? | How do I learn Python?
What are some good ways to lose weight? | How do I lose weight?
What should I do to become a good programmer? | How do I become a good programmer?
What are the steps to install Docker on Ubuntu? | How to install Docker on Ubuntu?
What is the proper way of cleaning a cast iron pan? | How should I clean a cast iron pan?
What do I need to do to get a passport? | How can I get a passport?
What is the best way to learn guitar? | What are the steps to learn guitar?
What is the fastest way to lose weight? | How can I lose weight fast?
Is it possible to learn French in six months? | Can I learn French in six months?
Is there a way to recover deleted files? | Can I recover deleted files?
Is it possible for dogs to eat chocolate? | Can dogs eat chocolate?
Is it a good idea to buy a used car? | Should I buy a used car?
What is the meaning of serendipity? | What does serendipity mean?
What is the definition of the word karma? | What does karma mean?
What is HTTP short for? | What does HTTP stand for?
What is the difference between a virus and bacteria? | How is bacteria different from a virus?
What time does the store open? | When does the store open?
What is the reason why the sky is blue? | Why is the sky blue?
Can you explain how vaccines work? | How do vaccines work?
Can you summarize the plot of Hamlet? | Summarize the plot of Hamlet.
Explain what machine learning is. | What is machine learning?
Where is the Eiffel Tower located? | Where is the Eiffel Tower?
What exactly is blockchain? | What is blockchain?
How should one prepare for an exam? | What is the best way to prepare for an exam?
Can someone hack my email account? | Is it possible to hack my email account?
# asking for information as an instruction
Show me the names of all students in grade 10. | What are the names of all students in grade 10?
Tell me the age of the oldest dog. | What is the age of the oldest dog?
Give me a recipe for pancakes. | What is a recipe for pancakes?
Name three rivers in France. | What are three rivers in France?
# "all" adds nothing to what is asked; "any", "some", "only" do
What are the names of all the students? | What are the names of the students?
# two words joined by "and" / "or" either way round
What is the minimum and maximum share? | What is the maximum and minimum share?
Should I pick tea or coffee? | Should I pick coffee or tea?
# a count asked another way
How many singers do we have? | What is the total number of singers?
How many airports are there? | Count the airports.
How much sugar is in a coke? | What is the amount of sugar in a coke?
What are the number of concerts in each stadium? | How many concerts are in each stadium?
Give the number of flights. | How many flights are there?
Return the number of airports. | How many airports are there?
# plurals and singulars agree: "countries" / "country", "cars" / "car", "IDs" / "ID"
Which countries have a car maker? | Which country has car makers?
List the IDs and names of the cars. | List the ID and name of each car.
# "return the X" asks for X; "every" is "all" or "each"; "whose" joins a clause
Return the names of the singers. | What are the names of the singers?
What is the age of every singer? | What is the age of each singer?
Find the car whose weight is below 3000. | Find the car with weight below 3000.
# "the highest number of X" is "the most X"
Which airline has the highest number of flights? | Which airline has the most flights?
Which airport has the lowest number of flights? | Which airport has the fewest flights?
# an instruction that frames a later sentence
Which city has the most shops? List its name. | Which city has the most shops? Give its name.
# a phrase fronted before the question qualifies it as at its end
In 1980, how many cars were made? | How many cars were made in 1980?
For each stadium, how many concerts are there? | How many concerts are there for each stadium?
# "what are some X" asks for X
What are some good books on economics? | What are good books on economics?
What are some of the causes of high blood pressure? | What are the causes of high blood pressure?
# a list of words joined by commas and "and" / "or" in any order
What are the name, age and country of a singer? | What are the country, name, and age of a singer?
List the first, middle and last name of Bo. | List the last, first and middle name of Bo.
# "the N of the M" is "M N" or "M's N"
What is the capital of France? | What is France's capital?
What are the causes of inflation? | What causes inflation?
Show the names of the stadiums without any concert. | Show the stadium names without any concert.
What are the first names of the students? | What are the students' first names?
What is the most common citizenship of singers? | What is the most common singer citizenship?
# inflections: "-ed" / "-ing" read as Porter's stemmer reads them, and irregular forms
Which languages are spoken in France? | Which languages do they speak in France?
Who wrote Hamlet? | Who has written Hamlet?
What is the dog named Max? | What is the dog with the name Max?
Which cities do the employees live in? | Which cities are the employees living in?
Which tools are used for testing? | Which tools do you use for testing?
Which trains stopped at Oxford? | Which trains stop at Oxford?
# an embedded question asks the question it embeds
Do you know how I can learn Python? | How can I learn Python?
I would like to know why the sky is blue. | Why is the sky blue?
Can you tell me where the station is? | Where is the station?
# a greeting, a discourse marker or thanks around a question asks nothing
Hi, how do I reset my password? | How do I reset my password?
So, can you explain recursion? | Can you explain recursion?
And what is the capital of Peru? | What is the capital of Peru?
How do I reset my password? Thanks | How do I reset my password?
# a measure asked another way
What is the age of the universe? | How old is the universe?
Tell me the height of Mount Everest. | How tall is Mount Everest?
What is the length of the Nile? | How long is the Nile?
What is the price of a ticket to Paris? | How much does a ticket to Paris cost?
# the superlatives of amount and size name one extreme; "fewer" is "less", "distinct" is
# "different", a number written out is its digits
Which stadium has the largest capacity? | Which stadium has the highest capacity?
What is the minimum weight of a car? | What is the smallest weight of a car?
Which country has the lowest population? | Which country has the smallest population?
Which airport has the fewest flights? | Which airport has the least flights?
Which codes have fewer than 3 templates? | Which codes have less than three templates?
What are the distinct countries of the singers? | What are the different countries of the singers?
"""
)


@pytest.mark.parametrize(("query", "cached", "reason"), OTHER_REQUESTS)
def test_strict_guards_refuse_other_requests(query: str, cached: str, reason: str) -> None:
    assert strict_rejection(query, cached) == reason
    assert strict_rejection(cached, query) == reason
    assert guard_rejection(query, cached, strict=True) is not None


@pytest.mark.parametrize(("query", "cached"), REWORDINGS)
def test_strict_guards_accept_rewordings(query: str, cached: str) -> None:
    assert strict_rejection(query, cached) is None
    assert strict_rejection(cached, query) is None
    assert guard_rejection(query, cached, strict=True) is None


def _ask(text: str) -> ChatRequest:
    return ChatRequest(messages=[Message(role="user", content=text)])


def test_the_default_cache_is_strict() -> None:
    cache = ResponseCache()
    assert cache.strict
    cache.store(
        _ask("How do I learn Python?"), ChatResponse(text="Practice.", finish_reason="stop")
    )
    assert cache.lookup(_ask("How do I learn Python fast?")) is None
    assert cache.stats.guard_rejections == {"term": 1}
    hit = cache.lookup(_ask("How can I learn Python?"))
    assert hit is not None
    assert hit.kind == "semantic"
    answer = ChatResponse(text="apt", finish_reason="stop")
    cache.store(_ask("How do I install Docker on Ubuntu?"), answer)
    hit = cache.lookup(_ask("What are the steps to install Docker on Ubuntu?"))  # a framing
    assert hit is not None
    assert hit.response.text == "apt"
    assert cache.lookup(_ask("Why do I install Docker on Ubuntu?")) is None
    assert ResponseCache(verifier=lambda query, cached: True).strict  # a yes/no verifier
    assert not ResponseCache(verifier=lambda query, cached: True, strict=False).strict


def _similarity(first: str, second: str) -> float:
    vectors = HashingEmbedder().embed([first, second])
    return float(vectors[0] @ vectors[1])


FRAMED = ("How do I install Docker on Ubuntu?", "What are the steps to install Docker on Ubuntu?")
# a statement: the strict guards do not judge it, so only the threshold decides
REWORDED = (
    "The quick brown fox jumps over the lazy dog near the river bank.",
    "A quick brown fox leaps over a lazy dog by the river.",
)


def test_strict_agreement_reads_framings_as_one_request() -> None:
    assert strict_agreement(*FRAMED)
    assert strict_agreement("How do I learn Python?", "What is the best way to learn Python?")
    assert not strict_agreement("How do I learn Python?", "How do I learn Python fast?")
    assert not strict_agreement("Why is the sky blue?", "When is the sky blue?")
    assert not strict_agreement(
        "How do I convert Fahrenheit to Celsius?", "How do I convert Celsius to Fahrenheit?"
    )
    assert not strict_agreement(*REWORDED)  # statements are not judged


def test_a_request_read_as_the_same_is_served_below_the_threshold() -> None:
    cache = ResponseCache()
    framed, reworded = _similarity(*FRAMED), _similarity(*REWORDED)
    # both fall short of the threshold, within the allowance
    assert cache.threshold - AGREED_ALLOWANCE <= min(framed, reworded)
    assert max(framed, reworded) < cache.threshold
    cache.store(_ask(FRAMED[0]), ChatResponse(text="apt", finish_reason="stop"))
    cache.store(_ask(REWORDED[0]), ChatResponse(text="fox", finish_reason="stop"))
    hit = cache.lookup(_ask(FRAMED[1]))
    assert hit is not None
    assert hit.response.text == "apt"
    assert hit.similarity == pytest.approx(framed, abs=1e-3)
    assert cache.lookup(_ask(REWORDED[1])) is None  # not judged: the threshold holds
    # the allowance is the strict guards': without them the threshold holds for both
    loose = ResponseCache(strict=False)
    loose.store(_ask(FRAMED[0]), ChatResponse(text="apt", finish_reason="stop"))
    assert loose.lookup(_ask(FRAMED[1])) is None
    # a threshold raised above the pair's similarity plus the allowance refuses it too
    high = ResponseCache(threshold=framed + AGREED_ALLOWANCE + 0.01)
    high.store(_ask(FRAMED[0]), ChatResponse(text="apt", finish_reason="stop"))
    assert high.lookup(_ask(FRAMED[1])) is None


def test_calibration_counts_the_pairs_the_cache_would_serve() -> None:
    pairs = [Pair(FRAMED[1], FRAMED[0], True), Pair(REWORDED[1], REWORDED[0], True)]
    above_both = max(_similarity(*FRAMED), _similarity(*REWORDED)) + 0.01
    strict_row = calibrate(pairs, strict=True, thresholds=[above_both])[0]
    loose_row = calibrate(pairs, strict=False, thresholds=[above_both])[0]
    assert (strict_row.tp, strict_row.fn) == (1, 1)  # the framing, served by agreement
    assert (loose_row.tp, loose_row.fn) == (0, 2)


def test_list_commas_read_as_and_only_inside_a_list() -> None:
    def is_content(word: str) -> bool:
        return word.lower() not in {"i", "will", "a", "the", "if"}

    assert listed("the name, age and city", is_content) == "the name and age and city"
    assert listed("the name, age, and city", is_content) == "the name and age, and city"
    assert listed("1,000 or 2,000 cars", is_content) == "1,000 or 2,000 cars"
    text = "If I learn Python, will I get a job and a car?"
    assert listed(text, is_content) == text  # "will" is no list item
    assert listed("Paris, Rome. Oslo and Bergen", is_content) == "Paris, Rome. Oslo and Bergen"


def test_of_phrases_read_as_compounds_where_a_noun_phrase_opens() -> None:
    def is_content(word: str) -> bool:
        return word not in {"the", "of", "what", "is", "do", "you", "and"}

    words = ["what", "is", "the", "name", "and", "age", "of", "the", "singer"]
    assert of_inverted(words, is_content) == ["what", "is", "the", "singer", "name", "and", "age"]
    words = ["the", "most", "common", "citizenship", "of", "singers"]
    assert of_inverted(words, is_content, head_only=True) == [
        "the",
        "most",
        "common",
        "singers",
        "citizenship",
    ]
    words = ["what", "do", "you", "think", "of", "python"]
    assert of_inverted(words, is_content) == words  # "think" opens no noun phrase


def test_numbers_written_out_are_their_digits() -> None:
    assert guard_rejection("Which dogs have three owners?", "Which dogs have 3 owners?") is None
    assert guard_rejection("Which dogs have three owners?", "Which dogs have 4 owners?") == "number"
    assert guard_rejection("Name 2 rivers in France.", "Name two rivers in Spain.") is not None
    # a number written out on one side only is no number guard's business ("the dogs")
    assert guard_rejection("Two dogs play in the snow.", "The dogs play in the snow.") is None
    assert guard_rejection("Two dogs play in 2 parks.", "The dogs play in 2 parks.") is None
