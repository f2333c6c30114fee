"""A Responses API request (``POST /v1/responses``) read as a server reads it: its
``instructions`` and ``input`` items as chat messages, its parameters as chat-completions
``create()`` keywords. What no chat route can serve is a :class:`RequestValidationError` (a
400) naming it, never a silent drop; parameters chat has too go on under their names, those
only the Responses API has that a Responses route serves (``store``, ``truncation``,
``reasoning`` whole, ``include``'s ``reasoning.encrypted_content``) go to Responses routes
only, and what changes nothing through the Guard (``max_tool_calls`` ..., the ``include``
values for items no answer through the Guard has: built-in tools' results and outputs, input
image URLs) is left out, never sent to a route whose API would refuse it as unknown.

Used by the Guard's transport and by the fake provider; :mod:`._responses_wire` writes the
answers.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ..errors import RequestValidationError
from ._responses_reasoning import ENCRYPTED, made_by_the_guard

# Parameters with the same name and meaning in chat completions (``prompt_cache_key``,
# ``prompt_cache_retention``, ``safety_identifier``, ``service_tier``, ``moderation`` and any
# other the request names go on as they are: see chat_arguments).
_SAME = ("temperature", "top_p", "metadata", "user", "parallel_tool_calls", "seed")
# Responses-only parameters that change nothing through the Guard, left out (a chat route's
# API refuses them as unknown): ``stream_options`` (its ``include_obfuscation``: the Guard's
# events carry no obfuscation), ``background`` false and ``background_options`` (a
# background response is a 400), ``max_tool_calls`` (it counts calls of built-in tools, and
# only function tools go through), ``context_management`` (compaction: the input is sent
# whole, no compaction item comes back), ``image`` (image context compression, an
# optimisation) and ``access_programs`` (the route resolves the program, as OpenAI does when
# it is not given).
_DROPPED = frozenset(
    {
        "stream_options",
        "background",
        "background_options",
        "max_tool_calls",
        "context_management",
        "image",
        "access_programs",
    }
)
# ``include`` values for output no chat route's answer has (items of built-in tools, which
# are a 400; input images, which the Guard does not store): asking changes nothing
_INCLUDE_NOTHING = frozenset(
    {
        "file_search_call.results",
        "web_search_call.results",
        "web_search_call.action.sources",
        "message.input_image.image_url",
        "computer_call_output.output.image_url",
        "code_interpreter_call.outputs",
    }
)
_INCLUDE_LOGPROBS = "message.output_text.logprobs"  # asked of a chat route as logprobs: true
# asked of Responses routes only (a chat route's reasoning is text, never encrypted)
_INCLUDE_RESPONSES = (ENCRYPTED,)
# asked of Responses routes as the caller asked them (chat and Anthropic routes have none of
# them: a chat route is sent reasoning's effort as reasoning_effort, and stores nothing
# unless asked; an input too long for it is its own overflow error, truncation or not)
_ROUTED = ("store", "truncation")
RESPONSES_ONLY = ("include", "reasoning", *_ROUTED)
"""The keywords of :func:`chat_arguments` that only Responses routes may be sent (the seam
names them under :data:`~llmguard_sdk.providers.wire.RESPONSES_ONLY_KEY`)."""
_ROLES = frozenset({"system", "developer", "user", "assistant"})
_TEXT_PARTS = frozenset({"input_text", "output_text", "text"})
_CHAT_DETAILS = frozenset({"low", "high"})  # an image's detail chat takes ("auto": its default)
_DETAILS = ("low", "high", "auto", "original")  # an input_image's, in the Responses API


def _bad(message: str) -> RequestValidationError:
    return RequestValidationError(f"responses request: {message}")


def _image(part: Mapping[str, Any]) -> dict[str, Any]:
    """An ``input_image`` as chat's ``image_url`` part: by URL (or data URL) only, as a chat
    route takes an image; one naming an uploaded file (``file_id``) no route can fetch. Its
    ``detail`` goes on (``"auto"``, the default, as none); a value chat has not (``"original"``)
    or no value of the API is a 400 naming it, never dropped."""
    url = part.get("image_url")
    if not isinstance(url, str) or not url:
        if part.get("file_id"):
            raise _bad(
                f"an input_image by file_id ({part['file_id']!r:.60}) cannot be sent to a chat"
                " route, which cannot fetch an uploaded file: send its image_url (a URL or a"
                " data: URL)"
            )
        raise _bad("an input_image needs an image_url")
    image: dict[str, Any] = {"url": url}
    detail = part.get("detail")
    if detail in _CHAT_DETAILS:
        image["detail"] = detail
    elif detail == "original":  # (was dropped: the image went at "auto", maybe low resolution)
        raise _bad(
            "an input_image's detail 'original' cannot be sent: the Guard's requests are"
            " chat's, whose image detail is 'low', 'high' or 'auto' (send 'high')"
        )
    elif detail not in (None, "auto"):
        raise _bad(
            f"an input_image's detail must be one of {', '.join(map(repr, _DETAILS))},"
            f" got {detail!r:.40}"
        )
    return {"type": "image_url", "image_url": image}


def _part(part: object, role: object) -> dict[str, Any]:
    if not isinstance(part, dict):
        raise _bad("a content part must be an object")
    kind = part.get("type")
    if kind in _TEXT_PARTS:
        return {"type": "text", "text": part.get("text", "")}
    if kind == "input_image":
        return _image(part)
    if kind == "refusal" and role == "assistant":  # an earlier answer's, sent back
        return {"type": "text", "text": part.get("refusal") or ""}
    raise _bad(f"content part type {kind!r} is not supported")


def _message(item: dict[str, Any]) -> dict[str, Any]:
    role = item.get("role")
    if role not in _ROLES:
        raise _bad(f"role {role!r} is not supported")
    content = item.get("content")
    if isinstance(content, list):
        parts = [_part(p, role) for p in content]
        if all(p["type"] == "text" for p in parts):
            return {"role": role, "content": "".join(str(p["text"]) for p in parts)}
        return {"role": role, "content": parts}
    if not isinstance(content, str):
        raise _bad("message content must be a string or a list of parts")
    return {"role": role, "content": content}


def _tool_call(item: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": item.get("call_id") or item.get("id"),
        "type": "function",
        "function": {"name": item.get("name"), "arguments": item.get("arguments") or ""},
    }


def _tool_output(output: object) -> str:
    """A ``function_call_output``'s ``output`` as a tool message's text: a string as it is,
    a list of parts as its text parts joined (a chat tool message carries text only: an
    image or a file in it is refused), anything else as its JSON."""
    if isinstance(output, str):
        return output
    if not isinstance(output, list):
        return json.dumps(output)
    texts = []
    for part in output:
        if not isinstance(part, dict) or part.get("type") not in _TEXT_PARTS:
            kind = part.get("type") if isinstance(part, dict) else part
            raise _bad(
                f"a function_call_output part of type {kind!r:.40} cannot be sent to a chat route:"
                " a tool's output there is text only"
            )
        texts.append(str(part.get("text", "")))
    return "".join(texts)


def chat_messages(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The request's ``instructions`` and ``input`` as chat messages."""
    messages: list[dict[str, Any]] = []
    instructions = body.get("instructions")
    if isinstance(instructions, str) and instructions:
        messages.append({"role": "system", "content": instructions})
    items = body.get("input")
    if isinstance(items, str):
        return [*messages, {"role": "user", "content": items}]
    if not isinstance(items, list):
        raise _bad("input must be a string or a list of items")
    return _item_messages(items, messages)


def _item_messages(items: list[object], messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``input``'s items as chat messages after ``messages``: a function call joins the
    assistant message of the calls before it (chat wants a turn's calls in one message, its
    tool messages after it).

    A ``reasoning`` item sent back (a model's earlier thoughts) has no place in chat: a
    route's own (its id a provider's) rides on the next assistant message's ``thinking``,
    which only Responses routes send, in its place before the message and its calls; the
    Guard's own (made of a route's reasoning text, see
    :func:`~._responses_reasoning.made_by_the_guard`) no route could find, and is left out, as is
    one that no assistant item follows."""
    thoughts: list[dict[str, Any]] = []  # reasoning items, for the next assistant message
    for item in items:
        if not isinstance(item, dict):
            raise _bad("each input item must be an object")
        kind = item.get("type", "message")
        if kind == "reasoning":
            if not made_by_the_guard(item.get("id")):
                thoughts.append(item)
            continue
        last = messages[-1] if messages else None
        if kind == "message":
            message = _message(item)
        elif kind == "function_call":
            if last is not None and last["role"] == "assistant" and last.get("tool_calls"):
                last["tool_calls"].append(_tool_call(item))
                if thoughts:
                    last["thinking"] = [*last.get("thinking", ()), *thoughts]
                thoughts = []
                continue
            message = {"role": "assistant", "tool_calls": [_tool_call(item)]}
        elif kind == "function_call_output":
            text = _tool_output(item.get("output"))
            message = {"role": "tool", "tool_call_id": item.get("call_id"), "content": text}
        else:
            raise _bad(f"input item type {kind!r} is not supported")
        if thoughts and message["role"] == "assistant":
            message["thinking"] = thoughts
        thoughts = []
        messages.append(message)
    return messages


def _chat_tool(tool: object) -> dict[str, Any]:
    if not isinstance(tool, dict) or tool.get("type") != "function":
        kind = tool.get("type") if isinstance(tool, dict) else tool
        raise _bad(f"only function tools are supported, not {kind!r}")
    # null is absent (openai's types let description, parameters and strict be None)
    return {
        "type": "function",
        "function": _given(tool, "name", "description", "parameters", "strict"),
    }


def _given(source: Mapping[str, Any], *keys: str) -> dict[str, Any]:
    """``source``'s ``keys`` that have a value (not null)."""
    return {k: source[k] for k in keys if source.get(k) is not None}


def _tool_choice(choice: object) -> object:
    if isinstance(choice, dict) and choice.get("type") == "function":
        return {"type": "function", "function": {"name": choice.get("name")}}
    return choice


def _text(text: object) -> dict[str, Any]:
    """``text``'s chat counterparts: ``response_format`` for its ``format`` (none for plain
    text), ``verbosity`` as it is (a route whose API has none, Anthropic's, drops it)."""
    if not isinstance(text, dict):
        return {}
    params: dict[str, Any] = {}
    if text.get("verbosity") is not None:
        params["verbosity"] = text["verbosity"]
    fmt = text.get("format")
    if not isinstance(fmt, dict) or fmt.get("type") in (None, "text"):
        return params
    if fmt.get("type") == "json_schema":
        schema = _given(fmt, "name", "schema", "strict", "description")
        return {**params, "response_format": {"type": "json_schema", "json_schema": schema}}
    return {**params, "response_format": {"type": str(fmt.get("type"))}}


def _include(body: Mapping[str, Any]) -> dict[str, Any]:
    """``include``'s chat counterparts: chat's ``logprobs`` (and ``top_logprobs``, which chat
    takes only beside it) for the text's logprobs, as the Responses API asks for them (without
    that value the answer has none, and ``top_logprobs`` is not passed on); ``include`` of the
    values only a Responses route can serve (``reasoning.encrypted_content``), a keyword only
    Responses routes are sent (:data:`RESPONSES_ONLY`). Values for output no answer through
    the Guard has are left out; a value of no known meaning is a 400."""
    include = body.get("include")
    if include is None:
        return {}
    if not isinstance(include, list):
        raise _bad("include must be a list")
    params: dict[str, Any] = {}
    for value in include:
        if value not in _INCLUDE_NOTHING | {_INCLUDE_LOGPROBS, *_INCLUDE_RESPONSES}:
            raise _bad(f"include value {value!r:.80} is not one the Guard can serve")
    if _INCLUDE_LOGPROBS in include:
        top = body.get("top_logprobs")
        params.update(logprobs=True, **({"top_logprobs": top} if top is not None else {}))
    routed = [value for value in _INCLUDE_RESPONSES if value in include]
    return {**params, "include": routed} if routed else params


def _prompt_cache(options: object) -> dict[str, Any]:
    """``prompt_cache_options`` as chat takes it (its ``mode`` and ``ttl``; the diagnostics'
    ``comparison_response_id`` is left out); a ``prewarm``, which answers no output, a 400."""
    if options is None:
        return {}
    if not isinstance(options, dict):
        raise _bad("prompt_cache_options must be an object")
    if options.get("prewarm"):
        raise _bad(
            "prompt_cache_options.prewarm asks for no output, and the Guard answers every"
            " request: warm the cache with a request of the prompt"
        )
    kept = {k: options[k] for k in ("mode", "ttl") if k in options}
    return {"prompt_cache_options": kept} if kept else {}


def _refuse_state(body: Mapping[str, Any]) -> None:
    """A request that needs what the Guard does not keep (earlier responses, conversations)
    or do (background responses): a 400 naming the parameter."""
    if body.get("previous_response_id"):
        raise _bad("previous_response_id needs state the Guard does not keep: send the input")
    if body.get("conversation"):
        raise _bad(
            "conversation needs state the Guard does not keep: send the conversation's items"
            " as the input"
        )
    if body.get("background"):
        raise _bad("background responses are not supported: send background false")
    if body.get("prompt"):
        raise _bad(
            "prompt (a stored prompt template, by id) is not supported: no route the Guard"
            " sends messages to has the stored prompt; send its text as instructions and input"
        )


def chat_arguments(body: Mapping[str, Any]) -> dict[str, Any]:
    """A Responses request as chat-completions ``create()`` keywords."""
    _refuse_state(body)
    known = {
        "model",
        "input",
        "instructions",
        "max_output_tokens",
        "tools",
        "tool_choice",
        "text",
        "reasoning",
        "stream",
        "top_logprobs",
        "include",
        "prompt_cache_options",
        "conversation",
        "previous_response_id",
        "prompt",
        *_SAME,
        *_ROUTED,
        *_DROPPED,
    }
    params: dict[str, Any] = {k: body[k] for k in (*_SAME, *_ROUTED) if body.get(k) is not None}
    params["messages"] = chat_messages(body)
    params["model"] = body.get("model")
    if body.get("max_output_tokens") is not None:
        params["max_completion_tokens"] = body["max_output_tokens"]
    if body.get("tools"):
        if not isinstance(body["tools"], list):
            raise _bad("tools must be a list")
        params["tools"] = [_chat_tool(t) for t in body["tools"]]
    if body.get("tool_choice") is not None:
        params["tool_choice"] = _tool_choice(body["tool_choice"])
    params.update(_text(body.get("text")))
    params.update(_include(body))
    params.update(_prompt_cache(body.get("prompt_cache_options")))
    reasoning = body.get("reasoning")
    if isinstance(reasoning, dict) and reasoning:  # whole, to Responses routes (its summary)
        params["reasoning"] = dict(reasoning)
        if reasoning.get("effort"):  # a chat route's counterpart
            params["reasoning_effort"] = reasoning["effort"]
    params.update({k: v for k, v in body.items() if k not in known})
    return params
