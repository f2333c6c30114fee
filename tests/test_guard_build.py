"""Building and closing a Guard: what it prepares before its first call, and what its close
leaves closed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SOURCE = str(Path(__file__).resolve().parent.parent / "src")

_WARMED = """
import json
from llmguard_sdk import Guard, OpenAICompatibleProvider, tokens
before = tokens._encoding_loaded, sorted(tokens._others)
guard = Guard(
    [
        OpenAICompatibleProvider("http://127.0.0.1:9/v1", model="gpt-4o-mini", name="a"),
        OpenAICompatibleProvider("http://127.0.0.1:9/v1", model="text-davinci-003", name="b"),
    ],
    environ={},
    telemetry=False,
)
print(json.dumps({"before": before, "loaded": tokens._encoding_loaded,
                  "others": sorted(tokens._others)}))
guard.close()
"""


def test_a_guard_loads_the_encodings_of_its_routes_when_it_is_built() -> None:
    """The first token count loaded tiktoken's encoding (half a second) inside the first
    call's deadline; a Guard now loads cl100k_base and its routes' encodings as it is built
    (a fresh interpreter, so that nothing loaded them before)."""
    env = {**os.environ, "PYTHONPATH": SOURCE}
    found = subprocess.run(
        [sys.executable, "-c", _WARMED], capture_output=True, text=True, env=env, timeout=120
    )
    assert found.returncode == 0, found.stderr
    report = json.loads(found.stdout.strip().splitlines()[-1])
    assert report["before"] == [False, []]  # nothing loaded by the import
    assert report["loaded"] is True  # cl100k_base, every count's fallback
    assert {"o200k_base", "p50k_base"} <= set(report["others"])  # the routes' own, probed
