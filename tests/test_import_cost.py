"""What ``from llmguard_sdk import Guard`` imports: the Guard's own modules, not the optional
parts only some Guards use (they come as a Guard is built with them). Each check runs in a
fresh interpreter."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from llmguard_sdk.testing import FakeProvider

# Modules a Guard with no cache, release, local model, prompt builder or file never uses.
OPTIONAL = (
    "llmguard_sdk.cache.core",
    "llmguard_sdk.cache.embedders",
    "llmguard_sdk.cache.guards",
    "llmguard_sdk.cache._words",
    "llmguard_sdk.providers.local",
    "llmguard_sdk.prompts.lint",
    "llmguard_sdk.prompts.builder",
    "llmguard_sdk.releases",  # (a Guard(release=...) imports them as it is built)
    "llmguard_sdk._config_schema",  # (Guard.from_config imports it)
)


def _printed(code: str, *args: str) -> Any:
    """The JSON ``code`` prints, run by a fresh interpreter."""
    done = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def _loaded(names: tuple[str, ...]) -> str:
    return f"sorted(m for m in {names!r} if m in sys.modules)"


def test_importing_the_guard_imports_no_optional_part() -> None:
    code = (
        f"import json, sys; from llmguard_sdk import Guard; print(json.dumps({_loaded(OPTIONAL)}))"
    )
    assert _printed(code) == []


def test_a_guard_built_with_a_cache_imports_it_and_answers_from_it(fake: FakeProvider) -> None:
    """The cache's modules come as a Guard is built with one; a wrong ``cache`` is still the
    same ConfigurationError."""
    code = (
        "import json, sys\n"
        "from llmguard_sdk import ConfigurationError, Guard, OpenAICompatibleProvider\n"
        "route = OpenAICompatibleProvider(sys.argv[1], api_key='k', model='m', name='p')\n"
        "before = 'llmguard_sdk.cache.core' in sys.modules\n"
        "try:\n"
        "    Guard([route], cache='yes')\n"
        "    wrong = None\n"
        "except ConfigurationError as error:\n"
        "    wrong = str(error)\n"
        "guard = Guard([route], retry=None, cache=True)\n"
        "ask = [{'role': 'user', 'content': 'hi'}]\n"
        "routes = [guard.chat(ask, max_tokens=5).route for _ in range(2)]\n"
        "print(json.dumps([before, wrong, 'llmguard_sdk.cache.core' in sys.modules, routes]))"
    )
    before, wrong, after, routes = _printed(code, fake.base_url)
    assert (before, after) == (False, True)
    assert wrong == "cache must be a ResponseCache or True, got 'yes'"
    assert routes == ["p", "cache"]
    assert fake.stats.requests == 1


def test_a_lazy_packages_names_are_its_modules_objects() -> None:
    code = (
        "import json; import llmguard_sdk.cache as c, llmguard_sdk.providers as p, "
        "llmguard_sdk.prompts as q\n"
        "from llmguard_sdk.cache.core import ResponseCache\n"
        "from llmguard_sdk.providers.local import LocalProvider\n"
        "from llmguard_sdk.prompts.builder import PromptBuilder\n"
        "print(json.dumps([c.ResponseCache is ResponseCache, p.LocalProvider is LocalProvider, "
        "q.PromptBuilder is PromptBuilder, set(c.__all__) <= set(dir(c)), "
        "all(hasattr(m, n) for m in (c, p, q) for n in m.__all__)]))"
    )
    assert _printed(code) == [True] * 5


def test_a_name_that_is_also_its_module_stays_the_name() -> None:
    """``llmguard_sdk.cache.calibrate`` is the function, as the eager imports made it, even
    once its module was imported first (a cache's core imports it): the import system binds a
    submodule on its package as it is imported."""
    code = (
        "import json\n"
        "from llmguard_sdk.cache import ResponseCache\n"
        "from llmguard_sdk.cache.calibrate import calibrate as function\n"
        "import llmguard_sdk.cache as c\n"
        "from llmguard_sdk.cache import calibrate\n"
        "print(json.dumps([calibrate is function, c.calibrate is function, "
        "callable(calibrate)]))"
    )
    assert _printed(code) == [True] * 3
