"""Replace one line: ``client = OpenAI()`` becomes ``client = guard.client()``.

The rest of the code keeps calling ``client.chat.completions.create(...)`` and reading
``choices[0].message.content``; every call now goes through the Guard. ``scoped`` sets the
tenant and feature for calls whose signature has no room for them. A failed call raises
openai's error, as before, and that error is the Guard's too (its class and attributes).
"""

import openai

from llmguard_sdk import Guard, OpenAICompatibleProvider, RateLimitedError, scoped
from llmguard_sdk.testing import FakeProvider, Fault

with FakeProvider() as api:
    guard = Guard(OpenAICompatibleProvider(api.base_url, api_key="sk-example"))
    client = guard.client()  # was: client = OpenAI()

    with scoped(tenant="acme", feature="support"):
        completion = client.chat.completions.create(
            model="gpt-4o-mini",
            messages=[{"role": "user", "content": "Hello!"}],
            max_tokens=50,
        )
    print(completion.choices[0].message.content)
    print(
        "tokens:", completion.usage.prompt_tokens, "in,", completion.usage.completion_tokens, "out"
    )
    print("served by:", completion.llmguard.route)

    for chunk in client.chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "Stream it"}], stream=True
    ):
        if chunk.choices:
            print(chunk.choices[0].delta.content or "", end="")
    print()

    api.always(Fault(status=429, retry_after=30))  # longer than the Guard waits: no retry
    try:
        client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "Hello!"}]
        )
    except openai.RateLimitError as error:  # your handler for OpenAI's errors still catches it
        guard_error = isinstance(error, RateLimitedError)
        print(
            f"rate limited: HTTP {error.status_code}, the Guard's RateLimitedError: {guard_error},"
            f" retry after {error.retry_after} s"
        )
    guard.close()
