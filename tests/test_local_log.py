"""The local model writes nothing on the application's stderr when it aborts a computation on
purpose (a caller that left, a deadline, close()), and hides no other line of llama.cpp's log.

Each test runs in a process of its own: llama.cpp's log callback is process-wide, and the test
reads the process's own stderr (fd 2), where llama-cpp-python's callback prints."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from pathlib import Path

import pytest

from llmguard_sdk.providers._llama_log import _TABLE, _first_levels, log_levels, parse_levels

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
    while provider._worker.running is not None:
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

def recording():  # the lines llama.cpp logs from now on, to a callback of the application's
    lines = []
    @llama_cpp.llama_log_callback
    def recorder(level, text, data):
        lines.append((level, text))
    recording.callback = recorder  # (kept alive: llama.cpp holds a pointer to it)
    llama_cpp.llama_log_set(recorder, None)
    return lines

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
lines = recording()
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


# llama.cpp's log levels, read from the installed llama-cpp-python (its enum, else the ggml.h
# its wheel ships), else the table of the llama.cpp the filter was written for.


def test_the_log_levels_are_those_of_the_installed_package() -> None:
    import re
    from importlib import metadata

    import llama_cpp

    levels = log_levels()
    assert {"DEBUG", "INFO", "WARN", "ERROR", "CONT"} <= set(levels)
    enum = getattr(llama_cpp, "GGMLLogLevel", None)
    with contextlib.suppress(ImportError):
        import llama_cpp._ggml as ggml

        enum = getattr(ggml, "GGMLLogLevel", enum)
    if enum is not None:
        assert levels == {m.name.removeprefix("GGML_LOG_LEVEL_"): m.value for m in enum}
    headers = [f for f in metadata.files("llama_cpp_python") or () if f.name == "ggml.h"]
    for header in headers:  # (the wheel's own header, where it ships one)
        text = Path(header.locate()).read_text(encoding="utf-8")
        for name, value in levels.items():
            assert re.search(rf"GGML_LOG_LEVEL_{name}\s*=\s*{value}\b", text), (name, value)
    assert enum is not None or headers  # the test read the package, not the fallback table


@pytest.mark.timeout(600)
def test_llama_cpp_logs_at_the_levels_read() -> None:
    # What llama.cpp itself logs, to a callback of the application's: its load's INFO and
    # DEBUG lines, and the ERROR of a decode given a token that is not in the vocabulary,
    # arrive at the levels log_levels() says (llama-cpp-python 0.3.x's own table has 1 as
    # INFO and 4 as DEBUG: llama.cpp's DEBUG and ERROR).
    result = run(
        """
from llmguard_sdk.providers._llama_log import log_levels
lines = recording()
start()
try:
    engine.llm.eval([10 ** 7])
except Exception:
    pass
provider.close()
levels = log_levels()
for what, start_of_line in (
    ("INFO", b"llama_model_loader: loaded meta data"),
    ("DEBUG", b"init_tokenizer:"),
    ("ERROR", b"llama_decode: failed to decode, ret = -1"),
):
    found = {level for level, text in lines if text.startswith(start_of_line)}
    print(what, levels[what], "found", sorted(found), flush=True)
"""
    )
    for what in ("INFO", "DEBUG", "ERROR"):
        line = next(line for line in result.stdout.splitlines() if line.startswith(what + " "))
        level, found = line.split(" found ")
        assert found == f"[{level.split()[1]}]", line


def test_levels_fall_back_to_the_table_where_the_package_says_nothing() -> None:
    def fails() -> dict[str, int] | None:
        raise OSError("no such file")

    assert _first_levels([lambda: None, fails]) == _TABLE
    assert _first_levels([lambda: None, lambda: {"ERROR": 2}]) == {"ERROR": 2}


def test_a_header_s_levels_are_read_whatever_the_version() -> None:
    older = """
    // older llama.cpp
    enum ggml_log_level {
        GGML_LOG_LEVEL_ERROR = 2,
        GGML_LOG_LEVEL_WARN = 3,   /* warnings */
        GGML_LOG_LEVEL_INFO = 4,
        GGML_LOG_LEVEL_DEBUG = 5
    };
    typedef void (*ggml_log_callback)(enum ggml_log_level level, const char * text, void * u);
    """
    assert parse_levels(older) == {"ERROR": 2, "WARN": 3, "INFO": 4, "DEBUG": 5}  # no CONT
    assert parse_levels("enum ggml_type { GGML_TYPE_F32 = 0 };") is None
