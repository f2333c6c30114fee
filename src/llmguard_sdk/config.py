"""Guard settings, from code or from ``LLMGUARD_*`` environment variables.

=========================== ===================================================== ===========
variable                    meaning                                               default
=========================== ===================================================== ===========
``LLMGUARD_STORE``          ``memory`` or a Redis URL (``redis://host:6379/0``)    ``memory``
``LLMGUARD_KEY_PREFIX``     prefix of every Redis key the SDK writes               ``llmguard``
``LLMGUARD_TIMEOUT``        total seconds a call may take, retries included        ``60``
``LLMGUARD_ATTEMPT_TIMEOUT`` seconds one route may stay silent (see Guard)         none
``LLMGUARD_MAX_INPUT_TOKENS`` refuse requests with more input tokens than this     no limit
``LLMGUARD_RETRY_ATTEMPTS`` attempts per route, the first included (1: no retries)  ``3``
``LLMGUARD_BASE_URL``       OpenAI-compatible API root for a default provider      none
``LLMGUARD_API_KEY``        its API key                                            none
``LLMGUARD_MODEL``          its model                                              none
``LLMGUARD_CONFIG``         a configuration file for ``Guard.from_config()``        none
=========================== ===================================================== ===========

Values given in code win over the environment. In code a number is a number: a string
(``timeout="5"``) is a :class:`~llmguard_sdk.errors.ConfigurationError`, as it is in a
request; the variables (and configuration files) are text, read as numbers.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .errors import ConfigurationError

__all__ = ["ENV_PREFIX", "GuardSettings"]

ENV_PREFIX = "LLMGUARD_"
"""The prefix of every environment variable the settings read."""


def _bad_store(store: str) -> str | None:
    """What is wrong with ``store`` as a store the Guard opens (``memory`` or a Redis URL),
    or None. The value is not repeated: a URL may hold a password."""
    from ._state.stores import _CLUSTER_SCHEMES, _REDIS_SCHEMES

    schemes = (*_REDIS_SCHEMES, *_CLUSTER_SCHEMES)
    if store.strip().lower() != "memory" and urlsplit(store.strip()).scheme not in schemes:
        return f"must be 'memory' or a URL of {', '.join(schemes)}"
    return None


def _text_environ(environ: Mapping[str, str] | None, who: str) -> Mapping[str, str]:
    """``environ`` (default ``os.environ``) once checked: a mapping of names to text (a
    number in it raised ``AttributeError`` or ``TypeError`` where it was read). Only the
    names are shown: a value may be a key."""
    if environ is None:
        return os.environ
    if not isinstance(environ, Mapping):
        raise ConfigurationError(
            f"{who} environ= must be a mapping of variables or None, got {type(environ).__name__}"
        )
    odd = sorted(
        repr(k) for k, v in environ.items() if not isinstance(k, str) or not isinstance(v, str)
    )
    if odd:
        raise ConfigurationError(
            f"{who} environ=: variables are names and text (str); not {', '.join(odd[:5])}"
        )
    return environ


_A_REFERENCE = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*\}")


def _literal(value: object) -> object:
    """A configuration value (a string, or a list or table of them) without a ``${NAME}``
    reference: one outside ``api_key``, ``base_url``, ``headers`` and ``store`` was taken as
    written (``model = "openai/${MODEL}"`` sent the model ``${MODEL}``)."""
    texts = value.items() if isinstance(value, Mapping) else [value]
    for text in texts:
        if isinstance(text, (list, tuple)):
            for part in text:
                _literal(part)
        elif isinstance(text, str) and _A_REFERENCE.search(text):
            raise ValueError(
                "a ${VARIABLE} reference is read only in api_key, base_url, headers and "
                "store; write the value itself"
            )
    return value


def _not_a_bool(value: object) -> object:
    """A setting's value, unless it is a bool (pydantic reads ``True`` as 1: a 1 s timeout)."""
    if isinstance(value, bool):
        raise ValueError("a bool is not a number")
    return value


_NUMBERS = ("timeout", "attempt_timeout", "max_input_tokens", "retry_attempts")


def _check_number(name: str, value: object) -> None:
    """A number given in code is a number: a string (``timeout="5"``) is refused, as a
    request's numbers are; only the environment and configuration files are text."""
    if name in _NUMBERS and isinstance(value, (str, bytes, bytearray)):
        raise ConfigurationError(
            f"invalid settings: argument {name}=: must be a number, got a string "
            f"({value!r:.40}); strings are read from {ENV_PREFIX}{name.upper()} and "
            "configuration files only"
        )


class GuardSettings(BaseModel):
    """The settings a :class:`~llmguard_sdk.Guard` is built from (see the module table)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    store: str = "memory"
    key_prefix: str = Field(default="llmguard", min_length=1, pattern=r"^[A-Za-z0-9_.:-]+$")
    timeout: float = Field(default=60.0, gt=0, allow_inf_nan=False)
    attempt_timeout: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    max_input_tokens: int | None = Field(default=None, gt=0)
    retry_attempts: int | None = Field(default=None, ge=1)
    base_url: str | None = None
    api_key: str | None = None
    model: str | None = None

    _numbers = field_validator(
        "timeout", "attempt_timeout", "max_input_tokens", "retry_attempts", mode="before"
    )(_not_a_bool)

    @field_validator("store")
    @classmethod
    def _check_store(cls, store: str) -> str:
        """Checked here, so that the error names the variable (``LLMGUARD_STORE``)."""
        problem = _bad_store(store)
        if problem is not None:
            raise ValueError(problem)
        return store

    @field_validator("base_url")
    @classmethod
    def _check_base_url(cls, base_url: str | None) -> str | None:
        """An http(s) URL with a host (checked here too: the error names the variable)."""
        if base_url is not None:
            parts = urlsplit(base_url.strip())
            if parts.scheme not in ("http", "https") or not parts.netloc:
                raise ValueError("must be an http(s) URL such as https://<provider host>/v1")
        return base_url

    @classmethod
    def from_env(
        cls, environ: Mapping[str, str] | None = None, **overrides: object
    ) -> GuardSettings:
        """Settings from ``LLMGUARD_*`` variables, with ``overrides`` (not ``None``) on top.

        Raises :class:`~llmguard_sdk.errors.ConfigurationError` naming the variable or
        argument that holds a bad value.
        """
        env = _text_environ(environ, "Guard")
        values: dict[str, object] = {}
        sources: dict[str, str] = {}
        for name in cls.model_fields:
            raw = env.get(ENV_PREFIX + name.upper())
            if raw is not None and raw.strip() != "":
                values[name] = raw.strip()
                sources[name] = f"environment variable {ENV_PREFIX}{name.upper()}"
        for name, value in overrides.items():
            if name not in cls.model_fields:
                raise ConfigurationError(f"unknown setting {name!r}")
            if value is not None:
                _check_number(name, value)
                values[name] = value
                sources[name] = f"argument {name}="
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            problems = []
            for err in exc.errors():
                field = str(err["loc"][0]) if err["loc"] else "settings"
                problems.append(f"{sources.get(field, field)}: {err['msg']}")
            raise ConfigurationError("invalid settings: " + "; ".join(problems)) from None
