"""``llmguard eval FILE``: replay sampled calls against another route or release.

``FILE`` is what an :class:`~llmguard_sdk.telemetry.sampling.EvalSink` wrote. Each answered
call is sent to the OpenAI-compatible endpoint ``--base-url`` (``--model``; the API key from
the environment variable ``--api-key-env``), and the answers are compared with the recorded
ones (:func:`~llmguard_sdk.telemetry.evaluation.replay`); the agreement, cost and latency
table is printed (``--json``: as JSON).

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import math
import os
import sys
from collections.abc import Callable
from typing import Any

from ..errors import ConfigurationError
from ._command import Command, number, positive_int, positive_number

__all__ = ["EVAL"]


def _price(text: str) -> tuple[str, float, float]:
    model, sep, rates = text.rpartition("=")
    given, _, taken = rates.partition("/")
    try:
        if not sep or not model:
            raise ValueError
        return model, float(given), float(taken)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"a price is MODEL=INPUT/OUTPUT (USD per million tokens); got {text!r}"
        ) from None


def _finite(text: str) -> float:
    value = number(text)
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError("must be a number")
    return value


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="the samples file (JSON Lines from EvalSink)")
    parser.add_argument("--base-url", required=True, help="the candidate's endpoint")
    parser.add_argument(
        "--model", help="the candidate's model (default: the model each call recorded)"
    )
    parser.add_argument(
        "--name", default="candidate", help="the candidate's name (default: %(default)s)"
    )
    parser.add_argument("--api-key-env", metavar="VAR", help="environment variable of its key")
    parser.add_argument(
        "--compare",
        default="overlap",
        help="overlap (shared words), exact, or module:function(recorded, replayed) "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--threshold",
        type=_finite,
        default=0.6,
        help="agreement from this share of shared words, 0 to 1, or this score of a "
        "module:function comparison (default: %(default)g)",
    )
    parser.add_argument("--limit", type=positive_int, help="replay at most this many calls")
    parser.add_argument(
        "--price",
        type=_price,
        action="append",
        default=[],
        metavar="MODEL=IN/OUT",
        help="a price in USD per million tokens, for models the price table lacks",
    )
    parser.add_argument(
        "--timeout",
        type=positive_number,
        default=30.0,
        help="per call, seconds (default: %(default)g)",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


_TAKES = "a function(recorded, replayed) of the two answers, returning a bool or a score"


def _comparator(spec: str) -> Any:
    if spec in ("overlap", "exact"):
        return spec
    module, sep, name = spec.partition(":")
    if not sep:
        raise ConfigurationError(f"--compare must be overlap, exact or module:function: {spec!r}")
    try:
        function = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise ConfigurationError(f"--compare {spec!r}: {exc}") from None
    return _of_two_answers(spec, function)


def _of_two_answers(spec: str, function: Any) -> Callable[[str, str], bool | float]:
    """``function``, checked to take the two answers before any call is replayed (``json:
    dumps`` ended in a TypeError traceback at the first comparison), and each verdict to be
    a bool or a number (a path, ``os.path:join``'s, was a ValueError traceback)."""
    if not callable(function):
        raise ConfigurationError(f"--compare {spec}: not a function; it takes {_TAKES}")
    try:
        inspect.signature(function).bind("recorded", "replayed")
    except TypeError:
        raise ConfigurationError(
            f"--compare {spec}: {_name_of(function)}{inspect.signature(function)} cannot take "
            f"the two answers; it takes {_TAKES}"
        ) from None
    except ValueError:  # no signature to read (a few builtins): its first verdict tells
        pass

    from ..telemetry.evaluation import _verdict_of

    def compare(recorded: str, replayed: str) -> bool | float:
        verdict = function(recorded, replayed)
        score = _verdict_of(verdict)  # (read as replay() reads it)
        if score is None:
            raise ConfigurationError(
                f"--compare {spec}: returned {verdict!r:.60} ({type(verdict).__name__}); it "
                "must return a bool or a number (a score, agreeing from --threshold)"
            )
        return score

    return compare


def _name_of(function: Any) -> str:
    return str(getattr(function, "__qualname__", None) or getattr(function, "__name__", "it"))


def _run(args: argparse.Namespace) -> int:
    """Run ``llmguard eval``; returns the exit status (1 when a replayed call failed, or
    the file held no answered call to replay)."""
    from .. import Guard, OpenAICompatibleProvider
    from ..budget import Price, PriceTable
    from ..telemetry.evaluation import replay
    from ..telemetry.sampling import read_samples

    samples = read_samples(args.file)
    if args.model is None:
        _recorded_models(samples, args)
    key = os.environ.get(args.api_key_env) if args.api_key_env else None
    if args.api_key_env and not key:  # else every replayed call goes without a key (401)
        state = "is not set" if key is None else "is empty"
        raise ConfigurationError(f"--api-key-env: {args.api_key_env} {state}")
    provider = OpenAICompatibleProvider(
        args.base_url, api_key=key, model=args.model, name=args.name
    )
    prices = PriceTable.default_table().with_prices(
        {model: Price(input=given, output=taken) for model, given, taken in args.price}
    )
    with Guard(provider, prices=prices, retry=None, timeout=args.timeout, environ={}) as guard:
        report = replay(
            samples,
            guard,
            compare=_comparator(args.compare),
            threshold=args.threshold,
            candidate=args.name,
            limit=args.limit,
        )
    if not report.overall.compared:  # the wrong file, or every call failed: nothing agreed
        skipped = f" ({report.skipped} failed or not replayable)" if report.skipped else ""
        print(
            f"llmguard eval: no answered calls to replay in {args.file}{skipped}", file=sys.stderr
        )
        return 1
    print(json.dumps(report.as_dict(), indent=2) if args.json else report.render())
    return 1 if report.overall.replayed.errors else 0


def _recorded_models(samples: list[dict[str, Any]], args: argparse.Namespace) -> None:
    """Without ``--model``, each call is replayed with the model it recorded: calls to replay
    that recorded none are a :class:`ConfigurationError` naming ``--model`` (each failed
    with ``no model: pass model=...``, Python's words, and the command exited 1)."""
    from ..telemetry.evaluation import _replayable

    replayed = [s for s in samples if not s.get("error") and _replayable(s)][: args.limit]
    unnamed = sum(1 for s in replayed if not s.get("model") and not s["request"].get("model"))
    if unnamed:
        raise ConfigurationError(
            f"--model: {unnamed} of the {len(replayed)} calls to replay in {args.file} recorded "
            "no model: name the candidate's model with --model"
        )


EVAL = Command(
    "eval",
    "replay sampled calls against another route or release and compare the answers",
    _arguments,
    _run,
    description="Replay the answered calls of an EvalSink file against an OpenAI-"
    "compatible endpoint and print agreement, cost and latency, overall and per feature.",
)
