"""Keep your existing openai code and decorate it: ``@guard.protect``.

The function runs unchanged and returns what it returned; the Guard reads the usage from the
openai object, reports a CallEvent to its hooks and classifies errors (a 429 becomes a
RateLimitedError with its Retry-After in the event), while your ``except openai.RateLimitError``
keeps working. Needs the ``openai`` package.
"""

import openai

from llmguard_sdk import CallEvent, Guard
from llmguard_sdk.testing import FakeProvider, Fault


def report(event: CallEvent) -> None:
    print(
        f"  [{event.kind}] {event.outcome} feature={event.scope.feature} "
        f"usage={event.usage} error={type(event.error).__name__ if event.error else None}"
    )


with FakeProvider() as api:
    guard = Guard(hooks=[report])
    client = openai.OpenAI(base_url=api.base_url, api_key="sk-example", max_retries=0)

    @guard.protect(feature="summaries")
    def summarise(text: str) -> str:
        completion = client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": f"Summarise: {text}"}]
        )
        return completion.choices[0].message.content or ""

    @guard.protect(feature="titles")
    def title(text: str) -> openai.types.chat.ChatCompletion:
        return client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": f"Title for: {text}"}]
        )

    print(title("a long article").choices[0].message.content)
    api.script(Fault(status=429, retry_after=2))
    try:
        summarise("another article")
    except openai.RateLimitError:
        print("openai.RateLimitError still reaches your code")
    client.close()
