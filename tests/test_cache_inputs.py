"""The response cache used directly, with inputs the Guard would have checked first: each bad
one is a typed error, not a ``TypeError`` from deep inside."""

from __future__ import annotations

from typing import Any

import pytest

from llmguard_sdk.cache import ResponseCache
from llmguard_sdk.errors import RequestValidationError
from tests.test_cache import answer, ask


@pytest.mark.parametrize("tags", [None, 7, 1.5])
def test_tags_that_are_no_list_are_a_typed_error(tags: Any) -> None:
    """``tags=None`` or a number raised ``TypeError: ... is not iterable``."""
    cache = ResponseCache()
    with pytest.raises(RequestValidationError, match="cache tags"):
        cache.lookup(ask("How do I reset my password?"), tags=tags)
    with pytest.raises(RequestValidationError, match="cache tags"):
        cache.store(ask("How do I reset my password?"), answer("a"), tags=tags)
    assert cache.stats.stores == 0
