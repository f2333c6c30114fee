"""Servers of other projects that tests start as processes: stopping them for sure."""

from __future__ import annotations

import subprocess
from typing import Any


def stop_process(process: subprocess.Popen[Any], timeout: float = 10) -> None:
    """Stop ``process`` (SIGTERM, then SIGKILL after ``timeout`` seconds) and reap it."""
    process.terminate()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=timeout)
