"""Build a Redis 8 server (with vector sets: VADD / VSIM) for the tests of the response
cache's server-side vector search; ``make install-dev`` runs it.

Redis 8 is not in this machine's Debian release nor on PyPI, so the source is Debian's own
source package of Redis 8.0.2 (from Debian 13), fetched from the Debian mirror that this
machine's apt is configured with and checked against its SHA-256 before it is built
(about a minute on two cores). The server lands in ``.venv/redis8/redis-server``; tests find
it there (or through ``LLMGUARD_REDIS8_SERVER``) and skip, saying why, where it is missing.
Nothing fails when the mirror cannot be reached: the script says so and exits 0.

Usage: python tools/redis8.py [--force]
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
from pathlib import Path

VERSION = "8.0.2"
SOURCE = f"pool/main/r/redis/redis_{VERSION}.orig.tar.gz"
SHA256 = "caf3c0069f06fc84c5153bd2a348b204c578de80490c73857bee01d9b5d7401f"
TARGET = Path(__file__).resolve().parents[1] / ".venv" / "redis8" / "redis-server"
_APT_SOURCES = [Path("/etc/apt/sources.list"), *Path("/etc/apt/sources.list.d").glob("*")]


def binary() -> str | None:
    """The Redis 8 server to test with: ``LLMGUARD_REDIS8_SERVER``, else the one this script
    built, else None."""
    configured = os.environ.get("LLMGUARD_REDIS8_SERVER")
    if configured:
        return configured
    return str(TARGET) if TARGET.exists() else None


def mirror() -> str | None:
    """The first Debian archive URI in this machine's apt sources (not the security one)."""
    for path in _APT_SOURCES:
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for uri in re.findall(r"^(?:URIs:\s*|deb\s+(?:\[[^\]]*\]\s+)?)(\S+)", text, re.M):
            if uri.startswith("http") and uri.rstrip("/").endswith("/debian"):
                return uri.rstrip("/")
    return None


def build(force: bool = False) -> int:
    if TARGET.exists() and not force:
        print(f"redis8: {TARGET.name} already built")
        return 0
    base = mirror()
    if base is None:
        print("redis8: no Debian mirror in the apt sources; vector-search tests will skip")
        return 0
    with tempfile.TemporaryDirectory(prefix="llmguard-redis8-") as work:
        archive = Path(work) / "redis.tar.gz"
        try:
            with urllib.request.urlopen(f"{base}/{SOURCE}", timeout=60) as answer:
                archive.write_bytes(answer.read())
        except OSError as exc:
            print(f"redis8: cannot fetch the source ({exc}); vector-search tests will skip")
            return 0
        digest = hashlib.sha256(archive.read_bytes()).hexdigest()
        if digest != SHA256:
            print(f"redis8: the source's SHA-256 is {digest}, expected {SHA256}", file=sys.stderr)
            return 1
        with tarfile.open(archive) as tar:
            if hasattr(tarfile, "data_filter"):  # Python 3.11.4 and later
                tar.extractall(work, filter="data")
            else:  # the archive's digest was checked above
                tar.extractall(work)
        tree = Path(work) / f"redis-{VERSION}"
        result = subprocess.run(
            ["make", "-j2", "MALLOC=libc", "BUILD_TLS=no", "redis-server"],
            cwd=tree / "src",
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            print(result.stdout[-2000:], result.stderr[-2000:], file=sys.stderr)
            print("redis8: the build failed; vector-search tests will skip")
            return 0
        TARGET.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(tree / "src" / "redis-server", TARGET)
    print(f"redis8: built Redis {VERSION} with vector sets")
    return 0


if __name__ == "__main__":
    sys.exit(build(force="--force" in sys.argv[1:]))
