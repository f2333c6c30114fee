"""Run a command (the test suite) and fail when it leaves something behind; used by ``make test``.

Two checks, after the command ends:

* **processes**: every process the command started, directly or not, must have ended. This
  script makes itself the *child subreaper* of the command (Linux ``prctl``), so descendants
  whose parent died are re-parented to it instead of to init; every process whose parent
  chain leads here is then the run's. A marker in the environment
  (``LLMGUARD_LEFTOVERS_RUN``) also finds descendants that left the chain some other way. Other
  people's processes (another ``make test`` on the same machine, a Redis on 6379) have
  neither. Leftovers get a few seconds to end, are then listed, killed and fail the run.
* **files**: nothing may appear or change in the user's cache directory
  (``${XDG_CACHE_HOME:-~/.cache}/llmguard``, where the budgets' spend journal lives by
  default): it is scanned before and after, and new or changed files are listed (not
  deleted: they may hold a real application's records) and fail the run.

The exit status is the command's when it failed, else 1 when a check failed, else 0.

Usage: python tools/leftovers.py [--grace SECONDS] -- COMMAND [ARGS...]
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

MARKER = "LLMGUARD_LEFTOVERS_RUN"
_PR_SET_CHILD_SUBREAPER = 36
_PROC = Path("/proc")


def user_cache_dir(environ: dict[str, str] | None = None) -> Path:
    """``${XDG_CACHE_HOME:-~/.cache}/llmguard``."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "llmguard"


def scan(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``folder``: relative path -> (size, mtime in ns)."""
    found: dict[str, tuple[int, int]] = {}
    if not folder.is_dir():
        return found
    for root, _dirs, files in os.walk(folder):
        for name in files:
            path = Path(root) / name
            try:
                stat = path.stat()
            except OSError:
                continue
            found[str(path.relative_to(folder))] = (stat.st_size, stat.st_mtime_ns)
    return found


def changed_files(
    before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]
) -> list[str]:
    """Files that appeared or changed between two :func:`scan` results."""
    return sorted(name for name, stat in after.items() if before.get(name) != stat)


def become_subreaper() -> bool:
    """Make this process the child subreaper of its descendants (Linux); False elsewhere."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def _parent(pid: int) -> int | None:
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # pid (comm) state ppid ...: comm may hold spaces and parentheses, so split after the last ')'
    return int(stat.rsplit(")", 1)[1].split()[1])


def _has_marker(pid: int, run: str) -> bool:
    try:
        environ = (_PROC / str(pid) / "environ").read_bytes()
    except OSError:
        return False
    return f"{MARKER}={run}".encode() in environ.split(b"\0")


def _command_line(pid: int) -> str:
    try:
        raw = (_PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return "?"
    return raw.replace(b"\0", b" ").decode(errors="replace").strip() or "?"


def descendants(root: int, run: str) -> dict[int, str]:
    """Live processes (not zombies) whose parent chain reaches ``root`` or whose environment
    carries the marker of ``run``: pid -> command line."""
    if not _PROC.is_dir():
        return {}
    parents: dict[int, int] = {}
    for entry in _PROC.iterdir():
        if entry.name.isdigit():
            parent = _parent(int(entry.name))
            if parent is not None:
                parents[int(entry.name)] = parent
    found: dict[int, str] = {}
    for pid in parents:
        if pid == root or _is_zombie(pid):
            continue
        chain, seen = pid, set()
        while chain in parents and chain not in seen and chain > 1:
            seen.add(chain)
            chain = parents[chain]
            if chain == root:
                break
        if chain == root or _has_marker(pid, run):
            found[pid] = _command_line(pid)
    return found


def _is_zombie(pid: int) -> bool:
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def _reap(keep: int | None = None) -> None:
    """Collect the exit status of re-parented children that ended (we are their subreaper),
    all of them, or while the command runs, all but the command (``keep``: subprocess
    waits for that one itself)."""
    if keep is None:
        while True:
            try:
                pid, _status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
    me = os.getpid()
    for entry in _PROC.iterdir() if _PROC.is_dir() else ():
        pid = int(entry.name) if entry.name.isdigit() else keep
        if pid != keep and _parent(pid) == me and _is_zombie(pid):
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)


def _reaper(command: subprocess.Popen[bytes], stop: threading.Event) -> None:
    """While the command runs, reap the orphans that ended (no zombies pile up in a long
    test run)."""
    while not stop.wait(2.0):
        _reap(keep=command.pid)


def _kill(pids: list[int]) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, sig)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            _reap()
            if not any(_alive(pid) for pid in pids):
                return
            time.sleep(0.1)


def _alive(pid: int) -> bool:
    return (_PROC / str(pid)).exists() and not _is_zombie(pid)


def main(argv: list[str]) -> int:
    grace = 10.0
    if len(argv) >= 2 and argv[0] == "--grace":
        grace, argv = float(argv[1]), argv[2:]
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    cache = user_cache_dir()
    before = scan(cache)
    run = uuid.uuid4().hex
    if not become_subreaper():
        print(
            "leftovers: no child subreaper here; finding processes by marker only", file=sys.stderr
        )
    env = {**os.environ, MARKER: run}
    command = subprocess.Popen(argv, env=env)
    stop = threading.Event()
    reaper = threading.Thread(target=_reaper, args=(command, stop), daemon=True)
    reaper.start()
    try:
        code = command.wait()
    except KeyboardInterrupt:
        code = command.wait()
    finally:
        stop.set()
        reaper.join()
    me = os.getpid()
    deadline = time.monotonic() + grace
    left = descendants(me, run)
    while left and time.monotonic() < deadline:  # processes told to stop may take a moment
        time.sleep(0.2)
        _reap()
        left = descendants(me, run)
    failed = False
    if left:
        failed = True
        print(
            f"leftovers: {len(left)} process(es) started by the run are still alive:",
            file=sys.stderr,
        )
        for pid, line in sorted(left.items()):
            print(f"  pid {pid}: {line[:300]}", file=sys.stderr)
        _kill(sorted(left))
        print("leftovers: killed them", file=sys.stderr)
    new = changed_files(before, scan(cache))
    if new:
        failed = True
        print(
            f"leftovers: the run wrote {len(new)} file(s) into the user's cache directory "
            f"{cache} (left in place; delete them if they hold test data):",
            file=sys.stderr,
        )
        for name in new:
            print(f"  {name}", file=sys.stderr)
    if code != 0:
        return code
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
