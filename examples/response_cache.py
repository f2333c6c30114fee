"""Response caching: repeated and paraphrased questions answered without a provider call.

Runs offline against a FakeProvider. ``cache=True`` keeps the cache in the Guard's store
(this process's memory here; pass ``store="redis://..."`` to share it between processes).
"""

from llmguard_sdk import Guard, OpenAICompatibleProvider, ResponseCache
from llmguard_sdk.testing import FakeProvider, Fault

with FakeProvider(model="gpt-4o-mini") as api:
    provider = OpenAICompatibleProvider(api.base_url, model="gpt-4o-mini", name="openai")
    cache = ResponseCache(ttl=3600, stale_ttl=86400)  # fresh for an hour, stale for a day
    with Guard(provider, cache=cache, retry=None, breaker=None) as guard:

        def ask(question: str, **options: object) -> None:
            answer = guard.chat([{"role": "user", "content": question}], **options)
            how = answer.metadata.get("cache", "provider")
            print(f"{question!r:55} -> {answer.route:8} {how}")

        ask("How do I reset my password on the mobile app?", tenant="acme")
        ask("How do I reset my password on the mobile app?", tenant="acme")  # exact
        ask("How can I reset my password in the mobile app?", tenant="acme")  # semantic
        ask("How do I reset my password on the mobile app?", tenant="globex")  # other tenant
        ask("How do I reset my password on the web site?", tenant="acme")  # other words
        ask("cancel my order", tenant="acme")
        ask("cancel my subscription", tenant="acme")  # one key term swapped: no hit
        print("requests the provider saw:", api.stats.requests)
        print("stats:", cache.stats.exact_hits, "exact,", cache.stats.semantic_hits, "semantic")

        api.always(Fault(status=503))  # the provider goes down: cached answers still come
        print("provider down:")
        ask("How can I reset my password in the mobile app?", tenant="acme")
