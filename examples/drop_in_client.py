"""Replace one line: ``client = OpenAI()`` becomes ``client = guard.client()``.

The rest of the code keeps calling ``client.chat.completions.create(...)`` and reading
``choices[0].message.content``; every call now goes through the Guard. ``scoped`` sets the
tenant and feature for calls whose signature has no room for them.
"""

from llmguard_sdk import Guard, OpenAICompatibleProvider, scoped
from llmguard_sdk.testing import FakeProvider

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
    guard.close()
