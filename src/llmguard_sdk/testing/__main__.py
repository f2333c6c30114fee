"""``python -m llmguard_sdk.testing serve``: a fake provider in its own process, for benchmarks."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType

from ._provider import FakeProvider


def _wait_for_eof(done: threading.Event) -> None:
    stdin = sys.stdin
    if stdin is None:
        return
    try:
        fd = stdin.fileno()
        while os.read(fd, 65536):
            pass
    except (OSError, ValueError):
        return  # no usable stdin: rely on signals
    done.set()


def _main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m llmguard_sdk.testing",
        description="Run a fake OpenAI-compatible provider (for benchmarks and drills).",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="serve until SIGTERM, SIGINT or end of stdin")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=0)
    serve.add_argument("--model", default="fake-model")
    serve.add_argument("--rpm", type=int, default=None)
    serve.add_argument("--tpm", type=int, default=None)
    serve.add_argument("--ignore-stdin", action="store_true", help="do not stop at end of stdin")
    args = parser.parse_args(argv)

    done = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        done.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        with FakeProvider(
            model=args.model, rpm=args.rpm, tpm=args.tpm, host=args.host, port=args.port
        ) as fake:
            print(fake.base_url, flush=True)
            if not args.ignore_stdin:
                threading.Thread(target=_wait_for_eof, args=(done,), daemon=True).start()
            while not done.wait(0.2):
                pass
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


if __name__ == "__main__":
    raise SystemExit(_main(sys.argv[1:]))
