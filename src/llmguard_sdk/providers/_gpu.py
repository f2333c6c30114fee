"""Where the local model runs: GPU layers and context size, from the GGUF's shape and free VRAM.

Three parts, each usable alone:

* :func:`read_gguf` reads a GGUF file's header and key/value section (never the tensors):
  the architecture, layer count, embedding width, attention heads and trained context, enough
  to size the weights and the KV cache. Every read is checked against the file's size, so a
  truncated or foreign file raises :class:`GGUFError` instead of reading past its end.
* :func:`free_vram` asks ``nvidia-smi`` (bounded by a timeout) for the free memory of the
  device llama.cpp will use: the first one in ``CUDA_VISIBLE_DEVICES``, else device 0. It
  never raises: ``None`` when it cannot tell.
* :func:`plan` (pure arithmetic) decides ``(n_gpu_layers, n_ctx)``; :func:`place` puts the
  three together for :class:`~llmguard_sdk.providers.LocalProvider`.
"""

from __future__ import annotations

import mmap
import os
import shutil
import struct
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "DEFAULT_N_CTX",
    "GGUFError",
    "GGUFInfo",
    "Placement",
    "Vram",
    "free_vram",
    "place",
    "plan",
    "read_gguf",
]

MIB = 1 << 20
DEFAULT_N_CTX = 2048
"""The context when nobody asks for one and the model does not all fit on a GPU."""
MAX_AUTO_CTX = 8192
"""The longest context chosen automatically (a larger one is only ever the user's choice)."""
VRAM_MARGIN = 0.10
"""Share of the free VRAM left alone: other processes, fragmentation, estimate error."""
VRAM_RESERVE = 512 * MIB
"""Left alone as well: the CUDA context and llama.cpp's compute buffers."""

_NO_OFFLOAD = "llama.cpp was built without GPU offload"
_MAGIC = b"GGUF"
_VERSIONS = (2, 3)  # version 1 (32-bit counts) is older than anything llama.cpp still loads
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?"}
_SCALARS.update({10: "<Q", 11: "<q", 12: "<d"})
_INTEGERS = frozenset({0, 1, 2, 3, 4, 5, 10, 11})
_STRING, _ARRAY = 8, 9
_MAX_KEY = 1 << 16  # bytes in a key
_MAX_KEPT_STRING = 1 << 16  # longer string values are skipped, not read
_MAX_KEPT_ARRAY = 1 << 12  # integer arrays kept (per-layer head counts); longer are skipped
_MAX_DEPTH = 3  # arrays of arrays
_TOKENS = "tokenizer.ggml.tokens"
N_UBATCH = 512
"""llama.cpp's micro-batch (``n_ubatch``): its compute buffer is sized for one of them."""
_SUFFIXES = (
    "block_count",
    "embedding_length",
    "context_length",
    "attention.head_count",
    "attention.head_count_kv",
    "attention.key_length",
    "attention.value_length",
)


class GGUFError(ValueError):
    """The file is not a GGUF file this reader understands (or it is cut short)."""


@dataclass(frozen=True)
class GGUFInfo:
    """What :func:`read_gguf` found: the model's shape and its file's size."""

    version: int
    tensor_count: int
    architecture: str
    block_count: int
    embedding_length: int
    head_count: int
    head_count_kv: int
    key_length: int
    value_length: int
    context_length: int | None
    file_size: int
    vocab_size: int = 0

    @property
    def kv_bytes_per_token(self) -> int:
        """KV-cache bytes per token of context: K and V, every layer, f16 (2 bytes)."""
        return self.block_count * self.head_count_kv * (self.key_length + self.value_length) * 2

    @property
    def compute_bytes(self) -> tuple[int, int]:
        """llama.cpp's compute buffer, estimated from above as ``(base, per context token)``:
        one micro-batch's logits (f32, ``vocab_size`` each) and attention scores (f32, one
        per head and context token). For SmolLM2-135M this gives 132 MiB at a 2048 context
        and 240 MiB at 8192, where llama.cpp 0.3.x allocates 99 and 166 MiB."""
        return 4 * N_UBATCH * self.vocab_size, 4 * N_UBATCH * self.head_count


class _Cursor:
    """Bounded little-endian reads from a memory-mapped file."""

    def __init__(self, data: mmap.mmap | bytes, name: str) -> None:
        self.data, self.name, self.pos = data, name, 0
        self.length = 0  # the length of the last array read

    def need(self, size: int) -> None:
        if size < 0 or self.pos + size > len(self.data):
            raise GGUFError(f"{self.name}: cut short at byte {self.pos} (wanted {size} more)")

    def unpack(self, fmt: str) -> int | float | bool:
        size = struct.calcsize(fmt)
        self.need(size)
        value: int | float | bool = struct.unpack_from(fmt, self.data, self.pos)[0]
        self.pos += size
        return value

    def count(self) -> int:
        return int(self.unpack("<Q"))

    def string(self, keep: int) -> str | None:
        """The string here (None, skipped, when it is longer than ``keep`` bytes)."""
        size = self.count()
        self.need(size)
        start, self.pos = self.pos, self.pos + size
        if size > keep:
            return None
        return bytes(self.data[start : self.pos]).decode("utf-8", "replace")

    def value(self, kind: int, keep: bool, depth: int = 0) -> object:
        """The value of ``kind`` here; skipped (None) unless ``keep`` and small."""
        if kind in _SCALARS:
            return self.unpack(_SCALARS[kind])
        if kind == _STRING:
            return self.string(_MAX_KEPT_STRING if keep else -1)
        if kind != _ARRAY or depth >= _MAX_DEPTH:
            raise GGUFError(f"{self.name}: unknown value type {kind} at byte {self.pos}")
        item = int(self.unpack("<I"))
        length = self.length = self.count()
        if item in _SCALARS:
            size = struct.calcsize(_SCALARS[item])
            self.need(length * size)
            if keep and item in _INTEGERS and length <= _MAX_KEPT_ARRAY:
                return [self.unpack(_SCALARS[item]) for _ in range(length)]
            self.pos += length * size
            return None
        self.need(length * 8)  # every string or array is at least its 8-byte length
        if item == _STRING:  # tokenizer vocabularies: tens of thousands, skipped fast
            data, pos, end = self.data, self.pos, len(self.data)
            for _ in range(length):
                if pos + 8 > end:
                    break
                pos += 8 + struct.unpack_from("<Q", data, pos)[0]
            else:
                if pos <= end:
                    self.pos = pos
                    return None
            raise GGUFError(f"{self.name}: cut short in a string array after byte {self.pos}")
        for _ in range(length):
            self.value(item, False, depth + 1)
        return None


def read_gguf(path: str | os.PathLike[str]) -> GGUFInfo:
    """The model's shape from a GGUF file's header and key/value section.

    Raises:
        GGUFError: not a GGUF file, an unsupported version, cut short, or missing the keys
            that give the model's shape.
        OSError: the file cannot be opened.
    """
    name = Path(path).name
    with open(path, "rb") as file:
        size = os.fstat(file.fileno()).st_size
        if size < 24:
            raise GGUFError(f"{name}: {size} bytes, too short for a GGUF header")
        with mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
            found, version, tensors = _read_header_and_keys(_Cursor(data, name))
    return _shape(found, name, version, tensors, size)


def _read_header_and_keys(cursor: _Cursor) -> tuple[dict[str, object], int, int]:
    if bytes(cursor.data[:4]) != _MAGIC:
        raise GGUFError(f"{cursor.name}: not a GGUF file (no GGUF magic)")
    cursor.pos = 4
    version = int(cursor.unpack("<I"))
    if version not in _VERSIONS:
        raise GGUFError(f"{cursor.name}: GGUF version {version} is not supported")
    tensors, keys = cursor.count(), cursor.count()
    cursor.need(keys * 12)  # each key/value takes at least 12 bytes
    found: dict[str, object] = {}
    for _ in range(keys):
        key = cursor.string(_MAX_KEY)
        if key is None:
            raise GGUFError(f"{cursor.name}: a key longer than {_MAX_KEY} bytes")
        kind = int(cursor.unpack("<I"))
        keep = key == "general.architecture" or key.endswith(_SUFFIXES)
        value = cursor.value(kind, keep)
        if keep:
            found[key] = value
        elif key == _TOKENS and kind == _ARRAY:
            found[key] = cursor.length  # the vocabulary's size
    return found, version, tensors


def _whole(value: object, pick: Callable[[list[int]], int]) -> int | None:
    """An integer value, or one picked from a per-layer list (zeros left out)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, list):
        numbers = [int(v) for v in value if isinstance(v, int) and v > 0]
        return pick(numbers) if numbers else None
    return None


def _shape(found: dict[str, object], name: str, version: int, tensors: int, size: int) -> GGUFInfo:
    arch = found.get("general.architecture")
    if not isinstance(arch, str) or not arch:
        raise GGUFError(f"{name}: no general.architecture")

    def number(key: str, pick: Callable[[list[int]], int] = max) -> int | None:
        """The key's value; None when absent, or not above 0 (no size of a real model: a
        negative head width made the KV cache negative, and every layer "fit" in no VRAM)."""
        value = _whole(found.get(f"{arch}.{key}"), pick)
        return value if value is not None and value > 0 else None

    blocks, width = number("block_count"), number("embedding_length")
    heads = number("attention.head_count", min)  # the fewest heads: the widest head
    if not blocks or not width or not heads:
        raise GGUFError(f"{name}: no layer count, embedding width or head count for {arch}")
    kv_heads = number("attention.head_count_kv") or heads
    head_width = width // heads
    context = number("context_length")
    return GGUFInfo(
        version=version,
        tensor_count=tensors,
        architecture=arch,
        block_count=blocks,
        embedding_length=width,
        head_count=heads,
        head_count_kv=kv_heads,
        key_length=number("attention.key_length") or head_width,
        value_length=number("attention.value_length") or head_width,
        context_length=context,
        file_size=size,
        vocab_size=_whole(found.get(_TOKENS), max) or 0,
    )


# -- free VRAM ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Vram:
    """One device's memory, in bytes, as ``nvidia-smi`` reported it."""

    free: int
    total: int
    device: str
    """The device's ``nvidia-smi`` index (``"min of 2"`` when the smallest of several)."""


_SMI_QUERY = "--query-gpu=index,uuid,name,memory.free,memory.total"


def free_vram(
    environ: Mapping[str, str] | None = None, *, timeout: float = 3.0, smi: str | None = None
) -> Vram | None:
    """The free memory of the GPU llama.cpp would use, or None when it cannot be told.

    Asks ``nvidia-smi`` (``smi``: its path; default: found on ``PATH``), waiting at most
    ``timeout`` seconds. The device is the first one in ``CUDA_VISIBLE_DEVICES`` (an index or a
    ``GPU-`` UUID or its prefix), else device 0; none when that variable hides every device
    (empty, or starting with ``-1``) or names a MIG instance. CUDA numbers devices fastest
    first unless ``CUDA_DEVICE_ORDER=PCI_BUS_ID``, nvidia-smi in bus order: on a machine with
    different GPUs an index could mean either, so the smallest free memory of them is used.
    Never raises.
    """
    environ = os.environ if environ is None else environ
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    first = "0" if visible is None else visible.split(",")[0].strip()
    if not first or first.startswith("-") or first.upper().startswith("MIG-"):
        return None
    exe = smi or shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        done = subprocess.run(
            [exe, _SMI_QUERY, "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except (OSError, ValueError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    return _pick_device(_smi_rows(done.stdout), first, environ.get("CUDA_DEVICE_ORDER"))


def _smi_rows(text: str) -> list[tuple[str, str, str, int, int]]:
    """(index, uuid, name, free MiB, total MiB) of each readable line (``[N/A]`` ones left out)."""
    rows = []
    for line in text.splitlines():
        parts = [part.strip() for part in line.split(",")]
        if len(parts) < 5:
            continue
        try:
            free, total = int(parts[-2]), int(parts[-1])
        except ValueError:
            continue
        if 0 <= free <= total:
            rows.append((parts[0], parts[1], ", ".join(parts[2:-2]), free, total))
    return rows


def _pick_device(
    rows: list[tuple[str, str, str, int, int]], first: str, order: str | None
) -> Vram | None:
    """The row of device ``first`` (see :func:`free_vram`), as bytes."""
    if first.upper().startswith("GPU-"):
        chosen = [row for row in rows if row[1].upper().startswith(first.upper())]
        if len(chosen) != 1:
            return None
    elif first.isascii() and first.isdigit():  # ("²".isdigit(), but int("²") fails)
        if order != "PCI_BUS_ID" and len({row[2] for row in rows}) > 1:
            chosen = rows  # fastest-first numbering: this index could be any of them
        else:
            chosen = [row for row in rows if row[0] == str(int(first))]
    else:
        return None
    if not chosen:
        return None
    least = min(chosen, key=lambda row: row[3])
    device = least[0] if len(chosen) == 1 else f"min of {len(chosen)}"
    return Vram(free=least[3] * MIB, total=least[4] * MIB, device=device)


# -- the decision ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Placement:
    """How the local model is placed, and why (``LocalProvider.placement``)."""

    n_gpu_layers: int
    """Layers offloaded to the GPU: -1 for all of them, 0 for none."""
    n_ctx: int
    """Context size in tokens."""
    reason: str
    """Why, in words."""
    free_vram: int | None = None
    """Free VRAM in bytes when it was read."""
    needed: int | None = None
    """Bytes the whole model and its KV cache at ``n_ctx`` take on the GPU (estimated)."""

    def describe(self) -> str:
        """One line for logs and reports."""
        layers = "all" if self.n_gpu_layers < 0 else str(self.n_gpu_layers)
        vram = "" if self.free_vram is None else f", {self.free_vram // MIB} MiB VRAM free"
        return f"n_gpu_layers={layers} n_ctx={self.n_ctx} ({self.reason}{vram})"


def plan(
    *,
    model_bytes: int,
    layers: int,
    kv_bytes_per_token: int,
    free_vram: int | None,
    wanted_ctx: int | None,
    trained_ctx: int | None,
    offload: bool = True,
    compute: tuple[int, int] = (0, 0),
    margin: float = VRAM_MARGIN,
    reserve: int = VRAM_RESERVE,
    max_ctx: int = MAX_AUTO_CTX,
) -> Placement:
    """Choose ``(n_gpu_layers, n_ctx)`` from the model's size and the free VRAM (bytes).

    The GPU may use ``free_vram * (1 - margin) - reserve``. When the weights
    (``model_bytes``), the KV cache for the context and the compute buffer (``compute``:
    bytes, and bytes per context token) fit, every layer goes there; else, after the compute
    buffer, as many whole layers as fit, each an equal share of the weights and the KV cache.
    The context is ``wanted_ctx``; only when none was asked for, it starts at
    :data:`DEFAULT_N_CTX` and, when every layer fits, grows toward the trained context (at most
    ``max_ctx``) while the whole model then takes at most half of what the GPU may use.
    No layers without GPU offload or a VRAM reading.
    """
    ctx = DEFAULT_N_CTX if wanted_ctx is None else wanted_ctx
    if not offload:
        return Placement(0, ctx, _NO_OFFLOAD)
    if free_vram is None:
        return Placement(0, ctx, "no free-VRAM reading")
    if layers <= 0:
        return Placement(0, ctx, "the model gives no layer count", free_vram)
    usable = int(free_vram * (1.0 - margin)) - reserve

    def weights_and_cache(tokens: int) -> int:
        return model_bytes + kv_bytes_per_token * tokens

    def buffer(tokens: int) -> int:
        return compute[0] + compute[1] * tokens

    needed = weights_and_cache(ctx) + buffer(ctx)
    if needed <= usable:
        if wanted_ctx is None and trained_ctx is not None:
            candidate = min(trained_ctx, max_ctx)
            while candidate > ctx:
                if weights_and_cache(candidate) + buffer(candidate) <= usable // 2:
                    ctx, needed = candidate, weights_and_cache(candidate) + buffer(candidate)
                    break
                candidate //= 2
        return Placement(-1, ctx, "the whole model fits in free VRAM", free_vram, needed)
    per_layer = -(-weights_and_cache(ctx) // layers)  # rounded up: fewer than all (see above)
    fitting = max(usable - buffer(ctx), 0) // per_layer
    if fitting <= 0:
        return Placement(0, ctx, "not one layer fits in free VRAM", free_vram, needed)
    return Placement(
        fitting, ctx, f"{fitting} of {layers} layers fit in free VRAM", free_vram, needed
    )


def place(
    path: Path,
    *,
    n_gpu_layers: int | None,
    n_ctx: int | None,
    offload: bool,
    grow_ctx: bool = True,
    vram: Callable[[], Vram | None] = free_vram,
) -> Placement:
    """The placement :class:`~llmguard_sdk.providers.LocalProvider` uses: what the caller
    gave wins; the rest is :func:`plan` from the GGUF at ``path`` and ``vram()``. Without
    ``grow_ctx`` the context stays at ``n_ctx`` or :data:`DEFAULT_N_CTX`.

    With GPU offload but no VRAM reading on macOS, every layer is offloaded (Metal shares
    the machine's memory, as llama.cpp's own default assumes). Never raises."""
    ctx = DEFAULT_N_CTX if n_ctx is None else n_ctx
    if n_gpu_layers is not None:
        return Placement(n_gpu_layers, ctx, "n_gpu_layers was given")
    if not offload:
        return Placement(0, ctx, _NO_OFFLOAD)
    try:
        info = read_gguf(path)
    except (GGUFError, OSError) as exc:
        return Placement(0, ctx, f"GGUF metadata unreadable: {exc}")
    reading = vram()
    if reading is None and sys.platform == "darwin":
        return Placement(-1, ctx, "macOS: Metal shares the machine's memory")
    return plan(
        model_bytes=info.file_size,
        layers=info.block_count,
        kv_bytes_per_token=info.kv_bytes_per_token,
        free_vram=None if reading is None else reading.free,
        wanted_ctx=n_ctx if n_ctx is not None or grow_ctx else DEFAULT_N_CTX,
        trained_ctx=info.context_length,
        compute=info.compute_bytes,
    )
