"""Replaying sampled traffic against another route or release: agreement, cost and latency.

::

    from llmguard_sdk.telemetry.evaluation import replay

    report = replay("eval.jsonl", candidate_guard)       # a Guard around the other route
    print(report.render())

Each sampled call that was answered (:mod:`~llmguard_sdk.telemetry.sampling`) is sent again,
one at a time, through the candidate; its answer is compared with the recorded one by
``compare`` (``"overlap"``: the word sets share at least ``threshold`` of their words;
``"exact"``: the same text up to case and spacing; or a function ``(recorded, replayed) ->
bool | float``, a float counting as agreement from ``threshold`` up: a grader, a verifier;
the text of a number counts as the number, any other verdict is a ``ConfigurationError``).
The report has the agreement, the cost and latency of both sides, errors, and the mean
feedback score of the recorded answers, overall and per feature.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ConfigurationError, LLMGuardError
from .sampling import read_samples

if TYPE_CHECKING:
    from ..guard import Guard

__all__ = ["Comparator", "EvalReport", "Side", "compare_exact", "compare_overlap", "replay"]

Comparator = Callable[[str, str], "bool | float"]
"""``(recorded, replayed) -> agree``: a bool, or a score that agrees from the threshold up."""
_WORD = re.compile(r"\w+")


def compare_exact(recorded: str, replayed: str) -> bool:
    """The same answer up to case and spacing."""
    return " ".join(recorded.casefold().split()) == " ".join(replayed.casefold().split())


def compare_overlap(recorded: str, replayed: str) -> float:
    """The share of words the two answers have in common (Jaccard of their word sets)."""
    left = set(_WORD.findall(recorded.casefold()))
    right = set(_WORD.findall(replayed.casefold()))
    if not left and not right:
        return 1.0
    return len(left & right) / len(left | right)


@dataclass
class Side:
    """One side of the comparison: the recorded calls or their replay."""

    calls: int = 0
    errors: int = 0
    cost_usd: float = 0.0
    priced: int = 0
    latencies: list[float] = field(default_factory=list)

    def add(self, latency: float | None, cost: float | None, error: bool = False) -> None:
        """Count one call: its latency (seconds) and cost (USD) where known."""
        self.calls += 1
        self.errors += error
        if latency is not None:
            self.latencies.append(latency)
        if cost is not None:
            self.cost_usd += cost
            self.priced += 1

    def percentile(self, share: float) -> float | None:
        """The nearest-rank percentile of the latencies (seconds), None without any."""
        if not self.latencies:
            return None
        ordered = sorted(self.latencies)
        return ordered[max(0, math.ceil(share * len(ordered)) - 1)]

    def as_dict(self) -> dict[str, Any]:
        """The side's figures as JSON-ready data."""
        return {
            "calls": self.calls,
            "errors": self.errors,
            "cost_usd": round(self.cost_usd, 8) if self.priced else None,
            "latency_p50_s": self.percentile(0.5),
            "latency_p95_s": self.percentile(0.95),
        }


@dataclass
class _Group:
    recorded: Side = field(default_factory=Side)
    replayed: Side = field(default_factory=Side)
    agreed: int = 0
    compared: int = 0
    scores: list[float] = field(default_factory=list)

    def tally(
        self, sample: dict[str, Any], agreed: bool, elapsed: float, cost: float | None, failed: bool
    ) -> None:
        self.compared += 1
        self.agreed += agreed
        self.scores.extend(
            f["score"] for f in sample.get("feedback", []) if _is_number(f.get("score"))
        )
        self.recorded.add(_known(sample.get("latency_s")), _known(sample.get("cost_usd")))
        self.replayed.add(elapsed, cost, error=failed)

    def as_dict(self) -> dict[str, Any]:
        return {
            "compared": self.compared,
            "agreed": self.agreed,
            "agreement": round(self.agreed / self.compared, 4) if self.compared else None,
            "feedback_mean": round(sum(self.scores) / len(self.scores), 4) if self.scores else None,
            "feedback_count": len(self.scores),
            "recorded": self.recorded.as_dict(),
            "replayed": self.replayed.as_dict(),
        }


@dataclass
class EvalReport:
    """What :func:`replay` found, overall and per feature."""

    candidate: str
    overall: _Group = field(default_factory=_Group)
    features: dict[str, _Group] = field(default_factory=dict)
    skipped: int = 0
    first_error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data."""
        return {
            "candidate": self.candidate,
            "skipped": self.skipped,
            "first_error": self.first_error,
            "overall": self.overall.as_dict(),
            "features": {name: g.as_dict() for name, g in sorted(self.features.items())},
        }

    def render(self) -> str:
        """The agreement table as text."""
        head = f"{'':<14}{'calls':>6}{'agree':>8}{'errors':>7}{'cost USD':>22}"
        head += f"{'p50 ms':>16}{'p95 ms':>16}{'feedback':>10}"
        under = f"{'':<35}{'recorded / replay':>22}{'rec / replay':>16}{'rec / replay':>16}"
        lines = [f"replayed against {self.candidate}", head, under]
        rows = [("all", self.overall), *sorted(self.features.items())]
        for name, group in rows:
            data = group.as_dict()
            lines.append(
                f"{name[:13]:<14}{group.compared:>6}"
                f"{_number(data['agreement'], '{:.0%}'):>8}"
                f"{group.replayed.errors:>7}"
                f"{_pair(data, 'cost_usd', '{:.6f}'):>22}"
                f"{_pair(data, 'latency_p50_s', '{:.0f}', 1000):>16}"
                f"{_pair(data, 'latency_p95_s', '{:.0f}', 1000):>16}"
                f"{_number(data['feedback_mean'], '{:.2f}'):>10}"
            )
        if self.first_error:
            lines.append(f"first replay error: {self.first_error}")
        if self.skipped:
            lines.append(f"({self.skipped} sampled calls skipped: errors or no answer)")
        return "\n".join(lines)


def _number(value: float | None, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


def _pair(data: dict[str, Any], key: str, fmt: str, scale: float = 1.0) -> str:
    values = [data[side][key] for side in ("recorded", "replayed")]
    return " / ".join("-" if v is None else fmt.format(v * scale) for v in values)


def _comparator(compare: str | Comparator, threshold: float) -> Callable[[str, str], bool]:
    if compare == "exact":
        return compare_exact
    if compare == "overlap":
        if not 0.0 <= threshold <= 1.0:  # 60 (meant as 60 %): every answer disagreed
            raise ConfigurationError(
                f"threshold: word overlap is a share from 0 to 1, not {threshold!r}"
            )
        return lambda a, b: compare_overlap(a, b) >= threshold
    if callable(compare):

        def agrees(recorded: str, replayed: str) -> bool:
            verdict = compare(recorded, replayed)
            score = _verdict_of(verdict)
            if score is None:
                raise ConfigurationError(
                    f"compare {compare!r} returned {verdict!r:.60} ({type(verdict).__name__}); "
                    f"{_VERDICTS}"
                )
            return score if isinstance(score, bool) else score >= threshold

        return agrees
    raise ConfigurationError(f"compare must be 'overlap', 'exact' or a function, not {compare!r}")


_VERDICTS = "it must return a bool or a number (a score, agreeing from the threshold)"


def _verdict_of(verdict: Any) -> bool | float | None:
    """A comparator's verdict as :func:`replay` and ``llmguard eval --compare`` read it: a
    bool, or a score from a number or the text of one (``"0.8"``, a grader's answer); None
    for anything else (a path, ``None``, an int too large for a float)."""
    if isinstance(verdict, bool):
        return verdict
    try:
        return float(verdict)
    except (TypeError, ValueError, OverflowError):
        return None


def replay(
    samples: str | Path | Iterable[dict[str, Any]],
    guard: Guard,
    *,
    compare: str | Comparator = "overlap",
    threshold: float = 0.6,
    candidate: str | None = None,
    limit: int | None = None,
) -> EvalReport:
    """Send each answered sample through ``guard`` and compare (see the module docs).

    Args:
        samples: a samples file (:class:`~llmguard_sdk.telemetry.sampling.EvalSink`) or its
            records (:func:`~llmguard_sdk.telemetry.sampling.read_samples`).
        guard: the candidate: a Guard around the other route or release (its first route's
            model when it names one, else the recorded model).
        compare / threshold: how answers are compared.

    Raises:
        ConfigurationError: ``compare`` returned neither a bool nor a number (a
            ``ValueError`` or ``TypeError`` from ``float()`` before).
        candidate: its name in the report (default: the guard's first route).
        limit: replay at most this many calls.
    """
    agrees = _comparator(compare, threshold)
    records: Sequence[dict[str, Any]] = (
        read_samples(samples) if isinstance(samples, str | Path) else list(samples)
    )
    report = EvalReport(candidate or _route_name(guard))
    own_model = bool(guard.routes) and bool(guard.routes[0].model)
    dropped = ("messages", "model") if own_model else ("messages",)
    for sample in records:
        if limit is not None and report.overall.compared >= limit:
            break
        if sample.get("error") or not _replayable(sample):
            report.skipped += 1
            continue
        params = {k: v for k, v in sample["request"].items() if k not in dropped}
        if not own_model and not params.get("model") and sample.get("model"):
            params["model"] = sample["model"]  # the model that answered the recorded call
        started = time.perf_counter()
        answer: str | None = None
        cost: float | None = None
        try:
            response = guard.chat(
                sample["request"]["messages"],
                feature=sample.get("feature"),
                cacheable=False,
                **params,
            )
            answer, cost = response.text, response.cost_usd
        except LLMGuardError as exc:  # counted as an error of the replay
            report.first_error = report.first_error or f"{type(exc).__name__}: {exc}"[:300]
        elapsed = time.perf_counter() - started
        agreed = answer is not None and agrees(sample["answer"], answer)
        feature = report.features.setdefault(sample.get("feature") or "-", _Group())
        for group in (report.overall, feature):
            group.tally(sample, agreed, elapsed, cost, answer is None)
    return report


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _known(value: Any) -> float | None:
    """A recorded figure, or None when the line holds no finite number there."""
    return float(value) if _is_number(value) and math.isfinite(value) else None


def _replayable(sample: dict[str, Any]) -> bool:
    """An answered sample whose request can be sent again (a line edited by hand may lack
    its request or messages)."""
    request = sample.get("request")
    return (
        isinstance(sample.get("answer"), str)
        and isinstance(request, dict)
        and isinstance(request.get("messages"), list)
    )


def _route_name(guard: Guard) -> str:
    return guard.routes[0].name if guard.routes else "candidate"
