"""Whether a route's model id names a fixed model: one table of rules, the first whose
pattern matches the id (stripped, lower-cased) decides; an id none matches cannot be told.

Aliases move: ``...-latest``, an undated preview, a provider's bare family name (``gpt-4o``,
``claude-sonnet-4-5``, ``gemini-2.0-flash``: each re-pointed to a new snapshot), also behind a
router's ``org/`` prefix (``openai/gpt-4o``). Fixed: a dated or versioned snapshot, Google's
stable Gemini ids from 2.5 on (Google: a stable model does not change; 1.x and 2.0 names
without ``-00N`` are auto-updated aliases), an OpenAI fine-tune, a Hugging Face repository
whose name carries a version or size (``meta-llama/Llama-3.1-8B-Instruct``, the weights a
vLLM server loaded; ``@<commit>``), a ``.gguf`` file. A router's ``org/name`` without one
(``deepseek/deepseek-chat``, ``qwen/qwen-max`` on OpenRouter: names their providers
re-point) cannot be told.

An Azure OpenAI route's model is a deployment's name, the user's own: one named for a dated
version is taken at its word; any other is refused saying that the deployment's model version
follows its version upgrade policy (by default it auto-updates to each new default version).
"""

from __future__ import annotations

import re
from typing import Literal

__all__ = ["judge", "judge_route"]

Verdict = Literal["pinned", "moving", "unknown"]

_DATED = (  # a date or version suffix: gpt-4o-2024-08-06, gpt-4-0613, mistral-large-2407 ...
    r"(-\d{4}-\d{2}-\d{2}|-\d{8}|[-@]\d{3}|@\d{8}|-v\d+(\.\d+)*(:\d+)?|-\d{2}-\d{4}"
    r"|-preview-\d{2}-\d{2}|-\d{4}(-preview)?|\.gguf)$"
)
_FAMILIES = r"(gpt|chatgpt|o\d|claude|gemini|(mini|mag|pix|code)?stral|mistral|command|grok)"

_TABLE: tuple[tuple[str, Verdict, str], ...] = (  # (pattern, verdict, why): the first wins
    (r"(^|[-/:])latest$", "moving", "a -latest alias"),
    (r"@(main|master)$", "moving", "a repository's branch"),
    (r"(^|/)auto$", "moving", "a router's pick (openrouter/auto)"),
    (r"^ft:", "pinned", "an OpenAI fine-tune"),
    (_DATED, "pinned", "a dated or versioned snapshot"),
    (r"@[0-9a-f]{7,40}$", "pinned", "a repository at one commit"),
    (r"-(preview|exp)(-|$)", "moving", "an undated preview or experimental model"),
    (r"(^|/)gpt-oss-\d+b$", "pinned", "open weights (gpt-oss)"),
    (r"(^|/)gemini-(2\.[5-9]|[3-9])", "pinned", "a stable Gemini id (2.5 on)"),
    (rf"(^|/){_FAMILIES}", "moving", "a provider's alias of its newest snapshot"),
    (r"^[^/\s@]+/[^/\s@]*\d[^/\s@]*$", "pinned", "a model repository (org/name-3.1-8b)"),
)
_RULES = tuple((re.compile(pattern), verdict, why) for pattern, verdict, why in _TABLE)
_AZURE_HOSTS = (".openai.azure.com", ".cognitiveservices.azure.com", ".services.ai.azure.com")


def judge(model: str) -> tuple[Verdict, str]:
    """``model``'s verdict and the rule's reason (``"unknown"``: no rule matched)."""
    name = model.strip().lower()
    for pattern, verdict, why in _RULES:
        if pattern.search(name):
            return verdict, why
    return "unknown", "no date, version or other form known to be fixed"


def judge_route(route: object, model: str) -> str | None:
    """Why ``route``'s ``model`` is refused as a release's pin (the end of the error's
    message), or None where it is pinned."""
    verdict, why = judge(model)
    host = str(getattr(route, "server_address", "") or "").lower()
    if verdict != "pinned" and host.endswith(_AZURE_HOSTS):
        return (
            "an Azure deployment's name without a dated model version: the deployment's "
            "model version follows its version upgrade policy (by default it auto-updates to "
            "each new default version); set the policy to No Auto Upgrade, then pass "
            "allow_alias=True"
        )
    if verdict == "moving":
        return (
            f"a moving alias ({why}): pin a dated id (gpt-4o-2024-08-06, "
            "claude-sonnet-4-5-20250929 ...) or pass allow_alias=True"
        )
    if verdict == "unknown":
        return (
            f"which may move: the SDK cannot tell ({why}); pin a dated or versioned id, or "
            "pass allow_alias=True if it names a fixed model"
        )
    return None
