"""Real traffic sampled into an evaluation set: a share of calls written to JSON Lines.

::

    sink = EvalSink("eval.jsonl", share=0.05)          # 5 % of calls
    guard = Guard(providers, telemetry=Telemetry(eval_sink=sink))
    answer = guard.chat(messages, feature="faq")
    guard.feedback(answer.metadata["call_id"], 1.0, label="thumbs")  # joins the sample

Each sampled call is one line ``{"type": "call", ...}`` with its ``call_id``, time, feature,
tenant (hashed), release, the route that served it, the request (messages, limits,
``response_format``), the answer, finish reason, usage, cost, latency, quality signals and
error type. Feedback on a sampled call is a later line ``{"type": "feedback", "call_id",
"score", "label"}``. ``llmguard eval FILE`` replays the calls against another route or
release and compares the answers (:func:`read_samples` joins the feedback).

**Privacy.** Every text goes through ``redact`` (default
:func:`~llmguard_sdk.telemetry.redaction.redact`: credentials, e-mail addresses, phone and
card numbers, SSNs and IBANs masked; credentials are masked whatever ``redact`` is) before it
is written; tenant and user ids are hashed. **Retention:**
the file is rotated to ``FILE.1`` when it passes half of ``max_bytes`` or when its first
record is older than half of ``max_age_s``, and the previous ``FILE.1`` is deleted then, so at
most ``max_bytes`` and nothing older than ``max_age_s`` stays on disk (checked at each write
and by :meth:`EvalSink.prune`). A record longer than half of ``max_bytes`` cannot fit in one
file, so it is left out (logged). **Processes sharing the file** take turns: each write,
with the rotation it may need, is made under an exclusive lock on ``FILE.lock`` (POSIX
``flock``; elsewhere only the threads of one process take turns), and whether to rotate is
read off the file on disk, not off what this process wrote, so one rotation happens once.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ConfigurationError
from ._options import checked_number
from ._redacting import redacted
from .redaction import redact as _default_redact

if TYPE_CHECKING:
    from ..context import CallContext
    from ..models import ChatResponse

__all__ = ["EvalSink", "call_record", "read_samples"]

logger = logging.getLogger("llmguard_sdk")
_REMEMBERED = 10_000  # sampled call ids kept for feedback
_DAY_S = 86_400.0


class EvalSink:
    """Writes a share of guarded calls, redacted, to a JSON Lines file (see the module docs).

    Args:
        path: the file (created with its folder; rotated to ``path.1``).
        share: the fraction of calls sampled, from 0 to 1.
        redact: applied to every text written (the default masks personal data), after
            the credentials are masked (whatever ``redact`` is, as for all telemetry). One
            that fails (raises, or gives no string) has its text written as
            ``[redaction failed]`` (logged), never unredacted; the sample is written.
        max_bytes: at most this much stays on disk (two files of half each; a record
            longer than half is left out).
        max_age_s: records older than this are deleted (default 30 days).
        seed: seeds the sampling (reproducible samples in tests).
    """

    def __init__(
        self,
        path: str | Path,
        share: float = 0.05,
        *,
        redact: Callable[[str], str] = _default_redact,
        max_bytes: int = 50_000_000,
        max_age_s: float = 30 * _DAY_S,
        seed: int | None = None,
    ) -> None:
        checked_number("EvalSink", "share", share, at_least=0, at_most=1)
        checked_number("EvalSink", "max_bytes", max_bytes, at_least=2048)  # (5e7 too)
        checked_number("EvalSink", "max_age_s", max_age_s, above=0)
        if not callable(redact):
            raise ConfigurationError("redact must be a function of a string")
        self.path = Path(path)
        self.share = share
        self._redact = redact
        self._max_bytes = int(max_bytes)
        self._max_age_s = max_age_s
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        self._sampled: OrderedDict[str, None] = OrderedDict()

    def __repr__(self) -> str:
        return f"EvalSink({str(self.path)!r}, share={self.share})"

    def offer(self, record: Callable[[], dict[str, Any]], call_id: str) -> bool:
        """Sample the call: write ``record()`` (built only when sampled); True if written.
        A call not written (too long, or ``record()`` failed) is forgotten: no feedback
        line is written for it."""
        with self._lock:
            if self.share <= 0.0 or self._random.random() >= self.share:
                return False
            self._sampled[call_id] = None
            if len(self._sampled) > _REMEMBERED:
                self._sampled.popitem(last=False)
        written = False
        try:
            written = self._write(record())
        finally:
            if not written:
                with self._lock:
                    self._sampled.pop(call_id, None)
        return written

    def feedback(self, call_id: str, score: float, label: str | None) -> bool:
        """Append feedback on ``call_id`` when that call was sampled; True if written."""
        with self._lock:
            if call_id not in self._sampled:
                return False
        line = {"type": "feedback", "call_id": call_id, "ts": round(time.time(), 3)}
        line.update({"score": score, "label": self.text(label) if label else label})
        self._write(line)
        return True

    def text(self, value: str) -> str:
        """``value`` as the sink writes it: credentials masked, then ``redact`` applied
        (``[redaction failed]`` where ``redact`` fails: raises, or gives no string)."""
        return redacted(self._redact, value)

    def prune(self) -> None:
        """Rotate or delete what is past the retention limits now."""
        with self._lock, _shared_lock(self.path):
            self._rotate_if_due(time.time())

    def _write(self, line: dict[str, Any]) -> bool:
        data = (json.dumps(line, separators=(",", ":"), default=str) + "\n").encode()
        if len(data) > self._max_bytes // 2:
            logger.warning(
                "eval sink %s: a %s record of %d bytes is longer than half of max_bytes "
                "(%d): left out",
                self.path,
                line.get("type"),
                len(data),
                self._max_bytes,
            )
            return False
        with self._lock, _shared_lock(self.path):
            self._rotate_if_due(time.time(), len(data))
            with self.path.open("ab") as out:  # one write per line: appends stay whole
                out.write(data)
        return True

    def _rotate_if_due(self, now: float, adding: int = 0) -> None:
        """FILE.1 holds records from at most half the age limit before its last write: it
        goes once that write is half the limit old. FILE goes to FILE.1 when it passes half
        the size or its first record half the age."""
        older = self.path.with_name(self.path.name + ".1")
        try:
            if now - older.stat().st_mtime > self._max_age_s / 2:
                older.unlink(missing_ok=True)
        except FileNotFoundError:
            pass
        try:
            found = self.path.stat()
        except FileNotFoundError:
            return
        # read off the file each time: another process may have rotated it
        first_at = _first_time(self.path) or now
        if found.st_size + adding > self._max_bytes // 2 or now - first_at > self._max_age_s / 2:
            os.replace(self.path, older)  # the previous FILE.1 goes


@contextlib.contextmanager
def _shared_lock(path: Path) -> Iterator[None]:
    """Held by one process at a time: an exclusive ``flock`` of ``path.lock`` (created with
    its folder); where there is no ``fcntl`` (Windows), nothing."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:
        yield
        return
    with path.with_name(path.name + ".lock").open("ab") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # released when the handle closes
        yield


def _first_time(path: Path) -> float | None:
    with path.open(encoding="utf-8") as lines:
        first = lines.readline()
    try:
        value = json.loads(first).get("ts")
    except (ValueError, AttributeError):
        return None
    return float(value) if isinstance(value, int | float) else None


def call_record(
    sink: EvalSink, ctx: CallContext, call: dict[str, Any], response: ChatResponse | None
) -> dict[str, Any]:
    """The line written for a sampled call (texts redacted by ``sink``)."""
    request = ctx.request
    messages = [{"role": m.role, "content": sink.text(m.text)} for m in request.messages if m.text]
    wanted: dict[str, Any] = {"messages": messages}
    for name in ("model", "max_tokens", "max_completion_tokens", "temperature", "top_p"):
        if getattr(request, name) is not None:
            wanted[name] = getattr(request, name)
    if request.response_format is not None:
        wanted["response_format"] = request.response_format
    line: dict[str, Any] = {
        "type": "call",
        "call_id": call.get("llmguard.call_id"),
        "ts": round(time.time(), 3),
        "feature": ctx.scope.feature,
        "tenant": call.get("llmguard.tenant"),
        "release": ctx.release or (request.metadata or {}).get("release"),  # as labels have
        "route": call.get("llmguard.served_by"),
        "model": call.get("gen_ai.response.model") or call.get("gen_ai.request.model"),
        "request": wanted,
        "latency_s": round(ctx.elapsed(), 4),
        "error": call.get("error.type"),
        "signals": call.get("llmguard.quality.signals", []),
    }
    if response is not None:
        line["answer"] = sink.text(response.text)
        line["finish_reason"] = response.finish_reason
        line["cost_usd"] = response.cost_usd
        line["cache"] = response.metadata.get("cache")
        if response.usage is not None:
            line["usage"] = {
                "input_tokens": response.usage.input_tokens,
                "output_tokens": response.usage.output_tokens,
            }
    return line


def read_samples(path: str | Path) -> list[dict[str, Any]]:
    """The sampled calls of ``path`` (``path.1`` first when present), each with the
    ``feedback`` given on it (a list of ``{"score", "label"}``).

    Raises:
        ConfigurationError: the file cannot be read.
    """
    calls: dict[str, dict[str, Any]] = {}
    base = Path(path)
    for part in (base.with_name(base.name + ".1"), base):
        if part == base or part.exists():
            for line in _lines(part):
                if not isinstance(line.get("call_id"), str):  # (a list: unhashable)
                    continue
                if line.get("type") == "call":
                    calls[line["call_id"]] = {**line, "feedback": []}
                elif line.get("type") == "feedback" and line["call_id"] in calls:
                    calls[line["call_id"]]["feedback"].append(
                        {"score": line.get("score"), "label": line.get("label")}
                    )
    return list(calls.values())


def _lines(path: Path) -> Iterator[dict[str, Any]]:
    try:
        with path.open(encoding="utf-8") as lines:
            for text in lines:
                try:
                    value = json.loads(text)
                except ValueError:
                    continue  # a line cut by a crash
                if isinstance(value, dict):
                    yield value
    except OSError as exc:
        raise ConfigurationError(f"cannot read samples file {path}: {exc}") from None
    except UnicodeDecodeError:  # a picture, an archive: not a samples file
        raise ConfigurationError(f"cannot read samples file {path}: not UTF-8 text") from None
