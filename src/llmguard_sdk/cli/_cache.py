"""``llmguard cache calibrate PAIRS.jsonl --precision 0.99``: choose a similarity threshold.

Scores every labelled pair (see :mod:`llmguard_sdk.cache.calibrate` for the file format)
with an embedder (``--embedder``: ``hashing``, the default; ``minilm``, all-MiniLM-L6-v2 in
numpy; ``hybrid``, the two side by side as :meth:`HybridEmbedder.minilm
<llmguard_sdk.cache.HybridEmbedder.minilm>`) and the false-hit guards, prints the trade-off
table (threshold, precision, recall, right and wrong hits) and the lowest threshold that meets
the precision target; exits with 1 when no threshold does.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from typing import Any

from ..cache.calibrate import calibrate, pick_threshold, read_pairs
from ..cache.embedders import BertEmbedder, Embedder, HashingEmbedder, HybridEmbedder
from ..errors import ConfigurationError

EMBEDDERS = ("hashing", "minilm", "hybrid")

__all__ = ["add_cache_command", "run_cache_command"]


def add_cache_command(commands: Any) -> None:
    """Register ``cache calibrate`` on the ``llmguard`` parser's subcommands."""
    cache = commands.add_parser("cache", help="response cache tools")
    actions = cache.add_subparsers(dest="cache_command", metavar="ACTION", required=True)
    calibrate_parser = actions.add_parser(
        "calibrate", help="pick the semantic threshold that meets a precision target"
    )
    calibrate_parser.add_argument("pairs", help="JSONL: {query, cached, duplicate} per line")
    calibrate_parser.add_argument(
        "--precision", type=float, default=0.99, help="target precision (0.99)"
    )
    calibrate_parser.add_argument(
        "--no-guards", action="store_true", help="score similarity alone (guards off)"
    )
    calibrate_parser.add_argument(
        "--embedder", choices=EMBEDDERS, default="hashing", help="what embeds the texts (hashing)"
    )
    calibrate_parser.add_argument("--json", action="store_true", help="print JSON")


def _embedder(name: str) -> Embedder:
    if name == "minilm":
        return BertEmbedder.all_minilm_l6_v2()
    return HybridEmbedder.minilm() if name == "hybrid" else HashingEmbedder()


def run_cache_command(args: argparse.Namespace) -> int:
    """Run ``llmguard cache ...``; returns the exit status."""
    if not 0.0 < args.precision <= 1.0:
        raise ConfigurationError("--precision must be in (0, 1]")
    pairs = read_pairs(args.pairs)
    embedder = _embedder(args.embedder)
    rows = calibrate(pairs, embedder=embedder, guards=not args.no_guards)
    chosen = pick_threshold(rows, args.precision)
    if args.json:
        table = [
            {**asdict(r), "precision": round(r.precision, 4), "recall": round(r.recall, 4)}
            for r in rows
        ]
        print(
            json.dumps(
                {
                    "pairs": len(pairs),
                    "embedder": embedder.name,
                    "precision_target": args.precision,
                    "threshold": None if chosen is None else chosen.threshold,
                    "table": table,
                }
            )
        )
    else:
        print(f"{len(pairs)} pairs; target precision {args.precision:g}")
        print(f"{'threshold':>9}  {'precision':>9}  {'recall':>6}  {'right':>5}  {'wrong':>5}")
        for r in rows:
            mark = "  <- chosen" if chosen is not None and r is chosen else ""
            print(
                f"{r.threshold:9.3f}  {r.precision:9.3f}  {r.recall:6.3f}  "
                f"{r.tp:5d}  {r.fp:5d}{mark}"
            )
        if chosen is None:
            print("no threshold meets the target: label more pairs or use a stronger embedder")
        else:
            how = {"hashing": "", "minilm": "embedder=BertEmbedder.all_minilm_l6_v2(), "}.get(
                args.embedder, "embedder=HybridEmbedder.minilm(), "
            )
            print(f"use ResponseCache({how}threshold={chosen.threshold})")
    return 0 if chosen is not None else 1
