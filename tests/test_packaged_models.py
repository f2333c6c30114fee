"""Models that packages ship in chunks (providers/_chunked.py): LocalProvider.from_package joins
them once into the cache folder, checks the whole file, and reuses it after.

The chunk packages here are real packages written to a temporary folder on ``sys.path``; the
last test splits the bundled SmolLM2 GGUF into three of them and answers through the joined
file (marker ``local_model``).
"""

from __future__ import annotations

import hashlib
import itertools
import re
import sys
from pathlib import Path

import pytest

from llmguard_sdk import ConfigurationError, Guard, LocalProvider
from llmguard_sdk._config_formats import read_data
from llmguard_sdk.providers import _chunked
from llmguard_sdk.providers._llama import _packaged_gguf

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"
_NUMBERS = itertools.count()


def _chunk_packages(root: Path, blobs: list[bytes]) -> tuple[str, ...]:
    """One package per blob under ``root``, each with its blob as the one file in data/."""
    prefix = f"llmguard_test_chunks_{next(_NUMBERS)}_part"
    names = []
    for number, blob in enumerate(blobs, 1):
        package = root / f"{prefix}{number}"
        (package / "data").mkdir(parents=True)
        # never imported: the chunks are found, and no code of theirs runs
        (package / "__init__.py").write_text("raise RuntimeError('imported')\n", encoding="utf-8")
        (package / "data" / f"part{number:02d}.bin").write_bytes(blob)
        names.append(package.name)
    return tuple(names)


def _register(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, blobs: list[bytes], **changes: object
) -> _chunked.ChunkedModel:
    whole = b"".join(blobs)
    root = tmp_path / "site"
    root.mkdir(exist_ok=True)
    parts = _chunk_packages(root, blobs)
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.setenv("LLMGUARD_MODEL_CACHE", str(tmp_path / "cache"))
    fields: dict[str, object] = {
        "file": "tiny.gguf",
        "parts": parts,
        "sha256": hashlib.sha256(whole).hexdigest(),
        "size": len(whole),
        "extra": "local-test",
        **changes,
    }
    model = _chunked.ChunkedModel(**fields)  # type: ignore[arg-type]
    monkeypatch.setitem(_chunked.PACKAGED_MODELS, "tiny-test-model", model)
    return model


BLOBS = [b"GGUF" + bytes(range(256)) * 40, b"\x01" * 5000, b"the end"]


def test_the_chunks_are_joined_once_checked_and_reused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    model = _register(monkeypatch, tmp_path, BLOBS)
    path = _packaged_gguf("tiny-test-model", None)
    assert path == tmp_path / "cache" / "tiny.gguf"
    assert not any(part in sys.modules for part in model.parts)
    assert path.read_bytes() == b"".join(BLOBS)
    assert path.stat().st_mode & 0o777 == 0o644
    marker = path.with_name("tiny.gguf.sha256")
    assert marker.read_text(encoding="ascii").strip() == model.sha256
    assert sorted(p.name for p in path.parent.iterdir()) == ["tiny.gguf", "tiny.gguf.sha256"]
    before = path.stat()
    assert _packaged_gguf("tiny-test-model", None) == path  # reused, not written again
    after = path.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    path.write_bytes(b"cut short")  # a damaged cached file is joined again
    assert _packaged_gguf("tiny-test-model", None).read_bytes() == b"".join(BLOBS)


def test_chunks_that_are_not_the_expected_file_are_refused_and_leave_nothing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _register(monkeypatch, tmp_path, BLOBS, sha256="0" * 64)
    with pytest.raises(ConfigurationError, match=r"SHA-256 is [0-9a-f]{64}, not 0{64}"):
        LocalProvider.from_package("tiny-test-model")
    assert list((tmp_path / "cache").iterdir()) == []
    _register(monkeypatch, tmp_path, BLOBS, size=3)
    with pytest.raises(ConfigurationError, match=r"the chunks hold 15251 bytes, not 3"):
        LocalProvider.from_package("tiny-test-model")


def test_a_missing_chunk_package_names_the_extra_that_installs_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    model = _register(monkeypatch, tmp_path, BLOBS)
    missing = (*model.parts, "llmguard_test_no_such_chunk_part")
    _register(monkeypatch, tmp_path, BLOBS, parts=missing)
    hint = re.escape("pip install 'llmguard-sdk[local-test]'")
    with pytest.raises(ConfigurationError, match=hint):
        LocalProvider.from_package("tiny-test-model")


def test_a_cache_folder_that_cannot_be_written_is_a_configuration_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _register(monkeypatch, tmp_path, BLOBS)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder", encoding="utf-8")
    monkeypatch.setenv("LLMGUARD_MODEL_CACHE", str(blocker / "cache"))
    with pytest.raises(ConfigurationError, match="cannot join tiny-test-model"):
        _packaged_gguf("tiny-test-model", None)


def test_toml_is_read_with_a_dependency_where_python_has_no_tomllib() -> None:
    """Configuration files in TOML are read with tomllib (Python 3.11+), else with tomli: a
    dependency on 3.10 (the tests had it from pytest, a user's install lacked it)."""
    dependencies = read_data(PYPROJECT)["project"]["dependencies"]
    assert "tomli>=1.1; python_version < '3.11'" in dependencies


def test_each_known_model_has_an_extra_that_pins_exactly_its_chunk_packages() -> None:
    extras = read_data(PYPROJECT)["project"]["optional-dependencies"]  # tomllib, or tomli
    assert _chunked.PACKAGED_MODELS
    for model in _chunked.PACKAGED_MODELS.values():
        pinned = [r for r in extras[model.extra] if not r.startswith("llama-cpp-python")]
        names = [r.split("==")[0].replace("-", "_") for r in pinned]
        assert names == list(model.parts)
        assert all(re.fullmatch(r"[a-z0-9-]+==[0-9.]+", r) for r in pinned)
        assert any(r.startswith("llama-cpp-python") for r in extras[model.extra])
    for extra in ("dev", "bench", "local"):  # hundreds of MB: never pulled in by another extra
        assert not any("part" in r for r in extras[extra])


@pytest.fixture
def smollm_in_chunks(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    from llmguard_sdk.providers.local import bundled_model_path

    data = bundled_model_path().read_bytes()
    third = len(data) // 3
    _register(monkeypatch, tmp_path, [data[:third], data[third : 2 * third], data[2 * third :]])
    return "tiny-test-model"


@pytest.mark.local_model
def test_a_model_joined_from_chunk_packages_answers(smollm_in_chunks: str) -> None:
    provider = LocalProvider.from_package(smollm_in_chunks, n_ctx=512, max_tokens=8)
    try:
        answer = Guard(provider, timeout=60, environ={}).chat(
            [{"role": "user", "content": "Say hello."}], temperature=0
        )
    finally:
        provider.close()
    assert answer.text.strip()
    assert answer.usage is not None
    assert answer.usage.output_tokens >= 1
