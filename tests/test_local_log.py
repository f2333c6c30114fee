"""The local model writes nothing on the application's stderr when it aborts a computation on
purpose (a caller that left, a deadline, close()), and hides no other line of llama.cpp's log.

Each test runs in a process of its own: llama.cpp's log callback is process-wide, and the test
reads the process's own stderr (fd 2), where llama-cpp-python's callback prints."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.local_model

# Three aborted prompts: the caller leaves, its deadline passes, the provider is closed. Each
# prints how many of its prompt's tokens the model held after it (fewer: it was aborted).
ABORTS = """
import ctypes, sys, time
import llama_cpp
from llmguard_sdk import LocalProvider, ProviderError
from llmguard_sdk.models import ChatRequest
BOXES = " ".join(f"Box {i} holds {i % 9 + 2} pens." for i in range(120))
LONG = [{"role": "user", "content": BOXES}]
request = ChatRequest.model_validate({"messages": LONG, "max_tokens": 5})

def start():
    global provider, engine, prompt
    provider = LocalProvider(n_ctx=2048, warm_up=True)
    assert provider.wait_loaded(120)
    engine = provider._worker.engine
    prompt = len(engine.tokens(LONG))

def idle():
    deadline = time.monotonic() + 240
    while provider._worker.busy.locked():
        assert time.monotonic() < deadline
        time.sleep(0.01)
    return engine.llm.n_tokens

def aborted(how):
    if how == "deadline":
        try:
            provider.complete(request, model="local", deadline=time.monotonic() + 0.3)
        except ProviderError:
            pass
    else:
        stream = provider.stream(request, model="local", deadline=time.monotonic() + 300)
        assert next(stream).text == ""  # the worker took the call: the prompt is read now
        stream.close() if how == "leave" else provider.close()
    print(how, idle(), "of", prompt, flush=True)

def log(level, text):  # a line as llama.cpp would log it, to the callback in place
    callback, data = llama_cpp.llama_log_callback(), ctypes.c_void_p()
    llama_cpp.llama_log_get(ctypes.byref(callback), ctypes.byref(data))
    callback(level, text, data)
"""


def run(script: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, "-c", ABORTS + script], capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr
    return result


def held(stdout: str, how: str) -> tuple[int, int]:
    line = next(line for line in stdout.splitlines() if line.startswith(how + " "))
    tokens, prompt = line.split()[1::2]
    return int(tokens), int(prompt)


@pytest.mark.timeout(600)
def test_an_aborted_prompt_writes_nothing_on_stderr() -> None:
    # llama.cpp logged "decode: removing memory module entries for seq_id = 0, pos = [0, +inf)"
    # (a warning, printed by llama-cpp-python's callback) for each prompt the model aborted.
    result = run(
        """
start()
for how in ("leave", "deadline"):
    aborted(how)
log(3, b"decode: removing memory module entries for seq_id = 0, pos = [0, +inf)\\n")
aborted("close")
"""
    )
    tokens, prompt = held(result.stdout, "leave")
    assert tokens < prompt  # the prompt was aborted, not read to its end
    # the same line outside an abort of ours (another model's, say) is printed as before
    assert (
        result.stderr == "decode: removing memory module entries for seq_id = 0, pos = [0, +inf)\n"
    )


@pytest.mark.timeout(600)
def test_the_log_callback_in_place_gets_every_other_line() -> None:
    # An application's own callback, set before the model loads: it gets llama.cpp's lines
    # (the load's, any other model's) as before, but not those of the aborts of ours.
    result = run(
        """
lines = []
@llama_cpp.llama_log_callback
def recorder(level, text, data):
    lines.append((level, text))
llama_cpp.llama_log_set(recorder, None)
start()
loaded = len(lines)
aborted("leave")
log(4, b"llama_decode: failed to decode, ret = 2\\n")  # not during an abort of ours
print("loaded", loaded, "of", len(lines), flush=True)
for level, text in lines[loaded:]:
    print("line", level, text, flush=True)
"""
    )
    tokens, prompt = held(result.stdout, "leave")
    assert tokens < prompt
    loaded, _ = held(result.stdout, "loaded")
    assert loaded > 10  # the load's lines reached the application's callback
    after = [line for line in result.stdout.splitlines() if line.startswith("line ")]
    assert after[-1] == "line 4 b'llama_decode: failed to decode, ret = 2\\n'"
    assert not [line for line in after[:-1] if "decode" in line or "compute" in line], after
    assert result.stderr == ""
