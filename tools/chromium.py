"""Find or install a headless Chromium for the HTML report's browser test; ``make install-dev``
runs it.

Where the browser comes from, in this order:

1. ``LLMGUARD_CHROMIUM``: a Chromium or Chrome binary you give;
2. ``chromium``, ``chromium-browser``, ``google-chrome`` or ``chrome`` on the ``PATH``;
3. Debian's ``chromium`` package, installed with ``apt-get`` when this runs as root on a
   Debian-like system (the package comes from the apt mirror the machine is configured with;
   PyPI's and npm's browser packages download their browser from elsewhere at install time).

When none can be found or installed, the script says why (and keeps the reason in
``.venv/chromium-MISSING``, which the test prints) and exits 0: the browser test then skips,
or fails under ``CI=true``, saying why.

Usage: python tools/chromium.py
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

NAMES = ("chromium", "chromium-browser", "google-chrome", "chrome")
MISSING = Path(__file__).resolve().parents[1] / ".venv" / "chromium-MISSING"


def find() -> str | None:
    """A Chromium binary, or None."""
    given = os.environ.get("LLMGUARD_CHROMIUM")
    if given:
        return given if os.access(given, os.X_OK) else None
    return next((found for name in NAMES if (found := shutil.which(name))), None)


def _install() -> str:
    """Install Debian's chromium; '' when done, else why not."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "not root: install Debian's chromium (apt-get install chromium) yourself"
    if shutil.which("apt-get") is None:
        return "no apt-get: install Chromium and set LLMGUARD_CHROMIUM"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command, seconds in (
        (["apt-get", "update", "-qq"], 300),
        (["apt-get", "install", "-y", "-qq", "chromium"], 900),
    ):
        try:
            done = subprocess.run(command, env=env, capture_output=True, timeout=seconds)
        except subprocess.TimeoutExpired:
            return f"{' '.join(command)} took over {seconds} s"
        if done.returncode != 0:
            return f"{' '.join(command)} failed: {done.stderr.decode(errors='replace')[-300:]}"
    return ""


def main() -> int:
    found = find()
    why = "" if found else _install()
    found = found or find()
    if found:
        MISSING.unlink(missing_ok=True)
        print(f"chromium: {found}")
    else:
        MISSING.parent.mkdir(parents=True, exist_ok=True)
        MISSING.write_text(why or "installed, but not on the PATH")
        print(f"chromium: none ({why}); the report's browser test will skip", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
