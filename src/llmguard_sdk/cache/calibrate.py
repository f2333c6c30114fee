"""Choosing a similarity threshold from labelled pairs (``llmguard cache calibrate``).

A pairs file holds one JSON object per line: two texts and whether a cached answer for one
may answer the other, e.g. ``{"query": "...", "cached": "...", "duplicate": true}`` (``a`` /
``b`` / ``label`` are accepted too). :func:`calibrate` scores every pair with the embedder and
the false-hit guards, sweeps the threshold, and :func:`pick_threshold` picks the lowest one
whose precision, *with its lower confidence bound*, meets the target: the Wilson score bound
(one-sided, 95 % by default), so 20 right hits out of 20 do not pass for 0.95 (their bound is
0.88): it takes 52 hits without a wrong one, or about 200 with 5 wrong.

With a ``verifier`` (see :mod:`llmguard_sdk.cache.verifier`), the embedder's similarity only
picks candidates (at or above ``candidate_threshold``) and the threshold swept is the
verifier's score.

:func:`bundled_pairs` reads the development set that ships with the package (see
``data/README.md`` beside this module).

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from statistics import NormalDist
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from .._lazy import np
from ..errors import ConfigurationError
from ._config import check_target
from .embedders import Embedder, HashingEmbedder
from .guards import AGREED_ALLOWANCE, guard_rejection, strict_agreement

if TYPE_CHECKING:
    import numpy.typing as npt

__all__ = [
    "BUNDLED_PAIRS",
    "CalibrationRow",
    "Pair",
    "Scorer",
    "bundled_pairs",
    "calibrate",
    "pick_threshold",
    "read_pairs",
    "target_threshold",
    "wilson_lower_bound",
]

BUNDLED_PAIRS = ("hard_questions", "question_framings")
"""The development sets shipped in ``llmguard_sdk/cache/data`` (``NAME.jsonl``)."""


@runtime_checkable
class Scorer(Protocol):
    """Scores pairs of texts: higher is more likely the same question (a verifier that
    accepts a pair when its score reaches ``threshold``)."""

    name: str
    threshold: float

    def score(self, pairs: Sequence[tuple[str, str]]) -> Sequence[float]:
        """One score per ``(query, cached query)`` pair."""
        ...


@dataclass(frozen=True)
class Pair:
    """Two texts and whether one's answer may serve the other."""

    query: str
    cached: str
    duplicate: bool


def wilson_lower_bound(successes: int, trials: int, confidence: float = 0.95) -> float:
    """The one-sided lower Wilson score bound of a proportion (0.0 without trials)."""
    if trials <= 0:
        return 0.0
    if not 0.5 <= confidence < 1.0:
        raise ConfigurationError("confidence must be in [0.5, 1)")
    z = NormalDist().inv_cdf(confidence)
    share = successes / trials
    centre = share + z * z / (2 * trials)
    spread = z * math.sqrt(share * (1 - share) / trials + z * z / (4 * trials * trials))
    return max(0.0, (centre - spread) / (1 + z * z / trials))


@dataclass(frozen=True)
class CalibrationRow:
    """The outcome at one threshold: hits that were right (tp) and wrong (fp), missed (fn)."""

    threshold: float
    tp: int
    fp: int
    fn: int
    confidence: float = 0.95

    @property
    def precision(self) -> float:
        """Share of accepted pairs that were duplicates (1.0 when none was accepted)."""
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else 1.0

    @property
    def precision_lower_bound(self) -> float:
        """The lower Wilson bound of :attr:`precision` at :attr:`confidence`."""
        return wilson_lower_bound(self.tp, self.tp + self.fp, self.confidence)

    @property
    def recall(self) -> float:
        """Share of duplicate pairs accepted."""
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else 0.0


def read_pairs(path: str | Path) -> list[Pair]:
    """Read a pairs file (see the module docs; UTF-8, with or without a byte order mark); a
    bad line raises ConfigurationError."""
    try:
        with open(path, encoding="utf-8-sig") as lines:
            return _parse(lines, str(path))
    except OSError as exc:
        raise ConfigurationError(f"cannot read {path}: {exc}") from None
    except UnicodeDecodeError:
        raise ConfigurationError(f"cannot read {path}: not UTF-8 text") from None


def _parse(lines: Iterable[str], where: str) -> list[Pair]:
    pairs = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            query = item.get("query", item.get("a"))
            cached = item.get("cached", item.get("b"))
            label = item.get("duplicate", item.get("label"))
        except (json.JSONDecodeError, AttributeError, RecursionError):  # (nested too deep)
            raise ConfigurationError(f"{where}:{number}: not a JSON object") from None
        if not isinstance(query, str) or not isinstance(cached, str):
            raise ConfigurationError(f"{where}:{number}: needs two texts (query, cached)")
        if not isinstance(label, int) or label not in (0, 1):  # (a 0-5 grade is no label)
            raise ConfigurationError(f"{where}:{number}: needs duplicate: true/false (or 1/0)")
        pairs.append(Pair(query, cached, bool(label)))
    if not pairs:
        raise ConfigurationError(f"{where}: no pairs")
    return pairs


@lru_cache(maxsize=4)
def bundled_pairs(name: str) -> tuple[Pair, ...]:
    """A development set shipped with the package (one of :data:`BUNDLED_PAIRS`)."""
    if name not in BUNDLED_PAIRS:
        raise ConfigurationError(f"no bundled pairs named {name!r}: one of {BUNDLED_PAIRS}")
    text = resources.files(__package__).joinpath(f"data/{name}.jsonl").read_text("utf-8")
    return tuple(_parse(text.splitlines(), f"{name}.jsonl"))


def calibrate(
    pairs: Sequence[Pair],
    *,
    embedder: Embedder | None = None,
    guards: bool = True,
    strict: bool = False,
    thresholds: Iterable[float] | None = None,
    verifier: Scorer | None = None,
    candidate_threshold: float = 0.0,
    confidence: float = 0.95,
) -> list[CalibrationRow]:
    """One :class:`CalibrationRow` per threshold (0.30 to 0.95 by 0.025 unless given; with a
    ``verifier``, its score from 0.05 to 0.95 by 0.025), each pair accepted as the cache
    would serve it (with ``strict``, a pair the strict guards read as the same request down
    to :data:`~llmguard_sdk.cache.guards.AGREED_ALLOWANCE` below the threshold)."""
    embedder = embedder or HashingEmbedder()
    left = embedder.embed([p.query for p in pairs])
    right = embedder.embed([p.cached for p in pairs])
    similarity: npt.NDArray[np.float64] = np.einsum("ij,ij->i", left, right).astype(np.float64)
    passes = np.array(
        [
            not guards
            or guard_rejection(p.query, p.cached, strict=strict, key_terms=verifier is None) is None
            for p in pairs
        ],
        dtype=bool,
    )
    if verifier is not None:
        candidates = passes & (similarity >= candidate_threshold)
        asked = [(p.query, p.cached) for p, c in zip(pairs, candidates, strict=True) if c]
        score = np.full(len(pairs), -np.inf)
        score[candidates] = np.asarray(verifier.score(asked), dtype=np.float64)
        similarity, default_steps = score, np.arange(0.05, 0.951, 0.025)
    else:
        default_steps = np.arange(0.30, 0.951, 0.025)
    duplicate = np.array([p.duplicate for p in pairs], dtype=bool)
    # as the cache serves them: with the strict guards, a pair they read as the same request
    # is served down to AGREED_ALLOWANCE below the threshold
    agreed = np.array(
        [
            verifier is None and guards and strict and strict_agreement(p.query, p.cached)
            for p in pairs
        ],
        dtype=bool,
    )
    allowance = np.where(agreed, AGREED_ALLOWANCE, 0.0)
    rows = []
    for threshold in thresholds if thresholds is not None else default_steps:
        accepted = passes & (similarity >= threshold - allowance)
        rows.append(
            CalibrationRow(
                threshold=round(float(threshold), 4),
                tp=int((accepted & duplicate).sum()),
                fp=int((accepted & ~duplicate).sum()),
                fn=int((~accepted & duplicate).sum()),
                confidence=confidence,
            )
        )
    return rows


def pick_threshold(
    rows: Sequence[CalibrationRow], precision: float, *, bound: bool = True
) -> CalibrationRow | None:
    """The lowest threshold whose precision meets ``precision`` (by its lower confidence
    bound unless ``bound=False``); None if none does."""

    def meets(row: CalibrationRow) -> bool:
        return (row.precision_lower_bound if bound else row.precision) >= precision

    meeting = [r for r in rows if r.tp > 0 and meets(r)]
    return min(meeting, key=lambda r: r.threshold) if meeting else None


def target_threshold(
    target: float,
    pairs: str | Path | Sequence[Pair] | None,
    *,
    embedder: Embedder,
    guards: bool,
    strict: bool,
    verifier: object,
    floor: float,
) -> float:
    """The similarity threshold whose precision's lower 95 % bound on labelled ``pairs``
    (default: the bundled sets) meets ``target``, never below ``floor`` (the embedder's own
    suggestion, or the threshold given: a set of short questions says little about long
    texts). With a scoring ``verifier``, its threshold is set so instead and ``floor`` is
    returned. :class:`ConfigurationError` when no threshold reaches the target.

    .. versionadded:: 0.2.0
    """
    check_target(target)
    if pairs is None:
        labelled: Sequence[Pair] = [p for name in BUNDLED_PAIRS for p in bundled_pairs(name)]
    elif isinstance(pairs, (str, Path)):
        labelled = read_pairs(pairs)
    elif isinstance(pairs, Sequence) and all(isinstance(pair, Pair) for pair in pairs):
        labelled = [pair for pair in pairs if isinstance(pair, Pair)]  # (all of them)
    else:
        raise ConfigurationError(
            f"calibration_pairs must be a JSONL path or a list of Pair, got {pairs!r:.80}"
        )
    scorer = verifier if isinstance(verifier, Scorer) else None
    rows = calibrate(
        labelled,
        embedder=embedder,
        guards=guards,
        strict=strict,
        verifier=scorer,
        candidate_threshold=floor,
    )
    chosen = pick_threshold(rows, target)
    if chosen is None:
        raise ConfigurationError(
            f"no threshold reaches precision {target:g} (lower 95 % bound) on "
            f"{len(labelled)} labelled pairs: label more, or add a verifier"
        )
    if scorer is not None:
        scorer.threshold = chosen.threshold
        return floor
    return max(floor, chosen.threshold)
