"""The SDK's warning categories, which stand outside the error tree (see
:mod:`llmguard_sdk.errors`, which exports them: import them from there)."""

from __future__ import annotations

__all__ = [
    "BatchSplitWarning",
    "DroppedParameterWarning",
    "LocalContextWarning",
    "RateLimitConfigWarning",
    "RetryMultiplicationWarning",
    "TelemetryConfigWarning",
    "UnknownSettingWarning",
]


class RetryMultiplicationWarning(UserWarning):
    """Two retry layers are stacked, so the attempts multiply; turn the inner one off."""


class RateLimitConfigWarning(UserWarning):
    """Rate limits set up so that they will not do what was likely meant: a route's token
    limit too small for the output a call without ``max_tokens`` reserves (every such call
    is refused), a request rate whose burst less ``batch_headroom`` holds less than one
    request (every ``batch`` call is refused), or a standalone limiter asked for a key it
    has no limits for (a misspelt key passes every call).

    .. versionadded:: 0.2.0
    """


class UnknownSettingWarning(UserWarning):
    """An ``LLMGUARD_*`` environment variable that no setting reads, spelled like one that
    does (the timeout's name less a letter): it is ignored, and its value never shown.

    .. versionadded:: 0.2.0
    """


class BatchSplitWarning(UserWarning):
    """Calls that reached a :class:`~llmguard_sdk.providers.BatchProvider` in one window went
    into more than one batch: a batch is sent with one set of ``extra_headers`` and
    ``extra_query`` (neither batch API takes them per call), and theirs differ. Said once a
    window, naming the headers and query parameters that differ (never their values). A header
    unique to each call (a request id) sends every call in a batch of its own: leave it off
    batch calls.

    .. versionadded:: 0.2.0
    """


class LocalContextWarning(UserWarning):
    """A :class:`~llmguard_sdk.providers.LocalProvider` was given an ``n_ctx`` above the
    context its model was trained on (its GGUF's ``<architecture>.context_length``): the
    context is that one instead, as llama-server caps its slots. A model reads nothing past
    it well, and a context far above it failed at the model's load ("Failed to create
    llama_context", on every call).

    .. versionadded:: 0.2.0
    """


class DroppedParameterWarning(UserWarning):
    """A route left out a request parameter its API has no counterpart for, rather than
    refuse the call: an :class:`~llmguard_sdk.providers.OpenAIResponsesProvider` sends none
    of chat completions' sampling parameters the Responses API lacks (``seed``, ``stop``,
    ``frequency_penalty``, ``presence_penalty``, ``logit_bias``, ``prediction``), so such an
    answer is not seeded, not cut at the stop sequences, not penalised or biased. Said once
    per route and parameter.

    .. versionadded:: 0.2.0
    """


class TelemetryConfigWarning(UserWarning):
    """A :class:`~llmguard_sdk.telemetry.Telemetry` given to a Guard names, in
    ``propagate={...}``, something that is no route or deployment group of that Guard (nor
    of a Guard the same Telemetry was given to before): a misspelt name that would send no
    request a trace context. Said once per Telemetry and name, as the Guard is built; a
    Telemetry shared by Guards with other routes may silence it with
    ``warnings.filterwarnings("ignore", category=TelemetryConfigWarning)``.

    .. versionadded:: 0.2.0
    """
