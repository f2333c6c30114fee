"""The fallback chain: when the first route fails, the next one answers.

The primary provider answers 503, then 429 with Retry-After, then hangs; each call is served
by the backup route instead. A request the provider refuses as wrong (400) is not retried
elsewhere.
"""

from llmguard_sdk import BadRequestError, CallEvent, Guard, OpenAICompatibleProvider
from llmguard_sdk.testing import FakeProvider, Fault

events: list[CallEvent] = []

with FakeProvider(name="primary") as primary, FakeProvider(name="backup") as backup:
    guard = Guard(
        [
            OpenAICompatibleProvider(primary.base_url, model="big-model", name="primary"),
            OpenAICompatibleProvider(backup.base_url, model="small-model", name="backup"),
        ],
        timeout=5,
        attempt_timeout=0.3,  # a silent route loses the call to the next one
        hooks=[events.append],
    )
    primary.script(Fault(status=503), Fault(status=429, retry_after=5), Fault(hang=True))
    for question in ["first", "second", "third"]:
        answer = guard.chat([{"role": "user", "content": question}])
        failed = ", ".join(f"{route}: {error}" for route, error in events[-1].route_errors)
        print(
            f"{question:>6}: served by {answer.route} after {answer.attempts} attempt(s) ({failed})"
        )

    primary.script(Fault(status=400))
    try:
        guard.chat([{"role": "user", "content": "bad"}])
    except BadRequestError as error:
        print("400 is not a route failure:", type(error).__name__, "from", error.route)
    guard.close()
