"""Releases: what a canary call that fell back to the current release records. One whose
fallback failed too counts once, on the candidate's arm, as its failure (the control arm's
figures untouched); its span and metric points are the current release's call on the canary
arm (``llmguard.release`` the release, ``llmguard.release.arm`` ``canary``), its error the
call's, each route's on its attempt span. A fallback's answer is the current release's: a
feedback score given to it is not the candidate's (it was counted on the candidate's arm)."""

from __future__ import annotations

from typing import Any

import pytest

from llmguard_sdk.errors import AllRoutesFailedError
from llmguard_sdk.releases import Release
from llmguard_sdk.testing import Fault

from .test_releases_fallback import INSIDE, USER, _guard, fakes, otel, route
from .test_telemetry import Exported, attempts_of, call_span

__all__ = ["fakes", "otel"]  # (the fixtures, shared)


def test_a_fallback_that_fails_too_is_the_candidates_failure_once(
    fakes: Any, otel: Exported
) -> None:
    a, b, _ = fakes
    a.always(Fault(status=500))
    b.always(Fault(status=503))
    current = Release("bot", "v1", route(a), prompt_version="p1")
    candidate = Release("bot", "v2", route(b), prompt_version="p2")
    with _guard(current, candidate, telemetry=otel.telemetry) as guard:
        with pytest.raises(AllRoutesFailedError) as failed:
            guard.chat(USER, user=INSIDE)
        assert list(failed.value.errors) == ["b", "a"]
        assert guard.releases is not None
        guard.releases.flush()
        status = guard.releases.status()
    assert (status["candidate"]["calls"], status["candidate"]["error_rate"]) == (1, 1.0)
    assert status["control"]["calls"] == 0
    span = call_span(otel)
    attributes = dict(span.attributes or {})
    assert attributes["llmguard.release"] == "bot@v1"
    assert attributes["llmguard.release.arm"] == "canary"
    assert str(attributes["error.type"]).endswith("AllRoutesFailedError")
    tried = [dict(s.attributes or {}) for s in attempts_of(otel, span)]
    assert [(t["llmguard.route"], str(t["error.type"]).rsplit(".")[-1]) for t in tried] == [
        ("b", "ProviderUnavailableError"),
        ("a", "ProviderUnavailableError"),
    ]
    labels = [p.attributes for p in otel.points("gen_ai.client.operation.duration")]
    assert [(lab["llmguard.release"], lab["llmguard.release.arm"]) for lab in labels] == [
        ("bot@v1", "canary")
    ]


def test_feedback_on_a_fallbacks_answer_is_not_the_candidates(fakes: Any, otel: Exported) -> None:
    a, b, _ = fakes
    b.always(Fault(status=500))
    current, candidate = Release("bot", "v1", route(a)), Release("bot", "v2", route(b))
    with _guard(current, candidate, telemetry=otel.telemetry) as guard:
        answer = guard.chat(USER, user=INSIDE)
        assert answer.route == "a"
        assert guard.releases is not None
        assert not guard.releases.feedback(answer.metadata["call_id"], 0.0)
        guard.releases.flush()
        status = guard.releases.status()
    assert status["candidate"]["feedback_scores"] == 0
    assert status["candidate"]["error_rate"] == 1.0  # (its failure, counted)
