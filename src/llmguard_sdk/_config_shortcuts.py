"""The provider shortcuts a route's ``model`` starts with, and what each reads.

Shortcuts and the environment variables they read when the route names no key (or URL):
``openai/`` (``OPENAI_API_KEY``, ``OPENAI_BASE_URL``), ``anthropic/`` (``ANTHROPIC_API_KEY``),
``azure/<deployment>`` (``AZURE_OPENAI_API_KEY``, ``AZURE_OPENAI_ENDPOINT``,
``OPENAI_API_VERSION``), ``openrouter/`` (``OPENROUTER_API_KEY``), ``groq/``
(``GROQ_API_KEY``), ``together/`` (``TOGETHER_API_KEY``), ``ollama/`` (``OLLAMA_HOST``, local
by default), ``vllm/`` (``base_url`` required, ``VLLM_API_KEY``), ``local/`` (``bundled`` or
a GGUF path; relative in a file: from the file's folder). An ``azure/`` route's
``base_url`` is its resource endpoint (as ``AZURE_OPENAI_ENDPOINT``), unless it is a whole
``.../openai/...`` URL. A key variable that is unset leaves the route without a key (a local
server's); one set but empty is refused naming it (``_config_routes.py``), as an empty
``${NAME}`` reference is.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from .errors import ConfigurationError

if TYPE_CHECKING:
    from ._config_schema import RouteConfig

__all__ = ["SHORTCUTS", "api_root", "key_variable"]

# shortcut -> (base URL or None, environment variable of the key, of the base URL)
_OPENAI_LIKE: dict[str, tuple[str | None, str | None, str | None]] = {
    "openai": ("https://api.openai.com/v1", "OPENAI_API_KEY", "OPENAI_BASE_URL"),
    "openrouter": ("https://openrouter.ai/api/v1", "OPENROUTER_API_KEY", None),
    "groq": ("https://api.groq.com/openai/v1", "GROQ_API_KEY", None),
    "together": ("https://api.together.xyz/v1", "TOGETHER_API_KEY", None),
    "ollama": ("http://127.0.0.1:11434/v1", None, "OLLAMA_HOST"),
    "vllm": (None, "VLLM_API_KEY", None),
}
SHORTCUTS = (*_OPENAI_LIKE, "anthropic", "azure", "local")


def key_variable(shortcut: str) -> str | None:
    """The environment variable ``shortcut``'s key is read from when a route names none
    (None: the shortcut sends no key of its own, ``ollama/``)."""
    if shortcut == "anthropic":
        return "ANTHROPIC_API_KEY"
    if shortcut == "azure":
        return "AZURE_OPENAI_API_KEY"
    return _OPENAI_LIKE[shortcut][1]


def api_root(
    shortcut: str,
    model: str,
    route: RouteConfig,
    environ: Mapping[str, str],
    where: str,
    given: str | None,
) -> str:
    """The route's API root: ``given`` (its ``base_url``), else the shortcut's. An azure/
    ``base_url`` is the resource's endpoint, as ``AZURE_OPENAI_ENDPOINT`` is (the deployment
    and ``api_version`` go on it), unless it is a whole ``.../openai/...`` URL already."""
    if given and (shortcut != "azure" or "/openai/" in urlsplit(given).path + "/"):
        return given
    if shortcut == "anthropic":
        return "https://api.anthropic.com/v1"
    if shortcut == "azure":
        endpoint = given or environ.get("AZURE_OPENAI_ENDPOINT")
        version = route.api_version or environ.get("OPENAI_API_VERSION")
        if not endpoint or not version:  # what it lacks only (its api_version given, it
            lacks = (  # was said to be missing too)
                ("base_url (or AZURE_OPENAI_ENDPOINT)", endpoint),
                ("api_version (or OPENAI_API_VERSION)", version),
            )
            needs = " and ".join(text for text, found in lacks if not found)
            raise ConfigurationError(f"{where}: azure/ needs {needs}")
        return f"{endpoint.rstrip('/')}/openai/deployments/{model}?api-version={version}"
    default, _key, url_variable = _OPENAI_LIKE[shortcut]
    given = environ.get(url_variable) if url_variable else None
    if shortcut == "ollama" and given:
        given = _ollama_root(given)
    if given:
        return given
    if default is None:
        raise ConfigurationError(f"{where}: {shortcut}/ needs base_url")
    return default


def _ollama_root(host: str) -> str:
    """The API root of ``OLLAMA_HOST`` read as Ollama reads it: without a scheme, ``http://``
    at Ollama's port 11434 unless it names one (``0.0.0.0``, set for the server to listen
    everywhere, went to port 80), then ``/v1``."""
    root = host.strip().rstrip("/")
    if "://" not in root:
        netloc, slash, path = root.partition("/")
        port = "" if re.fullmatch(r".*:\d+", netloc) else ":11434"  # ("[::1]" names none)
        root = f"http://{netloc}{port}{slash}{path}"
    return root if root.endswith("/v1") else f"{root}/v1"
