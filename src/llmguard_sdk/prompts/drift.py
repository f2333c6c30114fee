"""Prefix drift: the static part of a prompt template changed between two calls.

A template whose static part changes on every call (a timestamp in the system prompt, tools
serialised in another order, a tenant's name in the instructions) never hits a provider's
prefix cache, and nothing fails: the bill silently doubles. :class:`DriftMonitor` keeps the
prefix hash of each template's last call, per tenant (as the template's cache keys are made:
each tenant's builder may have a prefix of its own), and reports a :class:`PrefixDrift` event
when the next call of the same template and tenant has another prefix. A call whose dynamic
tail (history, per-call context, the user's message) alone changed is not drift.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ..errors import ConfigurationError

__all__ = ["DriftHook", "DriftMonitor", "PrefixDrift", "default_drift_monitor"]

logger = logging.getLogger("llmguard_sdk")


@dataclass(frozen=True)
class PrefixDrift:
    """The static prefix of ``template`` changed since its previous call.

    ``sections`` names the static sections whose text changed (``"instructions"``,
    ``"tools"``, ``"examples"``, ``"documents"``); ``offset`` is the first character where the
    static texts differ, ``before`` and ``after`` show a few characters around it (where only
    the tools changed, the text is the same: then they are those of the tools' canonical
    JSON); ``changes`` counts the drifts of this template (and tenant) so far; ``tenant``
    is the call's tenant (None: none), as drift is tracked per template and tenant.

    .. versionchanged:: 0.2.0 a drift of the tools alone points into the tools' JSON (it
       showed the same text twice).
    """

    template: str
    previous_hash: str
    prefix_hash: str
    sections: tuple[str, ...]
    offset: int
    before: str
    after: str
    changes: int
    tenant: str | None = None


DriftHook = Callable[[PrefixDrift], None]
"""Receives each :class:`PrefixDrift` event."""


@dataclass
class _Last:
    prefix_hash: str
    text: str
    sections: Mapping[str, str]
    changes: int = 0


class DriftMonitor:
    """Remembers the static prefix of each template's last call, per tenant, and reports
    changes.

    Args:
        hooks: callables receiving each :class:`PrefixDrift`; a failing hook is logged and
            never breaks the call. Without hooks, each drift is logged as a warning on the
            ``llmguard_sdk`` logger.
        max_templates: templates remembered at most, each tenant's prefix of a template
            counting as one (the least recently used are forgotten beyond it).

    A setting of the wrong kind raises :class:`~llmguard_sdk.errors.ConfigurationError` (a
    :class:`ValueError`).

    Thread-safe; share one monitor between the builders of a process (the default one,
    :data:`default_drift_monitor`, is shared already).
    """

    def __init__(
        self, hooks: tuple[DriftHook, ...] | list[DriftHook] = (), *, max_templates: int = 10_000
    ) -> None:
        if isinstance(hooks, (str, bytes)) or not isinstance(hooks, (list, tuple)):
            raise ConfigurationError(f"drift hooks must be a list of callables, not {hooks!r:.80}")
        for hook in hooks:
            _check_hook(hook)
        if isinstance(max_templates, bool) or not (
            isinstance(max_templates, int) and max_templates >= 1
        ):
            raise ConfigurationError(
                f"max_templates must be an int >= 1, not {max_templates!r:.40}"
            )
        self._hooks = list(hooks)
        self._max = max_templates
        self._last: dict[tuple[str, str | None], _Last] = {}
        self._lock = threading.Lock()

    def add_hook(self, hook: DriftHook) -> None:
        """Also give every later event to ``hook`` (a callable, else a
        :class:`~llmguard_sdk.errors.ConfigurationError`)."""
        _check_hook(hook)
        with self._lock:
            self._hooks.append(hook)

    def remove_hook(self, hook: DriftHook) -> None:
        """Stop giving events to ``hook`` (no error if it was not added)."""
        with self._lock:
            if hook in self._hooks:
                self._hooks.remove(hook)

    def observe(
        self,
        template: str,
        prefix_hash: str,
        text: str,
        sections: Mapping[str, str],
        *,
        tenant: str | None = None,
    ) -> PrefixDrift | None:
        """Record a call of ``template`` for ``tenant``; the :class:`PrefixDrift` it caused
        (and reported), or None when its prefix is the same as at the last call of this
        template and tenant (or it is the first)."""
        key = (template, tenant)
        with self._lock:
            last = self._last.pop(key, None)
            if last is None or last.prefix_hash == prefix_hash:
                changes = last.changes if last is not None else 0
                self._remember(key, _Last(prefix_hash, text, dict(sections), changes))
                return None
            changes = last.changes + 1
            self._remember(key, _Last(prefix_hash, text, dict(sections), changes))
            hooks = list(self._hooks)
        where = ""  # the static text, else (it is the same) the tools' JSON
        before_text, after_text = last.text, text
        if before_text == after_text:
            where = " of their JSON"
            before_text, after_text = last.sections.get("tools", ""), sections.get("tools", "")
        offset = _first_difference(before_text, after_text)
        event = PrefixDrift(
            template=template,
            previous_hash=last.prefix_hash,
            prefix_hash=prefix_hash,
            sections=tuple(
                name
                for name in dict.fromkeys([*last.sections, *sections])
                if last.sections.get(name) != sections.get(name)
            ),
            offset=offset,
            before=before_text[max(0, offset - 20) : offset + 40],
            after=after_text[max(0, offset - 20) : offset + 40],
            changes=changes,
            tenant=tenant,
        )
        if not hooks:
            logger.warning(
                "prompt template %r: its static prefix changed (%s at character %d%s: %r -> %r); "
                "the provider's prefix cache misses",
                template,
                ", ".join(event.sections) or "text",
                offset,
                where,
                event.before,
                event.after,
            )
        for hook in hooks:
            try:
                hook(event)
            except Exception:
                logger.exception("llmguard drift hook %r failed", hook)
        return event

    def _remember(self, key: tuple[str, str | None], last: _Last) -> None:
        self._last[key] = last  # re-inserted: the dict's order is least recent first
        while len(self._last) > self._max:
            del self._last[next(iter(self._last))]

    def forget(self, template: str | None = None) -> None:
        """Forget one template's last prefixes, every tenant's (or every template's)."""
        with self._lock:
            if template is None:
                self._last.clear()
            else:
                for key in [k for k in self._last if k[0] == template]:
                    del self._last[key]


def _check_hook(hook: object) -> None:
    """A :class:`ConfigurationError` for a hook that is no callable (it failed at each drift,
    logged, and the drift went unreported)."""
    if not callable(hook):
        raise ConfigurationError(f"a drift hook must be callable, not {hook!r:.80}")


def _first_difference(a: str, b: str) -> int:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return min(len(a), len(b))


default_drift_monitor = DriftMonitor()
"""The process-wide monitor every :class:`~llmguard_sdk.prompts.PromptBuilder` uses unless
given another; add hooks to it with :meth:`DriftMonitor.add_hook`."""
