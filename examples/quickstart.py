"""Quick start: one Guard around an OpenAI-compatible provider.

Runs offline: a local FakeProvider stands in for the real API. For a real provider, give
``OpenAICompatibleProvider`` its API root, key and model (``base_url`` ends in ``/v1``), or set
LLMGUARD_BASE_URL / LLMGUARD_API_KEY / LLMGUARD_MODEL and call ``Guard()``.
"""

from llmguard_sdk import Guard, OpenAICompatibleProvider
from llmguard_sdk.testing import FakeProvider

with FakeProvider(model="gpt-4o-mini") as api:
    provider = OpenAICompatibleProvider(api.base_url, api_key="sk-example", model="gpt-4o-mini")
    with Guard(provider, timeout=30) as guard:
        answer = guard.chat(
            [{"role": "user", "content": "What is a circuit breaker?"}],
            max_tokens=100,
            tenant="acme",
            feature="faq",
        )
        print("text:   ", answer.text)
        print("route:  ", answer.route, "| model:", answer.model)
        print("usage:  ", answer.usage)
        print("time:   ", f"{answer.timings.total_s * 1000:.1f} ms")
