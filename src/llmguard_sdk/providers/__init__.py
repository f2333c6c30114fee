"""Model backends behind one seam: :class:`Provider`."""

from .base import Provider
from .local import LocalProvider
from .openai_compat import OpenAICompatibleProvider

__all__ = ["LocalProvider", "OpenAICompatibleProvider", "Provider"]
