"""Model backends behind one seam: :class:`Provider`."""

from .base import Provider
from .openai_compat import OpenAICompatibleProvider

__all__ = ["OpenAICompatibleProvider", "Provider"]
