"""Guards from configuration files: every provider shortcut, keys by reference, clear errors."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from llmguard_sdk import ConfigurationError, DeploymentGroup, Guard, ProviderError
from llmguard_sdk._config_file import load_config, resolve, tasks_of
from llmguard_sdk.cli import main
from llmguard_sdk.config import GuardSettings
from llmguard_sdk.store import RedisStore
from llmguard_sdk.testing import FakeProvider

from .conftest import USER, require_module

LOCAL = "the file's local route builds a LocalProvider: it needs llama-cpp-python"

EVERY_SHORTCUT = """
timeout = 20
attempt_timeout = 5

[[routes]]
model = "openai/gpt-4o-mini"

[[routes]]
group = "claude"
strategy = "round_robin"
deployments = [
  { model = "anthropic/claude-3-5-haiku-latest" },
  { model = "openrouter/anthropic/claude-3.5-haiku", name = "openrouter", api_key = "${OR_KEY}" },
]

[[routes]]
model = "azure/prod-4o"
api_version = "2024-10-21"

[[routes]]
model = "groq/llama-3.1-8b-instant"

[[routes]]
model = "together/meta-llama/Llama-3-8b-chat-hf"

[[routes]]
model = "ollama/llama3.2"

[[routes]]
model = "vllm/qwen2.5-7b"
base_url = "http://127.0.0.1:8000/v1"

[[routes]]
model = "local/bundled"
"""

ENVIRON = {
    "OPENAI_API_KEY": "sk-openai-secret",
    "ANTHROPIC_API_KEY": "sk-ant-secret",
    "OR_KEY": "sk-or-secret",
    "AZURE_OPENAI_API_KEY": "azure-secret",
    "AZURE_OPENAI_ENDPOINT": "https://example-resource.openai.azure.com",
    "GROQ_API_KEY": "gsk-secret",
    "TOGETHER_API_KEY": "tg-secret",
}


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_a_file_with_every_shortcut_resolves(tmp_path: Path) -> None:
    require_module("llama_cpp", LOCAL)
    config = load_config(_write(tmp_path, "guard.toml", EVERY_SHORTCUT))
    entries, routes = resolve(config, ENVIRON)
    assert config.settings() == {"timeout": 20, "attempt_timeout": 5}
    assert isinstance(entries[1], DeploymentGroup)
    assert [(r.name, r.kind, r.group) for r in routes] == [
        ("openai", "openai", None),
        ("anthropic", "anthropic", "claude"),
        ("openrouter", "openrouter", "claude"),
        ("azure", "azure", None),
        ("groq", "groq", None),
        ("together", "together", None),
        ("ollama", "ollama", None),
        ("vllm", "vllm", None),
        ("local", "local", None),
    ]
    urls = {r.name: r.base_url for r in routes}
    assert urls["ollama"] == "http://127.0.0.1:11434/v1"
    assert urls["azure"] == (
        "https://example-resource.openai.azure.com/openai/deployments/prod-4o"
        "?api-version=2024-10-21"
    )
    keys = {r.name: r.key_from for r in routes}
    assert keys["openai"] == "${OPENAI_API_KEY}"
    assert keys["openrouter"] == "${OR_KEY}"
    assert keys["ollama"] is None
    assert [r.model for r in routes][2] == "anthropic/claude-3.5-haiku"
    for entry in entries:
        for route in entry.deployments if isinstance(entry, DeploymentGroup) else [entry]:
            route.close()


@pytest.mark.parametrize(
    ("host", "url"),
    [
        ("0.0.0.0", "http://0.0.0.0:11434/v1"),  # (the server's "listen everywhere")
        ("localhost", "http://localhost:11434/v1"),
        ("[::1]", "http://[::1]:11434/v1"),
        ("127.0.0.1:8080", "http://127.0.0.1:8080/v1"),
        ("http://ollama.internal", "http://ollama.internal/v1"),  # a scheme: its own port
        ("https://ollama.example/", "https://ollama.example/v1"),
    ],
)
def test_an_ollama_host_without_a_port_is_read_as_ollama_reads_it(
    tmp_path: Path, host: str, url: str
) -> None:
    """``OLLAMA_HOST=0.0.0.0`` (set for the server to listen everywhere) sent every call to
    port 80: Ollama reads a host without a scheme or port at its port, 11434."""
    config = load_config(_write(tmp_path, "guard.toml", '[[routes]]\nmodel = "ollama/m"\n'))
    entries, routes = resolve(config, {"OLLAMA_HOST": host})
    assert routes[0].base_url == url
    assert entries[0].base_url == url  # type: ignore[union-attr]
    entries[0].close()  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[[routes]]\nmodle = "openai/x"\n', "routes.0.modle"),
        ('[[routes]]\nmodel = "nowhere/x"\n', "routes.0.model"),
        ('[[routes]]\nmodel = "openai/x"\napi_key = "sk-plain"\n', "routes.0.api_key"),
        ('timeout = -1\n[[routes]]\nmodel = "openai/x"\n', "timeout"),
        ("routes = []\n", "routes"),
        ('[[routes]]\nmodel = "vllm/x"\n', "routes.0: vllm/ needs base_url"),
        ('[[routes]]\nmodel = "openai/x"\napi_key = "${MISSING_KEY}"\n', "MISSING_KEY"),
        ('[[routes]]\nmodel = "azure/x"\n', "AZURE_OPENAI_ENDPOINT"),
    ],
)
def test_bad_configurations_name_the_key(tmp_path: Path, text: str, message: str) -> None:
    path = _write(tmp_path, "bad.toml", text)
    with pytest.raises(ConfigurationError, match=message.replace(".", r"\.")) as caught:
        Guard.from_config(path, environ={})
    assert "bad.toml" in str(caught.value) or "routes.0" in str(caught.value)
    assert "sk-plain" not in str(caught.value)


def test_yaml_json_and_unknown_formats(tmp_path: Path) -> None:
    yaml_path = _write(
        tmp_path, "g.yaml", "routes:\n  - model: vllm/m\n    base_url: http://127.0.0.1:9/v1\n"
    )
    assert load_config(yaml_path).routes[0].model == "vllm/m"  # type: ignore[union-attr]
    json_path = _write(tmp_path, "g.json", json.dumps({"routes": [{"model": "ollama/m"}]}))
    assert load_config(json_path).routes[0].model == "ollama/m"  # type: ignore[union-attr]
    with pytest.raises(ConfigurationError, match=r"\.ini"):
        load_config(_write(tmp_path, "g.ini", "x"))
    with pytest.raises(ConfigurationError, match=r"g2\.toml"):
        load_config(_write(tmp_path, "g2.toml", "routes = [[["))
    with pytest.raises(ConfigurationError, match="LLMGUARD_CONFIG"):
        Guard.from_config(environ={})


def test_a_guard_from_config_answers_through_its_routes(tmp_path: Path) -> None:
    with FakeProvider(name="one") as one, FakeProvider(name="two") as two:
        text = f"""
timeout = 10
[[routes]]
group = "fake"
strategy = "round_robin"

[[routes.deployments]]
model = "vllm/fake-model"
name = "one"
base_url = "{one.base_url}"

[[routes.deployments]]
model = "vllm/fake-model"
name = "two"
base_url = "{two.base_url}"
api_key = "${{VLLM_KEY}}"
"""
        path = _write(tmp_path, "fake.toml", text)
        with Guard.from_config(environ={"LLMGUARD_CONFIG": str(path), "VLLM_KEY": "k2"}) as guard:
            assert [guard.chat(USER).route for _ in range(4)] == ["one", "two", "one", "two"]
            assert guard.settings.timeout == 10
        assert two.requests[-1].headers["authorization"] == "Bearer k2"
        assert "authorization" not in one.requests[-1].headers


def test_a_group_from_config_takes_regions_and_least_outstanding() -> None:
    with FakeProvider(name="one") as one, FakeProvider(name="two") as two:
        config = {
            "routes": [
                {
                    "group": "fake",
                    "strategy": "least_outstanding",
                    "regions": {"one": "us", "two": "eu"},
                    "region": "eu",
                    "deployments": [
                        {"model": "vllm/fake-model", "name": f.name, "base_url": f.base_url}
                        for f in (one, two)
                    ],
                }
            ]
        }
        with Guard.from_config(config, environ={}) as guard:
            assert {guard.chat(USER).route for _ in range(3)} == {"two"}
            assert guard.chat(USER, region="us").route == "one"
    with pytest.raises(ConfigurationError, match=r"routes\.0\.strategy"):
        Guard.from_config({"routes": [{**config["routes"][0], "strategy": "fastest"}]}, environ={})


def test_azure_routes_send_the_deployment_path_version_and_key(tmp_path: Path) -> None:
    with FakeProvider(name="azure") as fake:
        config = {"routes": [{"model": "azure/prod-4o", "api_version": "2024-10-21"}]}
        environ = {"AZURE_OPENAI_ENDPOINT": fake.base_url, "AZURE_OPENAI_API_KEY": "az-k"}
        guard = Guard.from_config(config, environ=environ, retry=None)
        with guard, pytest.raises(ProviderError):  # the fake serves /v1/chat/completions only
            guard.chat(USER)
        sent = fake.requests[-1]
        assert sent.path.endswith(
            "/openai/deployments/prod-4o/chat/completions?api-version=2024-10-21"
        )
        assert sent.headers["api-key"] == "az-k"
        assert "authorization" not in sent.headers


def test_llmguard_check_prints_routes_without_keys(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    require_module("llama_cpp", LOCAL)
    for name, value in ENVIRON.items():
        monkeypatch.setenv(name, value)
    path = _write(tmp_path, "guard.toml", EVERY_SHORTCUT)
    assert main(["check", str(path)]) == 0
    out = capsys.readouterr().out
    assert "openrouter (group claude): openrouter anthropic/claude-3.5-haiku" in out
    assert "${OPENAI_API_KEY}" in out
    assert not any(secret in out for secret in ENVIRON.values() if "secret" in secret)
    assert main(["check", str(_write(tmp_path, "bad.toml", "routes = []\n"))]) == 2
    assert "bad.toml" in capsys.readouterr().err


def test_the_example_configuration_is_valid(capsys: pytest.CaptureFixture[str]) -> None:
    require_module("llama_cpp", LOCAL)
    example = Path(__file__).resolve().parents[1] / "examples" / "guard.toml"
    config = load_config(example)
    entries, routes = resolve(config, ENVIRON)
    assert [r.name for r in routes] == ["openai", "azure", "anthropic", "local"]
    assert isinstance(entries[0], DeploymentGroup)
    tasks = tasks_of(config, entries)  # its tiers name the chain's routes and groups
    assert tasks is not None
    assert (tasks.default, tasks.tiers["large"]) == ("auto", ("anthropic", "local"))
    for entry in entries:
        for route in entry.deployments if isinstance(entry, DeploymentGroup) else [entry]:
            route.close()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('timeout = inf\n[[routes]]\nmodel = "vllm/x"\n', "timeout"),
        ('attempt_timeout = nan\n[[routes]]\nmodel = "vllm/x"\n', "attempt_timeout"),
        ('key_prefix = "my app"\n[[routes]]\nmodel = "vllm/x"\n', "key_prefix"),
        ('key_prefix = ""\n[[routes]]\nmodel = "vllm/x"\n', "key_prefix"),
        ('store = "redis-host:6379"\n[[routes]]\nmodel = "vllm/x"\n', "store"),
        ('[[routes]]\nmodel = "vllm/a"\n[[routes]]\nmodel = "vllm/b"\n', "vllm"),
    ],
)
def test_llmguard_check_refuses_what_the_guard_refuses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str
) -> None:
    routes = "\n".join(
        line + ('\nbase_url = "http://127.0.0.1:9/v1"' if line.startswith("model") else "")
        for line in text.splitlines()
    )
    path = _write(tmp_path, "guard.toml", routes + "\n")
    with pytest.raises(ConfigurationError, match=message):
        Guard.from_config(path, environ={})
    assert main(["check", str(path)]) == 2  # check says so too, naming the file and the key
    out = capsys.readouterr().err
    assert "guard.toml" in out or "routes:" in out
    assert message in out


def test_header_references_are_read_from_the_environment() -> None:
    with FakeProvider(name="gw") as fake:
        route = {
            "model": "vllm/fake-model",
            "name": "gw",
            "base_url": fake.base_url,
            "headers": {"X-Gateway-Key": "${GATEWAY_KEY}", "X-Team": "search"},
        }
        environ = {"GATEWAY_KEY": "gw-secret"}
        with Guard.from_config({"routes": [route]}, environ=environ) as guard:
            guard.chat(USER)
        sent = fake.requests[-1].headers
        assert (sent["x-gateway-key"], sent["x-team"]) == ("gw-secret", "search")
    with pytest.raises(ConfigurationError, match=r"routes\.0\.headers\.X-Gateway-Key.*GATEWAY_KEY"):
        Guard.from_config({"routes": [route]}, environ={})


def test_a_reference_inside_a_header_or_url_is_read_from_the_environment(
    redis_url: str, redis_prefix: str
) -> None:
    """``Authorization = "Bearer ${TOKEN}"`` was sent as written (the literal ``${TOKEN}``: a
    401 on every call), and a base URL with ``${HOST}`` in it went to a host of that name."""
    with FakeProvider(name="gw") as fake:
        host = fake.base_url.split("//", 1)[1].split("/", 1)[0]
        route = {
            "model": "vllm/fake-model",
            "name": "gw",
            "base_url": "http://${GW_HOST}/v1",
            "headers": {"Authorization": "Bearer ${GW_TOKEN}"},
        }
        config = {"routes": [route], "store": "redis://${REDIS_AT}/0", "key_prefix": redis_prefix}
        environ = {"GW_HOST": host, "GW_TOKEN": "tok-1", "REDIS_AT": redis_url.split("//")[1]}
        environ["REDIS_AT"] = environ["REDIS_AT"].rsplit("/", 1)[0]
        with Guard.from_config(config, environ=environ) as guard:
            guard.chat(USER)
            assert isinstance(guard.store, RedisStore)
            assert guard.store.ping()
        assert fake.requests[-1].headers["authorization"] == "Bearer tok-1"
    with pytest.raises(ConfigurationError, match=r"routes\.0\.headers\.Authorization.*GW_TOKEN"):
        Guard.from_config({"routes": [route]}, environ={"GW_HOST": host})


def test_an_azure_base_url_is_the_endpoint_its_deployment_and_version_go_on() -> None:
    with FakeProvider(name="azure") as fake:
        route = {"model": "azure/prod-4o", "base_url": fake.url, "api_version": "2024-10-21"}
        environ = {"AZURE_OPENAI_API_KEY": "az-k"}
        guard = Guard.from_config({"routes": [route]}, environ=environ, retry=None)
        with guard, pytest.raises(ProviderError):  # the fake serves /v1/chat/completions only
            guard.chat(USER)
        assert fake.requests[-1].path == (
            "/openai/deployments/prod-4o/chat/completions?api-version=2024-10-21"
        )
        without_version = {"routes": [{"model": "azure/prod-4o", "base_url": fake.url}]}
        with pytest.raises(ConfigurationError, match="api_version"):
            Guard.from_config(without_version, environ=environ)
        full = f"{fake.url}/openai/deployments/prod-4o?api-version=2024-06-01"
        guard = Guard.from_config(
            {"routes": [{"model": "azure/prod-4o", "base_url": full}]}, environ=environ, retry=None
        )
        with guard, pytest.raises(ProviderError):  # a whole deployment URL is taken as given
            guard.chat(USER)
        assert fake.requests[-1].path.endswith("?api-version=2024-06-01")


@pytest.mark.parametrize(
    "name", ["timeout", "attempt_timeout", "max_input_tokens", "retry_attempts"]
)
def test_a_bool_is_not_a_number_of_seconds_or_tokens(name: str) -> None:
    with pytest.raises(ConfigurationError, match=f"argument {name}="):
        GuardSettings.from_env({}, **{name: True})  # True was 1 (a 1 s deadline ...)
    if name != "retry_attempts":
        with pytest.raises(ConfigurationError, match=rf"configuration: {name}"):
            load_config({name: True, "routes": [{"model": "ollama/m"}]})
    with pytest.raises(ConfigurationError, match=r"routes\.0\.context_window"):
        load_config({"routes": [{"model": "ollama/m", "context_window": True}]})


@pytest.mark.parametrize(
    ("route", "message"),
    [
        ({"model": "openai/gpt-4o", "api_version": "2024-10-21"}, "api_version"),
        ({"model": "local/bundled", "api_key": "${KEY}"}, "api_key"),
        ({"model": "local/bundled", "base_url": "http://127.0.0.1:9/v1"}, "base_url"),
        ({"model": "local/bundled", "headers": {"x": "y"}}, "headers"),
        ({"model": "local/bundled", "context_window": 8192}, "context_window"),
    ],
)
def test_a_route_key_its_provider_would_not_use_is_refused(
    route: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigurationError, match=rf"routes\.0: .*{message}"):
        load_config({"routes": [route]})


def test_cascade_settings_of_a_check_it_does_not_run_are_refused() -> None:
    tiers = {"small": ["a"], "large": ["b"]}
    for extra, message in (
        ({"finish_reasons": ["stop"]}, "finish_reasons"),
        ({"json_schema": {"type": "object"}}, "json_schema"),
    ):
        cascade = {"tiers": ["small", "large"], "checks": ["not_empty"], **extra}
        config = {
            "routes": [{"model": "ollama/m"}],
            "tasks": {"tiers": tiers, "cascades": {"c": cascade}},
        }
        with pytest.raises(ConfigurationError, match=rf"tasks\.cascades\.c: .*{message}"):
            load_config(config)


@pytest.mark.parametrize(
    ("route", "expected"),
    [
        (
            {"model": "openai/x", "api_key": "sk-plain"},
            "routes.0.api_key: api_key must be a ${VARIABLE} reference, never the key itself",
        ),
        ({"modle": "openai/x"}, "routes.0.model: Field required; routes.0.modle: Extra inputs"),
        (
            {"group": "g", "deployments": [{"model": "no/x"}]},
            "routes.0.deployments.0.model: model must be <shortcut>/<model>",
        ),
    ],
)
def test_route_errors_name_only_the_bad_key(route: dict[str, object], expected: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        load_config({"routes": [route]})
    message = str(caught.value)
    assert message.startswith(f"configuration: {expected}")
    assert "function-after" not in message  # pydantic's own names of its validators
    assert "Value error" not in message  # pydantic's prefix of a validator's own message
    assert "Field required; routes.0.deployments" not in message  # the other kind's keys


@pytest.mark.parametrize("as_json", [False, True])
def test_llmguard_check_prints_the_store_without_its_password(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], as_json: bool
) -> None:
    text = (
        'store = "redis://app:hunter2-redis-pass@127.0.0.1:6379/0"\n'
        '[[routes]]\nmodel = "vllm/x"\nbase_url = "http://127.0.0.1:9/v1"\n'
    )
    path = _write(tmp_path, "guard.toml", text)
    assert main(["check", str(path), *(["--json"] if as_json else [])]) == 0
    out = capsys.readouterr().out
    assert "redis://app:***@127.0.0.1:6379/0" in out
    assert "hunter2-redis-pass" not in out


def test_a_store_reference_is_read_from_the_environment(
    tmp_path: Path,
    redis_url: str,
    redis_prefix: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``store = "${VARIABLE}"`` keeps a Redis password out of the file, as ``api_key`` does
    (it was refused: not a URL)."""
    text = (
        f'store = "${{GUARD_STORE_URL}}"\nkey_prefix = "{redis_prefix}"\n'
        '[[routes]]\nmodel = "vllm/x"\nbase_url = "http://127.0.0.1:9/v1"\n'
    )
    path = _write(tmp_path, "guard.toml", text)
    with Guard.from_config(path, environ={"GUARD_STORE_URL": redis_url}) as guard:
        assert isinstance(guard.store, RedisStore)
        assert guard.store.ping()  # the Redis the variable names
    with pytest.raises(ConfigurationError, match="GUARD_STORE_URL is not set"):
        Guard.from_config(path, environ={})
    with pytest.raises(ConfigurationError, match="store"):
        Guard.from_config(path, environ={"GUARD_STORE_URL": "redis-host:6379"})
    monkeypatch.delenv("GUARD_STORE_URL", raising=False)
    assert main(["check", str(path)]) == 2  # llmguard check reads this process's environment
    monkeypatch.setenv("GUARD_STORE_URL", redis_url)
    assert main(["check", str(path)]) == 0
    assert "${GUARD_STORE_URL}" in capsys.readouterr().out  # shown as written


@pytest.mark.parametrize(
    "text",
    [
        '[[routes]]\nmodel = "openai/x"\napi_key = "${MISSING_KEY}"\n',  # read when built
        '[[routes]]\nmodel = "vllm/a"\n',  # no base_url
        '[[routes]]\nmodel = "vllm/a"\nbase_url = "http://127.0.0.1:9/v1"\n'
        '[tasks]\ntiers = { small = ["nowhere"] }\n',  # a tier of no route
        'store = "${MISSING_STORE}"\n[[routes]]\nmodel = "vllm/a"\n'
        'base_url = "http://127.0.0.1:9/v1"\n',
    ],
)
def test_errors_found_when_the_routes_are_built_name_the_file(tmp_path: Path, text: str) -> None:
    """A Guard built from ``LLMGUARD_CONFIG`` says which file its error is in, whichever
    step found it (reading, validating, building the routes, their tasks, the store)."""
    path = _write(tmp_path, "from-env.toml", text)
    with pytest.raises(ConfigurationError, match=r"from-env\.toml: "):
        Guard.from_config(environ={"LLMGUARD_CONFIG": str(path)})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[[routes]]\nmodel = "openai/"\n', r"routes\.0\.model: .*<shortcut>/<model>"),
        ('[[routes]]\nmodel = "local/ "\n', r"routes\.0\.model: .*<shortcut>/<model>"),
        (
            '[[routes]]\ngroup = "g"\nstrategy = "weighted"\nweights = [1]\ndeployments = [\n'
            '  { model = "vllm/a", name = "a", base_url = "http://127.0.0.1:9/v1" },\n'
            '  { model = "vllm/b", name = "b", base_url = "http://127.0.0.1:9/v1" },\n]\n',
            r"routes\.0: weights: ",
        ),
    ],
)
def test_a_route_without_a_model_and_a_group_error_name_their_key(
    tmp_path: Path, text: str, message: str
) -> None:
    """``openai/`` passed (every call then sent model ""), and a group's own errors named
    ``weights`` without saying which entry of ``routes``."""
    path = _write(tmp_path, "guard.toml", text)
    with pytest.raises(ConfigurationError, match=message):
        Guard.from_config(path, environ={"OPENAI_API_KEY": "sk-test"})


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("guard.toml", '[[routes]]\nmodel = "ollama/m"\n'),
        ("guard.json", '{"routes": [{"model": "ollama/m"}]}'),
        ("guard.yaml", "routes:\n  - model: ollama/m\n"),
    ],
)
def test_a_file_saved_with_a_byte_order_mark_is_read(tmp_path: Path, name: str, text: str) -> None:
    """Windows editors save UTF-8 with a BOM: TOML said "Invalid statement (at line 1, column
    1)", JSON "Unexpected UTF-8 BOM", of a file that looks right."""
    path = tmp_path / name
    path.write_bytes(b"\xef\xbb\xbf" + text.encode())
    assert load_config(path).routes[0].model == "ollama/m"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("source", "error"),
    [("def classify(:\n", "SyntaxError"), ("raise RuntimeError('no DB')\n", "no DB")],
)
def test_a_task_function_whose_module_fails_to_import_names_the_key(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    source: str,
    error: str,
) -> None:
    """A module that fails at import (a syntax error, a raise) was a traceback out of
    ``llmguard check`` and ``Guard.from_config``; it is a ConfigurationError naming the key."""
    module = f"broken_routing_{abs(hash(source))}"
    (tmp_path / f"{module}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    text = (
        '[[routes]]\nmodel = "vllm/x"\nname = "x"\nbase_url = "http://127.0.0.1:9/v1"\n'
        f'[tasks]\ntiers = {{ s = ["x"] }}\nclassifier = "{module}:classify"\n'
    )
    path = _write(tmp_path, "guard.toml", text)
    with pytest.raises(ConfigurationError, match=r"tasks\.classifier"):
        Guard.from_config(path, environ={})
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    for said in ("guard.toml", "tasks.classifier", error):
        assert said in err


@pytest.mark.parametrize(
    ("name", "text", "key"),
    [
        (
            "guard.json",
            '{"timeout": 5, "routes": [{"model": "vllm/x", "base_url": "http://h/v1"}],'
            ' "timeout": 50}',
            "timeout",
        ),
        (
            "guard.yaml",
            "routes:\n  - {model: openai/gpt-4o-mini}\ntimeout: 5\n"
            "routes:\n  - {model: vllm/x, base_url: 'http://h/v1'}\n",
            "routes",
        ),
        (
            "guard.yaml",
            "routes:\n  - model: vllm/x\n    base_url: http://h/v1\n    name: a\n    name: b\n",
            "name",
        ),
    ],
)
def test_a_key_given_twice_is_refused_naming_the_file_and_key(
    tmp_path: Path, name: str, text: str, key: str
) -> None:
    """JSON and YAML readers keep the last of two equal keys: a second ``routes:`` dropped
    the first list of routes without a word (TOML refuses it already)."""
    path = _write(tmp_path, name, text)
    with pytest.raises(ConfigurationError) as caught:
        load_config(path)
    assert str(caught.value).startswith(str(path))
    assert f"{key!r} is given twice" in str(caught.value)


def test_yaml_merge_keys_still_read_and_their_keys_may_be_overridden(tmp_path: Path) -> None:
    text = (
        "routes:\n  - &first {model: vllm/x, base_url: 'http://h/v1', name: a}\n"
        "  - <<: *first\n    name: b\n"
    )
    config = load_config(_write(tmp_path, "guard.yaml", text))
    _entries, routes = resolve(config, {})
    assert [(r.name, r.base_url) for r in routes] == [("a", "http://h/v1"), ("b", "http://h/v1")]


@pytest.mark.parametrize(
    "second",
    [
        '[[routes]]\nmodel = "vllm/b"\nbase_url = "http://127.0.0.1:9/v1"\nname = "g"\n',
        '[[routes]]\ngroup = "g"\n'
        'deployments = [{model = "vllm/b", base_url = "http://127.0.0.1:9/v1", name = "b"}]\n',
    ],
)
def test_a_group_named_as_a_route_or_group_is_refused_by_check_as_by_the_guard(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], second: str
) -> None:
    """``llmguard check`` said such a file was good; the Guard refused it (a tier naming
    ``g`` would not say which), without naming the file."""
    first = (
        '[[routes]]\ngroup = "g"\n'
        'deployments = [{model = "vllm/a", base_url = "http://127.0.0.1:9/v1", name = "a"}]\n'
    )
    path = _write(tmp_path, "guard.toml", first + second)
    with pytest.raises(ConfigurationError, match=r"guard\.toml: routes: .* named 'g'"):
        Guard.from_config(path, environ={})
    assert main(["check", str(path)]) == 2
    assert "are named 'g'" in capsys.readouterr().err


@pytest.mark.parametrize("as_json", [False, True])
def test_llmguard_check_shows_a_base_url_reference_as_written_never_its_value(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    as_json: bool,
) -> None:
    """A gateway that takes its key in the URL (``?key=${GW_KEY}``): check printed the URL
    with the key read from the environment; it shows the reference, as for ``store``."""
    monkeypatch.setenv("GW_KEY", "gw-secret-value-123")
    text = '[[routes]]\nmodel = "vllm/x"\nbase_url = "https://gw.example/v1?key=${GW_KEY}"\n'
    path = _write(tmp_path, "guard.toml", text)
    assert main(["check", str(path), *(["--json"] if as_json else [])]) == 0
    out = capsys.readouterr().out
    assert "gw-secret-value-123" not in out
    assert "https://gw.example/v1?key=${GW_KEY}" in out


@pytest.mark.parametrize(
    ("data", "key"),
    [
        (
            {"routes": [{"group": "g", "strategy": "weighted", "weights": [True, False],
                         "deployments": [{"model": "vllm/a", "base_url": "http://h/v1"}]}]},
            "routes.0.weights",
        ),
        (
            {"routes": [{"model": "vllm/a", "base_url": "http://h/v1"}],
             "tasks": {"tiers": {"s": ["vllm"]}, "rules": [{"tier": "s", "min_tokens": True}]}},
            "tasks.rules.0.min_tokens",
        ),
        (
            {"routes": [{"model": "vllm/a", "base_url": "http://h/v1"}],
             "tasks": {"tiers": {"s": ["vllm"]}, "rules": [{"tier": "s", "max_tokens": False}]}},
            "tasks.rules.0.max_tokens",
        ),
    ],
)  # fmt: skip
def test_a_bool_where_a_number_belongs_is_refused_naming_the_key(
    data: dict[str, object], key: str
) -> None:
    """``weights = [true, false]`` was read as ``[1.0, 0.0]`` and ``min_tokens = true`` as 1,
    as ``timeout = true`` is refused (a 1 s timeout)."""
    with pytest.raises(ConfigurationError, match=re.escape(key)):
        load_config(data)


def test_weights_of_a_group_whose_strategy_is_not_weighted_are_refused() -> None:
    """Accepted and never used (the group ranked by latency), as a route's unused keys are
    refused."""
    deployments = [{"model": "vllm/a", "base_url": "http://h/v1"}]
    group = {"group": "g", "strategy": "latency", "weights": [1.0], "deployments": deployments}
    with pytest.raises(ConfigurationError, match=r"routes\.0: .*weights.*weighted"):
        load_config({"routes": [group]})
    load_config({"routes": [{**group, "strategy": "weighted"}]})


@pytest.mark.parametrize(
    "header",
    [
        {"Authorization": "Bearer sk-live-abcdef123456"},
        {"X-Gateway-Key": "gw-literal-key-value"},
        {"x-api-token": "literal"},
    ],
)
def test_a_credential_header_written_in_the_file_is_refused(header: dict[str, str]) -> None:
    """``api_key = "sk-..."`` is refused so that keys never sit in the file; the same key
    as an ``Authorization`` header was accepted."""
    route = {"model": "vllm/x", "base_url": "http://h/v1", "headers": header}
    name = next(iter(header))
    with pytest.raises(ConfigurationError, match=rf"routes\.0\.headers.*{name}.*VARIABLE"):
        load_config({"routes": [route]})
    referenced = {name: "Bearer ${TOKEN}", "X-Team": "search"}  # a reference; no credential
    load_config({"routes": [{**route, "headers": referenced}]})


def test_llmguard_check_says_where_a_local_route_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``local: local bundled at None; key no key``."""
    require_module("llama_cpp", LOCAL)
    path = _write(tmp_path, "guard.toml", '[[routes]]\nmodel = "local/bundled"\n')
    assert main(["check", str(path)]) == 0
    out = capsys.readouterr().out
    assert "None" not in out
    assert "local: local bundled in this process" in out


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("guard.json", '{"routes": [{"model": "ollama/m", "context_window": 1e30}]}'),
        ("guard.toml", '[[routes]]\nmodel = "ollama/m"\ncontext_window = 3000000000\n'),
        ("guard.yaml", "routes:\n  - model: ollama/m\n    context_window: 1.0e+400\n"),
        ("guard.json", '{"max_input_tokens": 1e30, "routes": [{"model": "ollama/m"}]}'),
    ],
)
def test_a_huge_token_count_is_refused_naming_the_bound(
    tmp_path: Path, name: str, text: str
) -> None:
    """1e30 said pydantic's "Unable to parse input string as an integer, exceeded maximum
    size" (no string was given), 3e9 passed (no context window is that large)."""
    key = "context_window" if "context_window" in text else "max_input_tokens"
    with pytest.raises(ConfigurationError) as caught:
        load_config(_write(tmp_path, name, text))
    message = str(caught.value)
    assert f"{key}: must be a whole number of tokens from 1 to 2147483647, got " in message
    assert "parse" not in message
