"""Retries, circuit breakers and the fallback chain.

Each route is retried with full-jitter backoff (Retry-After honoured); a route that keeps
failing, or asks for a wait beyond the retry cap, hands the call to the next route. A 429 opens
the route's circuit breaker for its Retry-After, so the next calls skip it without waiting. A
request the provider refuses as wrong (400) is neither retried nor sent elsewhere.

Background probes of open breakers (``BreakerPolicy.probe_every``) are turned off here: this
example scripts the exact faults each call meets, and a probe would take one of them.
"""

from llmguard_sdk import (
    BadRequestError,
    BreakerPolicy,
    CallEvent,
    Guard,
    OpenAICompatibleProvider,
    RetryPolicy,
)
from llmguard_sdk.testing import FakeProvider, Fault

events: list[CallEvent] = []

with FakeProvider(name="primary") as primary, FakeProvider(name="backup") as backup:
    guard = Guard(
        [
            OpenAICompatibleProvider(primary.base_url, model="big-model", name="primary"),
            OpenAICompatibleProvider(backup.base_url, model="small-model", name="backup"),
        ],
        timeout=5,
        attempt_timeout=2.0,  # a silent route loses the attempt (generous: a busy machine)
        retry=RetryPolicy(attempts=3, base=0.05, cap=2.0),
        breaker=BreakerPolicy(probe_every=None),
        hooks=[events.append],
    )
    cases = {
        "one 503": [Fault(status=503)],
        "429, wait 30 s": [Fault(status=429, retry_after=30)],
        "breaker open": [],
        "down": [Fault(status=503), Fault(reset=True), Fault(hang=True)],
    }
    for label, faults in cases.items():
        if label == "down":
            guard.breakers.reset("primary")  # by hand: put the primary back in service
        primary.script(*faults)
        answer = guard.chat([{"role": "user", "content": label}])
        event = events[-1]
        retried = ", ".join(type(r.cause).__name__ for r in event.retries) or "no retry"
        # (route_errors name each error's class fully: llmguard_sdk.errors.RateLimitedError)
        moved = ", ".join(
            f"{route}: {error.rpartition('.')[2]}" for route, error in event.route_errors
        )
        moved = moved or "-"
        print(
            f"{label:>15}: served by {answer.route} after {answer.attempts} attempt(s); "
            f"retried after: {retried}; moved on after: {moved}"
        )

    primary.script(Fault(status=400))
    try:
        guard.chat([{"role": "user", "content": "bad"}])
    except BadRequestError as error:
        print(
            "400 is not a route failure:",
            type(error).__name__,
            "from",
            error.route,
            f"after {events[-1].attempts} attempt",
        )
    guard.close()
