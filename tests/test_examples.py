"""Every example runs, offline, and prints what its docstring promises."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

EXPECTED = {
    "quickstart.py": ["text:    Echo: What is a circuit breaker?", "estimated=False"],
    "fallback_chain.py": [
        "one 503: served by primary after 2 attempt(s); retried after: ProviderUnavailableError",
        "429, wait 30 s: served by backup after 2 attempt(s); retried after: no retry; "
        "moved on after: primary: RateLimitedError",
        "breaker open: served by backup after 1 attempt(s); retried after: no retry; "
        "moved on after: primary: CircuitOpenError",
        "down: served by backup after 4 attempt(s)",
        "moved on after: primary: ProviderTimeoutError",
        "400 is not a route failure: BadRequestError from primary after 1 attempt",
    ],
    "routing.py": [
        "latency: the slow deployment kept to a trickle",
        "region us: ['east', 'west']",
        "region eu: frankfurt",
        "region eu, frankfurt down: True",
        "cheapest, short question: frankfurt",
        "cheapest, long question: west",
        "model=big: frankfurt",
        "no model=: True",
        "model=bigg: refused, the groups are ['small', 'big']",
    ],
    "streaming.py": ["first token after", "stream broke after: 'Echo: count to'", "async: Echo"],
    "drop_in_client.py": [
        "Echo: Hello!",
        "tokens: 5 in, 2 out",
        "Echo: Stream it",
        "rate limited: HTTP 429, the Guard's RateLimitedError: True, retry after 30.0 s",
    ],
    "protect_openai.py": [
        "[protect] ok feature=titles attempts=2",
        "[protect] error feature=titles attempts=1 usage=None error=RateLimitedError",
        "openai.RateLimitError still reaches your code",
    ],
    "retry_standalone.py": [
        "retry 1 of ask: InternalServerError",
        "retry 2 of ask: RateLimitError, waiting 0.30 s (server hint)",
        "retry 3 of ask: APIConnectionError",
        "Echo: still there?",
        "retry 1 of block: InternalServerError",
        "Echo: once more",
    ],
    "ratelimit_standalone.py": [
        "call 1 (acme): sent at once, 9 tokens",
        "call 2 (acme): sent at once, 9 tokens",
        "call 3 (globex): sent after its wait, 9 tokens",
        "call 4 (acme): refused (rate), room in ",
        "a 100k-token call: refused: never fits",
        "async (umbrella): sent after its wait",
    ],
    "breaker_standalone.py": [
        "Echo: hello?",
        "after 5 ValueErrors: closed",
        "breaker openai: closed -> open",
        "call 3: 503 from the provider",
        "call 4: refused unsent (open, retry in 30 s)",
        "requests the provider saw: 4",
        "retried until the breaker opened: 4 attempts sent",
    ],
    "prompt_builder.py": [
        "openai: 248 input tokens, 0 cached",
        "openai: 248 input tokens, 239 cached",
        "anthropic: 266 input tokens, 0 cached, 250 written",
        "anthropic: 266 input tokens, 250 cached, 0 written",
        "hit ratio openai: 0.48",
        "lint: timestamp in instructions at 9: '2025-03-01'",
        "drift: support-bot changed in instructions",
    ],
    "otel_console.py": [
        "streamed: Echo: Stream this",
        "cache: exact",
        '"name": "chat gpt-4o-mini"',
        '"llmguard.served_by": "openai"',
        '"llmguard.cache": "exact"',
        '"name": "gen_ai.client.operation.duration"',
        '"name": "gen_ai.client.operation.time_to_first_chunk"',
    ],
    "response_cache.py": [
        "'How can I reset my password in the mobile app?'        -> cache    semantic",
        "'How do I reset my password on the web site?'           -> openai   provider",
        "'cancel my subscription'                                -> openai   provider",
        "requests the provider saw: 5",
        "stats: 1 exact, 1 semantic",
        "provider down:",
    ],
    "minilm_cache.py": [
        "How do I learn Python fast?\n  default      miss\n"
        "  recommended  0.91 -> Write a small program every day.",
        "How do I cancel my subscription?\n  default      miss\n  recommended  miss",
        "How do I learn Python?\n  default      miss\n  recommended  miss",
    ],
    "budgets.py": [
        "call 1: large cost $0.000810 (estimated)",
        "alert: tenant:acme reached 50%",
        "tenant:acme: no room for this call, downgraded",
        "call 7: small cost $0.000027 (estimated)",
        "refused: scope=user:u-trial limit=$0.003 spent=$0.001620",
        "estimate: gpt-4o-mini $128/month, 70/30 split $731/month",
    ],
    "framework_langchain.py": [
        "Echo: What is a circuit breaker? | served by: primary",
        "Echo: And a fallback? | served by: backup",
        "Echo: And a fallback? | served by: cache",
        "streamed: Echo: Stream this",
    ],
    "framework_openai_agents.py": [
        "Echo: What is a circuit breaker? | served by: primary",
        "Echo: And a fallback? | served by: backup",
        "Echo: And a fallback? | served by: cache",
    ],
    "framework_pydantic_ai.py": [
        "Echo: What is a circuit breaker? | served by: primary",
        "Echo: And a fallback? | served by: backup",
        "Echo: And a fallback? | served by: cache",
    ],
    "cascade.py": [
        "'What is 2 + 3?'                 -> mini {\"answer\": 5}, $0.000003",
        '-> big {"answer": 42}, escalated from small: json_schema, $0.000051',
        "'Is this clause enforceable?'    -> big {\"answer\": 42}, $0.000040",
        'streamed in 1 chunk: {"answer": 42} from big',
    ],
    "releases.py": [
        "refused: gpt-4o is a moving alias",
        "event: rolled_back support@v8",
        "during the canary, served by: ['current']",
        "canary: rolled_back (errors breached",
        "candidate error rate: 100%",
        "after the rollback, served by: ['current']",
        "shadow: 20 pairs, exact agreement 0.75",
        "model gpt-4o-2024-08-06 retires 2026-06-30 (in 20 days)",
    ],
    "guardrails.py": [
        "Echo: mail me at [email]",
        "asks for a password",
        "the limit is 200",
        "requests the provider saw: 1",
        "async moderation: ['Echo: plan a party', 'Echo: plan a picnic', 'refused: guardrail",
        "sync call: Echo: hi",
    ],
}


def test_examples_import_only_public_names() -> None:
    """What an example imports from the SDK is in its module's ``__all__``, never private."""
    wrong = []
    for path in sorted(EXAMPLES.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("llmguard_sdk"):
                module_name = node.module or ""
                public = getattr(importlib.import_module(module_name), "__all__", ())
                private = any(part.startswith("_") for part in module_name.split("."))
                wrong += [
                    f"{path.name}: {module_name}.{alias.name}"
                    for alias in node.names
                    if private or alias.name not in public
                ]
    assert not wrong, f"examples import names that are not public: {wrong}"


def test_every_example_is_checked() -> None:
    assert sorted(p.name for p in EXAMPLES.glob("*.py")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_runs(name: str) -> None:
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / name)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    for expected in EXPECTED[name]:
        assert expected in result.stdout
