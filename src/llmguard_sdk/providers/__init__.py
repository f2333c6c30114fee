"""Model backends behind one seam: :class:`Provider`."""

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
