"""A model's :class:`Price` (USD per million tokens of each kind) and the :class:`Cost` of
a call's usage at it: cached reads, cache writes by retention and reasoning output at their own
rates, in the long-context tier of the call's input (the formula is in :mod:`.prices`).

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import math
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from ..errors import ConfigurationError
from ..models import Usage
from ..telemetry._repeats import log_repeated
from ._source import TIERS
from ._tool_fees import TOOLS

__all__ = ["Cost", "Price"]

logger = logging.getLogger("llmguard_sdk")
_MILLION = 1_000_000.0
_EPOCH = dt.date(1970, 1, 1)
_NO_12H = (
    "llmguard prices: %d tokens written to the prompt cache for 12 hours were priced at the "
    "model's cache-write rate: its price has no cache_write_12h (PriceTable.with_prices sets it)"
)
_NO_AUDIO = (
    "llmguard prices: %d %s audio tokens were priced at the text rate: the model's price has "
    "no %s rate (PriceTable.with_prices sets it)"
)
_FEES = ("per_request", *(tool.fee for tool in TOOLS))  # USD per request, per tool use
_RATES = (
    "input",
    "output",
    "cached_input",
    "cache_write",
    "cache_write_1h",
    "reasoning",
    "cache_write_12h",
    "input_audio",
    "output_audio",
)


@dataclass(frozen=True)
class Price:
    """USD per million tokens; ``cached_input`` and ``cache_write`` default to ``input``.

    ``effective_from`` is the first UTC day the price applies (entries of one model with
    later dates replace earlier ones from their date on). ``cache_write_1h`` is the rate of
    cache writes kept for an hour (Anthropic's 1-hour TTL; default: ``cache_write``),
    ``cache_write_12h`` that of writes kept for 12 hours (OpenAI's 12-hour retention; default:
    ``cache_write``, with a warning when a call's writes are priced so), ``reasoning`` the
    rate of reasoning output tokens (default: ``output``). ``tier`` names the service tier
    the price is for (``"flex"``, ``"priority"``, ``"batch"``, ``"fast"``; ``None``:
    standard). ``long_context`` holds ``(threshold, price)`` pairs: a call of more
    than ``threshold`` input tokens pays that price for all of its tokens. ``input_audio``
    and ``output_audio`` are the rates of the input and output tokens that carry audio
    (OpenAI's ``gpt-audio``: $32 and $64 per million; default: ``input`` and ``output``,
    with a warning when a call's audio tokens are priced so). ``per_request`` is a fee in
    USD charged once per request the provider bills, besides its tokens (Perplexity's
    ``sonar``: $0.012, genai-prices' ``requests_kcount`` of $12 per thousand requests;
    default ``None``: no fee, and ``PriceTable.with_prices`` keeps the fee of the model's
    price below); a batch discount (:meth:`scaled`) leaves it whole. ``web_search`` is the
    fee in USD per web search the provider runs for a call (``Usage.web_search_requests``;
    Anthropic's and OpenAI's $10 per thousand, genai-prices' ``web_searches_kcount``; default
    ``None``: the fee of :mod:`._tool_fees`, never $0, and ``PriceTable.with_prices`` keeps
    the fee of the model's price below); a batch discount leaves it whole too.
    ``file_search`` (USD per file search, ``Usage.file_search_calls``; OpenAI's $2.50 per
    thousand, genai-prices' ``storage_searches_kcount``) and ``code_execution`` (USD per code
    execution session, ``Usage.code_executions``; OpenAI's $0.03 per Code Interpreter
    container, Claude's 5-minute minimum at $0.05 per container-hour) are alike.

    .. versionchanged:: 0.2.0 ``cache_write_1h``, ``cache_write_12h``, ``reasoning``,
       ``tier``, ``long_context``, ``input_audio``, ``output_audio``, ``per_request``,
       ``web_search``, ``file_search`` and ``code_execution``.
    """

    input: float
    output: float
    cached_input: float | None = None
    cache_write: float | None = None
    effective_from: dt.date = _EPOCH
    cache_write_1h: float | None = None
    reasoning: float | None = None
    tier: str | None = None
    long_context: tuple[tuple[int, Price], ...] = ()
    deprecated_on: dt.date | None = None
    retires_on: dt.date | None = None
    cache_write_12h: float | None = None
    input_audio: float | None = None
    output_audio: float | None = None
    per_request: float | None = None
    web_search: float | None = None
    file_search: float | None = None
    code_execution: float | None = None

    def __post_init__(self) -> None:
        for name in (*_RATES, *_FEES):
            value = getattr(self, name)
            if value is None and name not in ("input", "output"):
                continue
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not 0 <= value < math.inf
            ):
                raise ConfigurationError(f"price {name} must be a number >= 0, got {value!r}")
        for day in (self.effective_from, self.deprecated_on or _EPOCH, self.retires_on or _EPOCH):
            if not isinstance(day, dt.date):
                raise ConfigurationError("effective_from, deprecated_on, retires_on are dates")
        if self.tier is not None and self.tier not in TIERS:
            raise ConfigurationError(f"tier must be one of {TIERS} or None, got {self.tier!r}")
        steps = tuple(self.long_context)
        if not all(
            isinstance(step, tuple)
            and len(step) == 2
            and isinstance(step[0], int)
            and step[0] >= 0
            and isinstance(step[1], Price)
            for step in steps
        ):
            raise ConfigurationError("long_context holds (threshold, Price) pairs")
        for name in _FEES:  # a long-context tier without a fee of its own pays this one
            fee = getattr(self, name)
            if fee is not None:
                steps = tuple((at, _with_fee(p, name, fee)) for at, p in steps)
        object.__setattr__(self, "long_context", tuple(sorted(steps, key=lambda s: s[0])))
        # the rates that default to others, and the dearest input and output rates: read by
        # every call's worst case and cost (attributes, not fields; a Price never changes)
        write = self.input if self.cache_write is None else self.cache_write
        rates = (
            self.input if self.cached_input is None else self.cached_input,
            write,
            write if self.cache_write_1h is None else self.cache_write_1h,
            self.output if self.reasoning is None else self.reasoning,
            write if self.cache_write_12h is None else self.cache_write_12h,
            self.input if self.input_audio is None else self.input_audio,
            self.output if self.output_audio is None else self.output_audio,
        )
        object.__setattr__(self, "_rates", rates)
        object.__setattr__(self, "_input_max", max(self.input, rates[1], rates[2], rates[4]))
        object.__setattr__(self, "_output_max", max(self.output, rates[3]))
        object.__setattr__(self, "_fee", self.per_request or 0.0)
        tools = tuple(
            tool.default if getattr(self, tool.fee) is None else getattr(self, tool.fee)
            for tool in TOOLS
        )
        object.__setattr__(self, "_tools", tools)

    # cached, write, write_1h, reasoning, write_12h, input audio, output audio
    _rates: ClassVar[tuple[float, float, float, float, float, float, float]]
    _input_max: ClassVar[float]
    _output_max: ClassVar[float]
    _fee: ClassVar[float]  # per_request, 0.0 for none
    _tools: ClassVar[tuple[float, ...]]  # per _tool_fees.TOOLS: its fee, else its default

    @property
    def search_fee(self) -> float:
        """USD per web search the provider runs for a call (``web_search``, else the
        default fee of :mod:`._tool_fees`)."""
        return self._tools[0]

    @property
    def tool_fees(self) -> tuple[float, ...]:
        """USD per use of each server-side tool of :data:`._tool_fees.TOOLS` (web search,
        file search, code execution): its fee, else the tool's default."""
        return self._tools

    @property
    def cached_rate(self) -> float:
        """Price of a cached input token read (per million)."""
        return self._rates[0]

    @property
    def write_rate(self) -> float:
        """Price of an input token written to the prompt cache (per million)."""
        return self._rates[1]

    @property
    def write_1h_rate(self) -> float:
        """Price of an input token written to the prompt cache for an hour (per million)."""
        return self._rates[2]

    @property
    def write_12h_rate(self) -> float:
        """Price of an input token written to the prompt cache for 12 hours (per million)."""
        return self._rates[4]

    @property
    def reasoning_rate(self) -> float:
        """Price of a reasoning output token (per million)."""
        return self._rates[3]

    @property
    def audio_rates(self) -> tuple[float, float]:
        """Prices of an input and of an output token that carry audio (per million)."""
        return self._rates[5], self._rates[6]

    def for_input(self, input_tokens: float) -> Price:
        """The price a call of ``input_tokens`` input tokens pays (its long-context tier)."""
        found = self
        for threshold, price in self.long_context:
            if input_tokens > threshold:
                found = price
        return found

    def scaled(self, factor: float, *, tier: str | None = None) -> Price:
        """Every rate times ``factor`` (a batch discount), long-context tiers included; the
        per-request fee stays whole."""
        rates: dict[str, Any] = {
            name: None if getattr(self, name) is None else getattr(self, name) * factor
            for name in _RATES
        }
        steps = tuple((t, p.scaled(factor, tier=tier)) for t, p in self.long_context)
        return dataclasses.replace(self, **rates, tier=tier, long_context=steps)

    def cost(self, usage: Usage) -> float:
        """The USD cost of ``usage`` (one request) at this price: cached reads, cache writes
        by retention (5 or 30 minutes, 1 hour, 12 hours), reasoning output and audio input and
        output at their own rates, the long-context tier of its input, the per-request
        fee and the fee of each use of a server-side tool (web and file searches, code
        execution sessions). Audio input is counted among
        the input read neither from nor into the cache (where a provider cached audio, its
        cached tokens pay the cached rate and the rest of the audio its audio rate)."""
        price = self.for_input(usage.input_tokens)
        cached = min(usage.cached_input_tokens, usage.input_tokens)
        written = min(usage.cache_write_input_tokens, usage.input_tokens - cached)
        hour = min(usage.cache_write_1h_input_tokens, written)
        half_day = min(usage.cache_write_12h_input_tokens, written - hour)
        plain = usage.input_tokens - cached - written
        reasoning = min(usage.reasoning_tokens, usage.output_tokens)
        heard = min(usage.audio_input_tokens, plain)
        spoken = min(usage.audio_output_tokens, usage.output_tokens - reasoning)
        cached_rate, write_rate, write_1h_rate, reasoning_rate, write_12h_rate = price._rates[:5]
        if half_day and price.cache_write_12h is None:  # (genai-prices lists none for OpenAI)
            log_repeated(logger, logging.WARNING, "prices:12h", _NO_12H, half_day)
        if heard or spoken:
            price._audio_unpriced(heard, spoken)
        fee = price._fee
        for tool, per_use in zip(TOOLS, price._tools, strict=True):
            uses = getattr(usage, tool.uses)
            if uses:  # (a call without server tools adds nothing)
                fee += uses * per_use
        return (
            fee
            + (
                (plain - heard) * price.input
                + heard * price._rates[5]
                + cached * cached_rate
                + (written - hour - half_day) * write_rate
                + hour * write_1h_rate
                + half_day * write_12h_rate
                + (usage.output_tokens - reasoning - spoken) * price.output
                + spoken * price._rates[6]
                + reasoning * reasoning_rate
            )
            / _MILLION
        )

    def _audio_unpriced(self, heard: int, spoken: int) -> None:
        """Warn (once, then counted) of audio tokens priced at the text rate: this price has
        no audio rate of their direction (genai-prices lists none for some audio models)."""
        for count, rate, name in (
            (heard, self.input_audio, "input_audio"),
            (spoken, self.output_audio, "output_audio"),
        ):
            if count and rate is None:
                key = f"prices:{name}"
                direction = "input" if name == "input_audio" else "output"
                log_repeated(logger, logging.WARNING, key, _NO_AUDIO, count, direction, name)

    def worst_case(
        self, input_tokens: float, output_tokens: float, audio_tokens: float = 0.0
    ) -> float:
        """The most a call of this many tokens can cost: no input counted as cached, every
        input token written to the cache at the dearest rate, ``audio_tokens`` of them (input
        audio) at the dearer of that and the input audio rate, every output token at the
        dearer of the output and reasoning rates, in the call's long-context tier, and the
        per-request fee."""
        price = self.for_input(input_tokens)
        text = input_tokens - audio_tokens
        heard = audio_tokens * max(price._input_max, price._rates[5])
        return (
            price._fee
            + (text * price._input_max + heard + output_tokens * price._output_max) / _MILLION
        )

    @property
    def output_max(self) -> float:
        """The dearer of the output and reasoning rates (per million)."""
        return self._output_max


def _with_fee(price: Price, name: str, fee: float) -> Price:
    """``price`` with the fee ``name`` (``per_request``, ``web_search`` ...) where it has
    none."""
    if getattr(price, name) is not None:
        return price
    fees: dict[str, Any] = {name: fee}
    return dataclasses.replace(price, **fees)


@dataclass(frozen=True)
class Cost:
    """A call's cost in USD and where it came from (``"reported"``, ``"estimated"``, or
    ``"cached"``: an answer from the response cache, free)."""

    usd: float
    source: Literal["reported", "estimated", "cached"]
