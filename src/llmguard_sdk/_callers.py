"""Where a warning should point: the first frame outside this package.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import sys

__all__ = ["caller_level"]

_PACKAGE = __name__.partition(".")[0] + "."


def caller_level() -> int:
    """The ``stacklevel`` of the first frame outside this package, for a warning raised by
    the function that calls this: the application's line, whichever way it came in
    (``GuardSettings.from_env``, ``Guard(...)``, ``Guard.from_config``, a limiter's blocking
    or async entry point)."""
    frame, level = sys._getframe(1), 1
    while frame.f_back is not None and frame.f_globals.get("__name__", "").startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1
    return level
