"""Safe releases: a pinned release, a canary that rolls itself back, shadow traffic, and a
warning before a pinned model retires. Offline, against two FakeProviders.

The candidate answers 503 to every call: the canary's calls fall back to the current release
(its users see no error), its canary breaches the error guardrail and is rolled back, and
later calls are all served by the current release. A second plan shadows a
candidate whose answers differ on every fourth prompt: users get the current answers, and the
shadow's report says how often the two agreed.
"""

import datetime as dt

from llmguard_sdk import Guard, OpenAICompatibleProvider
from llmguard_sdk.errors import MovingModelAliasError
from llmguard_sdk.releases import CanaryPolicy, Release, ReleasePlan, ShadowPolicy
from llmguard_sdk.testing import FakeProvider, Fault


def differs(body: dict) -> str:
    text = body["messages"][-1]["content"]
    return "something else" if int(text.split()[-1]) % 4 == 0 else "Echo: " + text


with FakeProvider(name="current") as a, FakeProvider(name="next", reply=differs) as b:
    route_a = OpenAICompatibleProvider(a.base_url, model="gpt-4o-2024-08-06", name="current")
    route_b = OpenAICompatibleProvider(b.base_url, model="gpt-4.1-2025-04-14", name="next")
    try:
        Release("support", "v0", OpenAICompatibleProvider(a.base_url, model="gpt-4o"))
    except MovingModelAliasError as exc:
        print("refused:", exc.model, "is a moving alias")
    current = Release("support", "v7", route_a, system_prompt="Answer briefly.")
    candidate = Release("support", "v8", route_b, parameters={"temperature": 0.2})

    # -- a canary: half of the users, decided after each batch of calls ----------------------
    b.always(Fault(status=503))
    plan = ReleasePlan(
        current, candidate=candidate,
        canary=CanaryPolicy(stages=(0.5, 1.0), min_calls=100, flush_interval=60.0),
        hooks=[lambda event: print(f"event: {event.kind} {event.release}")],
    )  # fmt: skip
    guard = Guard(release=plan, retry=None, breaker=None, telemetry=False)
    guard.releases.start_now()
    during = set()
    for i in range(80):  # the candidate's 503s fall back to the current release
        during.add(guard.chat([{"role": "user", "content": f"q {i}"}], user=f"user-{i}").route)
        if i % 20 == 19:
            guard.releases.flush()
    print("during the canary, served by:", sorted(during))
    status = guard.releases.status()
    print(f"canary: {status['canary']['status']} ({status['canary']['reason']})")
    print(f"candidate error rate: {status['candidate']['error_rate']:.0%}")
    ask = [{"role": "user", "content": "q 1"}]
    served = {guard.chat(ask, user=f"u{i}").route for i in range(20)}
    print("after the rollback, served by:", sorted(served))
    guard.close()

    # -- a shadow: every call copied to the candidate, compared, never shown ------------------
    b.always(None)
    plan = ReleasePlan(current, candidate=candidate, shadow=ShadowPolicy(share=1.0, rate_per_s=100))
    guard = Guard(release=plan, telemetry=False)
    answers = [guard.chat([{"role": "user", "content": f"q {i}"}]).text for i in range(20)]
    guard.releases.shadow.drain(30.0)
    report = guard.releases.shadow.report()
    print("users got the current answers:", answers[0])
    print(f"shadow: {report['pairs']} pairs, exact agreement {report['agreement']['exact']:.2f}")
    guard.close()

    # -- a pinned model that retires soon ------------------------------------------------------
    plan = ReleasePlan(
        current, retirements={"gpt-4o-2024-08-06": dt.date(2026, 6, 30)},
        clock=lambda: dt.datetime(2026, 6, 10, tzinfo=dt.timezone.utc).timestamp(),
        hooks=[lambda event: print(f"warning: {event.detail}")],
    )  # fmt: skip
    Guard(release=plan, telemetry=False).close()
