"""Anthropic's ``POST /v1/messages/count_tokens`` (``client.messages.count_tokens(...)``): the
Guard's own count of the request's input tokens, no provider asked.

The request is read as a Messages request is (:class:`~._messages.MessagesWire`) and prepared
as the call would be (validated, through the input filters, its routes chosen: a release's, a
group's ranking, a task's tier), so a request the call would refuse gets the same error (a
request without a model where a route names none: 400). Its tokens are then counted as the
route the call would go to first counts them (the first route of its chain whose known context
holds it and whose breaker is not open, see below): a local model with its own tokenizer,
another with its model's tiktoken encoding. Claude's tokenizer is not public: for an Anthropic
model, as for any model whose encoding is not at hand offline, the count is the Guard's
estimate (``cl100k_base``), the one its rate limits and budgets reserve by. The answer is
``{"input_tokens": N}``, with the route in ``x-llmguard-route``, ``x-llmguard-estimated: true``
or ``false`` and the counting method (``cl100k_base``, ``chars/4``, a route's tokenizer) in
``x-llmguard-count-method``. The Guard's ``max_input_tokens`` does not refuse a count: counting
is how a caller learns whether its input fits. A route whose breaker is open (or isolated), as
this process last saw it, is skipped as the call would skip it. A count is free, as Anthropic's
is: it takes nothing from a rate limit or a budget, and reads neither (a rate limit's wait or a
budget's downgrade may still move the call itself to another route).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from .._core import filters
from .._core.calls import call_contexts
from .._core.limits import route_input_tokens
from .._core.routes import call_routes, too_small_for
from . import _wire
from ._messages import MessagesWire
from ._wire import Answer, Incoming

if TYPE_CHECKING:
    from .._core.stages import Stages
    from ..context import CallContext
    from ..guard import Guard
    from ..providers.base import Provider

PATH = "/messages/count_tokens"


def asked(incoming: Incoming) -> bool:
    """Whether ``incoming`` asks for a token count."""
    return incoming.method == "POST" and incoming.path.rstrip("/").endswith(PATH)


def count_tokens(guard: Guard, incoming: Incoming) -> Answer:
    """The answer to a ``count_tokens`` request (an async input filter's wait in a worker
    thread)."""
    return filters.run(_counting(guard, incoming))


async def acount_tokens(guard: Guard, incoming: Incoming) -> Answer:
    """Async twin of :func:`count_tokens` (an async input filter awaited on the loop)."""
    return await filters.arun(_counting(guard, incoming))


def _counting(guard: Guard, incoming: Incoming) -> filters.Plan[Answer]:
    arguments: dict[str, Any] = MessagesWire().arguments(_wire.load_object(incoming.body), incoming)
    stages = dataclasses.replace(guard._stages, max_input_tokens=None)  # counted, not refused
    messages = arguments.pop("messages")
    ctx = yield from call_contexts(stages, messages, arguments, stream=False, reported=False)
    route = _counted_route(ctx, stages)
    count = route_input_tokens(ctx, route)
    headers = [
        ("content-type", "application/json"),
        ("x-llmguard-route", route.name),
        ("x-llmguard-estimated", "true" if count.estimated else "false"),
        ("x-llmguard-count-method", count.method),
    ]
    return Answer(200, headers, _wire.dumps({"input_tokens": count.tokens}))


def _counted_route(ctx: CallContext, stages: Stages) -> Provider:
    """The route the call would go to first: the first of its chain whose known context
    holds the request and whose breaker this process last saw neither open nor isolated (no
    store read: a count is free); else the first that holds it, else the chain's first."""
    ranked = call_routes(ctx, stages)
    fits = [route for route in ranked if not too_small_for(ctx, route, continued=False)]
    breakers = stages.breakers
    closed = [
        route
        for route in fits
        if breakers is None or breakers.last_seen(route.name) not in ("open", "isolated")
    ]
    return (closed or fits or list(ranked))[0]
