"""The default cache on text beyond ASCII: the hashing embedder reads words in every script,
so two questions that share only their Latin letters and digits are not one question."""

from __future__ import annotations

import pytest

from llmguard_sdk.cache import HashingEmbedder, ResponseCache
from tests.test_cache import answer, ask

DIFFERENT = [
    ("Как сбросить пароль на iPhone 12?", "Как купить iPhone 12?"),  # reset password / buy
    ("如何重置我的iPhone 12密码\uff1f", "在哪里购买iPhone 12\uff1f"),  # the same, in Chinese
    ("Как отменить мой заказ?", "Как отменить мою подписку?"),  # cancel order / subscription
]


@pytest.mark.parametrize(("stored", "asked"), DIFFERENT)
def test_questions_that_share_only_their_ascii_are_no_match(stored: str, asked: str) -> None:
    """The embedder read ``[a-z0-9]`` only: "How do I reset the password on my iPhone 12?"
    in Russian or Chinese embedded as "iphone 12" alone, and "Where do I buy an iPhone 12?"
    was served its answer at similarity 1.0."""
    cache = ResponseCache()
    assert cache.store(ask(stored), answer("Settings > Face ID & Passcode."))
    assert cache.lookup(ask(asked)) is None
    first, second = HashingEmbedder().embed([stored, asked])
    assert float(first @ second) < 0.6


def test_a_paraphrase_in_another_script_is_still_served() -> None:
    cache = ResponseCache()
    assert cache.store(ask("Как сбросить пароль на iPhone 12?"), answer("Настройки."))
    hit = cache.lookup(ask("Как мне сбросить пароль на iPhone 12?"))  # "how do I" / "how"
    assert hit is not None
    assert hit.kind == "semantic"


def test_the_embedders_name_says_its_vectors_changed() -> None:
    """Only text beyond ASCII embeds otherwise (test_cache pins ASCII vectors' bits), but
    the name moves on to v2: no process mixes the two versions' vectors in one partition."""
    assert HashingEmbedder().name.startswith("hashing-v2-")
