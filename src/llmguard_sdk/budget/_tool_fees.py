"""Fees for the tools a provider runs on its side (web search), billed per use besides the
tokens, where the price table lists none.

A model's :class:`~llmguard_sdk.budget.Price` carries its fee per web search
(``web_search``): genai-prices' ``web_searches_kcount`` (per thousand searches) where it has
one (Anthropic's models, OpenAI's, Google's, Perplexity's), else the user's price. A model
priced without one pays :data:`WEB_SEARCH` per search (never $0), and OpenAI's chat search
models (which search on every request and which genai-prices prices by token only) their
own fee (:data:`SEARCH_MODELS`).

Sources (the providers' price pages; re-check them when a fee changes):

* Anthropic, web search tool: "$10 per 1,000 searches", besides the tokens
  (https://docs.claude.com/en/docs/agents-and-tools/tool-use/web-search-tool, Pricing);
  web fetch: no charge beyond its tokens, so it is not counted here.
* OpenAI, built-in tools: "Web search (all models): $10.00 / 1k calls"; "Web search preview
  (non-reasoning models): $25.00 / 1k calls" (https://platform.openai.com/docs/pricing,
  Built-in tools), the rate of ``gpt-4o-search-preview`` and ``gpt-4o-mini-search-preview``
  in chat completions, which search once per request.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..models import ChatRequest, Usage

__all__ = [
    "HELD_SEARCHES",
    "SEARCH_MODELS",
    "WEB_SEARCH",
    "allowed_searches",
    "held_searches",
    "model_search_fee",
    "search_model",
    "with_model_search",
]

WEB_SEARCH = 0.010
"""USD per web search of a model whose price lists no fee: Anthropic's and OpenAI's
$10 per 1,000 searches."""

SEARCH_MODELS = re.compile(r"(?:^|/)gpt-4o(?:-mini)?-search-preview(?:-\d{4}-\d{2}-\d{2})?$")
"""OpenAI's chat search models: each request is one web search, at $25 per 1,000 calls."""

_SEARCH_MODEL_FEE = 0.025

HELD_SEARCHES = 10
"""The searches a budget holds for a call that lets the provider search the web and sets no
``max_uses`` (Anthropic's cap on a call's searches): the provider decides how many it runs,
and a call of more is charged its real count when it settles."""


def search_model(model: str) -> bool:
    """Whether ``model`` is one of OpenAI's chat search models (one search per request)."""
    return SEARCH_MODELS.search(model.lower()) is not None


def model_search_fee(model: str) -> float | None:
    """Our own fee per search of ``model`` where genai-prices lists none (``None``: no own
    fee)."""
    return _SEARCH_MODEL_FEE if search_model(model) else None


def allowed_searches(request: ChatRequest) -> int:
    """The web searches a budget holds for ``request``: each web search tool's ``max_uses``
    (Claude's ``web_search_20250305``...; OpenAI's Responses ``web_search``,
    ``web_search_preview``), :data:`HELD_SEARCHES` for one without, and one for chat's
    ``web_search_options`` (a search model's one search); 0 for a request without them (two
    reads)."""
    tools, extra = request.tools, request.extra_body
    if tools is None and extra is None:
        return 0
    count = 0
    for tool in tools or ():
        kind = tool.get("type")
        if isinstance(kind, str) and kind.startswith("web_search"):
            most = tool.get("max_uses")
            usable = isinstance(most, int) and not isinstance(most, bool) and most > 0
            count += most if usable and isinstance(most, int) else HELD_SEARCHES
    if extra is not None and "web_search_options" in extra:
        count = max(count, 1)
    return count


def held_searches(allowed: int, model: str) -> int:
    """The searches held for a call that ``allowed`` (:func:`allowed_searches`) on
    ``model``: at least one on a chat search model (it searches on every request)."""
    if "search" in model and search_model(model):
        return max(allowed, 1)
    return allowed


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
