"""Private orchestration: how a guarded call runs.

- :mod:`.run`: one call's state on its way through the routes, and its bookkeeping (breaker
  records, rate-limit settles, give-backs) queued in the call's tail.
- :mod:`.plan`: THE plan: one description of the route loop (admit, attempt, retry wait,
  next route, emit chunk, hedge race), for plain calls and streams alike.
- :mod:`.drive`: the two thin drivers (blocking and async) that carry the plan's ops out.
- :mod:`.assembly`: chunks of a stream assembled into the response they add up to.
- :mod:`.streams`: :class:`ChatStream` and :class:`AsyncChatStream`.
"""

# The providers first: they import this package's modules (.assembly) as they load, and
# .assembly imports them; entered from this side (a module here imported before the
# providers, now that ``import llmguard_sdk`` no longer imports them), the cycle met
# .assembly half-built. (The Guard imports the providers anyway: this costs nothing.)
from .. import providers as _providers  # noqa: F401
