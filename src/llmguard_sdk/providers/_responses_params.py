"""Chat completions' parameters that OpenAI's Responses API does not have, as a Responses route
treats them: one table, :data:`CHAT_ONLY`, covering every parameter of chat's
``create()`` (openai's ``CompletionCreateParams``) missing from a Responses request
(``ResponseCreateParams``), whether it is a request's own field (``max_tokens``, ``seed``,
``stop``, ``response_format`` ...) or in its ``extra_body``.

Each is one of three things. **Translated**: the API has it under another name
(``max_completion_tokens`` is ``max_output_tokens``, ``reasoning_effort`` is
``reasoning.effort``, ``response_format`` is ``text.format`` ...). **Dropped**: it only shapes
sampling in a way the API cannot (``seed``, ``stop``, the penalties, ``logit_bias``), so it is
left out and a :class:`~llmguard_sdk.errors.DroppedParameterWarning` says so. **Refused**: the
caller depends on what it asks (more than one choice, audio, legacy ``functions``), so the
call is an :class:`~llmguard_sdk.errors.UnsupportedRequestError` before anything is sent, and
a chain moves on to its next route. OpenAI answers any of them sent as they are with a 400
(``Unknown parameter: 'n'.``, ``Unsupported parameter: 'response_format'. In the Responses
API, this parameter has moved to 'text.format'.``), which no other route would get to try.

A vendor's parameter in ``extra_body`` that neither API has (``top_k``, ``min_p`` ...: sent
for a vLLM or Claude route of the same chain) is **dropped** as well (:func:`foreign`), not
refused: it shapes sampling like those dropped above, and refusing it would skip the
Responses route on every call of a chain that sends it for another route. A caller whose
Responses route takes it (a server of the API that takes more than OpenAI's) names it in
``metadata[RESPONSES_ONLY_KEY]``, and it is sent as given.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..models import ChatRequest
from ._responses_reasoning import included
from .wire import RESPONSES_ONLY_KEY, named_keys, sent_extra_body

RESPONSES_PARAMETERS = frozenset(
    {
        "access_programs",
        "background",
        "background_options",
        "context_management",
        "conversation",
        "image",
        "include",
        "input",
        "instructions",
        "max_output_tokens",
        "max_tool_calls",
        "metadata",
        "model",
        "moderation",
        "parallel_tool_calls",
        "previous_response_id",
        "prompt",
        "prompt_cache_key",
        "prompt_cache_options",
        "prompt_cache_retention",
        "reasoning",
        "safety_identifier",
        "service_tier",
        "store",
        "stream",
        "stream_options",
        "temperature",
        "text",
        "tool_choice",
        "tools",
        "top_logprobs",
        "top_p",
        "truncation",
        "user",
    }
)
"""The parameters of a Responses request (openai's ``ResponseCreateParams``): OpenAI refuses
any other with a 400 (``Unknown parameter``), as the fake does."""
_TEXT_LOGPROBS = "message.output_text.logprobs"
# a request's own fields that CHAT_ONLY names (the rest of its fields the API has as they are)
_FIELDS = frozenset({"max_tokens", "max_completion_tokens", "seed", "stop", "response_format"})


def _as_given(value: Any, stream: bool) -> Any:
    return value


def _text_format(value: Any, stream: bool) -> Any:
    """Chat's ``response_format`` as the Responses API's ``text.format``: a ``json_schema``'s
    ``name``, ``schema`` and ``strict`` beside its ``type``, not nested."""
    if not isinstance(value, Mapping):
        return None
    schema = value.get("json_schema")
    return {"type": value.get("type"), **(schema if isinstance(schema, Mapping) else {})}


def _logprobs(value: Any, stream: bool) -> Any:
    """Chat's ``logprobs: true`` as the Responses API asks for the text's logprobs (beside
    ``top_logprobs``, as chat's); ``false`` asks nothing."""
    return _TEXT_LOGPROBS if value is True else None


def _stream_options(value: Any, stream: bool) -> Any:
    """Chat's ``stream_options`` less its ``include_usage`` (a Responses stream always ends
    with its usage); on a stream only, where the API takes it."""
    if not stream or not isinstance(value, Mapping):
        return None
    return {k: v for k, v in value.items() if k != "include_usage"} or None


@dataclass(frozen=True)
class _Rule:
    """What a Responses route does with one of chat's parameters its API lacks."""

    to: str | None = None  # where the API has it (a dotted path in the request's body)
    convert: Callable[[Any, bool], Any] = _as_given  # (value, stream) -> sent, None: nothing
    dropped: str | None = None  # what the answer lacks without it (not sent, a warning)
    refused: str | None = None  # why the route cannot serve it ({value}: the value asked)
    served: Callable[[Any], bool] = field(default=lambda value: False)  # a value asking nothing


CHAT_ONLY: dict[str, _Rule] = {  # (an output limit: max_completion_tokens first, as chat's)
    "max_completion_tokens": _Rule(to="max_output_tokens"),
    "max_tokens": _Rule(to="max_output_tokens"),
    "reasoning_effort": _Rule(to="reasoning.effort"),
    "verbosity": _Rule(to="text.verbosity"),
    "response_format": _Rule(to="text.format", convert=_text_format),
    "logprobs": _Rule(to="include", convert=_logprobs),
    "stream_options": _Rule(to="stream_options", convert=_stream_options),
    "seed": _Rule(dropped="the answer is not seeded"),
    "stop": _Rule(dropped="the answer is not cut at the stop sequences"),
    "frequency_penalty": _Rule(dropped="repeated tokens are not penalised"),
    "presence_penalty": _Rule(dropped="tokens already in the text are not penalised"),
    "logit_bias": _Rule(dropped="no token's odds are biased"),
    "prediction": _Rule(dropped="the answer is not sped up by the predicted output"),
    "n": _Rule(refused="it gives one answer per call, not n={value}", served=lambda v: v == 1),
    "functions": _Rule(refused="it has no legacy functions: send them as tools"),
    "function_call": _Rule(refused="it has no legacy function_call: send tool_choice"),
    "audio": _Rule(refused="it answers no audio"),
    "modalities": _Rule(
        refused="it answers text only, not modalities={value}", served=lambda v: v == ["text"]
    ),
    "web_search_options": _Rule(
        refused="it searches the web with a web_search tool, not web_search_options"
    ),
}
"""Chat completions' parameters the Responses API lacks: translated (``to``), dropped with a
warning (``dropped``) or refused (``refused``, unless the value asks nothing: ``n`` 1,
``modalities`` text alone)."""


def chat_parameters(request: ChatRequest) -> dict[str, Any]:
    """``request``'s parameters that :data:`CHAT_ONLY` names, given a value: its own fields'
    and its ``extra_body``'s (which win, as a chat route sends them over the fields)."""
    asked = request.model_dump(include=set(_FIELDS), exclude_none=True)
    asked.update(sent_extra_body(request, responses=True))
    return {k: v for k, v in asked.items() if k in CHAT_ONLY and v is not None}


FOREIGN = "not an OpenAI parameter, as a vendor's top_k or min_p: the answer is made without it"
"""What the answer lacks without a vendor's parameter (:func:`foreign`) a Responses route
leaves out."""


def foreign(request: ChatRequest) -> list[str]:
    """``request``'s ``extra_body`` keys that neither OpenAI's Responses API nor chat
    completions has (a vendor's: vLLM's or Anthropic's ``top_k``, ``min_p``,
    ``repetition_penalty`` ...), which OpenAI answers with a 400 (``Unknown parameter``):
    a Responses route leaves them out, as it leaves out chat's sampling-only parameters
    (they shape sampling, or what OpenAI's API cannot do at all), unless the caller names
    them in ``request.metadata[RESPONSES_ONLY_KEY]`` (a server of the Responses API that
    takes more than OpenAI's: sent as given)."""
    extra = sent_extra_body(request, responses=True)
    if not extra:
        return []
    named = set(named_keys(request, RESPONSES_ONLY_KEY))
    known = RESPONSES_PARAMETERS | CHAT_ONLY.keys() | named
    return [key for key in extra if key not in known]


def refusal(asked: Mapping[str, Any]) -> str | None:
    """Why a Responses route cannot serve the chat parameters ``asked``, if it cannot."""
    for key, value in asked.items():
        rule = CHAT_ONLY[key]
        if rule.refused is not None and not rule.served(value):
            said = rule.refused.format(value=f"{value!r:.40}")
            return f"the Responses API has no {key!r} ({said}): let a chat route serve it"
    return None


def dropped(asked: Mapping[str, Any]) -> dict[str, str]:
    """The chat parameters of ``asked`` a Responses route leaves out, with what the answer
    lacks for it."""
    return {key: why for key in asked if (why := CHAT_ONLY[key].dropped) is not None}


def translate(payload: dict[str, Any], asked: Mapping[str, Any], *, stream: bool) -> None:
    """Put the chat parameters of ``asked`` that the Responses API has under another name in
    ``payload`` (a Responses request's body) there; what ``payload`` already sets (the
    caller's Responses parameters: a whole ``reasoning``, ``text`` ...) wins."""
    for key, rule in CHAT_ONLY.items():  # (in the table's order)
        if key not in asked or rule.to is None:
            continue
        value = rule.convert(asked[key], stream)
        if value is not None:
            _place(payload, rule.to, value)


def _place(payload: dict[str, Any], path: str, value: Any) -> None:
    """Set ``path`` (dotted) of ``payload`` to ``value`` unless set; an ``include`` value is
    added to the list. The objects on the way are copies (the caller's are left as given)."""
    *parents, leaf = path.split(".")
    at = payload
    for name in parents:
        inner = at.get(name)
        at[name] = dict(inner) if isinstance(inner, Mapping) else {}
        at = at[name]
    if leaf == "include":
        included(at, value)
    else:
        at.setdefault(leaf, value)
