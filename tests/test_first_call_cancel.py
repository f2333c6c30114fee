"""A cancel that lands while a process's first async call waits for the Guards' first-use
loads (the tokenizer, the price data: :func:`llmguard_sdk._lazy.aloaded`) is reported as a
cancelled call. It was reported nowhere: the wait came before the call's checks, whose
refusals report a cancel.

Each run is a fresh interpreter, where those loads are under way when the call starts."""

from __future__ import annotations

import json
import subprocess
import sys

_FIRST_CALL = """
import json
import anyio
from llmguard_sdk import Guard, OpenAICompatibleProvider, _lazy
from llmguard_sdk.testing import FakeProvider

events = []

async def main():
    with FakeProvider() as fake:
        route = OpenAICompatibleProvider(fake.base_url, model="gpt-4o", name="gpt")
        guard = Guard(providers=[route], hooks=[events.append], environ={})
        loading = any(thread.is_alive() for thread in _lazy.loading)
        with anyio.move_on_after(0.02):
            await guard.achat([{"role": "user", "content": "hi"}], tenant="acme", model="gpt-4o")
        guard.close()
        print(json.dumps({
            "loading": loading,
            "events": [[e.outcome, e.attempts, e.scope.tenant, e.model] for e in events],
            "requests": len(fake.requests),
        }))

anyio.run(main)
"""


def test_a_cancel_while_the_first_call_waits_for_the_loads_is_reported() -> None:
    ran = subprocess.run(
        [sys.executable, "-c", _FIRST_CALL], capture_output=True, text=True, timeout=120
    )
    assert ran.returncode == 0, ran.stderr
    found = json.loads(ran.stdout.strip().splitlines()[-1])
    assert found["loading"]  # (a fresh process: the loads were under way)
    ((outcome, attempts, tenant, model),) = found["events"]  # one event, whatever it cut
    assert (outcome, tenant, model) == ("cancelled", "acme", "gpt-4o")
    if found["requests"] == 0:
        assert attempts == 0
