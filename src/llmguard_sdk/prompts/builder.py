"""Assemble prompts so that providers' prefix caches hit: static first, per-call data last.

Providers and engines (OpenAI, Anthropic, vLLM, llama.cpp) reuse the computed prefix of a
prompt only when it is byte-identical to an earlier one. :class:`PromptBuilder` keeps a
template's sections in a fixed order, from the most static to the most dynamic:

1. instructions (the system prompt),
2. tool definitions, as canonical JSON (sorted keys) in a stable order (sorted by name),
3. few-shot examples,
4. reference documents, in a stable order,
5. the conversation history,
6. per-call context (the current time, the user's account ...) and the user's content, last.

Sections 1-4 are the *static part*: one system message whose text, with the tools, has a
``prefix_hash``. Sections 5-6 are the dynamic tail. :meth:`PromptBuilder.build` gives a
:class:`Prompt`, whose :meth:`Prompt.request` is a :class:`~llmguard_sdk.ChatRequest` for
``guard.chat(request=...)``.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from .._json import canonical_json
from .._problems import problems
from ..context import current_scope
from ..errors import ConfigurationError, PromptLintError, RequestValidationError
from ..errors._base import lint_remedy
from ..models import ChatRequest, Message
from ._order import unordered
from ._static import _Static
from ._tail import history_messages, user_message
from .adapters import (
    CACHE_HISTORY_KEY,
    PREFIX_HASH_KEY,
    STATIC_MESSAGES_KEY,
    TEMPLATE_KEY,
    prompt_cache_key,
)
from .drift import DriftMonitor, default_drift_monitor
from .lint import RULES, LintWarning, lint_text

__all__ = ["Document", "Example", "Prompt", "PromptBuilder", "canonical_json"]

logger = logging.getLogger("llmguard_sdk")

_LINT_MEMORY = 64  # prefixes whose lint results a builder remembers
_LEAK_MEMORY = 1024  # (prefix, per-call values found in it) already logged
# the least prefix OpenAI caches, and most Claude models (Anthropic's docs: 1,024 tokens for
# Sonnet 4.x and Opus 4.1, 2,048 for Haiku 3 and 3.5, 4,096 for Haiku 4.5 and Opus 4.5+)
MIN_CACHE_TOKENS = 1024


@dataclass(frozen=True)
class Example:
    """A few-shot example: what a user asked and what the assistant answered."""

    user: str
    assistant: str


@dataclass(frozen=True)
class Document:
    """A reference document; ``id`` (else ``title``, else the text) fixes its place."""

    text: str
    title: str | None = None
    id: str | None = None

    @property
    def sort_key(self) -> tuple[str, str, str]:
        """Documents are ordered by this key."""
        return (self.id or "", self.title or "", self.text)


@dataclass(frozen=True)
class Prompt:
    """An assembled prompt: the messages (static system message first, the user's content
    last) and tools of one call, with what caches need to know about it.

    ``static_messages`` counts the leading messages that belong to the static part (0 or 1);
    ``prefix_hash`` identifies that part (with the tools); ``cache_key`` is the OpenAI
    ``prompt_cache_key`` for the template and the call's tenant.
    """

    template: str
    messages: tuple[Message, ...]
    tools: tuple[dict[str, Any], ...] | None
    static_messages: int
    history_messages: int
    prefix_hash: str
    static_text: str
    cache_key: str

    def request(
        self,
        *,
        send_cache_key: bool = True,
        cache_history: bool = False,
        **params: Any,
    ) -> ChatRequest:
        """A :class:`~llmguard_sdk.ChatRequest` for ``guard.chat(request=...)``.

        ``params`` are further request fields (``max_tokens=``, ``temperature=`` ...). The
        request's ``metadata`` names the template, its prefix hash and the static part, so
        that :class:`~llmguard_sdk.providers.AnthropicProvider` puts ``cache_control``
        breakpoints after it (and after the history, with ``cache_history=True``); with
        ``send_cache_key`` the ``extra_body`` carries OpenAI's ``prompt_cache_key``, sent to
        the routes whose API takes it (an OpenAICompatibleProvider's ``send_cache_key``:
        OpenAI's and Azure OpenAI's by default, Azure AI Foundry's ``/openai/...`` paths
        among them; AnthropicProvider leaves it out). Raises
        :class:`~llmguard_sdk.errors.RequestValidationError` for bad parameters.
        """
        for field_name in ("metadata", "extra_body"):
            if not isinstance(params.get(field_name) or {}, Mapping):
                raise RequestValidationError(f"invalid prompt request: {field_name} is no object")
        if "messages" in params:  # it replaced the prompt, its static part with it
            raise RequestValidationError(
                "invalid prompt request: messages come from the prompt (its builder's build)"
            )
        tools = params.pop("tools", None)  # (tools=None leaves the builder's)
        if self.tools and tools is not None:
            raise RequestValidationError(
                "invalid prompt request: tools come from the prompt's builder (set_tools)"
            )
        metadata = {
            **(params.pop("metadata", None) or {}),
            TEMPLATE_KEY: self.template,
            PREFIX_HASH_KEY: self.prefix_hash,
            STATIC_MESSAGES_KEY: str(self.static_messages),
        }
        if cache_history and self.history_messages:
            metadata[CACHE_HISTORY_KEY] = str(self.static_messages + self.history_messages)
        from ..providers._wire_request import OPENAI_HINT_KEY

        extra_body = dict(params.pop("extra_body", None) or {})
        if send_cache_key and "prompt_cache_key" not in extra_body:  # (a caller's is theirs)
            extra_body["prompt_cache_key"] = self.cache_key
            metadata[OPENAI_HINT_KEY] = "prompt_cache_key"  # (for routes that take it)
        data: dict[str, Any] = {
            "messages": list(self.messages),
            "tools": [dict(t) for t in self.tools] if self.tools else tools,
            "metadata": metadata,
            "extra_body": extra_body or None,
            **params,
        }
        try:
            return ChatRequest.model_validate(data)
        except ValidationError as exc:
            found = "; ".join(problems(exc, "request"))
            raise RequestValidationError(f"invalid prompt request: {found}") from None

    def openai_params(self) -> dict[str, Any]:
        """Keyword arguments for openai-python's ``chat.completions.create``: ``messages``,
        ``tools`` (when there are any; Anthropic-shaped ones as function tools) and
        ``prompt_cache_key``."""
        from ..providers.wire import function_tool

        params: dict[str, Any] = {
            # a tool result's is_error and an assistant's thinking are Anthropic's: chat
            # completions has no such fields
            "messages": [
                m.model_dump(exclude_none=True, exclude={"is_error", "thinking"})
                for m in self.messages
            ],
            "prompt_cache_key": self.cache_key,
        }
        if self.tools:  # (in chat completions' shape: Anthropic's become function tools)
            params["tools"] = [function_tool(t) for t in self.tools]
        return params

    def anthropic_params(self, *, cache_history: bool = False) -> dict[str, Any]:
        """Keyword arguments for the Anthropic SDK's ``messages.create``: ``system`` blocks,
        ``messages`` and ``tools`` in Anthropic's shape, with ``cache_control`` breakpoints at
        the end of the static part (and of the history, with ``cache_history=True``)."""
        from ..providers.anthropic import anthropic_params

        request = self.request(send_cache_key=False, cache_history=cache_history)
        return anthropic_params(request)


class PromptBuilder:
    """Builds the prompts of one template, static sections first (see the module docs).

    Args:
        name: the template's name: drift is tracked, and cache keys are made, per name and
            tenant (a build's tenant).
        instructions: the system prompt.
        tools: tool definitions (OpenAI's ``{"type": "function", "function": {...}}`` or
            Anthropic's ``{"name": ..., "input_schema": ...}``), stored as canonical JSON and
            sorted by name.
        examples: few-shot examples: :class:`Example` objects, ``(user, assistant)`` pairs or
            ``{"user": ..., "assistant": ...}`` dicts.
        documents: reference documents: :class:`Document` objects, strings, or dicts with
            ``text`` (and ``title`` / ``id``); sorted by id, title, then text.
        strict: raise :class:`~llmguard_sdk.errors.PromptLintError` from :meth:`build` when
            the linter finds cache-breaking text in the static part (otherwise such findings
            are logged once per static prefix, and a call's tenant or user id found in it
            once per prefix and id).
        lint_ignore: lint rules not to apply (see :mod:`llmguard_sdk.prompts.lint`).
        drift: the :class:`DriftMonitor` told about every build (default: the process-wide
            :data:`~llmguard_sdk.prompts.default_drift_monitor`); ``None`` turns drift
            tracking off.
        examples_heading / documents_heading: the line that opens the examples' and the
            documents' section of the system message.
        min_cache_tokens: the least prefix the template's provider caches (default 1,024:
            OpenAI's and most Claude models'; 4,096 for Claude Haiku 4.5 and Opus 4.5+). A
            static part shorter than that (:attr:`static_tokens`) is never read from a prefix
            cache: the first build of each such static part logs a warning (never an error,
            strict or not). ``None`` turns the check off.

    The setters (:meth:`set_instructions` ...) return the builder, so they chain. Building is
    thread-safe; configure the builder before sharing it.
    """

    def __init__(
        self,
        name: str,
        *,
        instructions: str = "",
        tools: Iterable[Mapping[str, Any]] = (),
        examples: Iterable[Example | tuple[str, str] | Mapping[str, str]] = (),
        documents: Iterable[Document | str | Mapping[str, str]] = (),
        strict: bool = False,
        lint_ignore: Iterable[str] = (),
        drift: DriftMonitor | None = default_drift_monitor,
        examples_heading: str = "## Examples",
        documents_heading: str = "## Reference documents",
        min_cache_tokens: int | None = MIN_CACHE_TOKENS,
    ) -> None:
        if not isinstance(name, str) or not name.strip():
            raise ConfigurationError("a prompt template needs a non-empty name")
        _check_settings(strict, drift, min_cache_tokens, examples_heading, documents_heading)
        if not isinstance(lint_ignore, str):
            lint_ignore = _listed(lint_ignore, "lint_ignore")
        self.name = name
        self.strict = strict
        self.lint_ignore = frozenset([lint_ignore] if isinstance(lint_ignore, str) else lint_ignore)
        lint_text("", ignore=self.lint_ignore)  # unknown rule names fail here
        self.drift = drift
        self.min_cache_tokens = min_cache_tokens
        self._lock = threading.Lock()
        self._linted: dict[str, list[LintWarning]] = {}
        self._measured: dict[str, None] = {}  # static prefixes whose length was checked
        self._leaks_logged: dict[tuple[str, ...], None] = {}  # (prefix, values) logged
        self._static = _Static(
            examples_heading=examples_heading, documents_heading=documents_heading
        )
        self.set_instructions(instructions)
        self.set_tools(tools)
        self.set_examples(examples)
        self.set_documents(documents)

    def __repr__(self) -> str:
        return f"PromptBuilder(name={self.name!r}, prefix_hash={self.prefix_hash!r})"

    # -- the static part ---------------------------------------------------------------------

    def _replace(self, **changes: Any) -> PromptBuilder:
        current = self._static
        fields = {
            "instructions": current.instructions,
            "tools": current.tools,
            "examples": current.examples,
            "documents": current.documents,
            "examples_heading": current.examples_heading,
            "documents_heading": current.documents_heading,
            **changes,
        }
        self._static = _Static(**fields)
        return self

    def set_instructions(self, text: str) -> PromptBuilder:
        """Set the instructions (the system prompt)."""
        if not isinstance(text, str):
            raise ConfigurationError("instructions must be a string")
        return self._replace(instructions=text)

    def set_tools(self, tools: Iterable[Mapping[str, Any]]) -> PromptBuilder:
        """Set the tool definitions: canonical JSON, sorted by name; names must be unique."""
        named: dict[str, dict[str, Any]] = {}
        for tool in _listed(tools, "tools"):
            if not isinstance(tool, Mapping):
                raise ConfigurationError(f"each tool must be a JSON object, not {tool!r:.80}")
            canonical = json.loads(canonical_json(dict(tool)))
            name = _tool_name(canonical)
            if name in named:
                raise ConfigurationError(f"two tools are named {name!r}")
            named[name] = canonical
        ordered = tuple(named[k] for k in sorted(named))
        return self._replace(tools=ordered)

    def set_examples(
        self, examples: Iterable[Example | tuple[str, str] | Mapping[str, str]]
    ) -> PromptBuilder:
        """Set the few-shot examples (kept in the order given: a ``set`` has none that lasts
        from process to process and is a :class:`ConfigurationError`, as is an iterator, a
        generator expression or a ``map`` / ``filter`` / ``zip`` over one)."""
        given = _listed(examples, "examples", ordered=True)
        return self._replace(examples=tuple(_example(e) for e in given))

    def set_documents(
        self, documents: Iterable[Document | str | Mapping[str, str]], *, sort: bool = True
    ) -> PromptBuilder:
        """Set the reference documents, sorted by id, title and text unless ``sort=False``
        (a single string is one document, not one per character; a ``set`` is sorted, and
        with ``sort=False`` a :class:`ConfigurationError`, as for examples)."""
        if isinstance(documents, str):
            given: Iterable[Any] = [documents]
        else:
            given = _listed(documents, "documents", ordered=not sort)
        docs = [_document(d) for d in given]
        if sort:
            docs.sort(key=lambda d: d.sort_key)
        return self._replace(documents=tuple(docs))

    @property
    def static_text(self) -> str:
        """The static system message's text (instructions, examples, documents)."""
        return self._static.text

    @property
    def tools(self) -> tuple[dict[str, Any], ...]:
        """The tools, canonical and sorted."""
        return self._static.tools

    @property
    def prefix_hash(self) -> str:
        """A hash of the static part (text and tools): equal hashes, equal prefixes."""
        return self._static.prefix_hash

    @property
    def static_tokens(self) -> int:
        """About how many tokens the static part is (its text and tools), as
        :func:`~llmguard_sdk.tokens.count_text_tokens` counts them: an estimate, since each
        provider has a tokenizer of its own."""
        return self._static.tokens()

    def lint(self, known_values: Iterable[str] = ()) -> list[LintWarning]:
        """What the linter finds in the static part, section by section.

        ``known_values`` are values that differ per user or tenant (the build's tenant and
        user ids are added by :meth:`build`).
        """
        static = self._static
        found: list[LintWarning] = []
        values = [known_values] if isinstance(known_values, str) else list(known_values)
        for section, text in static.lint_sections.items():
            found.extend(
                lint_text(text, section=section, known_values=values, ignore=self.lint_ignore)
            )
        return found

    # -- building ------------------------------------------------------------------------------

    def build(
        self,
        content: str | Sequence[Mapping[str, Any]],
        *,
        history: Iterable[Message | Mapping[str, Any]] = (),
        context: str | Mapping[str, Any] | None = None,
        tenant: str | None = None,
        user: str | None = None,
    ) -> Prompt:
        """Assemble one call's prompt.

        Args:
            content: the user's message (text, or content parts such as images).
            history: earlier turns, oldest first (messages or dicts).
            context: per-call data (the current time, the user's plan ...): a string, or a
                mapping rendered as sorted ``key: value`` lines (a value that is a mapping,
                list or set as canonical JSON); it goes into the last user message, in a
                ``<context>`` block before ``content``, never into the static part. An empty
                one adds nothing. A ``<context>`` or ``</context>`` tag inside it (any case,
                spaces after the ``<``) cannot end the block: its ``<`` is written ``&lt;``.
                Nor can a mapping's multi-line value forge a ``key: value`` line: each line
                break inside an entry is followed by two spaces (a value without one
                renders as it is); a key that could (empty, with a ``:``, a line break or
                spaces at either end) is refused. The user's text gets the same escape of
                those tags, so it cannot forge a block either, and so does the text of the
                history's user, assistant and tool turns (not system or developer ones).
            tenant, user: the call's tenant and user (default: :func:`~llmguard_sdk.scoped`'s);
                the tenant picks the cache key and the drift it is tracked under
                (:class:`DriftMonitor`), and both are checked not to appear in the
                static part.

        Raises :class:`~llmguard_sdk.errors.RequestValidationError` for bad messages or a bad
        context (a value that contains itself, or is nested over 100 levels deep, a key that
        could forge a line), and
        :class:`~llmguard_sdk.errors.PromptLintError` when the builder is strict and the
        static part has cache-breaking text.
        """
        static = self._static
        scope = current_scope()
        tenant = tenant if tenant is not None else scope.tenant
        user = user if user is not None else scope.user
        for name, value in (("tenant", tenant), ("user", user)):
            if value is not None and not isinstance(value, str):
                raise RequestValidationError(f"{name} must be a string, not {value!r:.40}")
        self._check_lint(static, [v for v in (tenant, user) if v])
        self._check_length(static)
        if self.drift is not None:
            self.drift.observe(
                self.name, static.prefix_hash, static.text, static.sections, tenant=tenant
            )
        messages: list[Message] = []
        if static.text:
            messages.append(Message(role="system", content=static.text))
        turns = history_messages(history)
        messages.extend(turns)
        messages.append(user_message(content, context))
        return Prompt(
            template=self.name,
            messages=tuple(messages),
            tools=static.tools or None,
            static_messages=1 if static.text else 0,
            history_messages=len(turns),
            prefix_hash=static.prefix_hash,
            static_text=static.text,
            cache_key=prompt_cache_key(self.name, tenant),
        )

    def _first_leak(self, prefix_hash: str, leaks: list[LintWarning]) -> bool:
        """Whether these per-call values were not yet found in this prefix (each is logged
        once, not at every call of its tenant or user)."""
        mark = (prefix_hash, *sorted({w.text for w in leaks}))
        with self._lock:
            if mark in self._leaks_logged:
                return False
            self._leaks_logged[mark] = None
            while len(self._leaks_logged) > _LEAK_MEMORY:
                del self._leaks_logged[next(iter(self._leaks_logged))]
        return True

    def _check_length(self, static: _Static) -> None:
        """Log, once per static part, one too short for any provider to cache."""
        least = self.min_cache_tokens
        if least is None or not (static.text or static.tools):
            return
        with self._lock:
            if static.prefix_hash in self._measured:
                return
            self._measured[static.prefix_hash] = None
            while len(self._measured) > _LINT_MEMORY:
                del self._measured[next(iter(self._measured))]
        tokens = static.tokens()
        if tokens < least:
            logger.warning(
                "prompt template %r: its static part is about %d tokens, under the %d a "
                "provider caches at the least (min_cache_tokens): no call reads it from a "
                "prefix cache; lengthen it (examples, documents) or pass min_cache_tokens=None",
                self.name,
                tokens,
                least,
            )

    def _check_lint(self, static: _Static, per_call: list[str]) -> None:
        with self._lock:
            found = self._linted.get(static.prefix_hash)
            first = found is None
            if found is None:
                found = self.lint()
                self._linted[static.prefix_hash] = found
                while len(self._linted) > _LINT_MEMORY:
                    del self._linted[next(iter(self._linted))]
        values = [v for v in per_call if len(v.strip()) >= 3]
        leaks: list[LintWarning] = []
        if "per-user" not in self.lint_ignore and any(
            v in text for v in values for text in static.sections.values()
        ):
            others = set(RULES) - {"per-user"}
            leaks = [
                w
                for section, text in static.lint_sections.items()
                for w in lint_text(text, section=section, known_values=values, ignore=others)
                if w.text in values
            ]
        findings = [*found, *leaks]
        if not findings:
            return
        if self.strict:
            raise PromptLintError(self.name, findings)
        new_leak = bool(leaks) and self._first_leak(static.prefix_hash, leaks)
        if first or new_leak:
            logger.warning(
                "prompt template %r: cache-breaking text in the static part: %s; %s",
                self.name,
                "; ".join(str(w) for w in findings[:5]),
                lint_remedy(findings),
            )


def _check_settings(strict: object, drift: object, least: object, *headings: object) -> None:
    """A :class:`ConfigurationError` for a builder setting of the wrong kind (``strict="no"``
    was true; a ``drift`` that is no monitor failed every build)."""
    if not isinstance(strict, bool):
        raise ConfigurationError(f"strict must be True or False, not {strict!r:.80}")
    if least is not None and (type(least) is not int or least < 1):
        raise ConfigurationError(f"min_cache_tokens must be an int >= 1 or None, not {least!r:.40}")
    if drift is not None and not isinstance(drift, DriftMonitor):
        raise ConfigurationError(f"drift must be a DriftMonitor or None, not {drift!r:.80}")
    if not all(isinstance(h, str) for h in headings):
        raise ConfigurationError("examples_heading and documents_heading must be strings")


def _listed(values: Iterable[Any], what: str, ordered: bool = False) -> Iterable[Any]:
    """``values``, or a :class:`ConfigurationError` when they are not a collection of items
    (with ``ordered``, also when they come in a set's order, :func:`~._order.unordered`: it
    differs between processes, with ``PYTHONHASHSEED``, and so would the static text kept in
    it; a dict's views keep the dict's order)."""
    if isinstance(values, (str, bytes, Mapping)) or not isinstance(values, Iterable):
        raise ConfigurationError(f"{what} must be a list, not {type(values).__name__}")
    if ordered and unordered(values):
        raise ConfigurationError(
            f"{what} must be in an order that is kept, a list, not {type(values).__name__} in a "
            "set's order: it differs between processes, and so would the prefix hash (pass a "
            "sorted list)"
        )
    return values


def _tool_name(tool: Mapping[str, Any]) -> str:
    function = tool.get("function")
    if isinstance(function, dict) and isinstance(function.get("name"), str):
        return str(function["name"])
    if isinstance(tool.get("name"), str):
        return str(tool["name"])
    raise ConfigurationError(f"a tool needs a name: {canonical_json(tool)[:80]}")


def _example(value: Example | tuple[str, str] | Mapping[str, str]) -> Example:
    if isinstance(value, Example):
        example = value
    elif isinstance(value, tuple) and len(value) == 2:
        example = Example(user=value[0], assistant=value[1])
    elif isinstance(value, Mapping) and set(value) == {"user", "assistant"}:
        example = Example(user=value["user"], assistant=value["assistant"])
    else:
        raise ConfigurationError(
            "an example is an Example, a (user, assistant) pair or a dict with those keys"
        )
    if not isinstance(example.user, str) or not isinstance(example.assistant, str):
        raise ConfigurationError("an example's user and assistant texts must be strings")
    return example


def _document(value: Document | str | Mapping[str, str]) -> Document:
    if isinstance(value, Document):
        document = value
    elif isinstance(value, str):
        document = Document(text=value)
    elif isinstance(value, Mapping) and isinstance(value.get("text"), str):
        unknown = set(value) - {"text", "title", "id"}
        if unknown:
            raise ConfigurationError(f"unknown document fields {sorted(unknown)}")
        document = Document(text=value["text"], title=value.get("title"), id=value.get("id"))
    else:
        raise ConfigurationError("a document is a Document, a string or a dict with 'text'")
    if not isinstance(document.text, str):
        raise ConfigurationError(f"a document's text must be a string, not {document.text!r:.80}")
    for name in ("title", "id"):
        if not isinstance(getattr(document, name), str | None):
            raise ConfigurationError(f"a document's {name} must be a string or None")
    if not document.text.strip():
        raise ConfigurationError("a reference document has no text")
    return document
