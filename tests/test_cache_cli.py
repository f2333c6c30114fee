"""``llmguard cache clear``: a namespace of a Redis-backed response cache emptied from a shell
(a prompt changed, a bad answer cached), without writing code; other namespaces stay."""

from __future__ import annotations

import json

import pytest

from llmguard_sdk.cache import ResponseCache
from llmguard_sdk.cli import main
from llmguard_sdk.models import ChatRequest, ChatResponse, Message

QUESTION = ChatRequest(messages=[Message(role="user", content="How do I reset my password?")])
ANSWER = ChatResponse(text="Settings > Reset.", finish_reason="stop")


def test_clear_empties_one_namespace_for_every_process(
    redis_url: str, redis_prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    faq = ResponseCache(redis_url, key_prefix=redis_prefix, namespace="faq", sync_interval=0.0)
    other = ResponseCache(redis_url, key_prefix=redis_prefix, namespace="other")
    assert faq.store(QUESTION, ANSWER)
    assert other.store(QUESTION, ANSWER)
    assert faq.lookup(QUESTION) is not None  # (the running process's index holds it)
    where = ["--store", redis_url, "--prefix", redis_prefix, "--namespace", "faq"]
    assert main(["cache", "clear", *where, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"namespace": "faq", "cleared": True}
    assert faq.lookup(QUESTION) is None
    assert faq.lookup_stale(QUESTION) is None
    assert other.lookup(QUESTION) is not None
    assert main(["cache", "clear", *where]) == 0
    assert "cleared namespace 'faq'" in capsys.readouterr().out
    faq.close()
    other.close()


def test_clear_says_when_redis_is_away_or_no_redis_is_named(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["cache", "clear", "--store", "redis://127.0.0.1:1/0"]) == 1
    assert "not cleared" in capsys.readouterr().err
    assert main(["cache", "clear", "--store", "memory"]) == 2  # (a process's own: not shared)
    assert "--store" in capsys.readouterr().err
