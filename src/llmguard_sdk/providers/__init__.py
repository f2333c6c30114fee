"""Model backends behind one seam: :class:`Provider`.

Each name is imported from its module at its first use (a Guard without a local model does
not import llama.cpp's bindings).
"""

from typing import TYPE_CHECKING

from .._exports import lazy_exports

if TYPE_CHECKING:  # (at run time: __getattr__ below imports each at its first read)
    from .anthropic import AnthropicProvider
    from .base import Provider
    from .local import LocalProvider
    from .openai_compat import OpenAICompatibleProvider
    from .responses import OpenAIResponsesProvider

__all__ = [
    "AnthropicProvider",
    "LocalProvider",
    "OpenAICompatibleProvider",
    "OpenAIResponsesProvider",
    "Provider",
]

_HOMES = {
    "anthropic": "AnthropicProvider",
    "base": "Provider",
    "local": "LocalProvider",
    "openai_compat": "OpenAICompatibleProvider",
    "responses": "OpenAIResponsesProvider",
}
__getattr__, __dir__ = lazy_exports(globals(), _HOMES)
