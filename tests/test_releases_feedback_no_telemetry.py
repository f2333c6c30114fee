"""A canary's feedback needs the answer's ``metadata["call_id"]``, which telemetry gave: with
``Guard(telemetry=False)`` answers carried none, so ``guard.feedback(...)`` could name no call
and the canary's low-feedback check never saw a score. A Guard with a release gives its
answers a call id with telemetry off too."""

from __future__ import annotations

from llmguard_sdk import Guard
from llmguard_sdk.testing import FakeProvider

from .test_releases_feedback_once import USER, plan, users


def test_feedback_reaches_the_canary_with_telemetry_off() -> None:
    with (
        FakeProvider(name="a") as a,
        FakeProvider(name="b") as b,
        Guard(release=plan(a, b), environ={}, telemetry=False) as guard,
    ):
        controls = guard.releases
        assert controls is not None
        controls.start_now()
        answers = [guard.chat(USER, user=user) for user in users(True, 3)]
        assert [answer.route for answer in answers] == ["b"] * 3  # canary calls
        ids = [answer.metadata.get("call_id") for answer in answers]
        counted = [guard.feedback(str(call_id), 0.0) for call_id in ids]
        again = guard.feedback(str(ids[0]), 0.0)  # (the canary counts a call's first score)
        controls.flush()
        status = controls.status()
    assert all(isinstance(call_id, str) for call_id in ids)
    assert len(set(ids)) == 3
    assert counted == [True] * 3  # recorded by the canary (was False: telemetry's flag only)
    assert again is False
    assert status["candidate"]["feedback_scores"] == 3
    assert status["candidate"]["low_feedback"] == 3
