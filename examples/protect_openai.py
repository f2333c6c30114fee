"""Keep your existing openai code and decorate it: ``@guard.protect``.

The function runs unchanged and returns what it returned. The Guard retries it when it fails
with a retryable provider error (a 503 here; Retry-After honoured), reads the usage from the
openai object, and reports a CallEvent to its hooks. An error that is not worth retrying (a 429
asking for a 30 s wait) reaches your ``except openai.RateLimitError`` as before. Give the
client ``max_retries=0``: with the client's own retries on, attempts would multiply (the Guard
warns about that). Needs the ``openai`` package.
"""

import openai

from llmguard_sdk import CallEvent, Guard, RetryPolicy
from llmguard_sdk.testing import FakeProvider, Fault


def report(event: CallEvent) -> None:
    error = type(event.error).__name__ if event.error else None
    print(
        f"  [{event.kind}] {event.outcome} feature={event.scope.feature} "
        f"attempts={event.attempts} usage={event.usage} error={error}"
    )


with FakeProvider() as api:
    guard = Guard(hooks=[report], retry=RetryPolicy(base=0.05))
    client = openai.OpenAI(base_url=api.base_url, api_key="sk-example", max_retries=0)

    @guard.protect(feature="titles")
    def title(text: str) -> openai.types.chat.ChatCompletion:
        return client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": f"Title for: {text}"}]
        )

    api.script(Fault(status=503))  # retried by the Guard
    print(title("a long article").choices[0].message.content)

    api.script(Fault(status=429, retry_after=30))
    try:
        title("another article")
    except openai.RateLimitError:
        print("openai.RateLimitError still reaches your code")
    client.close()
