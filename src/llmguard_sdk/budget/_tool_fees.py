"""Fees for the tools a provider runs on its side (web search, file search, code execution),
billed per use besides the tokens: one table (:data:`TOOLS`) of what a tool's uses are counted
in, what its fee is, which request tools let the provider run it and how many uses a call
holds, read by the price, the cost and the budget's hold alike.

A model's :class:`~llmguard_sdk.budget.Price` carries its fee per use of each tool
(``web_search``, ``file_search``, ``code_execution``): genai-prices' ``web_searches_kcount``,
``storage_searches_kcount`` and ``code_executions_kcount`` (per thousand uses) where it has
one, else the user's price, else our own fee of the model (:func:`with_model_fees`), else the
tool's default (never $0). A request's tools can make a use dearer (:func:`request_fees`:
OpenAI's ``web_search_preview`` on a non-reasoning model).

Sources (the providers' price pages; re-check them when a fee changes):

* Anthropic, web search tool: "$10 per 1,000 searches", besides the tokens (Anthropic's
  pricing page, and its web search tool page, Pricing); web fetch: no charge beyond its
  tokens, so it is not counted here. Code execution tool: "$0.05 per hour per container",
  with "a minimum of 5 minutes" billed per execution (Anthropic's pricing page, and its code
  execution tool page, Usage and pricing): one container's 5 minutes, $0.05 / 12, per answer
  that ran it (its free hours each month are not counted: a budget charges the dearer).
* OpenAI, built-in tools (OpenAI's API pricing page, Built-in tools): "Web search (all
  models): $10.00 / 1k calls"; "Web search preview (reasoning models, including gpt-5,
  o-series): $10.00 / 1k calls"; "Web search preview (non-reasoning models): $25.00 / 1k
  calls", also the rate of ``gpt-4o-search-preview`` and ``gpt-4o-mini-search-preview`` in
  chat completions, which search once per request; "File search tool call: $2.50 / 1k calls"
  (genai-prices' ``storage_searches_kcount``); Code Interpreter: "$0.03" per container (1 GB,
  the default), a container per ``container_id`` an answer's ``code_interpreter_call`` items
  name.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from ..models import ChatRequest, Usage
    from ._price import Price

__all__ = [
    "CODE_EXECUTION",
    "FILE_SEARCH",
    "HELD_SEARCHES",
    "SEARCH_MODELS",
    "TOOLS",
    "WEB_SEARCH",
    "ToolFee",
    "allowed_uses",
    "held_fees",
    "held_uses",
    "request_fees",
    "search_model",
    "with_model_fees",
    "with_model_search",
    "with_request_fees",
]

WEB_SEARCH = 0.010
"""USD per web search of a model whose price lists no fee: Anthropic's and OpenAI's
$10 per 1,000 searches."""

FILE_SEARCH = 0.0025
"""USD per file search of a model whose price lists no fee: OpenAI's $2.50 per 1,000 calls."""

CODE_EXECUTION = 0.03
"""USD per code execution session of a model whose price lists no fee: OpenAI's Code
Interpreter container (1 GB), the dearer of OpenAI's and Anthropic's."""

SEARCH_MODELS = re.compile(r"(?:^|/)gpt-4o(?:-mini)?-search-preview(?:-\d{4}-\d{2}-\d{2})?$")
"""OpenAI's chat search models: each request is one web search, at $25 per 1,000 calls."""

_PREVIEW_FEE = 0.025  # OpenAI: web search preview (non-reasoning models), a search model's
_CLAUDE_CODE_EXECUTION = 0.05 / 12  # Anthropic: $0.05 per container-hour, 5 minutes at least
# OpenAI's reasoning models (o-series, gpt-5 and later, codex; not the "-chat" ones): their
# web search preview costs the web search's $10 per 1,000
_REASONING = re.compile(r"(?:^|/)(?:o\d|gpt-(?:[5-9]|\d\d)|codex)(?!.*-chat)")

HELD_SEARCHES = 10
"""The uses a budget holds for a search tool of a call (web search, file search) that sets no
``max_uses`` (Anthropic's cap on a call's searches): the provider decides how many it runs,
and a call of more is charged its real count when it settles."""


class ToolFee(NamedTuple):
    """A server-side tool billed per use: the :class:`~llmguard_sdk.models.Usage` field that
    counts its uses, the :class:`~llmguard_sdk.budget.Price` field of its fee, its default fee
    (USD per use), the prefixes of the request tool types that let the provider run it, and
    the uses held for such a tool without ``max_uses``."""

    uses: str
    fee: str
    default: float
    types: tuple[str, ...]
    held: int


TOOLS = (
    ToolFee("web_search_requests", "web_search", WEB_SEARCH, ("web_search",), HELD_SEARCHES),
    ToolFee("file_search_calls", "file_search", FILE_SEARCH, ("file_search",), HELD_SEARCHES),
    # one container (session) per tool of a request
    ToolFee("code_executions", "code_execution", CODE_EXECUTION, ("code_",), 1),
)
"""The tools priced per use, in the order of :func:`allowed_uses`' counts."""

_OWN: tuple[tuple[str, re.Pattern[str], float, bool], ...] = (
    # genai-prices lists gpt-4o-mini-search-preview under gpt-4o-mini, at the tool's fee
    ("web_search", SEARCH_MODELS, _PREVIEW_FEE, True),
    ("code_execution", re.compile(r"claude"), _CLAUDE_CODE_EXECUTION, False),  # (Bedrock's too)
)
"""Our own fees: (Price field, model pattern, USD per use, whether it wins over
genai-prices' fee)."""


def search_model(model: str) -> bool:
    """Whether ``model`` is one of OpenAI's chat search models (one search per request)."""
    return SEARCH_MODELS.search(model.lower()) is not None


def with_model_fees(price: Price, model: str, *, genai: bool = False) -> Price:
    """``price`` of ``model`` with our own fees (:data:`_OWN`) where it has none (``genai``:
    a price of genai-prices', over its fee too where ours wins); itself for most models."""
    name = model.lower()
    fees: dict[str, Any] = {
        field: fee
        for field, pattern, fee, wins in _OWN
        if (getattr(price, field) is None or (genai and wins)) and pattern.search(name)
    }
    return dataclasses.replace(price, **fees) if fees else price


def request_fees(request: ChatRequest, model: str) -> dict[str, float]:
    """The fees per use that ``request``'s tools set on ``model``, by
    :class:`~llmguard_sdk.budget.Price` field (a use costs the dearer of this and the
    price's): OpenAI's ``web_search_preview`` on a non-reasoning model, $25 per 1,000 calls
    (an answer's ``web_search_call`` items do not say which tool ran them)."""
    preview = ("web_search_preview", "web_search_preview_2025_03_11")
    if any(tool.get("type") in preview for tool in request.tools or ()):
        return {} if _REASONING.search(model.lower()) else {"web_search": _PREVIEW_FEE}
    return {}


def with_request_fees(price: Price, request: ChatRequest, model: str) -> Price:
    """``price`` with the dearer fees :func:`request_fees` sets (itself for most)."""
    if request.tools is None:
        return price
    fees: dict[str, Any] = {
        name: fee
        for name, fee in request_fees(request, model).items()
        if fee > price.tool_fees[_FIELDS.index(name)]
    }
    return dataclasses.replace(price, **fees) if fees else price


_FIELDS = tuple(tool.fee for tool in TOOLS)


def allowed_uses(request: ChatRequest) -> tuple[int, ...]:
    """The uses of each of :data:`TOOLS` a budget holds for ``request``: each such tool's
    ``max_uses`` (Claude's ``web_search_20250305``...), the tool's :attr:`ToolFee.held` for
    one without (OpenAI's Responses ``web_search``, ``file_search``, ``code_interpreter``;
    Claude's ``code_execution_...``), at most the Responses ``max_tool_calls`` each, and one
    search for chat's ``web_search_options`` (a search model's one search); empty for a
    request without them (two reads)."""
    tools, extra = request.tools, request.extra_body
    if tools is None and extra is None:
        return ()
    counts = [0] * len(TOOLS)
    for tool in tools or ():
        kind = tool.get("type")
        if not isinstance(kind, str):
            continue
        for place, fee in enumerate(TOOLS):
            if kind.startswith(fee.types):
                most = tool.get("max_uses")
                usable = isinstance(most, int) and not isinstance(most, bool) and most > 0
                counts[place] += most if usable and isinstance(most, int) else fee.held
    if extra is not None and "web_search_options" in extra:
        counts[0] = max(counts[0], 1)
    cap = extra.get("max_tool_calls") if extra is not None else None
    if isinstance(cap, int) and not isinstance(cap, bool) and cap >= 0:
        counts = [min(count, cap) for count in counts]
    return tuple(counts) if any(counts) else ()


def held_uses(allowed: tuple[int, ...], model: str) -> tuple[int, ...]:
    """The uses held for a call that ``allowed`` (:func:`allowed_uses`) on ``model``: at least
    one search on a chat search model (it searches on every request)."""
    if "search" in model and search_model(model):
        counts = list(allowed or (0,) * len(TOOLS))
        counts[0] = max(counts[0], 1)
        return tuple(counts)
    return allowed


def held_fees(held: tuple[int, ...], price: Price, fees: Mapping[str, float]) -> float:
    """USD of the ``held`` uses (:func:`held_uses`) at ``price``'s fees, or the dearer
    ``fees`` of the request (:func:`request_fees`)."""
    return sum(
        count * max(fee, fees.get(name, 0.0))
        for count, fee, name in zip(held, price.tool_fees, _FIELDS, strict=False)
        if count
    )


def with_model_search(usage: Usage | None, model: object) -> Usage | None:
    """``usage`` of an answer of ``model`` counting the search a chat search model runs for
    every request (OpenAI reports none); itself otherwise (a substring test for most)."""
    if (
        usage is None
        or not isinstance(model, str)
        or "search" not in model
        or usage.web_search_requests
        or not search_model(model)
    ):
        return usage
    return usage.model_copy(update={"web_search_requests": 1})
