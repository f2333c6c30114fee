"""What every bench shares: the Redis it was given, cleanup on every exit path, and
latency summaries that claim a p99 only where there are enough samples for one.

Not a benchmark itself (the leading underscore); the benches import it as ``_benchkit``
(their own folder is first on ``sys.path`` when they run as scripts).

* :func:`given_redis`: the URL of ``--redis-url``, else ``REDIS_URL``, else a throwaway
  ``redis-server`` started for the run (``tools/with_redis.py``). A bench never falls back
  to ``127.0.0.1:6379`` on its own: it writes only into the Redis it was given.
* :func:`exit_on_signals`: SIGTERM (and SIGHUP) raise ``SystemExit``, so ``finally`` blocks
  and ``with`` exits run when a bench is stopped, as they do on Ctrl-C.
* :class:`Reaper`: a watchdog process, in its own session, holding the read end of a pipe.
  The bench registers each child it starts; when the bench ends by any means, SIGKILL
  included, the pipe closes and the watchdog stops every registered child still alive (by
  process group where the child leads one). Children are matched by pid *and* start time,
  so a recycled pid is never hit. Children that are stopped normally are unregistered.
* :func:`popen_group`: ``subprocess.Popen`` in a new process group (session), registered
  with the reaper; :func:`stop_group` stops the whole group (SIGTERM, then SIGKILL).
* :class:`RoundCpu`: the CPU a round's server and worker used, and the rest of the machine.
* :func:`round_arguments`: the command line of a bench whose worker processes take turns.
* :func:`print_result`: the bench's result, one JSON object with ``--json``, else a
  ``key: value`` line each.
* :func:`shared_data`: where a data file the repository does not hold is looked for:
  ``shared/data`` beside the checkout, and beside the main checkout when the bench runs
  from a git worktree (``git worktree add``), which lies elsewhere.
* :func:`latency_summary`: ``samples``, ``p50``, ``max`` and, from
  :data:`P99_MIN_SAMPLES` samples on, ``p99`` (nearest rank). With fewer samples the
  nearest-rank p99 is one of the slowest few calls, so it is not reported as a p99.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

_TOOLS = Path(__file__).resolve().parents[1] / "tools"

P99_MIN_SAMPLES = 1000
"""The fewest samples over which a p99 is reported (10 calls beyond it)."""


# ------------------------------------------------------------------------------- Redis


def redis_url_given(flag: str | None) -> str | None:
    """``--redis-url`` if given, else ``REDIS_URL`` if set, else ``None``."""
    return flag or os.environ.get("REDIS_URL") or None


@contextlib.contextmanager
def given_redis(flag: str | None) -> Iterator[str]:
    """The Redis a bench uses (see the module docs); a throwaway one is stopped and its folder
    removed when the block ends."""
    url = redis_url_given(flag)
    if url is not None:
        yield url
        return
    if str(_TOOLS) not in sys.path:
        sys.path.insert(0, str(_TOOLS))
    import with_redis

    print("no --redis-url or REDIS_URL: starting a throwaway redis-server", file=sys.stderr)
    with with_redis.throwaway() as url:
        yield url


def delete_prefix(client: Any, prefix: str) -> int:
    """Delete every key of ``client`` (a redis-py client) matching ``prefix*``; how many."""
    deleted = 0
    for key in client.scan_iter(match=f"{prefix}*", count=1000):
        deleted += int(client.delete(key))
    return deleted


# ---------------------------------------------------------------------------- cleanup


def _raise_exit(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def exit_on_signals() -> None:
    """SIGTERM and SIGHUP raise ``SystemExit(128 + signum)`` in the main thread."""
    for name in ("SIGTERM", "SIGHUP"):
        number = getattr(signal, name, None)
        if number is not None:
            signal.signal(number, _raise_exit)


def _start_time(pid: int) -> str | None:
    """The kernel's start time of ``pid`` (``/proc/PID/stat`` field 22), or None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


_WATCHDOG = r"""
import os, signal, sys, time
def start(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except OSError:
        return None
children = {}
for line in sys.stdin:
    op, pid, group, started = line.split()
    if op == "+":
        children[int(pid)] = (group == "1", started)
    else:
        children.pop(int(pid), None)
def send(sig):
    alive = 0
    for pid, (group, started) in children.items():
        if start(pid) != started:
            continue
        alive += 1
        try:
            os.killpg(pid, sig) if group else os.kill(pid, sig)
        except OSError:
            pass
    return alive
if send(signal.SIGTERM):
    time.sleep(3)
    send(signal.SIGKILL)
"""


class Reaper:
    """Stops registered children when this process ends, however it ends (see module docs).

    Linux only (it reads ``/proc``); elsewhere registering does nothing.
    """

    def __init__(self) -> None:
        self._process: subprocess.Popen[str] | None = None

    def _pipe(self) -> Any:
        if self._process is None:
            self._process = subprocess.Popen(
                [sys.executable, "-c", _WATCHDOG],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                text=True,
                start_new_session=True,  # outlives a kill of the bench's process group
            )
        return self._process.stdin

    def add(self, pid: int, *, group: bool = False) -> None:
        """Stop ``pid`` (its process group if ``group``) when this process ends."""
        started = _start_time(pid)
        if started is None:
            return
        pipe = self._pipe()
        pipe.write(f"+ {pid} {int(group)} {started}\n")
        pipe.flush()

    def remove(self, pid: int) -> None:
        """``pid`` was stopped: forget it."""
        if self._process is not None and self._process.stdin is not None:
            with contextlib.suppress(OSError, ValueError):
                self._process.stdin.write(f"- {pid} 0 0\n")
                self._process.stdin.flush()


REAPER = Reaper()


def popen_group(args: Sequence[str], **kwargs: Any) -> subprocess.Popen[Any]:
    """``subprocess.Popen`` leading a new process group (session), registered with the
    reaper so it is stopped with this process whatever happens."""
    process: subprocess.Popen[Any] = subprocess.Popen(args, start_new_session=True, **kwargs)
    REAPER.add(process.pid, group=True)
    return process


def stop_group(process: subprocess.Popen[Any], timeout: float = 5.0) -> None:
    """Stop a child started by :func:`popen_group` and everything in its group."""
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, timeout)):
        if process.poll() is not None:
            break
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=wait)
    with contextlib.suppress(ProcessLookupError):  # a grandchild left behind in the group
        os.killpg(process.pid, signal.SIGKILL)
    REAPER.remove(process.pid)


def stop_processes(processes: Sequence[Any], grace: float = 5.0) -> None:
    """Join ``multiprocessing`` processes for up to ``grace`` seconds, then terminate and kill
    the ones still alive."""
    deadline = time.monotonic() + grace
    for process in processes:
        if process.pid is not None:
            process.join(timeout=max(0.0, deadline - time.monotonic()))
    for process in processes:
        if process.pid is not None and process.is_alive():
            process.terminate()
            process.join(timeout=3.0)
        if process.pid is not None and process.is_alive():
            process.kill()
            process.join(timeout=3.0)
        if process.pid is not None:
            REAPER.remove(process.pid)


def start_processes(processes: Sequence[Any]) -> None:
    """Start ``multiprocessing`` processes and register them with the reaper."""
    for process in processes:
        process.start()
        REAPER.add(process.pid)


# -------------------------------------------------------------------------- CPU shares

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_ticks(pid: int | None = None) -> int:
    """CPU ticks of process ``pid``, or (None) the whole machine's busy ticks (Linux)."""
    if pid is None:
        with open("/proc/stat") as stat:
            fields = stat.readline().split()[1:]
        return sum(int(v) for v in fields[:8]) - int(fields[3]) - int(fields[4])
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


class RoundCpu:
    """CPU used while a round runs: the server's and the worker's processes (seconds each) and
    the rest of the machine (``others``: cores' worth, the load of a shared machine)."""

    def __init__(self, server_pid: int, worker_pid: int) -> None:
        self._pids = (server_pid, worker_pid)
        self._start = self._now()
        self._started = time.perf_counter()

    def _now(self) -> tuple[int, int, int]:
        return cpu_ticks(), cpu_ticks(self._pids[0]), cpu_ticks(self._pids[1])

    def done(self) -> tuple[float, float, float]:
        """``(server_s, worker_s, others)`` since this object was made."""
        elapsed = time.perf_counter() - self._started
        machine, server, worker = (b - a for a, b in zip(self._start, self._now(), strict=True))
        others = max(0, machine - server - worker) / _TICK / elapsed
        return server / _TICK, worker / _TICK, others


# ------------------------------------------------------------------------ percentiles


def nearest_rank(ordered: Sequence[float], q: float) -> float:
    """Nearest-rank percentile ``q`` (0-100) of sorted values."""
    return ordered[max(1, math.ceil(q / 100.0 * len(ordered))) - 1]


def latency_summary(values: Sequence[float], digits: int = 3) -> dict[str, float | int | None]:
    """``{"samples", "p50", "max"}`` and ``"p99"`` from :data:`P99_MIN_SAMPLES` samples on."""
    ordered = sorted(values)
    if not ordered:
        return {"samples": 0, "p50": None, "max": None}
    found: dict[str, float | int | None] = {
        "samples": len(ordered),
        "p50": round(nearest_rank(ordered, 50), digits),
        "max": round(ordered[-1], digits),
    }
    if len(ordered) >= P99_MIN_SAMPLES:
        found["p99"] = round(nearest_rank(ordered, 99), digits)
    return found


LOOPBACK_SERVERS: dict[str, tuple[str, ...]] = {
    "fake": ("-m", "llmguard_sdk.testing", "serve"),
    "asyncio": (str(Path(__file__).with_name("_asyncio_server.py")),),
}
"""The Python arguments of each loopback server a bench can start (each prints its base URL
and stops when its stdin closes): the FakeProvider, and ``_asyncio_server.py``."""


def round_arguments(
    doc: str, workers: Sequence[str], what: str, worker_main: Callable[..., None]
) -> argparse.Namespace | None:
    """The command line of a bench whose ``workers`` (one process each) take turns round by
    round: ``--json``, ``--calls``, ``--rounds`` (of ``what``), ``--quick`` (200 calls, 2
    rounds) and the hidden worker flags. In a worker's process it runs
    ``worker_main(worker, base_url, concurrency, calls)`` and gives None."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--calls", type=int, default=2000, help="calls per round (2,000)")
    parser.add_argument("--rounds", type=int, default=6, help=f"measured rounds per {what} (6)")
    parser.add_argument("--quick", action="store_true", help="200 calls, 2 rounds")
    parser.add_argument(
        "--server",
        choices=sorted(LOOPBACK_SERVERS),
        default="asyncio",
        help="the loopback server: asyncio (one event loop, the default) or fake (the "
        "FakeProvider: a thread per connection)",
    )
    parser.add_argument("--worker", choices=workers, help=argparse.SUPPRESS)
    parser.add_argument("--base-url", help=argparse.SUPPRESS)
    parser.add_argument("--concurrency", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    exit_on_signals()
    if args.worker:
        worker_main(args.worker, args.base_url, args.concurrency, args.calls)
        return None
    if args.quick:
        args.calls, args.rounds = 200, 2
    return args


# --------------------------------------------------------------------------- data files


def shared_data(name: str, root: Path | None = None) -> list[Path]:
    """Where the data file ``name`` is looked for when no path is given: ``shared/data``
    beside the checkout ``root`` (this repository's by default), then beside the main
    checkout when ``root`` is a git worktree (git tells where; no git: the first alone)."""
    root = (root or Path(__file__).resolve().parents[1]).resolve()
    places = [root.parent / "shared" / "data" / name]
    try:
        common = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--git-common-dir"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return places
    main = (root / common).resolve().parent  # the folder of the main checkout's .git
    place = main.parent / "shared" / "data" / name
    return places if place in places else [*places, place]


def print_result(result: dict[str, Any], as_json: bool) -> None:
    """Print ``result``: one JSON object (``--json``), else a ``key: value`` line each."""
    if as_json:
        print(json.dumps(result))
        return
    width = max((len(key) for key in result), default=0)
    for key, value in result.items():
        print(f"{key:>{width}}: {value}")
