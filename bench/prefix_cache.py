"""Prefix-cache-friendly assembly against a naive one: time to first token and cached tokens.

A support bot's prompt: instructions, two tools and a handbook of policy articles (the static
part, about 2,000 tokens of the bundled model's tokenizer), then one of 20 different customer
questions. Three assemblies of the same content:

* ``builder``: :class:`~llmguard_sdk.PromptBuilder` keeps the static part first and
  byte-identical; the current time goes into the per-call context, in the last user message.
* ``static`` (the fair baseline): no builder; a plain hand-written request with the same
  static text as its system message and ``Current time: ...`` before the question in the user
  message, the tools passed as they are. For the Anthropic-style API its system message
  carries one ``cache_control`` breakpoint, as Anthropic's prompt-caching docs show.
* ``naive`` (a second baseline, the cache-breaking case): the system message starts with
  ``Current time: <ISO time with microseconds>``, then the same instructions and handbook; the
  question follows as the user message.

Local model (``ttft_*``): the bundled SmolLM2-135M through ``LocalProvider`` behind a Guard,
one provider (with its own llama.cpp context) per assembly, ``temperature=0``, answers cut at 8
tokens; the questions alternate between the two. TTFT is measured by the caller, from just
before ``guard.chat(..., stream=True)`` to the first non-empty text chunk. The builder's
first call computes the static part once (a deployment's first call): it is reported as
``ttft_builder_cold_ms`` and not counted in ``ttft_builder_ms``. Figures are medians over the
questions; ``ratio`` is ``ttft_naive_ms / ttft_builder_ms`` (target: at least 20) and
``ratio_vs_static`` is ``ttft_static_ms / ttft_builder_ms``. The static assembly's first call
also computes its static part: ``ttft_static_cold_ms``, not counted in ``ttft_static_ms``.
``local_cached_share_*`` is the share of prompt tokens llama.cpp reused from its KV cache
(``Usage.cached_input_tokens``). The questions rotate the order of the three assemblies.

FakeProvider (``cached_share_*``): the same prompts through an
``OpenAICompatibleProvider`` to a ``FakeProvider(prefix_cache=True)``, which counts the common
prefix with its earlier requests on its own deterministic tokens; the share is cached input
tokens over input tokens, over all questions (the first request of each assembly finds an empty
cache). ``anthropic_cached_share_*``: the same through ``AnthropicProvider`` to the
FakeProvider's ``/v1/messages``, which caches only up to ``cache_control`` breakpoints (the
builder's requests get them at the end of the static part, the static ones have the one their
author wrote; the naive ones have none). Real providers cache only prefixes of at least 1,024
tokens (OpenAI; Anthropic's Sonnet and Opus models), so the FakeProvider runs with
``prefix_cache_min_tokens=1024`` (``min_prefix_tokens``) and always with the full handbook
(``fake_static_tokens``: the static part in the FakeProvider's own token count).

``--quick`` (for the smoke test) uses 4 questions and, for the local model, a static part of
about 500 tokens.
Timings need a quiet machine: every CPU runs the model, and any other load slows it.

Usage: python bench/prefix_cache.py [--json] [--quick]
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import time
from typing import Any

from _benchkit import exit_on_signals, print_result

from llmguard_sdk import (
    AnthropicProvider,
    Guard,
    LocalProvider,
    OpenAICompatibleProvider,
    PromptBuilder,
)
from llmguard_sdk.prompts import DriftMonitor, PrefixCacheStats
from llmguard_sdk.testing import FakeProvider

TARGET_RATIO = 20.0
MAX_TOKENS = 8
MIN_PREFIX_TOKENS = 1024  # the shortest prefix OpenAI and Anthropic (Sonnet, Opus) cache
ARTICLES = 26  # about 2,000 static tokens with SmolLM2's tokenizer
ARTICLES_QUICK = 5
QUESTIONS_QUICK = 4

INSTRUCTIONS = (
    "You are Pedal, the customer support assistant of Velo Works, a shop that sells and repairs "
    "bicycles. Answer in two sentences at most, politely and precisely. Use only the handbook "
    "below; when it does not cover a question, say so and offer to open a ticket. Name the "
    "article you rely on. Never promise refunds or delivery dates that the handbook does not "
    "allow."
)
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "open_ticket",
            "description": "Open a support ticket for a question the handbook does not cover.",
            "parameters": {
                "type": "object",
                "properties": {
                    "summary": {"type": "string"},
                    "priority": {"type": "string", "enum": ["low", "normal", "high"]},
                },
                "required": ["summary"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "order_status",
            "description": "Look up the status of an order by its number.",
            "parameters": {
                "type": "object",
                "properties": {"order_number": {"type": "string"}},
                "required": ["order_number"],
            },
        },
    },
]
_TOPICS = (
    ("Returns of new bicycles", "may be returned within 30 days if unridden and complete"),
    ("Returns of accessories", "may be returned within 14 days in their original packaging"),
    ("Repairs under warranty", "are free for two years on frames and one year on parts"),
    ("Delivery", "takes three to five working days; bulky items may take up to ten"),
    ("Click and collect", "orders wait in the shop for seven days before they are cancelled"),
    ("Price match", "applies to identical items sold by a shop in the same country"),
    ("Gift cards", "are valid for three years and cannot be exchanged for cash"),
    ("Servicing", "a basic service covers brakes, gears, chain and tyre pressure"),
    ("Electric bicycles", "batteries are covered for 500 charge cycles or two years"),
    ("Payment", "we accept cards, bank transfer and financing over 12 or 24 months"),
    ("Damaged deliveries", "must be reported within 48 hours with a photo of the damage"),
    ("Trade-in", "used bicycles are valued in the shop and credited against a new one"),
    ("Fitting", "a bike fit takes one hour and is free with any bicycle over 1,000 euros"),
)
QUESTIONS = (
    "Can I return a bike I bought three weeks ago?",
    "My new helmet does not fit, can I send it back?",
    "The frame of my two-year-old bike cracked. Is that covered?",
    "How long does delivery take for a cargo bike?",
    "I forgot to pick up my order last week. Is it still there?",
    "Another shop sells the same lock cheaper. Will you match it?",
    "Can I get cash for my gift card?",
    "What does a basic service include?",
    "My e-bike battery lost half its range after a year. What now?",
    "Can I pay for a bike in monthly instalments?",
    "My bike arrived with a bent wheel yesterday. What should I do?",
    "Can I trade in my old road bike?",
    "Is the bike fit free if I buy a 1,500 euro bike?",
    "Do you repair bikes bought elsewhere?",
    "How do I know which frame size I need?",
    "Can I return a bike I have already ridden once?",
    "Are tyres covered by the warranty?",
    "Do you deliver on Saturdays?",
    "Can I use two gift cards for one order?",
    "What happens if my financing application is refused?",
)


def handbook(articles: int) -> list[dict[str, str]]:
    """The reference documents: numbered policy articles."""
    docs = []
    for i in range(articles):
        title, rule = _TOPICS[i % len(_TOPICS)]
        docs.append(
            {
                "id": f"article-{i + 1:02d}",
                "title": f"Article {i + 1}: {title}",
                "text": (
                    f"{title} {rule}. Staff check the receipt or the order number first, and "
                    f"note the case in the customer's file. Exceptions need a manager's "
                    f"approval and are recorded under section {i % 7 + 1}. Customers are told "
                    f"the outcome by e-mail within two working days."
                ),
            }
        )
    return docs


def make_builder(articles: int) -> PromptBuilder:
    """The support bot's template."""
    return PromptBuilder(
        "support-bot",
        instructions=INSTRUCTIONS,
        tools=TOOLS,
        documents=handbook(articles),
        drift=DriftMonitor([lambda event: None]),  # the naive assembly is not built here
    )


def naive_messages(builder: PromptBuilder, question: str) -> list[dict[str, str]]:
    """The same content, with the current time first."""
    now = dt.datetime.now(dt.timezone.utc).isoformat(timespec="microseconds")
    return [
        {"role": "system", "content": f"Current time: {now}\n\n{builder.static_text}"},
        {"role": "user", "content": question},
    ]


def static_messages(
    builder: PromptBuilder, question: str, *, breakpoint: bool = False
) -> list[dict[str, Any]]:
    """A hand-written request without the builder: a static system prompt, the current time
    with the question; ``breakpoint`` marks the system prompt for Anthropic's cache."""
    now = dt.datetime.now(dt.timezone.utc).isoformat(timespec="microseconds")
    system: Any = builder.static_text
    if breakpoint:
        system = [{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}]
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": f"Current time: {now}\n\n{question}"},
    ]


def builder_messages(builder: PromptBuilder, question: str) -> list[dict[str, Any]]:
    """The builder's assembly; the current time is per-call context."""
    now = dt.datetime.now(dt.timezone.utc).isoformat(timespec="microseconds")
    prompt = builder.build(question, context={"current_time": now})
    return [m.model_dump(exclude_none=True) for m in prompt.messages]


def ttft(guard: Guard, messages: list[dict[str, Any]]) -> tuple[float, int, int]:
    """Seconds to the first text, prompt tokens and cached prompt tokens of one call."""
    start = time.perf_counter()
    first: float | None = None
    with guard.chat(messages, stream=True, temperature=0, max_tokens=MAX_TOKENS) as stream:
        for chunk in stream:
            if chunk.text and first is None:
                first = time.perf_counter()
    end = time.perf_counter()
    response = stream.response
    assert response is not None
    assert response.usage is not None
    usage = response.usage
    return (first or end) - start, usage.input_tokens, usage.cached_input_tokens


ASSEMBLIES = {"builder": builder_messages, "static": static_messages, "naive": naive_messages}


def local_run(builder: PromptBuilder, questions: list[str]) -> dict[str, Any]:
    """TTFT of the three assemblies on the bundled model, each with its own context."""
    providers = [LocalProvider(n_ctx=4096, name=n, warm_up=True) for n in ASSEMBLIES]
    guards: dict[str, Guard] = {}
    try:
        for provider in providers:
            if not provider.wait_loaded(120):
                raise SystemExit("the local model did not load within 120 s")
        guards = {
            name: Guard(p, timeout=300, retry=None, environ={})
            for name, p in zip(ASSEMBLIES, providers, strict=True)
        }
        cold_s, static_tokens, _ = ttft(guards["builder"], builder_messages(builder, "Hello!"))
        static_cold_s, _, _ = ttft(guards["static"], static_messages(builder, "Hello!"))
        runs: dict[str, list[tuple[float, int, int]]] = {name: [] for name in ASSEMBLIES}
        names = list(ASSEMBLIES)
        for i, question in enumerate(questions):
            shift = i % len(names)
            for name in names[shift:] + names[:shift]:
                runs[name].append(ttft(guards[name], ASSEMBLIES[name](builder, question)))
    finally:
        for guard in guards.values():
            guard.close()
        for provider in providers[len(guards) :]:
            provider.close()

    def median_ms(name: str) -> float:
        return round(statistics.median(r[0] for r in runs[name]) * 1000, 1)

    def share(name: str) -> float:
        return round(sum(r[2] for r in runs[name]) / sum(r[1] for r in runs[name]), 3)

    builder_ms, naive_ms = median_ms("builder"), median_ms("naive")
    static_ms = median_ms("static")
    return {
        "ttft_builder_ms": builder_ms,
        "ttft_static_ms": static_ms,
        "ttft_naive_ms": naive_ms,
        "ttft_samples": len(questions),
        "ttft_statistic": "median over the questions",
        "ratio": round(naive_ms / builder_ms, 1),
        "ratio_vs_static": round(static_ms / builder_ms, 2),
        "target_ratio": TARGET_RATIO,
        "ttft_builder_cold_ms": round(cold_s * 1000, 1),
        "ttft_static_cold_ms": round(static_cold_s * 1000, 1),
        "ttft_builder_max_ms": round(max(r[0] for r in runs["builder"]) * 1000, 1),
        "ttft_static_max_ms": round(max(r[0] for r in runs["static"]) * 1000, 1),
        "ttft_naive_min_ms": round(min(r[0] for r in runs["naive"]) * 1000, 1),
        "prompt_tokens_median": statistics.median(r[1] for r in runs["naive"]),
        "static_tokens_approx": static_tokens,
        "local_cached_share_builder": share("builder"),
        "local_cached_share_static": share("static"),
        "local_cached_share_naive": share("naive"),
    }


def fake_run(builder: PromptBuilder, questions: list[str]) -> dict[str, Any]:
    """Cached-token shares that FakeProvider's emulated prefix caches report, caching only
    prefixes of at least ``MIN_PREFIX_TOKENS`` tokens."""
    out: dict[str, Any] = {"min_prefix_tokens": MIN_PREFIX_TOKENS}
    with FakeProvider(
        prefix_cache=True, prefix_cache_min_tokens=MIN_PREFIX_TOKENS, model="fake-model"
    ) as api:
        routes = {
            "": OpenAICompatibleProvider(api.base_url, model="fake-model", name="openai"),
            "anthropic_": AnthropicProvider(api.base_url, model="fake-claude", name="anthropic"),
        }
        for prefix, route in routes.items():
            stats = PrefixCacheStats()
            with Guard(route, hooks=[stats], timeout=30, environ={}) as guard:
                for question in questions:
                    now = dt.datetime.now(dt.timezone.utc).isoformat(timespec="microseconds")
                    prompt = builder.build(question, context={"current_time": now})
                    guard.chat(request=prompt.request(max_tokens=MAX_TOKENS), feature="builder")
                api.clear_prefix_cache()
                for question in questions:
                    guard.chat(
                        static_messages(builder, question, breakpoint=prefix == "anthropic_"),
                        tools=list(TOOLS),
                        max_tokens=MAX_TOKENS,
                        feature="static",
                    )
                api.clear_prefix_cache()
                for question in questions:
                    guard.chat(
                        naive_messages(builder, question),
                        tools=list(builder.tools),
                        max_tokens=MAX_TOKENS,
                        feature="naive",
                    )
                api.clear_prefix_cache()
            for name in ASSEMBLIES:
                out[f"{prefix}cached_share_{name}"] = round(stats.hit_ratio(name), 3)
        before = api.stats.input_tokens
        route = OpenAICompatibleProvider(api.base_url, model="fake-model", name="count")
        with Guard(route, environ={}) as guard:
            guard.chat(
                [
                    {"role": "system", "content": builder.static_text},
                    {"role": "user", "content": ""},
                ],
                tools=list(builder.tools),
                max_tokens=1,
            )
        out["fake_static_tokens"] = api.stats.input_tokens - before - 4  # less the user frame
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--quick", action="store_true", help="4 questions, a short prompt")
    args = parser.parse_args()
    exit_on_signals()
    builder = make_builder(ARTICLES_QUICK if args.quick else ARTICLES)
    questions = list(QUESTIONS[:QUESTIONS_QUICK] if args.quick else QUESTIONS)
    result: dict[str, Any] = {
        "quick": args.quick,
        "questions": len(questions),
        "assemblies": {
            "builder": "PromptBuilder: static part first, the time in the last user message",
            "static": "no builder: a static system prompt, the time with the question",
            "naive": "no builder: the system prompt starts with a microsecond timestamp",
        },
    }
    result.update(local_run(builder, questions))
    result.update(fake_run(make_builder(ARTICLES), questions))
    print_result(result, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
