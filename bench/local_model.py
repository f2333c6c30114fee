"""Local-model generation through the SDK against raw llama-cpp-python, on the bundled model.

Everything runs on the bundled SmolLM2-135M-Instruct GGUF, greedy (``temperature=0``), with
``n_ctx=2048`` and the same ``n_threads`` on both sides (the provider's default: half the CPUs
this process may use, at least one; the prompt is read with all of them on both sides).

* ``sdk``: ``Guard(LocalProvider(n_ctx=2048, warm_up=True), timeout=120, environ={})`` and
  ``guard.chat(messages, stream=True, temperature=0, max_tokens=N)``. The provider formats the
  prompt with the GGUF's chat template and runs ``Llama.generate`` in its worker thread; the
  chunks reach the caller through a queue and the Guard's stream pipeline.
* ``raw``: ``llama_cpp.Llama(model_path=..., n_ctx=2048, n_threads=..., verbose=False)`` (through
  ``load_llama``, which only keeps llama.cpp's extra weight buffers off on AMX CPUs) and
  ``create_chat_completion(messages, temperature=0, max_tokens=N, stream=True)`` in the calling
  thread (it formats the prompt with the same GGUF chat template).

Each side lives in its own worker process (this script, started with ``--worker``), so each
has its own peak RSS, and the parent only sends prompts and collects results; only one worker
generates at any time. The prompt asks for a long explanation, so answers normally run to
``max_tokens``, and it is identical on both sides. Both sides are timed the same way, inside
the worker, by the caller: ``total`` from just before the call until the stream is exhausted,
TTFT until the first non-empty text chunk. Decode speed (``*_tok_s``) is
``output_tokens / (total - TTFT)``; end to end (``*_e2e_tok_s``) is ``output_tokens / total``.
Output tokens: the SDK's usage (exact, from the model's tokenizer); raw streams carry no usage,
so ``max_tokens`` when the stream ends with ``finish_reason == "length"``, else the answer
re-tokenized. ``same_output`` says whether both sides wrote exactly the same text every round.
``sdk_reported_ttft_ms`` is the SDK's own ``response.timings.first_token_s``, for comparison.

KV prefix reuse: both sides keep the previous call's KV cache and only compute the prompt
tokens after the longest prefix it shares with the new prompt, so a repeated prompt starts
almost at once. Every measured round therefore appends ``(Request i.)`` to the user message,
the same ``i`` on both sides: each call re-evaluates the same short suffix on both sides. Each
side is warmed up once (suffix ``(Warm-up.)``), then the rounds alternate between the sides,
with the side that goes first alternating too, and medians over the rounds are reported.
``ratio`` is ``sdk_tok_s / raw_tok_s`` (target: at least 0.95).

``prefix_cold_ttft_ms`` / ``prefix_warm_ttft_ms``: SDK TTFT of a ~1500-token prompt (a long
system message, one earlier exchange, a question) whose system message starts with a new
edition number each repeat, so nothing but the chat template's first tokens is cached ("cold"),
then of the same prompt with only the last user message changed ("warm": only that message is
computed). Medians over the repeats; answers are cut at 8 tokens.

``lookup_*``: prompt-lookup (n-gram) speculative decoding on a copy-heavy prompt (copy a
~160-word paragraph with one word changed): decode tokens/s of ``LocalProvider()`` (the ``sdk``
worker) against ``LocalProvider(prompt_lookup_tokens=10)`` (a third worker), both through a
Guard, warmed up once, then alternated; ``lookup_speedup`` is the ratio of the medians and
``lookup_same_output`` whether both wrote the same text every round (it may be false: the
drafted tokens are verified from one batched decode, whose logits differ from single-token
decodes in the last bits, enough to flip a near-tie; raw llama-cpp-python with the same draft
model does the same). The prompt plus
``max_tokens`` plus a draft stays under 512 tokens: llama-cpp-python 0.3.x sizes
``Llama.scores`` by ``n_batch`` (512 rows) unless ``logits_all=True`` is passed, and past
position 512 a drafting call without it fails with "could not broadcast input array".
``LocalProvider`` passes ``logits_all=True`` whenever it drafts, so the SDK no longer hits this;
the bound keeps the run comparable with earlier ones. A failure is reported in
``lookup_error``.

Memory: ``sdk_peak_rss_mb`` / ``raw_peak_rss_mb`` / ``lookup_peak_rss_mb`` are each worker
process's peak resident set (``getrusage(RUSAGE_SELF).ru_maxrss``): the Python interpreter, its
imports (the SDK worker imports the SDK and its dependencies, the raw worker only llama_cpp and
NumPy), one loaded model and its KV cache. The SDK worker's figure also covers the prefix and
copy prompts it served. ``peak_rss_mb`` is the SDK worker's figure: the peak of a process that
serves the SDK path (it includes tiktoken's cl100k table, about 40 MiB, which the Guard loads
to count every request's input tokens). The parent process loads no model and is not counted.

GPU: with a GPU build of llama-cpp-python (see the README, "The local fallback on a GPU"), the
SDK worker's ``LocalProvider`` chooses ``n_gpu_layers`` by free VRAM (``placement`` in the
result says what and why) and the raw and prompt-lookup workers get the same number, so both
sides run on the same device; ``--n-gpu-layers N`` (``-1``: all, ``0``: CPU only) sets it for
every worker instead. ``gpu_offload`` says whether this llama.cpp build can offload at all.

Noise: any other busy process on the machine slows generation a lot and unevenly (the more
threads decode, the more: they wait for each other at every token); alternation and medians
spread it over both sides, but compare runs of this script only on a quiet machine.

Usage: python bench/local_model.py [--json] [--quick] [--n-gpu-layers N]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from types import TracebackType
from typing import Any, TextIO, cast

Messages = list[dict[str, str]]

N_CTX = 2048
MAX_TOKENS = 200
MAX_TOKENS_QUICK = 64
RUNS = 5  # measured rounds per side
RUNS_QUICK = 2
TARGET_RATIO = 0.95

PREFIX_REPEATS = 3
PREFIX_REPEATS_QUICK = 1
PREFIX_MAX_TOKENS = 8  # only the time to the first token matters here

LOOKUP_TOKENS = 10  # prompt_lookup_tokens: tokens drafted per step
LOOKUP_RUNS = 3
LOOKUP_RUNS_QUICK = 1
LOOKUP_MAX_TOKENS = 200  # ~245 prompt tokens + 200 + a 10-token draft < 512 (see the docstring)
LOOKUP_MAX_TOKENS_QUICK = 100

EXPLAIN_MESSAGES: Messages = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Explain in detail how a refrigerator works, step by step."},
]

PARAGRAPH = (
    "The old mill stood beside the river for more than two hundred years. Every morning the "
    "miller opened the heavy wooden doors, checked the great stone wheels, and listened to the "
    "water as it turned the paddles. Farmers from the surrounding villages brought their grain "
    "in carts pulled by patient horses, and they waited in the yard while the flour was ground, "
    "talking about the weather, the price of seed, and the news from the town. In spring the "
    "river rose and the wheel turned faster; in late summer the water ran low and the miller "
    "worked only in the early hours. Children liked to watch the fish gather in the deep pool "
    "below the weir, and in the evening the swallows flew low over the water, catching insects "
    "in the golden light. When the railway came to the valley, the farmers began to send their "
    "grain to the large steam mills in the city, and the old mill grew quiet."
)
COPY_MESSAGES: Messages = [
    {
        "role": "user",
        "content": "Copy the paragraph below exactly, word for word, but change the word "
        f'"river" to "stream".\n\n{PARAGRAPH}',
    },
]

# The long, prefix-stable prompt: a handbook of numbered rules as the system message.
_PRODUCTS = ("kettles", "bicycles", "garden chairs", "desk lamps", "rain jackets", "bookcases")
_NOTES = (
    "the customer pays the return postage unless the item arrived damaged",
    "a photo of the damage must be attached to any claim",
    "gift cards cannot be used for express delivery",
    "orders placed after noon count as the next working day",
    "items bought in a sale can be exchanged but not refunded",
)
_HANDBOOK_RULES = 35  # about 1500 prompt tokens in all with SmolLM2's tokenizer
PREFIX_QUESTIONS = (
    "A customer bought a desk lamp in a sale and wants a refund. What do I tell them?",
    "Which rule covers rain jackets that arrived damaged?",
)


def with_suffix(messages: Messages, suffix: str) -> Messages:
    """A copy of ``messages`` whose last message ends with ``suffix``."""
    *head, last = messages
    return [*head, {**last, "content": f"{last['content']} {suffix}"}]


def handbook_messages(edition: int, question: str) -> Messages:
    """The ~1500-token prompt; ``edition`` comes first, so a new one shares no cached prefix."""
    rules = [
        f"Rule {i + 1}: {_PRODUCTS[i % len(_PRODUCTS)]} ordered from warehouse {i % 7 + 1} ship "
        f"within {i % 5 + 2} working days and may be returned within {14 + i % 3 * 7} days; "
        f"{_NOTES[i % len(_NOTES)]}."
        for i in range(_HANDBOOK_RULES)
    ]
    system = (
        f"Handbook edition {edition + 1}. You answer questions from shop staff using only the "
        "rules below, and you name the rule you rely on.\n\n" + "\n".join(rules)
    )
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": "Can kettles be returned after three weeks?"},
        {"role": "assistant", "content": "Check the kettle rules: most allow 14 to 28 days."},
        {"role": "user", "content": question},
    ]


# ------------------------------------------------------------------ worker processes


@dataclass
class Run:
    """One streamed generation, timed by the caller inside the worker."""

    total_s: float
    ttft_s: float  # to the first non-empty text chunk (total_s if there was none)
    output_tokens: int
    text: str
    input_tokens: int | None = None  # SDK only: the exact prompt size
    reported_ttft_s: float | None = None  # SDK only: response.timings.first_token_s

    @property
    def decode_tok_s(self) -> float:
        """Tokens per second after the first token arrived."""
        return self.output_tokens / max(self.total_s - self.ttft_s, 1e-9)

    @property
    def e2e_tok_s(self) -> float:
        """Tokens per second over the whole call."""
        return self.output_tokens / max(self.total_s, 1e-9)


Generate = Callable[[Messages, int], Run]


def peak_rss_mb() -> float:
    """This process's peak resident set in MiB (``ru_maxrss`` is in KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def sdk_worker(lookup: int | None, n_gpu_layers: int | None) -> tuple[Generate, dict[str, Any]]:
    """Load ``LocalProvider`` behind a ``Guard``; return its generate function and facts."""
    import llama_cpp

    from llmguard_sdk import Guard, LocalProvider

    started = time.perf_counter()
    provider = LocalProvider(
        n_ctx=N_CTX, warm_up=True, prompt_lookup_tokens=lookup, n_gpu_layers=n_gpu_layers
    )
    if not provider.wait_loaded(60):
        raise SystemExit("the local model did not load within 60 s")
    guard = Guard(provider, timeout=120, environ={})
    facts = {
        "load_s": time.perf_counter() - started,
        "model": provider.model,
        "model_path": str(provider.path),
        "n_threads": provider.n_threads,
        "n_gpu_layers": provider.n_gpu_layers,
        "placement": provider.placement.describe(),
        "gpu_offload": bool(llama_cpp.llama_supports_gpu_offload()),
    }

    def generate(messages: Messages, max_tokens: int) -> Run:
        pieces: list[str] = []
        first: float | None = None
        start = time.perf_counter()
        with guard.chat(messages, stream=True, temperature=0, max_tokens=max_tokens) as stream:
            for chunk in stream:
                if chunk.text and first is None:
                    first = time.perf_counter()
                pieces.append(chunk.text)
        end = time.perf_counter()
        response = stream.response
        assert response is not None
        assert response.usage is not None
        return Run(
            total_s=end - start,
            ttft_s=(first or end) - start,
            output_tokens=response.usage.output_tokens,
            text="".join(pieces),
            input_tokens=response.usage.input_tokens,
            reported_ttft_s=response.timings.first_token_s,
        )

    return generate, facts


def raw_worker(
    model_path: str, n_threads: int, n_gpu_layers: int
) -> tuple[Generate, dict[str, Any]]:
    """Load a bare ``llama_cpp.Llama``; return its generate function and facts."""
    from llmguard_sdk.providers.local import load_llama  # llama_cpp.Llama, AMX-safe

    started = time.perf_counter()
    llm = load_llama(
        model_path=model_path,
        n_ctx=N_CTX,
        n_threads=n_threads,
        n_gpu_layers=n_gpu_layers,
        verbose=False,
    )
    facts = {
        "load_s": time.perf_counter() - started,
        "n_threads": n_threads,
        "n_gpu_layers": n_gpu_layers,
    }

    def generate(messages: Messages, max_tokens: int) -> Run:
        pieces: list[str] = []
        first: float | None = None
        finish: str | None = None
        start = time.perf_counter()
        # With stream=True this is an iterator of OpenAI-style chunk dicts.
        stream = cast(
            "Iterator[dict[str, Any]]",
            llm.create_chat_completion(
                messages,  # type: ignore[arg-type]
                temperature=0,
                max_tokens=max_tokens,
                stream=True,
            ),
        )
        for chunk in stream:
            choice = chunk["choices"][0]
            content = choice["delta"].get("content")
            if content:
                if first is None:
                    first = time.perf_counter()
                pieces.append(content)
            finish = choice.get("finish_reason") or finish
        end = time.perf_counter()
        text = "".join(pieces)
        if finish == "length":
            tokens = max_tokens  # cut at the limit: exactly max_tokens were generated
        else:
            tokens = len(llm.tokenize(text.encode("utf-8"), add_bos=False))
        return Run(
            total_s=end - start, ttft_s=(first or end) - start, output_tokens=tokens, text=text
        )

    return generate, facts


def serve_worker(args: argparse.Namespace) -> int:
    """Worker main: load one model, then answer JSON-line requests from the parent on stdin.

    Requests are ``{"op": "generate", "messages": [...], "max_tokens": N}`` (answered with a
    :class:`Run` or ``{"error": ...}``) and ``{"op": "finish"}`` (answered with the peak RSS,
    then the worker exits). The first line written is ``{"ready": true, ...facts}``.
    """
    # The protocol gets the real stdout; anything llama.cpp prints there goes to stderr.
    channel: TextIO = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    if args.worker == "raw":
        generate, facts = raw_worker(args.model_path, args.n_threads, args.n_gpu_layers or 0)
    else:
        generate, facts = sdk_worker(args.lookup, args.n_gpu_layers)

    def reply(payload: dict[str, Any]) -> None:
        channel.write(json.dumps(payload) + "\n")

    reply({"ready": True, **facts})
    for line in sys.stdin:
        request = json.loads(line)
        if request["op"] == "finish":
            reply({"peak_rss_mb": peak_rss_mb()})
            return 0
        try:
            run = generate(request["messages"], request["max_tokens"])
        except Exception as exc:  # the parent decides whether this ends the benchmark
            reply({"error": repr(exc)})
        else:
            reply(asdict(run))
    return 0


class WorkerError(RuntimeError):
    """A worker could not generate (its error message is the exception's)."""


class Worker:
    """The parent's handle on one worker process (a context manager that always reaps it)."""

    def __init__(self, *args: str) -> None:
        self.args = args
        self.process = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--worker", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.facts = self._request(None)  # wait for {"ready": true, ...}

    def _request(self, payload: dict[str, Any] | None) -> dict[str, Any]:
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        if payload is not None:
            self.process.stdin.write(json.dumps(payload) + "\n")
            self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise SystemExit(f"worker {' '.join(self.args)} exited ({self.process.wait()})")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def generate(self, messages: Messages, max_tokens: int) -> Run:
        answer = self._request({"op": "generate", "messages": messages, "max_tokens": max_tokens})
        if "error" in answer:
            raise WorkerError(answer["error"])
        return Run(**answer)

    def finish(self) -> float:
        """Stop the worker; its peak RSS in MiB."""
        rss = float(self._request({"op": "finish"})["peak_rss_mb"])
        self.process.wait(timeout=30)
        return rss

    def __enter__(self) -> Worker:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


# ------------------------------------------------------------------ the parent


def alternate(
    first: Worker, second: Worker, prompts: Sequence[Messages], max_tokens: int
) -> tuple[list[Run], list[Run]]:
    """Run every prompt on both workers, alternating which one goes first; their runs."""
    runs: dict[Worker, list[Run]] = {first: [], second: []}
    for i, messages in enumerate(prompts):
        for worker in (first, second) if i % 2 == 0 else (second, first):
            runs[worker].append(worker.generate(messages, max_tokens))
    return runs[first], runs[second]


def median(values: Sequence[float], scale: float = 1.0, digits: int = 1) -> float:
    """The median of ``values`` times ``scale``, rounded."""
    return round(statistics.median(values) * scale, digits)


def compare(sdk: Worker, raw: Worker, runs: int, max_tokens: int) -> dict[str, Any]:
    """The SDK-versus-raw rounds on the explanation prompt (see the docstring)."""
    warm_up = with_suffix(EXPLAIN_MESSAGES, "(Warm-up.)")
    sdk.generate(warm_up, max_tokens)
    raw.generate(warm_up, max_tokens)
    prompts = [with_suffix(EXPLAIN_MESSAGES, f"(Request {i + 1}.)") for i in range(runs)]
    sdk_runs, raw_runs = alternate(sdk, raw, prompts, max_tokens)
    sdk_tok_s = statistics.median(r.decode_tok_s for r in sdk_runs)
    raw_tok_s = statistics.median(r.decode_tok_s for r in raw_runs)
    reported = [r.reported_ttft_s for r in sdk_runs if r.reported_ttft_s is not None]
    return {
        "sdk_tok_s": round(sdk_tok_s, 1),
        "raw_tok_s": round(raw_tok_s, 1),
        "ratio": round(sdk_tok_s / raw_tok_s, 3),
        "sdk_e2e_tok_s": median([r.e2e_tok_s for r in sdk_runs]),
        "raw_e2e_tok_s": median([r.e2e_tok_s for r in raw_runs]),
        "ttft_ms": median([r.ttft_s for r in sdk_runs], 1000),
        "raw_ttft_ms": median([r.ttft_s for r in raw_runs], 1000),
        "sdk_reported_ttft_ms": median(reported, 1000) if reported else None,
        "sdk_total_ms": median([r.total_s for r in sdk_runs], 1000),
        "raw_total_ms": median([r.total_s for r in raw_runs], 1000),
        "sdk_output_tokens": round(statistics.median(r.output_tokens for r in sdk_runs)),
        "raw_output_tokens": round(statistics.median(r.output_tokens for r in raw_runs)),
        "same_output": all(s.text == r.text for s, r in zip(sdk_runs, raw_runs, strict=True)),
    }


def prefix_reuse(sdk: Worker, repeats: int) -> dict[str, Any]:
    """Cold and warm SDK TTFT of the long, prefix-stable prompt (see the docstring)."""
    cold, warm = [], []
    prompt_tokens = 0
    for edition in range(repeats):
        first = sdk.generate(handbook_messages(edition, PREFIX_QUESTIONS[0]), PREFIX_MAX_TOKENS)
        second = sdk.generate(handbook_messages(edition, PREFIX_QUESTIONS[1]), PREFIX_MAX_TOKENS)
        cold.append(first.ttft_s)
        warm.append(second.ttft_s)
        prompt_tokens = first.input_tokens or 0
    return {
        "prefix_prompt_tokens": prompt_tokens,
        "prefix_cold_ttft_ms": median(cold, 1000),
        "prefix_warm_ttft_ms": median(warm, 1000),
    }


def prompt_lookup(plain: Worker, lookup: Worker, runs: int, max_tokens: int) -> dict[str, Any]:
    """Decode speed with and without prompt-lookup decoding on the copy prompt."""
    try:
        warm_up = with_suffix(COPY_MESSAGES, "(Warm-up.)")
        plain.generate(warm_up, max_tokens)
        lookup.generate(warm_up, max_tokens)
        prompts = [with_suffix(COPY_MESSAGES, f"(Request {i + 1}.)") for i in range(runs)]
        plain_runs, lookup_runs = alternate(plain, lookup, prompts, max_tokens)
    except WorkerError as exc:
        return {
            "lookup_tok_s": None,
            "no_lookup_tok_s": None,
            "lookup_speedup": None,
            "lookup_same_output": None,
            "lookup_error": str(exc),
        }
    lookup_tok_s = statistics.median(r.decode_tok_s for r in lookup_runs)
    plain_tok_s = statistics.median(r.decode_tok_s for r in plain_runs)
    return {
        "lookup_tok_s": round(lookup_tok_s, 1),
        "no_lookup_tok_s": round(plain_tok_s, 1),
        "lookup_speedup": round(lookup_tok_s / plain_tok_s, 3),
        "lookup_same_output": all(
            a.text == b.text for a, b in zip(plain_runs, lookup_runs, strict=True)
        ),
        "lookup_output_tokens": round(statistics.median(r.output_tokens for r in lookup_runs)),
        "no_lookup_output_tokens": round(statistics.median(r.output_tokens for r in plain_runs)),
        "lookup_prompt_tokens": plain_runs[0].input_tokens,
    }


def print_table(result: dict[str, Any]) -> None:
    """The result as a readable table."""
    print(
        f"{result['model']}, n_threads={result['n_threads']}, n_ctx={result['n_ctx']}, "
        f"{result['runs']} rounds of {result['max_tokens']} tokens, medians"
    )
    print(f"GPU offload built in: {result['gpu_offload']}; placement: {result['placement']}")
    header = ("decode tok/s", 14), ("e2e tok/s", 11), ("ttft ms", 9), ("total ms", 10)
    print(
        f"{'side':<6}" + "".join(f"{name:>{width}}" for name, width in header) + f"{'rss MiB':>9}"
    )
    for side, ttft in (("sdk", "ttft_ms"), ("raw", "raw_ttft_ms")):
        print(
            f"{side:<6}{result[f'{side}_tok_s']:>14}{result[f'{side}_e2e_tok_s']:>11}"
            f"{result[ttft]:>9}{result[f'{side}_total_ms']:>10}{result[f'{side}_peak_rss_mb']:>9}"
        )
    verdict = "meets" if result["ratio"] >= TARGET_RATIO else "misses"
    print(f"ratio {result['ratio']} ({verdict} the {TARGET_RATIO} target)")
    print(f"same output on both sides: {result['same_output']}")
    print(
        f"prefix reuse ({result['prefix_prompt_tokens']} prompt tokens): TTFT cold "
        f"{result['prefix_cold_ttft_ms']} ms, warm {result['prefix_warm_ttft_ms']} ms"
    )
    if result.get("lookup_error"):
        print(f"prompt lookup failed: {result['lookup_error']}")
    else:
        print(
            f"prompt lookup ({result['lookup_runs']} rounds of {result['lookup_max_tokens']} "
            f"tokens): {result['lookup_tok_s']} tok/s against {result['no_lookup_tok_s']} "
            f"without, speed-up {result['lookup_speedup']}, same output "
            f"{result['lookup_same_output']}"
        )
    print(f"runtime {result['runtime_s']} s")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--quick", action="store_true", help="smoke test: fewer rounds, shorter answers"
    )
    parser.add_argument(
        "--n-gpu-layers",
        type=int,
        default=None,
        help="layers offloaded to a GPU on every side (-1: all, 0: none; default: the "
        "provider's choice by free VRAM, copied to the raw side)",
    )
    # Internal: how the parent starts its worker processes.
    parser.add_argument("--worker", choices=["sdk", "raw"], help=argparse.SUPPRESS)
    parser.add_argument("--lookup", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--model-path", help=argparse.SUPPRESS)
    parser.add_argument("--n-threads", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker is not None:
        return serve_worker(args)

    runs = RUNS_QUICK if args.quick else RUNS
    max_tokens = MAX_TOKENS_QUICK if args.quick else MAX_TOKENS
    lookup_runs = LOOKUP_RUNS_QUICK if args.quick else LOOKUP_RUNS
    lookup_max_tokens = LOOKUP_MAX_TOKENS_QUICK if args.quick else LOOKUP_MAX_TOKENS
    prefix_repeats = PREFIX_REPEATS_QUICK if args.quick else PREFIX_REPEATS

    start = time.perf_counter()
    chosen = [] if args.n_gpu_layers is None else ["--n-gpu-layers", str(args.n_gpu_layers)]
    with Worker("sdk", *chosen) as sdk:
        facts = sdk.facts
        n_threads = str(facts["n_threads"])
        same = ["--n-gpu-layers", str(facts["n_gpu_layers"])]  # the SDK's choice, on every side
        raw_args = ["--model-path", facts["model_path"], "--n-threads", n_threads, *same]
        with Worker("raw", *raw_args) as raw:
            comparison = compare(sdk, raw, runs, max_tokens)
            raw_rss = raw.finish()
        prefix = prefix_reuse(sdk, prefix_repeats)
        with Worker("sdk", "--lookup", str(LOOKUP_TOKENS), *same) as lookup:
            lookup_result = prompt_lookup(sdk, lookup, lookup_runs, lookup_max_tokens)
            lookup_rss = lookup.finish()
        sdk_rss = sdk.finish()

    result: dict[str, Any] = {
        "benchmark": "local_model",
        "model": facts["model"],
        "n_threads": facts["n_threads"],
        "n_ctx": N_CTX,
        "gpu_offload": facts["gpu_offload"],
        "n_gpu_layers": facts["n_gpu_layers"],
        "placement": facts["placement"],
        "runs": runs,
        "max_tokens": max_tokens,
        **comparison,
        "target_ratio": TARGET_RATIO,
        **prefix,
        "peak_rss_mb": round(sdk_rss, 1),
        "sdk_peak_rss_mb": round(sdk_rss, 1),
        "raw_peak_rss_mb": round(raw_rss, 1),
        "lookup_peak_rss_mb": round(lookup_rss, 1),
        "prompt_lookup_tokens": LOOKUP_TOKENS,
        "lookup_runs": lookup_runs,
        "lookup_max_tokens": lookup_max_tokens,
        **lookup_result,
        "runtime_s": round(time.perf_counter() - start, 1),
    }
    if args.json:
        print(json.dumps(result))
    else:
        print_table(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
