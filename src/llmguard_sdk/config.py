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
``LLMGUARD_API_KEY``        its API key (set but empty: refused; unset: no key)    none
``LLMGUARD_MODEL``          its model                                              none
``LLMGUARD_CONFIG``         a configuration file for ``Guard.from_config()``        none
=========================== ===================================================== ===========

Values given in code win over the environment. In code a number is a number: a string
(``timeout="5"``, ``GuardSettings(timeout="5")``) is a
:class:`~llmguard_sdk.errors.ConfigurationError`, as it is in a request; the variables (and
configuration files, ``model_validate_strings``, ``model_validate_json``) are text, read as
numbers. A count (``max_input_tokens``, ``retry_attempts``) is a whole number from 1 to
2147483647, as in a configuration file (``1e3`` is one).

A wrong value raises :class:`~llmguard_sdk.errors.SettingsValidationError`, a
:class:`~llmguard_sdk.errors.ConfigurationError` and pydantic's ``ValidationError`` both, also
when ``GuardSettings`` is built directly (``GuardSettings(timeout=-1)``, ``model_validate``):
its message names each field (or the variable or argument that gave it) and what was expected.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import difflib
import os
import re
import warnings
from collections.abc import Callable, Collection, Mapping
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from ._callers import caller_level
from ._problems import _message, problems
from ._whole_counts import read_count
from .errors import ConfigurationError, SettingsValidationError, UnknownSettingWarning

__all__ = ["ENV_PREFIX", "GuardSettings"]

ENV_PREFIX = "LLMGUARD_"
"""The prefix of every environment variable the settings read."""

_READ_ELSEWHERE = ("LLMGUARD_CONFIG", "LLMGUARD_MODEL_CACHE")  # (Guard.from_config, models)
_warned_names: set[str] = set()  # (at most the environment's own names)


def _resembled(name: str, known: frozenset[str]) -> list[str]:
    """The settings' variables ``name`` resembles (at most two, the likeliest first): those it
    extends, then those spelled like it, each compared without :data:`ENV_PREFIX`."""
    tail = name.removeprefix(ENV_PREFIX)
    tails = {setting.removeprefix(ENV_PREFIX): setting for setting in known}
    extended = sorted((t for t in tails if tail.startswith(t + "_")), key=len, reverse=True)
    spelled = difflib.get_close_matches(tail, list(tails), n=2, cutoff=0.75)
    return [tails[t] for t in dict.fromkeys([*extended, *spelled])][:2]


def _warn_misspelled(env: Mapping[str, str], known: frozenset[str]) -> None:
    """Warn once per name about an ``LLMGUARD_*`` variable nothing reads that is spelled
    like one that is (the timeout's name less a letter) or extends one (``..._MODEL_NAME``):
    it would be ignored without a word. Names far from every setting (a tool's own,
    ``..._HOST``) are left alone: the names are compared without the prefix they share."""
    for name in env:
        if not name.startswith(ENV_PREFIX) or name in known or name in _warned_names:
            continue
        close = _resembled(name, known)
        if close:
            _warned_names.add(name)
            warnings.warn(
                f"environment variable {name} is not a setting and is ignored: "
                f"did you mean {' or '.join(close)}?",
                UnknownSettingWarning,
                stacklevel=caller_level(),
            )


def _bad_store(store: str) -> str | None:
    """What is wrong with ``store`` as a store the Guard opens (``memory`` or a Redis URL),
    or None. The value is not repeated: a URL may hold a password."""
    from ._state.urls import CLUSTER_SCHEMES, REDIS_SCHEMES

    schemes = (*REDIS_SCHEMES, *CLUSTER_SCHEMES)
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
_TEXT: ContextVar[bool] = ContextVar("llmguard_settings_text", default=False)
"""Set while the values validated are text (variables, files), numbers read from it (a
context var: pydantic calls the model's own ``__init__``, without its validation context)."""


def _no_string(name: str, value: object) -> str | None:
    """Why ``value``, given in code for the setting ``name``, is refused: a number given in
    code is a number, a string (``timeout="5"``) is not, as a request's numbers are; only the
    environment and configuration files are text."""
    if name in _NUMBERS and isinstance(value, (str, bytes, bytearray)):
        return (
            f"must be a number, got a string ({value!r:.40}); strings are read from "
            f"{ENV_PREFIX}{name.upper()} and configuration files only"
        )
    return None


def _a_number(value: object, info: ValidationInfo) -> object:
    """A numeric setting's value: never a bool (:func:`_not_a_bool`), and a string only
    where the values are text (:data:`_TEXT`)."""
    _not_a_bool(value)
    problem = None if _TEXT.get() else _no_string(info.field_name or "", value)
    if problem is not None:
        raise ValueError(problem)
    return value


def _a_count(value: object, info: ValidationInfo) -> object:
    """A count's value (``max_input_tokens``, ``retry_attempts``): a number
    (:func:`_a_number`), a whole one from 1 to 2**31 - 1, as a configuration file's
    (:func:`~llmguard_sdk._whole_counts.read_count`)."""
    unit = "attempts" if info.field_name == "retry_attempts" else "tokens"
    return read_count(_a_number(value, info), unit)


def _check_number(name: str, value: object) -> None:
    """An argument of ``name`` given in code is refused when a string (:func:`_no_string`)."""
    problem = _no_string(name, value)
    if problem is not None:
        raise ConfigurationError(f"invalid settings: argument {name}=: {problem}")


def _shown_input(detail: Mapping[str, Any]) -> object:
    """The input a settings error keeps in its details: never a value that may be a secret
    (a key, a store's or URL's password; an unknown setting's value: ``apikey=`` mistyped;
    the whole input of settings refused as a whole, JSON that does not parse ...)."""
    from ._config_references import redacted

    if not detail["loc"]:  # (no field: its input is everything given, the key with it)
        return "***"
    field, value = detail["loc"][0], detail["input"]
    if field == "api_key" or detail["type"] == "extra_forbidden":
        return "***"
    if field in ("store", "base_url") and isinstance(value, str):
        return redacted(value)
    return value


def _invalid(error: ValidationError, found: list[str]) -> SettingsValidationError:
    """``error`` as the SDK's :class:`SettingsValidationError`: ``found`` (each problem as
    ``where: what was expected``) as its message, pydantic's details kept (secrets masked)."""
    return SettingsValidationError.from_validation_error(
        error, "invalid settings: " + "; ".join(found), shown_input=_shown_input
    )


_T = TypeVar("_T")


def _checked(validate: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
    """``validate(*args, **kwargs)``, pydantic's ``ValidationError`` raised as the SDK's."""
    try:
        return validate(*args, **kwargs)
    except ValidationError as exc:
        raise _invalid(exc, problems(exc, "settings")) from None


def _as_text(validate: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
    """``validate(*args, **kwargs)`` of values that are text (strings, JSON, variables):
    numbers are read from it."""
    token = _TEXT.set(True)
    try:
        return validate(*args, **kwargs)
    finally:
        _TEXT.reset(token)


class GuardSettings(BaseModel):
    """The settings a :class:`~llmguard_sdk.Guard` is built from (see the module table).

    Built directly (``GuardSettings(timeout=30)``, ``model_validate`` ...), a wrong value
    raises :class:`~llmguard_sdk.errors.SettingsValidationError`: a
    :class:`~llmguard_sdk.errors.ConfigurationError` naming the field, and pydantic's
    ``ValidationError`` with its details. A number given in code is a number
    (``GuardSettings(timeout="5")`` is refused); ``model_validate_strings`` and
    ``model_validate_json`` read text, as :meth:`from_env` does.
    """

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

    _numbers = field_validator("timeout", "attempt_timeout", mode="before")(_a_number)
    _counts = field_validator("max_input_tokens", "retry_attempts", mode="before")(_a_count)

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

    if not TYPE_CHECKING:  # (type checkers keep the fields' own signature)

        def __init__(self, /, **data: Any) -> None:
            _checked(super().__init__, **data)

        @classmethod
        def model_validate(cls, *args: Any, **kwargs: Any) -> GuardSettings:
            """Pydantic's ``model_validate``; a wrong value raises
            :class:`~llmguard_sdk.errors.SettingsValidationError`."""
            return _checked(super().model_validate, *args, **kwargs)

        @classmethod
        def model_validate_json(cls, *args: Any, **kwargs: Any) -> GuardSettings:
            """Pydantic's ``model_validate_json``; a wrong value raises
            :class:`~llmguard_sdk.errors.SettingsValidationError`."""
            return _checked(_as_text, super().model_validate_json, *args, **kwargs)

        @classmethod
        def model_validate_strings(cls, *args: Any, **kwargs: Any) -> GuardSettings:
            """Pydantic's ``model_validate_strings``; a wrong value raises
            :class:`~llmguard_sdk.errors.SettingsValidationError`."""
            return _checked(_as_text, super().model_validate_strings, *args, **kwargs)

    @classmethod
    def from_env(
        cls, environ: Mapping[str, str] | None = None, **overrides: object
    ) -> GuardSettings:
        """Settings from ``LLMGUARD_*`` variables, with ``overrides`` (not ``None``) on top.

        Raises :class:`~llmguard_sdk.errors.ConfigurationError` naming the variable or
        argument that holds a bad value.
        """
        return cls._read_env(environ, **overrides)[0]

    @classmethod
    def _read_env(
        cls, environ: Mapping[str, str] | None = None, **overrides: object
    ) -> tuple[GuardSettings, frozenset[str]]:
        """:meth:`from_env`'s settings, and the variables it found set but empty or blank
        (read as unset), from one read of the environment."""
        env = _text_environ(environ, "Guard")
        known = frozenset(ENV_PREFIX + name.upper() for name in cls.model_fields)
        _warn_misspelled(env, known | frozenset(_READ_ELSEWHERE))
        values: dict[str, object] = {}
        sources: dict[str, str] = {}
        blank: set[str] = set()
        for name in cls.model_fields:
            raw = env.get(ENV_PREFIX + name.upper())
            if raw is not None and raw.strip() != "":
                values[name] = raw.strip()
                sources[name] = f"environment variable {ENV_PREFIX}{name.upper()}"
            elif raw is not None:
                blank.add(ENV_PREFIX + name.upper())
        for name, value in overrides.items():
            if name not in cls.model_fields:
                raise ConfigurationError(f"unknown setting {name!r}")
            if value is not None:
                _check_number(name, value)
                values[name] = value
                sources[name] = f"argument {name}="
        try:
            settings = _as_text(cls.model_validate, values)  # (the arguments: checked above)
        except ValidationError as exc:  # the variable or argument that gave each value
            found = []
            for err in exc.errors():
                field = str(err["loc"][0]) if err["loc"] else "settings"
                found.append(f"{sources.get(field, field)}: {_message(err, None)}")
            raise _invalid(exc, found) from None
        return settings, frozenset(blank)


def _check_default_key(settings: GuardSettings, blank: Collection[str]) -> None:
    """Refuse ``LLMGUARD_API_KEY`` set but empty or blank (among ``blank``, the variables
    :meth:`GuardSettings._read_env` read as unset) where ``settings`` build the route
    ``LLMGUARD_BASE_URL`` names (a Guard given no routes): it went as no key, and the first
    call failed with 401. A Guard given its routes reads neither variable."""
    key = f"{ENV_PREFIX}API_KEY"
    if settings.base_url is not None and settings.api_key is None and key in blank:
        raise ConfigurationError(
            f"invalid settings: environment variable {key} is set but empty: set it to the "
            f"key of the {ENV_PREFIX}BASE_URL route, or unset it for a route that sends no key"
        )
