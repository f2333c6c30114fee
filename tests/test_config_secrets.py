"""Configuration errors and ``llmguard check`` never show a secret: not a ``${NAME}``
reference's value, not a URL's password, not a credential query parameter."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmguard_sdk import AnthropicProvider, ConfigurationError, Guard
from llmguard_sdk.cli import main

SECRET = "sk-secret-value-123"


@pytest.mark.parametrize(
    ("base_url", "environ", "shown"),
    [
        ("ftp://gw.example/v1?key=${GW_KEY}", {"GW_KEY": SECRET}, "ftp://gw.example/v1?key=${GW_KEY}"),
        ("${GATEWAY}", {"GATEWAY": f"gw.example/v1?key={SECRET}"}, "'${GATEWAY}'"),
        (f"http://app:{SECRET}@gw.example:99999/v1", {}, "http://app:***@gw.example:99999/v1"),
    ],
)  # fmt: skip
def test_a_bad_base_url_is_shown_as_written_without_its_secrets(
    base_url: str, environ: dict[str, str], shown: str
) -> None:
    """The provider's error repeated the URL as built: the value a reference read from the
    environment (a key in its query, a whole URL), a password written in it."""
    route = {"model": "vllm/m", "base_url": base_url}
    with pytest.raises(ConfigurationError, match="base_url must be an http") as caught:
        Guard.from_config({"routes": [route]}, environ=environ)
    assert SECRET not in str(caught.value)
    assert shown in str(caught.value)


@pytest.mark.parametrize("as_json", [False, True])
def test_llmguard_check_hides_credential_query_parameters(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], as_json: bool
) -> None:
    """A Redis URL's ``?password=`` and a gateway's ``?api_key=`` were printed as written
    (only a ``user:password@`` was hidden); other parameters are still shown."""
    path = tmp_path / "guard.toml"
    path.write_text(
        f'store = "redis://127.0.0.1:6379/0?password={SECRET}"\n'
        f'[[routes]]\nmodel = "vllm/m"\nbase_url = "http://127.0.0.1:9/v1?api_key={SECRET}&v=2"\n',
        encoding="utf-8",
    )
    assert main(["check", str(path), *(["--json"] if as_json else [])]) == 0
    out = capsys.readouterr().out
    assert SECRET not in out
    assert "redis://127.0.0.1:6379/0?password=***" in out
    assert "http://127.0.0.1:9/v1?api_key=***&v=2" in out


def test_a_route_from_the_environment_is_named_and_shown_without_its_password() -> None:
    """``LLMGUARD_BASE_URL=https://user:password@host/v1`` named the route
    ``user:password@host``: the name every span, metric, log line and Redis key carries; the
    providers' reprs (the Guard's too) showed the password as well."""
    environ = {"LLMGUARD_BASE_URL": f"https://app:{SECRET}@gw.example/v1", "LLMGUARD_MODEL": "m"}
    with Guard(environ=environ, telemetry=False) as guard:
        assert [route.name for route in guard.routes] == ["gw.example"]
        assert SECRET not in repr(guard)
        assert SECRET not in repr(guard.routes)
    anthropic = AnthropicProvider(f"https://app:{SECRET}@gw.example/v1", api_key="k")
    assert "https://app:***@gw.example/v1" in repr(anthropic)
    anthropic.close()
