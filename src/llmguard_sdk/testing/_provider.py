"""The :class:`FakeProvider`: its lifecycle, fault schedule, counters, prefix cache and limits."""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any, Literal

from .._closing import Closes
from ._faults import Fault, ProviderStats, ReceivedRequest
from ._server import _Server
from ._wire import (
    _MAX_RECORDED,
    _PREFIX_MEMORY,
    _STOP_WAIT_S,
    _echo_reply,
    _format_duration,
    _prefix_key,
    _request_id,
)

__all__ = ["FakeProvider"]

_BatchRows = Callable[[dict[str, Any]], "dict[str, Any] | str | None"]
"""``batch_rows(row)``: a batch result row as it will be stored (a dict), a raw line, or None."""
_Outcome = Literal["expired", "failed"] | None


def _check_settings(
    rpm: int | None,
    tpm: int | None,
    hang_limit: float,
    prefix_cache_min_tokens: int,
    batch_seconds: float,
) -> None:
    """Raise ValueError for a setting the :class:`FakeProvider` cannot take."""
    if rpm is not None and rpm < 1:
        raise ValueError("rpm must be >= 1 or None")
    if tpm is not None and tpm < 1:
        raise ValueError("tpm must be >= 1 or None")
    if not hang_limit >= 0 or math.isinf(hang_limit):
        raise ValueError("hang_limit must be a finite number >= 0")
    if prefix_cache_min_tokens < 0:
        raise ValueError("prefix_cache_min_tokens must be >= 0")
    if not 0 <= batch_seconds < math.inf:
        raise ValueError("batch_seconds must be a finite number of seconds >= 0")


class FakeProvider(Closes):
    """A real OpenAI-compatible HTTP server on a loopback port, run in a background thread.

    Use it as a context manager (or call :meth:`start` / :meth:`stop`).  Point any OpenAI
    client at :attr:`base_url`.  Faults for the next requests are chosen, in this order of
    precedence, from the :meth:`script` queue, an active :meth:`fail_for` window, and the
    :meth:`always` default; requests without a fault are subject to the ``rpm`` / ``tpm``
    limits (sliding 60 s window) and otherwise answered normally.

    Args:
        model: model id reported by ``/v1/models`` and used when a request names none.
        reply: ``reply(body) -> str`` computes the assistant text from the request JSON;
            default: ``"Echo: " + <text of the last user message>``.
        rpm: requests per minute the fake provider allows (``None``: unlimited).
        tpm: tokens per minute it allows; a request costs its input tokens plus its
            ``max_tokens`` (or the reply's token count when no ``max_tokens`` is given).
        limit_window: the sliding window of ``rpm`` / ``tpm`` in seconds (60 by default;
            shorter windows make quick drills: ``rpm=10, limit_window=1`` is 10 per second).
            A 429 from these limits carries ``Retry-After`` (whole seconds, at least 1) and
            the exact wait in ``retry-after-ms``. Answers carry the limits' state as OpenAI's
            ``x-ratelimit-*`` headers, on the Messages endpoint as Anthropic's
            ``anthropic-ratelimit-*`` (resets as RFC 3339 instants).
        host: interface to bind, loopback by default.
        port: port to bind; 0 picks a free one (kept across :meth:`stop` / :meth:`start`).
        hang_limit: seconds a ``Fault(hang=True)`` request hangs at most.
        name: a label for logs and thread names.
        prefix_cache: emulate a provider prefix cache and report cached tokens in usage
            (see the module docs).
        prefix_cache_min_tokens: shortest prefix the emulated cache keeps.
        usage: ``usage(body, counted) -> dict`` gives the ``usage`` object a chat-completions
            answer reports (and its stream's usage chunk), from the request JSON and the
            usage the fake counted (``prompt_tokens``, ``completion_tokens``,
            ``total_tokens``, ``prompt_tokens_details``); default: the counted one. A test
            makes the fake bill as a provider does what it does not count itself: image
            or audio tokens (``prompt_tokens_details.audio_tokens``,
            ``completion_tokens_details.audio_tokens``).
        strict: refuse with a 400, as the real APIs do, a chat-completions or Responses
            request that names no ``model`` (by default the fake answers it as ``model``),
            and tool messages that do not answer the calls before them: a chat ``tool``
            message whose ``tool_call_id`` no assistant message just before called, an
            assistant's ``tool_calls`` not each answered, a Messages ``tool_result`` block
            with no ``tool_use`` in the message before it, or ``tool_use`` blocks left
            without results in the next message. Whatever
            ``strict`` says, a chat request with no ``messages``, an empty list or a message
            whose role chat has not is refused as OpenAI refuses it (its ``param`` and
            ``code`` in the error body).
        batch_seconds: how long a batch (OpenAI's Batch API, Anthropic's Message Batches)
            runs before it ends; see :attr:`batch_seconds`.
        batch_rows: ``batch_rows(row)`` rewrites each result row of the next batches; see
            :attr:`batch_rows`.
        batch_outcome: how the next batches end (``None``, ``"expired"``, ``"failed"``);
            see :attr:`batch_outcome`.

    .. versionchanged:: 0.2.0 ``usage``, ``strict``, ``batch_seconds``, ``batch_rows``,
       ``batch_outcome`` (before, attributes set on the provider and declared nowhere).
    """

    def __init__(
        self,
        *,
        model: str = "fake-model",
        reply: Callable[[dict[str, Any]], str] | None = None,
        rpm: int | None = None,
        tpm: int | None = None,
        limit_window: float = 60.0,
        host: str = "127.0.0.1",
        port: int = 0,
        hang_limit: float = 30.0,
        name: str = "fake",
        prefix_cache: bool = False,
        prefix_cache_min_tokens: int = 0,
        usage: Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]] | None = None,
        strict: bool = False,
        batch_seconds: float = 0.2,
        batch_rows: _BatchRows | None = None,
        batch_outcome: _Outcome = None,
    ) -> None:
        limits = (rpm, tpm, hang_limit, prefix_cache_min_tokens)
        _check_settings(*limits, batch_seconds)
        self.batch_seconds: float = batch_seconds
        """Seconds a batch runs from its creation to its end (0.2 by default; 0: it has ended
        at the first status read). OpenAI's batches are ``validating`` for the first tenth
        of it and ``finalizing`` for the last tenth. Read when a batch is created."""
        self.batch_rows: _BatchRows | None = batch_rows
        """``batch_rows(row)`` rewrites each result row of a batch as it is stored: the row
        to write (a dict), a raw line (a str: a row the provider broke) or ``None`` (left
        out). An OpenAI row with an ``error`` or a status other than 200 goes to the error
        file and counts as failed."""
        self._batch_outcome: _Outcome = None
        self.batch_outcome = batch_outcome
        self.strict = strict
        """Whether requests are refused where the real APIs refuse them and the fake is
        lenient by default (see ``strict`` in the class docs)."""
        self.prefix_cache = prefix_cache
        """Whether the emulated prefix cache is on."""
        self._prefix_min = prefix_cache_min_tokens
        self._seen_prompts: deque[list[str]] = deque(maxlen=256)
        self._written: OrderedDict[str, None] = OrderedDict()
        self.name = name
        """A label for this provider (used in thread names)."""
        self._model = model
        self._reply = reply
        self._usage = usage
        if not 0 < limit_window < math.inf:
            raise ValueError("limit_window must be a positive number of seconds")
        self._rpm = rpm
        self._tpm = tpm
        self._limit_window = limit_window
        self._host = host
        self._port = port
        self._hang_limit = hang_limit

        self._lifecycle = threading.Lock()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._bound_port: int | None = None

        self._lock = threading.Lock()
        self._counter = 0
        self._script: deque[Fault | None] = deque()
        self._window_fault: Fault | None = None
        self._window_until = 0.0
        self._default_fault: Fault | None = None
        self._rate_window: deque[tuple[float, int]] = deque()
        self._rate_tokens = 0
        self._recorded: deque[ReceivedRequest] = deque(maxlen=_MAX_RECORDED)
        self._stats: dict[str, int] = {}
        self._by_status: dict[int, int] = {}

    @property
    def batch_outcome(self) -> _Outcome:
        """How the next batches end: ``None`` (each request answered), ``"expired"`` (OpenAI:
        ``status`` ``expired``, each request in the error file as ``batch_expired``; Anthropic:
        each result ``expired``) or ``"failed"`` (OpenAI: ``status`` ``failed`` with
        ``errors``, no files; Anthropic: each result ``errored``). Another value is a
        ``ValueError`` when set."""
        return self._batch_outcome

    @batch_outcome.setter
    def batch_outcome(self, outcome: _Outcome) -> None:
        if outcome not in (None, "expired", "failed"):
            raise ValueError(f"batch_outcome must be None, 'expired' or 'failed', not {outcome!r}")
        self._batch_outcome = outcome

    # ---- lifecycle

    def start(self) -> FakeProvider:
        """Start serving in a daemon thread (no-op when already started); return ``self``.

        After a :meth:`stop`, starting again binds the same port, so :attr:`url` stays valid.
        """
        with self._lifecycle:
            if self._server is not None:
                return self
            port = self._bound_port if self._bound_port is not None else self._port
            server = _Server((self._host, port), self)
            self._bound_port = server.server_port
            thread = threading.Thread(
                target=server.run, name=f"FakeProvider[{self.name}]", daemon=True
            )
            self._server = server
            self._thread = thread
            thread.start()
        return self

    def stop(self) -> None:
        """Stop serving (no-op when not started); returns within about a second.

        Hung and streaming requests are interrupted, open connections are shut down and the
        listening socket is closed, so new connections are refused afterwards.
        """
        with self._lifecycle:
            server, thread = self._server, self._thread
            self._server = None
            self._thread = None
            if server is None:
                return
            server.stopping.set()
            if thread is not None:
                thread.join(timeout=_STOP_WAIT_S)
            server.server_close()
            server.drop_connections(timeout=_STOP_WAIT_S)

    def __enter__(self) -> FakeProvider:
        return self.start()

    def close(self) -> None:
        """Same as :meth:`stop` (what the end of a ``with`` block calls)."""
        self.stop()

    @property
    def running(self) -> bool:
        """Whether the server is currently started."""
        return self._server is not None

    @property
    def url(self) -> str:
        """``http://HOST:PORT`` of the server (the port is known once started)."""
        port = self._bound_port if self._bound_port is not None else self._port
        if port == 0:
            raise RuntimeError("FakeProvider has no port yet; call start() first")
        host = f"[{self._host}]" if ":" in self._host else self._host
        return f"http://{host}:{port}"

    @property
    def model(self) -> str:
        """The model name answered when a request names none."""
        return self._model

    @property
    def base_url(self) -> str:
        """``url + "/v1"``: what an OpenAI client takes as ``base_url``."""
        return self.url + "/v1"

    # ---- faults

    def script(self, *faults: Fault | None) -> None:
        """Queue faults for the next ``len(faults)`` chat requests (``None``: normal answer).

        Appends to any faults already queued.
        """
        with self._lock:
            self._script.extend(faults)

    def fail_for(self, seconds: float, fault: Fault) -> None:
        """Give ``fault`` to every chat request in the next ``seconds`` (monotonic clock).

        Replaces any earlier window.  The :meth:`script` queue still takes precedence.
        """
        with self._lock:
            self._window_fault = fault if seconds > 0 else None
            self._window_until = time.monotonic() + max(0.0, seconds)

    def always(self, fault: Fault | None) -> None:
        """Set the default fault for every chat request from now on (``None`` clears it)."""
        with self._lock:
            self._default_fault = fault

    def reset_faults(self) -> None:
        """Clear the script queue, the :meth:`fail_for` window and the :meth:`always` fault."""
        with self._lock:
            self._script.clear()
            self._window_fault = None
            self._window_until = 0.0
            self._default_fault = None

    # ---- observation

    @property
    def stats(self) -> ProviderStats:
        """A frozen snapshot of the counters."""
        with self._lock:
            s = self._stats
            return ProviderStats(
                requests=s.get("requests", 0),
                streams=s.get("streams", 0),
                succeeded=s.get("succeeded", 0),
                faults=s.get("faults", 0),
                by_status=dict(self._by_status),
                rate_limited=s.get("rate_limited", 0),
                input_tokens=s.get("input_tokens", 0),
                output_tokens=s.get("output_tokens", 0),
                connections=s.get("connections", 0),
                cached_input_tokens=s.get("cached_input_tokens", 0),
                cache_write_input_tokens=s.get("cache_write_input_tokens", 0),
            )

    def reset_stats(self) -> None:
        """Zero all counters (the recorded :attr:`requests` and rate-limit window stay)."""
        with self._lock:
            self._stats.clear()
            self._by_status.clear()

    def clear_prefix_cache(self) -> None:
        """Forget every prefix the emulated cache holds."""
        with self._lock:
            self._seen_prompts.clear()
            self._written.clear()

    @property
    def requests(self) -> list[ReceivedRequest]:
        """A copy of the last (at most 1000) requests received, oldest first."""
        with self._lock:
            return list(self._recorded)

    # ---- internals used by the handler threads

    def _bump(self, key: str, amount: int = 1) -> None:
        with self._lock:
            self._stats[key] = self._stats.get(key, 0) + amount

    def _note_connection(self) -> None:
        self._bump("connections")

    def _note_chat(self, *, stream: bool) -> None:
        with self._lock:
            self._stats["requests"] = self._stats.get("requests", 0) + 1
            if stream:
                self._stats["streams"] = self._stats.get("streams", 0) + 1

    def _note_fault(self) -> None:
        self._bump("faults")

    def _note_rate_limited(self) -> None:
        self._bump("rate_limited")

    def _note_status(self, status: int) -> None:
        with self._lock:
            self._by_status[status] = self._by_status.get(status, 0) + 1

    def _note_success(self, input_tokens: int, output_tokens: int, *, undo: bool = False) -> None:
        sign = -1 if undo else 1
        with self._lock:
            s = self._stats
            s["succeeded"] = s.get("succeeded", 0) + sign
            s["input_tokens"] = s.get("input_tokens", 0) + sign * input_tokens
            s["output_tokens"] = s.get("output_tokens", 0) + sign * output_tokens

    def _openai_cached(self, tokens: list[str]) -> int:
        """Tokens of ``tokens`` the emulated cache holds: the longest prefix shared with an
        earlier request; remembers this one."""
        if not self.prefix_cache:
            return 0
        with self._lock:
            best = 0
            for earlier in self._seen_prompts:
                shared = 0
                for a, b in zip(earlier, tokens, strict=False):
                    if a != b:
                        break
                    shared += 1
                best = max(best, shared)
            self._seen_prompts.append(tokens)
            cached = best if best >= max(1, self._prefix_min) else 0
            self._stats["cached_input_tokens"] = self._stats.get("cached_input_tokens", 0) + cached
            return cached

    def _anthropic_cached(self, tokens: list[str], breakpoints: list[int]) -> tuple[int, int]:
        """``(read, written)`` tokens of an Anthropic-style request: breakpoint prefixes only."""
        if not self.prefix_cache:
            return 0, 0
        usable = [p for p in breakpoints if p >= max(1, self._prefix_min)]
        with self._lock:
            read = 0
            for position in usable:
                key = _prefix_key(tokens, position)
                if key in self._written:
                    self._written.move_to_end(key)
                    read = max(read, position)
            written = 0
            for position in usable:
                if position > read:
                    self._written[_prefix_key(tokens, position)] = None
                    written = max(written, position - read)
            while len(self._written) > _PREFIX_MEMORY:
                self._written.popitem(last=False)
            s = self._stats
            s["cached_input_tokens"] = s.get("cached_input_tokens", 0) + read
            s["cache_write_input_tokens"] = s.get("cache_write_input_tokens", 0) + written
            return read, written

    def _record_request(self, method: str, path: str, headers: dict[str, str], body: Any) -> int:
        with self._lock:
            self._counter += 1
            self._recorded.append(ReceivedRequest(method, path, headers, body, time.monotonic()))
            return self._counter

    def _choose_fault(self) -> Fault | None:
        with self._lock:
            if self._script:
                return self._script.popleft()
            if self._window_fault is not None:
                if time.monotonic() < self._window_until:
                    return self._window_fault
                self._window_fault = None
            return self._default_fault

    def _make_reply(self, body: dict[str, Any]) -> str:
        if self._reply is None:
            return _echo_reply(body)
        return str(self._reply(body))

    def _make_usage(self, body: dict[str, Any], counted: dict[str, Any]) -> dict[str, Any]:
        """The usage a chat-completions answer reports (see ``usage`` in the class docs)."""
        return counted if self._usage is None else self._usage(body, counted)

    def _prune_locked(self, now: float) -> None:
        window = self._rate_window
        while window and window[0][0] <= now - self._limit_window:
            self._rate_tokens -= window.popleft()[1]

    def _rate_headers_locked(self, now: float, anthropic: bool = False) -> list[tuple[str, str]]:
        """The limits' headers: OpenAI's ``x-ratelimit-*`` (resets as durations), or with
        ``anthropic`` Anthropic's ``anthropic-ratelimit-*`` (resets as RFC 3339 instants)."""
        out: list[tuple[str, str]] = []
        window = self._rate_window
        wait = window[0][0] + self._limit_window - now if window else 0.0
        if anthropic:
            instant = datetime.fromtimestamp(time.time() + wait, tz=timezone.utc)
            at = instant.isoformat(timespec="seconds").replace("+00:00", "Z")
            for kind, limit, used in (
                ("requests", self._rpm, len(window)),
                ("tokens", self._tpm, self._rate_tokens),
            ):
                if limit is not None:
                    out += [
                        (f"anthropic-ratelimit-{kind}-limit", str(limit)),
                        (f"anthropic-ratelimit-{kind}-remaining", str(max(0, limit - used))),
                        (f"anthropic-ratelimit-{kind}-reset", at),
                    ]
            return out
        reset = _format_duration(wait) if window else "0s"
        if self._rpm is not None:
            out += [
                ("x-ratelimit-limit-requests", str(self._rpm)),
                ("x-ratelimit-remaining-requests", str(max(0, self._rpm - len(window)))),
                ("x-ratelimit-reset-requests", reset),
            ]
        if self._tpm is not None:
            out += [
                ("x-ratelimit-limit-tokens", str(self._tpm)),
                ("x-ratelimit-remaining-tokens", str(max(0, self._tpm - self._rate_tokens))),
                ("x-ratelimit-reset-tokens", reset),
            ]
        return out

    def _common_headers(self, n: int, anthropic: bool = False) -> list[tuple[str, str]]:
        """The request id and limit headers (with ``anthropic``, as Anthropic names them)."""
        headers = [("request-id" if anthropic else "x-request-id", _request_id(n, anthropic))]
        if self._rpm is None and self._tpm is None:
            return headers
        with self._lock:
            now = time.monotonic()
            self._prune_locked(now)
            return headers + self._rate_headers_locked(now, anthropic)

    def _admit(
        self, cost: int, anthropic: bool = False
    ) -> tuple[float | None, list[tuple[str, str]]]:
        """Apply rpm/tpm: ``(None, headers)`` when admitted, else ``(wait_s, headers)``."""
        if self._rpm is None and self._tpm is None:
            return None, []
        with self._lock:
            now = time.monotonic()
            self._prune_locked(now)
            window = self._rate_window
            wait = 0.0
            if self._rpm is not None and len(window) + 1 > self._rpm:
                wait = max(wait, window[len(window) - self._rpm][0] + self._limit_window - now)
            if self._tpm is not None and self._rate_tokens + cost > self._tpm:
                if cost > self._tpm:
                    wait = max(
                        wait, self._limit_window
                    )  # can never fit; tell the client to back off
                else:
                    freed = 0
                    for stamp, tokens in window:
                        freed += tokens
                        if self._rate_tokens - freed + cost <= self._tpm:
                            wait = max(wait, stamp + self._limit_window - now)
                            break
            if wait > 0.0:
                return wait, self._rate_headers_locked(now, anthropic)
            window.append((now, cost))
            self._rate_tokens += cost
            return None, self._rate_headers_locked(now, anthropic)

    def __repr__(self) -> str:
        where = self.url if self._bound_port or self._port else "unbound"
        state = "running" if self.running else "stopped"
        return f"FakeProvider(name={self.name!r}, {where}, {state})"


# --------------------------------------------------------------------------- CLI
