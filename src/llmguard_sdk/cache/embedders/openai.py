"""Embeddings from an OpenAI-compatible ``/v1/embeddings`` endpoint, over httpx."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import httpx

from ..._keys import check_api_key
from ..._lazy import np
from ...errors import (
    ConfigurationError,
    MalformedResponseError,
    ProviderTimeoutError,
    ProviderUnavailableError,
)
from .base import normalise

if TYPE_CHECKING:
    from .base import Vectors

__all__ = ["OpenAIEmbedder"]

_ROUTE = "embeddings"


class OpenAIEmbedder:
    """Embeddings from an OpenAI-compatible ``/v1/embeddings`` endpoint.

    Args:
        base_url: the API root, e.g. ``http://127.0.0.1:8080/v1``.
        model: the embedding model to ask for.
        dimension: the model's vector size (checked on every answer).
        api_key: sent as a bearer token when given (empty, or with whitespace around it:
            :class:`~llmguard_sdk.errors.ConfigurationError`).
        timeout: seconds for each request (:meth:`embed` may be given less).
        transport: the httpx transport requests go through (default: httpx's own).
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        dimension: int,
        *,
        api_key: str | None = None,
        timeout: float = 10.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
            raise ConfigurationError(f"timeout must be a number of seconds, got {timeout!r}")
        if not 0 < timeout < math.inf:  # (NaN too)
            raise ConfigurationError(f"timeout must be positive and finite, got {timeout!r}")
        if isinstance(dimension, bool) or not isinstance(dimension, int) or dimension < 1:
            raise ConfigurationError(f"dimension must be a whole number >= 1, got {dimension!r}")
        check_api_key(api_key)  # "" sent no key: a 401 at the first call, read as an outage
        headers = {"Authorization": f"Bearer {api_key}"} if api_key is not None else {}
        self._client = httpx.Client(
            base_url=base_url.rstrip("/") + "/",
            headers=headers,
            timeout=timeout,
            transport=transport,
        )
        self._model = model
        self._timeout = timeout
        self.dimension = dimension
        self.name = f"openai:{model}:{dimension}"

    def __repr__(self) -> str:
        return f"OpenAIEmbedder(model={self._model!r})"

    def embed(self, texts: Sequence[str], *, timeout: float | None = None) -> Vectors:
        """Ask the endpoint for the vectors of ``texts`` (one request); ``timeout``: wait at
        most this many seconds (never more than the embedder's own ``timeout``; 0 or less:
        :class:`~llmguard_sdk.errors.ProviderTimeoutError` without asking)."""
        wait = self._timeout if timeout is None else min(timeout, self._timeout)
        if not wait > 0:
            raise ProviderTimeoutError("no time left for the embeddings request", route=_ROUTE)
        try:
            answer = self._client.post(
                "embeddings", json={"model": self._model, "input": list(texts)}, timeout=wait
            )
        except httpx.TimeoutException as exc:
            raise ProviderTimeoutError(
                f"embeddings request timed out after {wait:g} s", route=_ROUTE
            ) from exc
        except httpx.HTTPError as exc:
            raise ProviderUnavailableError(
                f"embeddings request failed: {exc}", route="embeddings"
            ) from exc
        if answer.status_code != 200:
            raise ProviderUnavailableError(
                f"embeddings endpoint answered HTTP {answer.status_code}",
                route="embeddings",
                status_code=answer.status_code,
            )
        try:
            payload = answer.json()
        except ValueError:  # a proxy's HTML page, say
            raise MalformedResponseError(
                "embeddings answer is not JSON", route="embeddings"
            ) from None
        return _vectors_from_payload(payload, len(texts), self.dimension)

    def close(self) -> None:
        """Close the HTTP connection pool."""
        self._client.close()


def _vectors_from_payload(payload: Any, count: int, dimension: int) -> Vectors:
    data = payload.get("data") if isinstance(payload, dict) else None
    if not isinstance(data, list) or len(data) != count:
        raise MalformedResponseError(
            "embeddings answer lacks one vector per input", route="embeddings"
        )
    try:
        rows = sorted(data, key=lambda item: item.get("index", 0) if isinstance(item, dict) else 0)
        vectors = np.array([row["embedding"] for row in rows], dtype=np.float32)
    except (KeyError, TypeError, ValueError) as exc:
        raise MalformedResponseError(
            f"embeddings answer is malformed: {exc}", route="embeddings"
        ) from None
    if vectors.shape != (count, dimension):
        raise MalformedResponseError(
            f"embeddings have shape {vectors.shape}, expected {(count, dimension)}",
            route="embeddings",
        )
    return normalise(vectors)
