"""The README stays true to the code: its Python blocks parse (and read as ``ruff format``
writes them), the names they import are public, the keywords it gives the classes it names
and ``Guard.chat`` exist, the examples it lists are the ones in ``examples/``, and every
``llmguard`` command line it shows names a command and options the CLI has."""

from __future__ import annotations

import ast
import contextlib
import difflib
import importlib
import inspect
import io
import re
import subprocess
import sys
import textwrap
import typing
from pathlib import Path

import pytest
import typing_extensions

from llmguard_sdk.cli import main
from llmguard_sdk.guard import ChatOptions

from .conftest import require

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")

# Public packages whose names the README uses beside ``llmguard_sdk``'s own.
PACKAGES = (
    "llmguard_sdk",
    "llmguard_sdk.releases",
    "llmguard_sdk.router",
    "llmguard_sdk.cache",
    "llmguard_sdk.telemetry",
    "llmguard_sdk.testing",
    "llmguard_sdk.retry",
    "llmguard_sdk.ratelimit",
    "llmguard_sdk.prompts",
    "llmguard_sdk.providers.batch",
)
CHAT_KEYWORDS = set(typing.get_type_hints(ChatOptions)) | {"stream"}


def _fences() -> list[tuple[str, str]]:
    """Every fenced block of the README as (language, dedented text), nested in lists too."""
    blocks: list[tuple[str, str]] = []
    opened: re.Match[str] | None = None
    lines: list[str] = []
    for line in README.splitlines():
        fence = re.fullmatch(r"( *)```(\w*)", line)
        if opened is None and fence:
            opened, lines = fence, []
        elif opened is not None and fence and fence.group(1) == opened.group(1):
            blocks.append((opened.group(2), textwrap.dedent("\n".join(lines) + "\n")))
            opened = None
        elif opened is not None:
            lines.append(line)
    return blocks


def _fenced(*languages: str) -> list[str]:
    return [text for language, text in _fences() if language in languages]


def _parse(source: str) -> ast.Module:
    flags = ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    tree: ast.Module = compile(source, "README.md", "exec", flags=flags)
    return tree


PYTHON_BLOCKS = _fenced("python")


def _public_names() -> dict[str, object]:
    names: dict[str, object] = {}
    for package in reversed(PACKAGES):
        module = importlib.import_module(package)
        names.update({name: getattr(module, name) for name in module.__all__})
    return names


def _inline_calls() -> list[ast.Call]:
    calls = []
    for span in re.findall(r"`([^`\n]*\([^`]*\))`", README):
        with contextlib.suppress(SyntaxError):
            node = ast.parse(span.replace("...", "x"), mode="eval").body
            if isinstance(node, ast.Call):
                calls.append(node)
    return calls


def _calls() -> list[ast.Call]:
    calls = _inline_calls()
    for block in PYTHON_BLOCKS:
        calls += [node for node in ast.walk(_parse(block)) if isinstance(node, ast.Call)]
    return calls


def test_the_readme_has_python_blocks() -> None:
    assert len(PYTHON_BLOCKS) >= 15


@pytest.mark.parametrize("index", range(len(PYTHON_BLOCKS)))
def test_python_block_parses(index: int) -> None:
    _parse(PYTHON_BLOCKS[index])


@pytest.mark.parametrize("index", range(len(PYTHON_BLOCKS)))
def test_python_block_is_ruff_formatted(index: int) -> None:
    """Each Python block is as ``ruff format`` (the project's settings) writes it: the code a
    reader copies looks like the code they run ruff on (the quickstart's was hand-aligned)."""
    ruff = Path(sys.executable).with_name("ruff")
    require(ruff.exists(), f"ruff (a dev dependency) beside {sys.executable}")
    block = PYTHON_BLOCKS[index]
    formatted = subprocess.run(
        [str(ruff), "format", "--config", str(ROOT / "pyproject.toml"), "-"],
        input=block,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    diff = "".join(difflib.unified_diff(block.splitlines(True), formatted.splitlines(True)))
    assert formatted == block, f"README python block {index} is not ruff-formatted:\n{diff}"


def test_imports_name_public_names() -> None:
    wrong = []
    for block in PYTHON_BLOCKS:
        for node in ast.walk(_parse(block)):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("llmguard_sdk"):
                module = importlib.import_module(node.module or "")
                public = getattr(module, "__all__", ())
                wrong += [f"{node.module}.{a.name}" for a in node.names if a.name not in public]
    assert not wrong, f"the README imports names that are not public: {wrong}"


# What the README's prose calls its instances: ``guard.budget_status(...)``, ``cache.stats`` ...
INSTANCES = {
    "guard": "Guard",
    "cache": "ResponseCache",
    "builder": "PromptBuilder",
    "support": "PromptBuilder",
    "prompt": "Prompt",
    "group": "DeploymentGroup",
    "stats": "PrefixCacheStats",
    "monitor": "FalseHitMonitor",
    "provider": "LocalProvider",
    "local": "LocalProvider",
}


def _callee(func: ast.expr, public: dict[str, object]) -> tuple[str, object]:
    """What a call in the README calls: (how it reads, the object; None: not ours)."""
    if isinstance(func, ast.Name):
        return func.id, public.get(func.id)
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        owner = public.get(INSTANCES.get(func.value.id, func.value.id))
        label = f"{func.value.id}.{func.attr}"
        if owner is None:
            return label, None
        return label, getattr(owner, func.attr, _MISSING)
    return "", None


_MISSING = object()


def _wrong_keywords(call: ast.Call, label: str, target: object) -> list[str]:
    if label.rpartition(".")[2] in ("chat", "achat"):  # guard.chat(...), `chat(..., priority=...)`
        return [f"chat({k.arg}=)" for k in call.keywords if k.arg not in CHAT_KEYWORDS]
    if target is _MISSING:
        return [f"{label}: no such attribute"]
    if target is None or not callable(target):
        return []
    try:
        parameters = inspect.signature(target).parameters
    except (TypeError, ValueError):
        return []
    accepted = set(parameters)
    for parameter in parameters.values():
        if parameter.kind is inspect.Parameter.VAR_KEYWORD:
            options = _typed_options(target, parameter.name)
            if options is None:
                return []  # **kwargs of any name
            accepted |= options
    return [f"{label}({k.arg}=)" for k in call.keywords if k.arg and k.arg not in accepted]


def _typed_options(target: object, name: str) -> set[str] | None:
    """The keys of ``**name: Unpack[SomeTypedDict]``, or None for untyped ``**kwargs``."""
    try:
        hint = typing.get_type_hints(target, include_extras=True).get(name)
    except Exception:  # an annotation that does not resolve at run time
        return None
    # (no typing.Unpack before Python 3.11: a None here matched every hint without an origin)
    unpack = (typing_extensions.Unpack, getattr(typing, "Unpack", typing_extensions.Unpack))
    if hint is None or typing.get_origin(hint) not in unpack:
        return None
    return set(typing.get_type_hints(typing.get_args(hint)[0]))


class _Options(typing_extensions.TypedDict):
    size: int


def _untyped(**options: typing.Any) -> None: ...


def _typed(**options: typing_extensions.Unpack[_Options]) -> None: ...


def test_keywords_typed_any_are_any_keywords_and_a_typed_dict_names_them() -> None:
    assert _typed_options(_untyped, "options") is None
    assert _typed_options(_typed, "options") == {"size"}


def test_calls_name_methods_and_keywords_that_exist() -> None:
    public = _public_names()
    wrong = []
    for call in _calls():
        label, target = _callee(call.func, public)
        if label == "chat" or target is not None:
            wrong += _wrong_keywords(call, label, target)
    assert not wrong, f"the README calls what the code does not have: {sorted(set(wrong))}"


def test_every_example_is_listed_and_every_listed_one_exists() -> None:
    examples = ROOT / "examples"
    scripts = {path.name for path in examples.glob("*.py")}
    listed = set(re.findall(r"`(?:examples/)?([a-z_]+\.py)`", README)) & (
        scripts | set(re.findall(r"examples/([a-z_]+\.py)", README))
    )
    assert scripts <= listed, f"examples the README does not name: {sorted(scripts - listed)}"
    for path in re.findall(r"examples/[\w./-]+\w", README):
        assert (ROOT / path).exists(), path


def _command_lines() -> list[str]:
    lines = [span for span in re.findall(r"`(llmguard [^`]+)`", README)]
    for block in _fenced("bash", ""):
        lines += re.findall(r"^\$? ?(llmguard [^\n#]+)", block, re.M)
    return [" ".join(line.split()) for line in lines]


def test_the_readme_shows_command_lines() -> None:
    assert len(_command_lines()) >= 10


@pytest.mark.parametrize("line", sorted(set(_command_lines())))
def test_command_line_names_real_options(line: str) -> None:
    words = [word.strip("[]") for word in line.split()[1:]]
    options = {word.split("=")[0] for word in words if word.startswith("--")}
    help_text = io.StringIO()
    with contextlib.redirect_stdout(help_text), pytest.raises(SystemExit) as exit_:
        # every word before the first option, then --help: a command that is not there
        # exits 2; one that is prints its options
        main([*words[: _first_option_at(words)], "--help"])
    assert exit_.value.code == 0, line
    missing = {
        option for option in options if not re.search(rf"{option}(?![\w-])", help_text.getvalue())
    }
    assert not missing, f"{line}: options the command does not have: {sorted(missing)}"


def _first_option_at(words: list[str]) -> int:
    return next((i for i, word in enumerate(words) if word.startswith("-")), len(words))


def test_placement_is_described_by_its_method() -> None:
    """The README quotes ``placement.describe()``'s line; ``str(placement)`` is the repr."""
    from llmguard_sdk.providers._gpu import Placement

    line = Placement(-1, 8192, "the whole model fits in free VRAM", 80532 * 2**20).describe()
    assert line in " ".join(README.split())
    assert "placement.describe()" in README


def test_every_benchmark_is_in_the_benchmarks_list() -> None:
    """The Benchmarks section's commands name every bench script (helpers start with ``_``)."""
    listed = set()
    for block in _fenced("bash"):
        listed |= set(re.findall(r"bench/(\w+\.py)", block))
    scripts = {path.name for path in (ROOT / "bench").glob("[!_]*.py")}
    assert scripts <= listed, f"benchmarks the README does not list: {sorted(scripts - listed)}"
    assert all((ROOT / "bench" / name).exists() for name in listed), sorted(listed)


def test_every_llmguard_environment_variable_is_documented() -> None:
    source = "".join(p.read_text(encoding="utf-8") for p in (ROOT / "src").rglob("*.py"))
    variables = set(re.findall(r"LLMGUARD_[A-Z0-9_]+", source)) - {"LLMGUARD_"}
    assert variables, "no LLMGUARD_ variable found in src"
    missing = {name for name in variables if name not in README}
    assert not missing, f"environment variables the README does not name: {sorted(missing)}"


def test_default_folders_are_the_ones_the_readme_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The journal and the joined-model cache follow ``$XDG_CACHE_HOME``, as the README says."""
    from llmguard_sdk.budget.journal import default_journal_dir
    from llmguard_sdk.providers._chunked import model_cache_dir

    monkeypatch.delenv("LLMGUARD_MODEL_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    text = " ".join(README.split())
    assert default_journal_dir() == tmp_path / "llmguard" / "journal"
    assert "default `$XDG_CACHE_HOME/llmguard/journal`" in text
    assert model_cache_dir() == tmp_path / "llmguard-sdk" / "models"
    assert "default `$XDG_CACHE_HOME/llmguard-sdk/models`" in text


def test_every_command_and_action_is_shown() -> None:
    """Each ``llmguard`` command (and each action of a command that has actions) appears in
    one of the README's command lines."""
    from llmguard_sdk.cli._command import Group
    from llmguard_sdk.cli._commands import COMMANDS as _COMMANDS

    shown = {" ".join(line.split()[:3]) for line in _command_lines()}
    shown |= {" ".join(line.split()[:2]) for line in _command_lines()}
    missing = []
    for command in _COMMANDS:
        actions = command.actions if isinstance(command, Group) else ()
        paths = [f"llmguard {command.name} {a.name}" for a in actions] or [
            f"llmguard {command.name}"
        ]
        missing += [path for path in paths if path not in shown]
    assert not missing, f"commands the README never shows: {missing}"


def test_the_errors_tree_names_every_error() -> None:
    """The README's Errors section draws the whole tree: every error class the SDK exports
    (``UnknownModelError`` and ``RejectedResultError`` were missing from it)."""
    from llmguard_sdk import errors

    section = README.split("\n## Errors\n", 1)[1].split("\n## ", 1)[0]
    exported = [getattr(errors, name) for name in errors.__all__]
    classes = [c for c in exported if isinstance(c, type) and issubclass(c, errors.LLMGuardError)]
    missing = [c.__name__ for c in classes if not re.search(rf"\b{c.__name__}\b", section)]
    assert not missing, f"errors the README's tree leaves out: {missing}"
