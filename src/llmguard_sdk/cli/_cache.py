"""``llmguard cache calibrate PAIRS.jsonl --target-precision 0.95``: choose a threshold;
``llmguard cache clear --store URL --namespace NS``: delete a shared cache's namespace.

Scores every labelled pair (see :mod:`llmguard_sdk.cache.calibrate` for the file format;
``bundled:hard_questions`` or ``bundled:question_framings`` reads a development set shipped
with the package) with an embedder (``--embedder``: ``hashing``, the default; ``minilm``,
all-MiniLM-L6-v2 in numpy;
``hybrid``, the two side by side as :meth:`HybridEmbedder.minilm
<llmguard_sdk.cache.HybridEmbedder.minilm>`) and the false-hit guards (strict ones, as the
default cache uses, unless ``--verifier``), prints the curve (threshold, precision, its lower
confidence bound, recall, right and wrong hits) and the lowest threshold whose lower bound
meets the target; exits with 1 when none does. With ``--verifier``, the curve is over the
:class:`~llmguard_sdk.cache.ParaphraseVerifier`'s score, for candidates at or above the
embedder's threshold.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from .._state.urls import redacted_url
from ..cache import Pair, Scorer, bundled_pairs, calibrate, pick_threshold, read_pairs
from ..cache.embedders import (
    BertEmbedder,
    Embedder,
    HashingEmbedder,
    HybridEmbedder,
    suggested_threshold,
)
from ..errors import ConfigurationError, StoreUnavailableError
from ._command import Command, Group, redis_store, store_arguments

EMBEDDERS = ("hashing", "minilm", "hybrid")

__all__ = ["CACHE"]


def _calibrate_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "pairs",
        help="JSONL: {query, cached, duplicate} per line; or bundled:hard_questions / "
        "bundled:question_framings",
    )
    parser.add_argument(
        "--target-precision",
        "--precision",
        dest="precision",
        type=float,
        default=0.95,
        help="target precision, met by its lower 95%% confidence bound (default: %(default)g)",
    )
    parser.add_argument(
        "--no-guards", action="store_true", help="score similarity alone (guards off)"
    )
    parser.add_argument(
        "--no-strict",
        action="store_true",
        help="the standard guards only (the strict ones are the default cache's); not with "
        "--no-guards or --verifier",
    )
    parser.add_argument(
        "--embedder",
        choices=EMBEDDERS,
        default="hashing",
        help="what embeds the texts (default: %(default)s)",
    )
    parser.add_argument(
        "--verifier",
        action="store_true",
        help="sweep the ParaphraseVerifier's score over the embedder's candidates",
    )
    parser.add_argument("--json", action="store_true", help="print JSON")


def _embedder(name: str) -> Embedder:
    if name == "minilm":
        return BertEmbedder.all_minilm_l6_v2()
    return HybridEmbedder.minilm() if name == "hybrid" else HashingEmbedder()


def _pairs(source: str) -> list[Pair]:
    if source.startswith("bundled:"):
        return list(bundled_pairs(source.removeprefix("bundled:")))
    return read_pairs(source)


def _run_calibrate(args: argparse.Namespace) -> int:
    """Run ``llmguard cache calibrate``; returns the exit status."""
    if not 0.0 < args.precision < 1.0:
        raise ConfigurationError("--target-precision must be in (0, 1)")
    for other, given, why in (
        ("--no-guards", args.no_guards, "no guards at all"),
        ("--verifier", args.verifier, "the verifier runs with the standard guards only"),
    ):
        if args.no_strict and given:  # it changed nothing, without a word
            raise ConfigurationError(f"--no-strict: not with {other} ({why})")
    pairs = _pairs(args.pairs)
    embedder = _embedder(args.embedder)
    verifier: Scorer | None = None
    if args.verifier:
        from ..cache.verifier import ParaphraseVerifier

        verifier = ParaphraseVerifier.minilm()
    rows = calibrate(
        pairs,
        embedder=embedder,
        guards=not args.no_guards,
        strict=verifier is None and not args.no_strict,
        verifier=verifier,
        candidate_threshold=suggested_threshold(embedder),
    )
    chosen = pick_threshold(rows, args.precision)
    if args.json:
        table = [
            {
                "threshold": r.threshold,
                "tp": r.tp,
                "fp": r.fp,
                "fn": r.fn,
                "precision": round(r.precision, 4),
                "precision_lower_bound": round(r.precision_lower_bound, 4),
                "recall": round(r.recall, 4),
            }
            for r in rows
        ]
        print(
            json.dumps(
                {
                    "pairs": len(pairs),
                    "embedder": embedder.name,
                    "verifier": None if verifier is None else verifier.name,
                    "precision_target": args.precision,
                    "threshold": None if chosen is None else chosen.threshold,
                    "table": table,
                }
            )
        )
        return 0 if chosen is not None else 1
    _print_curve(args, len(pairs), rows, chosen, verifier is not None)
    return 0 if chosen is not None else 1


def _print_curve(
    args: argparse.Namespace, count: int, rows: list[Any], chosen: Any, verified: bool
) -> None:
    print(f"{count} pairs; target precision {args.precision:g} (lower 95% Wilson bound)")
    header = "verifier" if verified else "threshold"
    print(f"{header:>9}  {'precision':>9}  {'bound':>6}  {'recall':>6}  {'right':>5}  {'wrong':>5}")
    for r in rows:
        mark = "  <- chosen" if chosen is not None and r is chosen else ""
        print(
            f"{r.threshold:9.3f}  {r.precision:9.3f}  {r.precision_lower_bound:6.3f}  "
            f"{r.recall:6.3f}  {r.tp:5d}  {r.fp:5d}{mark}"
        )
    if chosen is None:
        print("no threshold meets the target: label more pairs or use a stronger embedder")
        return
    how = {"hashing": "", "minilm": "embedder=BertEmbedder.all_minilm_l6_v2(), "}.get(
        args.embedder, "embedder=HybridEmbedder.minilm(), "
    )
    if verified:
        print(f"use ResponseCache({how}verifier=ParaphraseVerifier.minilm({chosen.threshold}))")
    else:
        print(f"use ResponseCache({how}threshold={chosen.threshold})")


def _clear_arguments(parser: argparse.ArgumentParser) -> None:
    store_arguments(parser, users="the caches")
    parser.add_argument(
        "--namespace", default="default", help="the namespace to clear (default: %(default)s)"
    )
    parser.add_argument("--json", action="store_true", help="print JSON")


def _run_clear(args: argparse.Namespace) -> int:
    """Run ``llmguard cache clear``: every entry of the namespace, whatever its version,
    tenant or kind of vectors, for every process (their indexes drop them at their next
    sync); returns the exit status."""
    from ..cache import ResponseCache

    store = redis_store(args)
    try:
        ResponseCache(store, namespace=args.namespace, semantic=False).clear()
    except StoreUnavailableError as exc:
        print(f"llmguard cache clear: Redis at {redacted_url(args.store)}: {exc}", file=sys.stderr)
        return 1
    finally:
        store.close()
    if args.json:
        print(json.dumps({"namespace": args.namespace, "cleared": True}))
    else:
        print(f"cleared namespace {args.namespace!r} of {redacted_url(args.store)}")
    return 0


CACHE = Group(
    "cache",
    "response cache tools",
    (
        Command(
            "calibrate",
            "pick the semantic threshold that meets a precision target",
            _calibrate_arguments,
            _run_calibrate,
        ),
        Command(
            "clear",
            "delete every entry of a namespace of a cache shared through Redis",
            _clear_arguments,
            _run_clear,
        ),
    ),
)
