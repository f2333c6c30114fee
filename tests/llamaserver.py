"""llama-cpp-python's own OpenAI-compatible server (``llama_cpp.server``) on a loopback port,
serving the bundled GGUF: a real server we did not write."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx

from llmguard_sdk.providers.local import bundled_model_path

from .peers import stop_process

# llama_cpp.server as is, except that on AMX CPUs llama.cpp's extra weight buffers stay off
# (llama.cpp 0.3.x crashes at the first decode there; LocalProvider does the same).
_SERVER_ON_ANY_CPU = """
import runpy, sys
import llama_cpp
from llmguard_sdk.providers import local
if local._cpu_has_amx():
    default = llama_cpp.llama_cpp.llama_model_default_params
    def without_extra_buffers():
        params = default()
        params.use_extra_bufts = False
        return params
    llama_cpp.llama_cpp.llama_model_default_params = without_extra_buffers
sys.argv = ["llama_cpp.server", *sys.argv[1:]]
runpy.run_module("llama_cpp.server", run_name="__main__")
"""


@contextmanager
def llama_server(n_ctx: int) -> Iterator[str]:
    """The base URL (``.../v1``) of a ``llama_cpp.server`` whose context holds ``n_ctx``
    tokens (256 at least: llama.cpp pads a smaller one to 256, and llama-cpp-python then
    fails every long prompt with a numpy error), its model alias ``smollm2``; stopped at the
    end, also when it never started."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tools"))
    import with_redis

    port = with_redis.free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            _SERVER_ON_ANY_CPU,
            "--model",
            str(bundled_model_path()),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--n_ctx",
            str(n_ctx),
            "--model_alias",
            "smollm2",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 90
        while True:
            assert process.poll() is None, "llama_cpp.server exited"
            try:
                if httpx.get(base_url + "/models", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "llama_cpp.server did not start"
            time.sleep(0.2)
        yield base_url
    finally:  # also when it never started: no server outlives its test
        stop_process(process, timeout=20)
