"""Prefix-cache-friendly prompt assembly: static sections first, per-call data last.

* :class:`PromptBuilder` assembles a template's prompts in a fixed order (instructions, tools
  as canonical JSON, few-shot examples, reference documents, then the history and the user's
  content), so that every call of a template shares its whole static prefix.
* :func:`lint_text` (and :meth:`PromptBuilder.lint`) find what would break that prefix:
  timestamps, random ids, unsorted JSON, whitespace drift, per-user values.
* :class:`DriftMonitor` reports a :class:`PrefixDrift` when the static prefix of a template
  changes between calls.
* :func:`prompt_cache_key`, :func:`add_cache_breakpoints` and :class:`PrefixCacheStats` speak
  to the providers' caches and measure their hit ratio per feature.

Each name is imported from its module at its first use (a provider needs only the adapters).

.. versionadded:: 0.2.0
"""

from typing import TYPE_CHECKING

from .._exports import lazy_exports

if TYPE_CHECKING:  # (at run time: __getattr__ below imports each at its first read)
    from .adapters import (
        CACHE_HISTORY_KEY,
        PREFIX_HASH_KEY,
        STATIC_MESSAGES_KEY,
        TEMPLATE_KEY,
        FeatureCacheStats,
        PrefixCacheStats,
        add_cache_breakpoints,
        prompt_cache_key,
        static_prefix_hash,
    )
    from .builder import Document, Example, Prompt, PromptBuilder, canonical_json
    from .drift import DriftHook, DriftMonitor, PrefixDrift, default_drift_monitor
    from .lint import RULES, LintRule, LintWarning, lint_text

__all__ = [
    "CACHE_HISTORY_KEY",
    "PREFIX_HASH_KEY",
    "RULES",
    "STATIC_MESSAGES_KEY",
    "TEMPLATE_KEY",
    "Document",
    "DriftHook",
    "DriftMonitor",
    "Example",
    "FeatureCacheStats",
    "LintRule",
    "LintWarning",
    "PrefixCacheStats",
    "PrefixDrift",
    "Prompt",
    "PromptBuilder",
    "add_cache_breakpoints",
    "canonical_json",
    "default_drift_monitor",
    "lint_text",
    "prompt_cache_key",
    "static_prefix_hash",
]

_HOMES = {
    "adapters": "CACHE_HISTORY_KEY PREFIX_HASH_KEY STATIC_MESSAGES_KEY TEMPLATE_KEY"
    " FeatureCacheStats PrefixCacheStats add_cache_breakpoints prompt_cache_key"
    " static_prefix_hash",
    "builder": "Document Example Prompt PromptBuilder canonical_json",
    "drift": "DriftHook DriftMonitor PrefixDrift default_drift_monitor",
    "lint": "RULES LintRule LintWarning lint_text",
}
__getattr__, __dir__ = lazy_exports(globals(), _HOMES)
